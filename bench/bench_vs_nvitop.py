"""gputop next to nvitop on the same simulated GPUs: run by hand, prints a table.

Both tools load gputop's fake driver (tests/fakenvml), so both go through the real pynvml
ctypes path against the same GPUs and the same real processes.  nvitop lives in its own
virtual environment, never in gputop's dependencies:

    python bench/bench_vs_nvitop.py --setup          # builds the fake driver, makes the venv
    python bench/bench_vs_nvitop.py                  # the table (about 6 minutes)
    python bench/bench_vs_nvitop.py --tui-seconds 20 --runs 3   # quicker, noisier

Environment: BENCH_VENV (default .venv-nvitop here; `--setup` installs nvitop 1.7.2 there).
The fake driver is built into build/fakenvml/ when missing.  Without nvitop it says so and
exits 0: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pty
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from helpers import fakenvml  # noqa: E402

BENCH_VENV = Path(os.environ.get("BENCH_VENV", ROOT / ".venv-nvitop"))
NVITOP_VERSION = "1.7.2"
GPUTOP = [str(Path(sys.executable).parent / "gputop")]
COLS, ROWS = 200, 50
TICK = os.sysconf("SC_CLK_TCK")


def nvitop() -> list[str]:
    return [str(BENCH_VENV / "bin" / "nvitop")]


def setup() -> None:
    fakenvml.library_dir()
    if not (BENCH_VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    subprocess.run([str(BENCH_VENV / "bin" / "pip"), "install", "-q",
                    f"nvitop=={NVITOP_VERSION}"], check=True)


@contextlib.contextmanager
def fake_gpus(scenario: dict[str, Any]) -> Iterator[dict[str, str]]:
    """The tools' environment on ``scenario``, its processes real (sleeping) ones."""
    with tempfile.TemporaryDirectory() as tmp, fakenvml.processes(scenario):
        env = fakenvml.environment(fakenvml.write_scenario(Path(tmp) / "scenario", scenario))
        env["PYTHONPATH"] = str(ROOT)
        env.pop("GPUTOP_HOSTS", None)
        yield env


@contextlib.contextmanager
def host_processes(count: int) -> Iterator[list[int]]:
    """``count`` sleeping processes: a busy host's /proc, not on any GPU; their pids."""
    procs = [subprocess.Popen(["sleep", "3600"]) for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def crowded(gpus: int, per_gpu: int, pids: list[int]) -> dict[str, Any]:
    """``gpus`` busy H100s with ``per_gpu`` processes each, their pids cycled over ``pids``."""
    return {"devices": [
        {"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "util_gpu": 90,
         "processes": [{"pid": pids[(g * per_gpu + i) % len(pids)], "used_mib": 150,
                        "sm_util": 20} for i in range(per_gpu)]}
        for g in range(gpus)]}


def once_ms(cmd: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def nvml_calls(cmd: list[str], env: dict[str, str]) -> int:
    with tempfile.NamedTemporaryFile() as trace:
        subprocess.run(cmd, env=dict(env, FAKENVML_TRACE=trace.name),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        with open(trace.name) as lines:
            return sum(1 for line in lines if "nvml" in line)


def _lines(path: str) -> int:
    with open(path) as f:
        return sum(1 for _ in f)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def tui(cmd: list[str], env: dict[str, str], warmup: float, seconds: float,
        trace: bool = False) -> dict[str, float]:
    """Run a TUI in a 200x50 pty: CPU ms/s, terminal KiB/s, RSS after, NVML calls/refresh."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    env = dict(env, TERM="xterm-256color", COLUMNS=str(COLS), LINES=str(ROWS))
    trace_dir = tempfile.mkdtemp()
    trace_path = os.path.join(trace_dir, "trace") if trace else None
    if trace_path is not None:
        env["FAKENVML_TRACE"] = trace_path
    proc = subprocess.Popen(cmd, env=env, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    counted = 0
    calls_at = 0

    def drain(until: float) -> int:
        got = 0
        while (left := until - time.monotonic()) > 0:
            ready, _, _ = select.select([master], [], [], left)
            if ready:
                try:
                    got += len(os.read(master, 65536))
                except OSError:
                    break
        return got

    try:
        drain(time.monotonic() + warmup)
        cpu0 = _cpu_s(proc.pid)
        if trace_path is not None:
            calls_at = _lines(trace_path)
        counted = drain(time.monotonic() + seconds)
        cpu1 = _cpu_s(proc.pid)
        rss = _rss_mib(proc.pid)
        calls = (_lines(trace_path) - calls_at) if trace_path else 0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
        shutil.rmtree(trace_dir, ignore_errors=True)
    return {"cpu": 1000 * (cpu1 - cpu0) / seconds, "kib": counted / 1024 / seconds,
            "rss": rss, "calls": calls / seconds}


def row(name: str, ours: float, theirs: float, goal: str, unit: str) -> str:
    ratio = ours / theirs if theirs else float("nan")
    return f"| {name} | {ours:.1f} {unit} | {theirs:.1f} {unit} | {ratio:.2f} | {goal} |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setup", action="store_true", help="build the fake driver, install nvitop")
    ap.add_argument("--runs", type=int, default=7, help="one-shot runs per tool (median)")
    ap.add_argument("--tui-seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--host-procs", type=int, default=4000)
    ap.add_argument("--skip-big", action="store_true", help="skip the 8x500 TUI case")
    args = ap.parse_args()
    if args.setup:
        setup()
        return 0
    if not shutil.which(nvitop()[0]):
        print(f"needs nvitop in {BENCH_VENV}: run --setup")
        return 0
    rows = []
    with fake_gpus(fakenvml.template("dgx8")) as env:
        g, n = once_ms([*GPUTOP, "--once"], env, args.runs), once_ms([*nvitop(), "-1"], env,
                                                                       args.runs)
        rows.append(row("`--once`, quiet host", g, n, "<= 0.5", "ms"))
        gc, nc = nvml_calls([*GPUTOP, "--once"], env), nvml_calls([*nvitop(), "-1"], env)
        rows.append(row("NVML calls, `--once`", gc, nc, "<= 1.0", ""))
        with host_processes(args.host_procs):
            g = once_ms([*GPUTOP, "--once"], env, args.runs)
            n = once_ms([*nvitop(), "-1"], env, args.runs)
        rows.append(row(f"`--once`, {args.host_procs} host processes", g, n, "<= 0.5", "ms"))
        gt = tui([*GPUTOP, "--interval", "1"], env, args.warmup, args.tui_seconds, trace=True)
        nt = tui([*nvitop(), "--interval", "1"], env, args.warmup, args.tui_seconds, trace=True)
        up = f"{(args.warmup + args.tui_seconds) / 60:.1f} min"
        rows.append(row(f"TUI CPU at 1 s refresh, {up} uptime", gt["cpu"], nt["cpu"],
                        "<= 1.0", "ms/s"))
        rows.append(row("bytes written to the terminal", gt["kib"], nt["kib"], "<= 6 KiB/s",
                        "KiB/s"))
        rows.append(row(f"RSS after {up}", gt["rss"], nt["rss"], "<= 1.5", "MiB"))
        rows.append(row("NVML calls per second, TUI", gt["calls"], nt["calls"], "<= 1.0", ""))
    if not args.skip_big:
        with host_processes(256) as pids, fake_gpus(crowded(8, 500, pids)) as env:
            gt = tui([*GPUTOP, "--interval", "1"], env, args.warmup, args.tui_seconds)
            nt = tui([*nvitop(), "--interval", "1"], env, args.warmup, args.tui_seconds)
            rows.append(row("TUI at 8 GPUs x 500 processes", gt["cpu"], nt["cpu"], "<= 0.6",
                            "ms/s"))
    print("| measure | gputop | nvitop | ratio | goal |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
