"""`gputop run`'s line: hand-off latency and the cost of waiting.

    .venv/bin/python bench/bench_queue.py [--jobs 20] [--idle-s 20]

A fake 4-GPU host (gputop's fake driver, tests/fakenvml, through the real pynvml), a
private store. One job holds all four cards; JOBS more wait behind it, each asking for all
four cards, so every hand-off is one job ending and the next starting. Measured:

- hand-off: from a job's command logging its end to the next job's command logging its
  start (release, the waiters noticing, planning, reserving, fork/exec), median and max;
- waiting cost: CPU time (utime + stime from /proc) of the waiting `gputop run`
  processes over IDLE_S seconds while nothing changes, as % of one core per process.

Targets: hand-off under 1 s (median) with 20 jobs waiting; a waiting
`gputop run` under 0.5 % of a core.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import fakenvml

TICK = os.sysconf("SC_CLK_TCK")
JOB = ('echo "$1 start $(date +%s.%N)" >> "$2/log";'
       ' if [ "$1" = holder ]; then while [ ! -e "$2/go" ]; do sleep 0.05; done; fi;'
       ' echo "$1 end $(date +%s.%N)" >> "$2/log"')


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--idle-s", type=float, default=20.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gputop-bench-queue-"))
    try:
        run(root, args.jobs, args.idle_s)
    finally:
        subprocess.run(["pkill", "-f", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)


def run(root: Path, jobs: int, idle_s: float) -> None:
    scenario = fakenvml.write_scenario(root / "scenario", {"devices": [
        {"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559} for _ in range(4)]})
    store = root / "store"
    store.mkdir()
    store.chmod(0o1777)
    (root / "config.yaml").write_text(f"reservations: {{dir: {store}}}\n")
    (root / "log").touch()
    # Each job's history row goes to the bench's own state directory, not the user's.
    env = dict(fakenvml.environment(scenario), GPUTOP_POLICY=str(root / "none.yaml"),
               XDG_STATE_HOME=str(root / "state"))

    def start(label: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "gputop.cli", "run", "--config", str(root / "config.yaml"),
             "--gpus", "4", "--", "sh", "-c", JOB, "sh", label, str(root)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    holder = start("holder")
    while "holder start" not in (root / "log").read_text():
        time.sleep(0.05)
    waiting = []
    for n in range(jobs):
        waiting.append(start(f"j{n:02d}"))
        # One at a time: each must be in line before the next arrives.
        while len(list(store.glob("job.*"))) < n + 2:
            time.sleep(0.02)
    time.sleep(2.0)  # let every waiter finish starting up
    before = {p.pid: cpu_seconds(p.pid) for p in waiting}
    time.sleep(idle_s)
    used = [cpu_seconds(pid) - cpu for pid, cpu in before.items()]
    (root / "go").touch()
    for proc in [holder, *waiting]:
        proc.wait()
    events = [line.split() for line in (root / "log").read_text().splitlines()]
    ends = [float(t) for _l, what, t in events if what == "end"]
    starts = [float(t) for _l, what, t in events if what == "start"][1:]
    handoffs = [s - e for e, s in zip(ends, starts, strict=False)]
    per_core = [100.0 * u / idle_s for u in used]
    print(f"| measure ({jobs} jobs waiting, 4 fake GPUs) | value | target |")
    print("|---|---|---|")
    print(f"| hand-off, median (max) of {len(handoffs)} | {statistics.median(handoffs):.3f} s"
          f" ({max(handoffs):.3f} s) | < 1 s |")
    print(f"| waiting `gputop run`, CPU over {idle_s:g} s, median (max) |"
          f" {statistics.median(per_core):.2f} % ({max(per_core):.2f} %) of a core | < 0.5 % |")


if __name__ == "__main__":
    main()
