"""`gputop --screenshot DIR`: the main screens rendered headless into SVG files.

Deterministic: a frozen simulated clock (the simulator's values are pure functions of
time), a fixed user, built-in defaults instead of the user's config, and no blinking
cursor on screen, so the same build writes the same files.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gputop.config import Config
from gputop.model import HostSnapshot
from gputop.ui.app import GputopApp

START = 1_764_680_000.0  # 2025-12-02 12:53:20 UTC
HISTORY_S = 150  # a little more than the sparklines' two minutes
ME = "alice"


class FrozenClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def demo_history(scenario: str, seconds: int = HISTORY_S,
                 start: float = START) -> list[HostSnapshot]:
    """One snapshot per simulated second of a built-in scenario, oldest first."""
    from gputop.sources import sim
    from gputop.sources.nvml import Collector

    clock = FrozenClock(start)
    nvml = sim.SimNvml(sim.load_scenario(scenario), clock=clock)
    host = str(nvml.scenario.host.get("hostname") or scenario)
    collector = Collector(nvml, sim.SimProcs(nvml), host=host, demo=True, clock=clock)
    snaps = []
    for _ in range(seconds):
        snaps.append(HostSnapshot.from_dict(collector.collect()))
        clock.now += 1.0
    return snaps


def demo_app(scenario: str, seconds: int = HISTORY_S) -> GputopApp:
    """A dashboard over ``seconds`` of a scenario's history, frozen at its last snapshot."""
    snaps = demo_history(scenario, seconds)
    app = GputopApp(config=Config(), clock=FrozenClock(snaps[-1].time), me=ME)
    app.pending_snapshots = snaps  # type: ignore[attr-defined]
    return app


async def load(pilot: Any) -> None:
    """Feed the app its pending snapshots and draw; usable as snap_compare's run_before."""
    app = pilot.app
    for snap in app.pending_snapshots:
        app.ingest(snap)
    app.refresh_view()
    await pilot.pause()


Step = Callable[[Any], Awaitable[None]]


def _press(*keys: str) -> Step:
    async def run(pilot: Any) -> None:
        await pilot.press(*keys)
        await pilot.pause()

    return run


# (file name, scenario, size, steps after loading, screen class name that must show or None)
SHOTS: list[tuple[str, str, tuple[int, int], list[Step], str | None]] = [
    ("main-lab-160x50", "lab", (160, 50), [], None),
    ("main-lab-80x24", "lab", (80, 24), [], None),
    ("main-dgx-h100-160x50", "dgx-h100", (160, 50), [], None),
    ("main-dgx-h100-80x24", "dgx-h100", (80, 24), [], None),
    ("main-dgx-h100-240x70", "dgx-h100", (240, 70), [], None),
    ("main-faulty-160x50", "faulty", (160, 50), [], None),
    ("detail-lab", "lab", (120, 40), [_press("enter")], "DetailScreen"),
    ("help", "lab", (120, 40), [_press("question_mark")], "HelpScreen"),
    ("topology-dgx-h100", "dgx-h100", (160, 50), [_press("t")], "TopologyScreen"),
    ("warnings-log-faulty", "faulty", (160, 50), [_press("w")], "WarningLogScreen"),
    ("kill-lab", "lab", (120, 40), [_press("k")], "KillScreen"),
]


async def _shoot(name: str, scenario: str, size: tuple[int, int], steps: list[Step],
                 screen: str | None, outdir: Path) -> str | None:
    app = demo_app(scenario)
    async with app.run_test(size=size) as pilot:
        await load(pilot)
        for step in steps:
            await step(pilot)
        if screen is not None and type(app.screen).__name__ != screen:
            return None  # that screen is not in this build
        path = outdir / f"{name}.svg"
        path.write_text(app.export_screenshot(title=f"gputop: {name}"), encoding="utf-8")
        return str(path)


def run_screenshots(args: argparse.Namespace) -> int:
    outdir = Path(args.screenshot)
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"gputop: --screenshot {outdir}: {err.strerror}", file=sys.stderr)
        return 2
    # Times shown (detail view) must not depend on where the screenshots are made.
    os.environ["TZ"] = "UTC"
    time.tzset()
    written = []
    for shot in SHOTS:
        path = asyncio.run(_shoot(*shot, outdir=outdir))
        if path is not None:
            written.append(path)
            print(path)
    return 0 if written else 1
