"""Run gputop's command line under cProfile, every thread its own profile: run by hand.

    python bench/profiled.py OUT.prof --interval 0.25     # gputop's arguments after OUT

The dashboard's CPU is spread over threads (Textual's loop on the main thread, the feed's
poll, the analysis), and cProfile follows only the thread that enabled it: this wrapper
starts one profiler per thread (``threading.Thread.run`` wrapped), each timing its
thread's CPU (``time.thread_time``: a thread waiting for NVML or the terminal costs
nothing), and on SIGTERM or at exit writes them merged into OUT.prof and each into
OUT.prof.THREAD-NAME.  Used by bench_vs_nvitop.py with ``BENCH_PROFILE=DIR`` (gputop's
TUI rows then run under it; the figures of such a run are not the table's) and by hand:

    python -m pstats OUT.prof          # sort tottime, stats 30

``--memory`` first (``profiled.py --memory OUT ARGS``): no profilers, tracemalloc from the
start instead, and at the end OUT.mem.txt, the live allocations by file (what the RSS
beyond the interpreter's and the modules' own is made of).
"""

from __future__ import annotations

import cProfile
import marshal
import os
import pstats
import signal
import sys
import threading
import time
import tracemalloc
from typing import Any

PROFILES: dict[str, cProfile.Profile] = {}


def _profiled_run(run: Any) -> Any:
    def wrapper(self: threading.Thread) -> None:
        profile = PROFILES[self.name] = cProfile.Profile(time.thread_time)
        profile.enable()
        try:
            run(self)
        finally:
            profile.disable()

    return wrapper


def dump(out: str) -> None:
    """Every thread's profile so far into ``out`` (merged) and ``out.NAME``; profilers of
    other threads are read as they stand (snapshot_stats), not stopped."""
    merged: pstats.Stats | None = None
    for name, profile in list(PROFILES.items()):
        profile.snapshot_stats()  # type: ignore[attr-defined]
        path = f"{out}.{name.replace('/', '_').replace(' ', '_')}"
        with open(path, "wb") as f:
            marshal.dump(profile.stats, f)  # type: ignore[attr-defined]
        if merged is None:
            merged = pstats.Stats(path)
        else:
            merged.add(path)
    if merged is not None:
        merged.dump_stats(out)


def dump_memory(out: str) -> None:
    snapshot = tracemalloc.take_snapshot()
    stats = snapshot.statistics("filename")
    total = sum(stat.size for stat in stats)
    with open(f"{out}.mem.txt", "w") as f:
        f.write(f"traced {total / 2**20:.1f} MiB, RSS {rss_mib():.1f} MiB\n")
        for stat in stats[:40]:
            f.write(f"{stat.size / 2**20:7.2f} MiB {stat.count:8d} {stat.traceback[0].filename}\n")
        f.write("\nby line:\n")
        for stat in snapshot.statistics("lineno")[:30]:
            f.write(f"{stat.size / 2**20:7.2f} MiB {stat.count:8d} {stat.traceback[0]}\n")


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    memory = sys.argv[1] == "--memory"
    if memory:
        del sys.argv[1]
    out = sys.argv[1]
    sys.argv = ["gputop", *sys.argv[2:]]
    if memory:
        tracemalloc.start()
        try:
            from gputop.cli import entry

            entry()
        finally:
            dump_memory(out)
        return
    threading.Thread.run = _profiled_run(threading.Thread.run)  # type: ignore[method-assign]
    main_profile = PROFILES["main"] = cProfile.Profile(time.thread_time)

    def stop(signum: int, frame: Any) -> None:
        main_profile.disable()
        dump(out)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    from gputop.cli import entry

    main_profile.enable()
    try:
        entry()
    finally:
        main_profile.disable()
        dump(out)


if __name__ == "__main__":
    main()
