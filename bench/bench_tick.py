"""The dashboard's tick at 0.25, 1 and 2 s refresh after 1, 10 and 60 minutes of uptime.

    .venv/bin/python bench/bench_tick.py              # the table (about 2 minutes)
    .venv/bin/python bench/bench_tick.py --ticks 10   # quicker, noisier
    PYTHONPATH=/other/checkout .venv/bin/python bench/bench_tick.py   # another tree

Uptime is simulated: the app's history is filled first with the snapshots that many
minutes at that refresh would have left (re-timed copies of a few collected ones), then
``--ticks`` real ticks are timed (CPU time of analysis, view update and Textual drawing
the frame into a headless 160x50 screen, as bench/bench_ui.py's per-tick row).  The goal
(issue 27): the cost of one refresh the same in every row, whatever the uptime and the
refresh rate; CPU per second then follows the refresh rate alone.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import os
import statistics
import sys
import time
from collections.abc import Iterator

from gputop.config import Config
from gputop.model import HostSnapshot
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector

START = 1_764_680_000.0
GPUS, PROCESSES = 8, 64


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def snapshots(clock: Clock, step: float, steady: bool = False) -> Iterator[HostSnapshot]:
    """Snapshots of one simulated 8-GPU host, ``step`` simulated seconds apart.

    ``steady``: the host of bench_vs_nvitop.py's fake driver, whose cards read the same
    every time: the first snapshot again and again, only its time and the host's CPU
    figure moving (the processes age, as real ones do).
    """
    nvml = sim.SimNvml(sim.synthetic_scenario(GPUS, PROCESSES), clock=clock)
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="synthetic", demo=True,
                               clock=clock)
    first = HostSnapshot.from_dict(collector.collect())
    for i in itertools.count():
        if steady:
            yield dataclasses.replace(first, time=clock.now, cpu_percent=10.0 + i % 7)
        else:
            yield first if i == 0 else HostSnapshot.from_dict(collector.collect())
        clock.now += step


async def tick_cost(refresh: float, uptime_s: float, ticks: int,
                    profile: str | None = None, steady: bool = False,
                    size: tuple[int, int] = (160, 50)) -> float:
    """Median CPU ms of one refresh after ``uptime_s`` of history at ``refresh``."""
    from gputop.ui.app import GputopApp

    clock = Clock(START)
    feed = snapshots(clock, refresh, steady)
    seeds = [next(feed) for _ in range(16)]
    app = GputopApp(config=Config(), clock=clock, me="alice")
    an = app.analyser
    # What `uptime_s` at `refresh` left in the history, oldest first.
    count = int(uptime_s / refresh)
    base = START
    for i in range(count):
        an.history.add(dataclasses.replace(seeds[i % len(seeds)], time=base + i * refresh))
    clock.now = base + count * refresh
    costs = []
    import cProfile

    profiler = cProfile.Profile() if profile else None
    async with app.run_test(size=size) as pilot:
        for i in range(ticks + 3):
            snap = next(feed)  # the simulated host's collection: not the tick's
            clock.now = snap.time
            if profiler is not None and i >= 3:
                profiler.enable()
            t0 = time.process_time()
            app._apply_result(an(snap))  # History.add, the rules; then the view
            app.dashboard.refresh_view()
            await pilot.pause()
            if i >= 3:  # the first frames lay the screen out
                costs.append(1000 * (time.process_time() - t0))
            if profiler is not None:
                profiler.disable()
    if profiler is not None and profile:
        profiler.dump_stats(profile)
    return statistics.median(costs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=20)
    ap.add_argument("--refresh", type=float, nargs="*", default=[0.25, 1.0, 2.0])
    ap.add_argument("--uptime", type=float, nargs="*", default=[1.0, 10.0, 60.0],
                    help="minutes")
    ap.add_argument("--profile", metavar="FILE",
                    help="cProfile the ticks of the first refresh and uptime into FILE")
    ap.add_argument("--steady", action="store_true",
                    help="cards that read the same every tick (bench_vs_nvitop's fake driver)")
    ap.add_argument("--size", default="160x50", help="the screen, COLSxROWS (160x50)")
    args = ap.parse_args()
    cols, rows = (int(n) for n in args.size.split("x"))
    size = (cols, rows)
    import gputop

    if args.profile:
        cost = asyncio.run(tick_cost(args.refresh[0], args.uptime[0] * 60, args.ticks,
                                     args.profile, args.steady, size))
        import pstats

        print(f"{cost:.1f} ms a tick")
        pstats.Stats(args.profile).sort_stats("tottime").print_stats(25)
        return

    print(f"gputop from {os.path.dirname(gputop.__file__)}; {GPUS} GPUs x {PROCESSES} "
          f"processes{', steady' if args.steady else ''}, {args.size}; "
          f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print("| refresh | " + " | ".join(f"{u:g} min" for u in args.uptime)
          + " | CPU at the last uptime |")
    print("|---|" + "---|" * (len(args.uptime) + 1))
    for refresh in args.refresh:
        cells = [asyncio.run(tick_cost(refresh, u * 60, args.ticks, None, args.steady, size))
                 for u in args.uptime]
        row = " | ".join(f"{c:.1f} ms" for c in cells)
        print(f"| {refresh:g} s | {row} | {cells[-1] / refresh:.0f} ms/s |", flush=True)
    print(f"median of {args.ticks} ticks per cell; CPU time of the process (one core)")


if __name__ == "__main__":
    sys.exit(main())
