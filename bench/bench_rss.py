"""The dashboard's memory over an hour of simulated uptime, fed ticks as fast as it takes
them.  Prints RSS at each mark and, with --trace, what grew between the first and the
last mark (tracemalloc, by line).

    .venv/bin/python bench/bench_rss.py                  # an hour at 1 s (about 3 minutes)
    .venv/bin/python bench/bench_rss.py --refresh 0.25 --minutes 15 --trace
    PYTHONPATH=/other/checkout .venv/bin/python bench/bench_rss.py   # another tree
    .venv/bin/python bench/bench_rss.py --split --minutes 12         # whose RSS it is

``--split``: RSS of fresh interpreters after importing only Textual, then gputop's app
(what no tick changes), and then the app's own allocations by package after the run
(tracemalloc from the interpreter's start, in a child: tracing inflates its RSS, so
only the traced sizes are shown).

The app is the real one (headless, 160x50) on the simulated 8-GPU host of
bench/bench_tick.py, its clock stepped by ``--refresh`` per tick, every tick analysed
(History.add, the rules) and one in ``--draw-every`` drawn.  Goal (issue 27): flat once
the history window (10 minutes) is full.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tick import START, Clock, snapshots


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


_STAGES = (
    ("the interpreter alone", "pass"),
    ("+ Textual (the modules the app imports)",
     "import textual.app, textual.widgets, textual.containers, textual.screen"),
    ("+ gputop's app and everything it imports", "import gputop.ui.app"),
)
_STATM = ("\nimport os\nprint(int(open('/proc/self/statm').read().split()[1])"
          " * os.sysconf('SC_PAGE_SIZE') / 1048576)")


def split(minutes: float) -> None:
    import subprocess

    print("| fresh process, after | RSS (/proc/self/statm) |")
    print("|---|---|")
    for label, code in _STAGES:
        out = subprocess.run([sys.executable, "-c", code + _STATM], capture_output=True,
                             cwd=Path(__file__).parent,  # not a checkout: PYTHONPATH decides
                             text=True, check=True).stdout
        print(f"| {label} | {float(out):.1f} MiB |", flush=True)
    print(f"\ntraced allocations alive after {minutes:g} min of the app, by package:")
    subprocess.run([sys.executable, "-X", "tracemalloc=1", __file__, "--minutes", str(minutes),
                    "--marks", str(minutes), "--by-package"], check=True)


def by_package() -> None:
    gc.collect()
    sizes: dict[str, int] = {}
    for stat in tracemalloc.take_snapshot().statistics("filename"):
        name = stat.traceback[0].filename
        if "/site-packages/" in name:
            package = name.split("/site-packages/", 1)[1].split("/", 1)[0]
        elif "/gputop/" in name:
            package = "gputop"
        elif "/bench/" in name:
            package = "bench (the feed)"
        elif name.startswith("<frozen importlib"):
            package = "code of every imported module (importlib)"
        elif name.startswith("<"):
            package = "generated code (dataclasses' methods...)"
        else:
            package = "stdlib: " + name.rsplit("/python3", 1)[-1].split("/")[1].split(".")[0]
        sizes[package] = sizes.get(package, 0) + stat.size
    print("| package | traced |")
    print("|---|---|")
    for package, size in sorted(sizes.items(), key=lambda kv: -kv[1])[:10]:
        print(f"| {package} | {size / 1048576:.1f} MiB |")
    print(f"| all | {sum(sizes.values()) / 1048576:.1f} MiB |")


async def run(refresh: float, minutes: float, marks: list[float], trace: bool,
              draw_every: int, packages: bool = False) -> None:
    from gputop.config import Config
    from gputop.ui.app import GputopApp

    clock = Clock(START)
    feed = snapshots(clock, refresh)
    app = GputopApp(config=Config(), clock=clock, me="alice")
    first_trace = None
    async with app.run_test(size=(160, 50)) as pilot:
        ticks = int(minutes * 60 / refresh)
        todo = sorted(m for m in marks if m <= minutes)
        for i in range(1, ticks + 1):
            snap = next(feed)
            clock.now = snap.time
            result = app.analyser(snap)
            if i % draw_every == 0:  # what grows is kept by the analysis, every tick
                app._apply_result(result)
                app.dashboard.refresh_view()
                await pilot.pause()
            up = i * refresh / 60
            if todo and up >= todo[0]:
                todo.pop(0)
                gc.collect()
                print(f"| {up:g} min | {rss_mib():.1f} MiB |", flush=True)
                if trace:
                    if first_trace is None:
                        tracemalloc.start(1) if not tracemalloc.is_tracing() else None
                        first_trace = tracemalloc.take_snapshot()
                    else:
                        now_trace = tracemalloc.take_snapshot()
                        top = now_trace.compare_to(first_trace, "lineno")[:12]
                        for stat in top:
                            print(f"    {stat}")
                        first_trace = now_trace
        if packages:
            by_package()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refresh", type=float, default=1.0)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--marks", type=float, nargs="*", default=[1, 5, 10, 20, 30, 45, 60])
    ap.add_argument("--trace", action="store_true",
                    help="tracemalloc from the first mark: what grew, by source line")
    ap.add_argument("--draw-every", type=int, default=10,
                    help="draw one tick in this many (1: all); every tick is analysed")
    ap.add_argument("--split", action="store_true",
                    help="how much of the RSS is the imports, and whose the rest is")
    ap.add_argument("--by-package", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.split:
        split(args.minutes)
        return
    import gputop

    print(f"gputop from {os.path.dirname(gputop.__file__)}; refresh {args.refresh:g} s, "
          f"simulated uptime up to {args.minutes:g} min")
    print("| uptime | RSS |")
    print("|---|---|")
    asyncio.run(run(args.refresh, args.minutes, args.marks, args.trace, args.draw_every,
                    args.by_package))


if __name__ == "__main__":
    main()
