"""Wall time and peak RSS of `gputop --once --demo dgx-h100`, median of 5 runs.

    .venv/bin/python bench/bench_once.py [--runs 5] [-- extra gputop args]

Each run is a fresh process (what a script calling gputop pays); peak RSS comes from
that child's own rusage (os.wait4), not from the sum of all children.
Targets: under 0.25 s and under 40 MB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

TARGET_S = 0.25
TARGET_MB = 40.0


def gputop_command() -> list[str]:
    exe = shutil.which("gputop", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "gputop.cli"]


def one_run(command: list[str]) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {proc.stderr.read().decode()}")
    return wall, usage.ru_maxrss / 1024.0  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("extra", nargs="*", help="gputop arguments instead of the default")
    opts = parser.parse_args()
    args = opts.extra or ["--once", "--demo", "dgx-h100"]
    rows = []
    for label, more in (("gputop " + " ".join(args), args), ("python -c pass", None)):
        command = gputop_command() + more if more else [sys.executable, "-c", "pass"]
        one_run(command)  # warm the page cache: the first run measures the disk
        runs = [one_run(command) for _ in range(opts.runs)]
        rows.append(
            (label, statistics.median(w for w, _ in runs), statistics.median(m for _, m in runs))
        )
    print(f"{'command':<36} {'wall s':>7} {'target':>7} {'RSS MB':>7} {'target':>7} {'ok':>3}")
    for i, (label, wall, rss) in enumerate(rows):
        if i == 0:
            ok = "yes" if wall < TARGET_S and rss < TARGET_MB else "NO"
            print(f"{label:<36} {wall:>7.3f} {'< 0.25':>7} {rss:>7.1f} {'< 40':>7} {ok:>3}")
        else:
            print(f"{label + ' (baseline)':<36} {wall:>7.3f} {'':>7} {rss:>7.1f}")
    print(f"median of {opts.runs} runs after one warm-up run")


if __name__ == "__main__":
    main()
