"""CPU cost of the orphan rules per refresh, and how long a kill takes to report
(printed as a table; not a test).

    .venv/bin/python bench/orphans.py
"""

from __future__ import annotations

import dataclasses
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from gputop.actions.kill import read_stat, signal_process
from gputop.analysis import orphans
from gputop.analysis.history import History
from gputop.model import Gpu, GpuProcess, HostSnapshot

GIB = 1 << 30
ROUNDS = 200
OBSERVED_MINUTES = 35  # longer than the idle rule, so every idle streak is walked in full


def _snapshot(count: int) -> HostSnapshot:
    procs = []
    for i in range(count):
        kind = i % 4
        procs.append(
            GpuProcess(
                pid=10_000 + i,
                gpu=i % 8,
                gpu_mem=2 * GIB,
                sm_util=0 if kind else 60,
                user=f"user{i % 12}",
                uid=1000 + i % 12,
                command="python -m ipykernel_launcher -f /r/kernel-1.json" if kind == 1
                else "python train.py",
                cmdline=("python", "-m", "ipykernel_launcher", "-f", "/r/kernel-1.json")
                if kind == 1 else ("python", "train.py"),
                ppid=1 if kind == 2 else 999,
                parent_command="/sbin/init" if kind == 2 else "bash",
                state="S",
                start_ticks=i,
            )
        )
    gpus = tuple(Gpu(index=g, mem_used=(count // 8 + 1) * 2 * GIB, mem_total=80 * GIB)
                 for g in range(8))
    return HostSnapshot(host="bench", time=1_764_680_000.0, gpus=gpus, processes=tuple(procs))


def _time(fn: Callable[[], object], rounds: int = ROUNDS) -> list[float]:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def _kill_latency(rounds: int = 20) -> list[float]:
    """From signal_process() call to its answer, for a process that exits on SIGTERM."""
    samples = []
    for _ in range(rounds):
        proc = subprocess.Popen(
            [sys.executable, "-c", "import time\nprint('ready', flush=True)\ntime.sleep(60)"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        info = read_stat(proc.pid)
        assert info is not None
        t0 = time.perf_counter()
        result = signal_process(proc.pid, info["start_ticks"], "TERM", 5.0)
        samples.append(time.perf_counter() - t0)
        assert result["outcome"] == "exited", result
        proc.wait(5)
        proc.stdout.close()
    return samples


def main() -> None:
    rows: list[tuple[str, list[float]]] = []
    for count in (200, 2000):
        base = _snapshot(count)
        history = History(seconds=600, process_seconds=3600)
        snap = base
        for minute in range(OBSERVED_MINUTES + 1):
            snap = dataclasses.replace(base, time=base.time + 60 * minute)
            history.add(snap)
        rounds = ROUNDS if count <= 200 else ROUNDS // 10
        flags = orphans.classify_snapshot(snap, history, orphans.OrphanRules(), snap.time)
        rows.append((
            f"classify_snapshot, 8 GPUs x {count}",
            _time(lambda s=snap, h=history: orphans.classify_snapshot(s, h, None, s.time), rounds),
        ))
        rows.append((
            f"reclaimable (root), {count} procs",
            _time(lambda s=snap, f=flags: orphans.reclaimable(s, f, "root", True), rounds),
        ))
        rows.append((
            f"ghost_memory, {count} procs",
            _time(lambda s=snap: orphans.ghost_memory(s), rounds),
        ))
    rows.append(("signal_process TERM -> exited (real)", _kill_latency()))
    print(f"{'what':<40} {'median ms':>10} {'p95 ms':>8} {'n':>5}")
    for name, samples in rows:
        samples.sort()
        p95 = samples[min(len(samples) - 1, int(len(samples) * 0.95))]
        print(f"{name:<40} {statistics.median(samples) * 1e3:>10.2f} {p95 * 1e3:>8.2f}"
              f" {len(samples):>5}")


if __name__ == "__main__":
    main()
