"""Dashboard costs: CPU per tick, idle CPU, startup to first full frame.  Prints a table.

    .venv/bin/python bench/bench_ui.py            # everything (about 75 s)
    .venv/bin/python bench/bench_ui.py --idle 20  # a shorter idle run

Per tick = what the app does with one new snapshot: analysis (History.add, the health
rules, the orphan flags; a worker thread in the app), the view update (rows filtered and
sorted, panels) and Textual drawing the frame (headless driver), each shown apart.
Collection itself is the collector's bench (bench/bench_collector.py).  Targets from
issue 3: < 20 ms at 8 GPUs x 200 processes, < 40 ms at 8 x 2,000; idle < 3 % of one
core; first frame < 1.0 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

from gputop.config import Config
from gputop.model import HostSnapshot
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector

TICKS = 40
WARMUP = 5


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


START = 1_764_680_000.0


def snapshots(gpus: int, processes: int, count: int) -> Iterator[HostSnapshot]:
    """One snapshot a second, made when asked for.

    Not built up front: the app holds one snapshot per host, and 45 kept-alive snapshots
    of 2,000 processes tripled the objects every full garbage collection walks, which
    showed up in the p95 as collector pauses the app does not have.
    """
    clock = Clock(START)
    nvml = sim.SimNvml(sim.synthetic_scenario(gpus, processes), clock=clock)
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="synthetic", demo=True, clock=clock)
    for _ in range(count):
        yield HostSnapshot.from_dict(collector.collect())
        clock.now += 1.0


async def per_tick(gpus: int, processes: int) -> dict[str, float]:
    from gputop.analysis import health, orphans
    from gputop.analysis.pipeline import Analysed
    from gputop.ui.app import GputopApp

    snaps = snapshots(gpus, processes, TICKS + WARMUP)
    clock = Clock(START)
    app = GputopApp(config=Config(), clock=clock, me="alice")
    an = app.analyser
    parts: dict[str, list[float]] = {"history": [], "health": [], "orphans": [], "view": []}
    async with app.run_test(size=(160, 50)) as pilot:
        for i, snap in enumerate(snaps):
            clock.now = snap.time
            # The steps of Analyser.__call__ (analysis/pipeline.py), timed one by one.
            t0 = time.process_time()
            an.history.add(snap)
            t1 = time.process_time()
            # In the app's order: the flags first, then the health rules reuse them.
            flags = orphans.classify_snapshot(snap, an.history, an.settings.rules, snap.time)
            t2 = time.process_time()
            fresh = health.warnings(snap, an.history, an.settings.thresholds, snap.time,
                                    an.me_on(snap.host), flags if an.shares_flags else None)
            warnings = an.tracker.update(snap.host, fresh, snap.time)
            t3 = time.process_time()
            app._apply_result(Analysed(snap, warnings, flags))
            app.dashboard.refresh_view()
            await pilot.pause()  # lets Textual lay out and draw the frame
            t4 = time.process_time()
            if i >= WARMUP:
                steps = (t1 - t0, t3 - t2, t2 - t1, t4 - t3)  # in the order of `parts`
                for name, dt in zip(parts, steps, strict=True):
                    parts[name].append(dt * 1000)
    total = [sum(p) for p in zip(*parts.values(), strict=True)]
    out = {name: statistics.median(values) for name, values in parts.items()}
    out["total"] = statistics.median(total)
    out["p95"] = sorted(total)[int(len(total) * 0.95) - 1]
    return out


async def idle_cpu(seconds: float) -> float:
    """The real app with the dgx-h100 demo feed at 1 s for ``seconds``: % of one core."""
    from gputop.options import SourceOptions
    from gputop.sources.opener import open_feeds
    from gputop.ui.app import GputopApp

    app = GputopApp(open_feeds(SourceOptions(demo="dgx-h100"), Config()), Config(), interval=1.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(3.0)  # startup and the first snapshots are not idle
        c0, w0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        c1, w1 = time.process_time(), time.monotonic()
        assert app.state.version >= seconds - 2, "the feed stopped delivering"
    return 100.0 * (c1 - c0) / (w1 - w0)


STARTUP = r"""
import time
t0 = time.perf_counter()
import asyncio
from gputop.ui.app import GputopApp
from gputop.options import SourceOptions
from gputop.sources.opener import open_feeds
from gputop.config import Config
async def main():
    app = GputopApp(open_feeds(SourceOptions(demo="dgx-h100"), Config()), Config())
    async with app.run_test(size=(160, 50)) as pilot:
        while not app.dashboard.table.rows:
            await asyncio.sleep(0.005)
        await pilot.pause()  # the frame with the data is drawn
        print(time.perf_counter() - t0)
asyncio.run(main())
"""


def startup() -> float:
    """Seconds from interpreter start of the app code to the first frame with data."""
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", STARTUP], capture_output=True, text=True,
                             check=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        runs.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=60.0, help="idle run seconds (60)")
    args = parser.parse_args()
    print(f"{'measure':<38} {'value':>10}  target")
    for gpus, procs, target in ((8, 200, 20.0), (8, 2000, 40.0)):
        r = asyncio.run(per_tick(gpus, procs))
        label = f"tick {gpus} GPUs x {procs} procs"
        print(f"{label + ' (median ms)':<38} {r['total']:>10.1f}  < {target:g} ms")
        for name, what in (("history", "History.add"), ("health", "health rules + tracker"),
                           ("orphans", "orphan flags"), ("view", "view update + draw")):
            print(f"{'  ' + what + ' (ms)':<38} {r[name]:>10.1f}")
        print(f"{'  p95 (ms)':<38} {r['p95']:>10.1f}")
    print(f"{'startup to first full frame (s)':<38} {startup():>10.2f}  < 1.0 s")
    cpu = asyncio.run(idle_cpu(args.idle))
    print(f"{f'idle CPU, dgx-h100, {args.idle:g} s at 1 s (%)':<38} {cpu:>10.2f}  < 3 %")


if __name__ == "__main__":
    main()
