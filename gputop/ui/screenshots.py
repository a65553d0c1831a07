"""`gputop --screenshot DIR`: the main screens rendered headless into SVG files.

Deterministic: a frozen simulated clock (the simulator's values are pure functions of
time) stepped one second at a time through three minutes of history, so the sparklines
show what three minutes of that scenario look like; a fixed user, built-in defaults
instead of the user's config, and no blinking cursor on screen, so the same build writes
the same files.  The cluster pictures are several simulated hosts (and two that are down)
fed to one app, the SSH feed's picture without SSH.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gputop.config import Config
from gputop.model import HostSnapshot, Reservation, error_snapshot
from gputop.sources.simcluster import CLUSTER, CLUSTER_DOWN, CLUSTER_HOSTS, machine
from gputop.ui.app import GputopApp

START = 1_764_680_000.0  # 2025-12-02 12:53:20 UTC
HISTORY_S = 180  # the sparklines show three minutes
ME = "alice"


class FrozenClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def demo_history(scenario: str, seconds: int = HISTORY_S, start: float = START,
                 hostname: str | None = None, seed: int | None = None) -> list[HostSnapshot]:
    """One snapshot per simulated second of a built-in scenario, oldest first.

    ``hostname`` and ``seed`` make another machine of the same kind (cluster pictures).
    """
    from gputop.sources.hostsource import open_simulation

    clock = FrozenClock(start)
    scenario_obj = machine(scenario, hostname, seed)
    host = str(scenario_obj.host.get("hostname") or scenario)
    collector = open_simulation(scenario_obj, host=host, clock=clock).collector
    snaps = []
    for _ in range(seconds):
        snaps.append(HostSnapshot.from_dict(collector.collect()))
        clock.now += 1.0
    return snaps


def demo_app(scenario: str, seconds: int = HISTORY_S) -> GputopApp:
    """A dashboard over ``seconds`` of a scenario's history, frozen at its last snapshot."""
    if scenario == CLUSTER:
        return demo_cluster_app(seconds)
    snaps = demo_history(scenario, seconds)
    app = GputopApp(config=Config(), clock=FrozenClock(snaps[-1].time), me=ME)
    app.pending_snapshots = snaps  # type: ignore[attr-defined]
    return app


def cluster_history(seconds: int = HISTORY_S) -> list[HostSnapshot]:
    """Several simulated hosts side by side, in time order, plus two hosts that are down."""
    per_host = []
    for scenario, hostname, seed, labels in CLUSTER_HOSTS:
        snaps = demo_history(scenario, seconds, hostname=hostname, seed=seed)
        extra: dict[str, Any] = {"labels": labels}
        if hostname == "lab-gpu-04":
            # One card reserved, so the overview shows what a reservation looks like.
            held = Reservation(gpu=2, user="dave", until=snaps[-1].time + 5 * 3600,
                               since=snaps[0].time, note="ablation run tonight",
                               host=hostname)
            extra["reservations"] = (held,)
        per_host.append([dataclasses.replace(s, **extra) for s in snaps])
    ordered = [snap for step in zip(*per_host, strict=True) for snap in step]
    last = ordered[-1].time
    for host, state, error, labels in CLUSTER_DOWN:
        ordered.append(error_snapshot(host, last - 42.0, state, error, labels=labels))
    return ordered


def demo_cluster_app(seconds: int = HISTORY_S) -> GputopApp:
    """A dashboard holding several hosts, the SSH feed's picture without SSH."""
    snaps = cluster_history(seconds)
    now = max(s.time for s in snaps)
    app = GputopApp(config=Config(), clock=FrozenClock(now), me=ME)
    app.pending_snapshots = snaps  # type: ignore[attr-defined]
    return app


async def load(pilot: Any) -> None:
    """Feed the app its pending snapshots and draw; usable as snap_compare's run_before."""
    app = pilot.app
    for snap in app.pending_snapshots:
        app.ingest(snap)
    app.dashboard.refresh_view()
    await pilot.pause()


Step = Callable[[Any], Awaitable[None]]


def _press(*keys: str) -> Step:
    async def run(pilot: Any) -> None:
        await pilot.press(*keys)
        await pilot.pause()

    return run


def reserve_dialog(gpus: str) -> Step:
    """The reserve dialog for ``gpus``, as typed over the prefilled card: what it says of
    cards other users' processes run on."""
    async def run(pilot: Any) -> None:
        await pilot.press("r")
        await pilot.pause()
        field = pilot.app.screen.query_one("#reserve-gpus")
        await pilot.press("end", *["backspace"] * len(field.value), *gpus)
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
    ("main-mig-160x50", "mig", (160, 50), [], None),
    ("detail-lab", "lab", (120, 40), [_press("enter")], "DetailScreen"),
    ("metrics-lab", "lab", (120, 40), [_press("enter"), _press("m")], "MetricsScreen"),
    ("help", "lab", (120, 40), [_press("question_mark")], "HelpScreen"),
    ("topology-dgx-h100", "dgx-h100", (160, 50), [_press("t")], "TopologyScreen"),
    ("warnings-log-faulty", "faulty", (160, 50), [_press("w")], "WarningLogScreen"),
    ("kill-lab", "lab", (120, 40), [_press("k")], "KillScreen"),
    ("reclaim-lab", "lab", (120, 40), [_press("o")], "ReclaimScreen"),
    ("reserve-lab", "lab", (120, 40), [_press("r")], "ReserveScreen"),
    ("reserve-lab-80x24", "lab", (80, 24), [reserve_dialog("0,1,3")], "ReserveScreen"),
    ("cluster-160x50", CLUSTER, (160, 50), [_press("c")], "ClusterScreen"),
    ("cluster-80x24", CLUSTER, (80, 24), [_press("c")], "ClusterScreen"),
    ("cluster-processes", CLUSTER, (160, 50), [_press("c"), _press("p")],
     "ClusterProcessesScreen"),
    ("main-cluster-host-160x50", CLUSTER, (160, 50), [], None),
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


def run_screenshots(directory: str) -> int:
    outdir = Path(directory)
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
