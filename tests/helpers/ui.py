"""Helpers for the dashboard tests: simulated snapshots on a frozen clock, demo apps,
waiting for a condition, rich renderables as plain text."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from rich.console import Console

from gputop.config import Config
from gputop.model import GpuProcess, HostSnapshot
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector
from gputop.ui.app import GputopApp

START = 1_764_680_000.0  # a fixed epoch: no test depends on the real clock


class Clock:
    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def demo_snapshots(scenario: str, count: int, start: float = START,
                   step: float = 1.0) -> list[HostSnapshot]:
    """``count`` snapshots of a built-in scenario, ``step`` simulated seconds apart."""
    clock = Clock(start)
    nvml = sim.SimNvml(sim.load_scenario(scenario), clock=clock)
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host=scenario, demo=True, clock=clock)
    out = []
    for _ in range(count):
        out.append(HostSnapshot.from_dict(collector.collect()))
        clock.now += step
    return out


def demo_app(scenario: str = "lab", history: int = 3, me: str = "alice",
             config: Config | None = None, **kwargs: object) -> tuple[GputopApp, Clock]:
    """An app without feeds, fed ``history`` snapshots by ingest() once it runs."""
    snaps = demo_snapshots(scenario, history)
    clock = Clock(snaps[-1].time)
    app = GputopApp(config=config, clock=clock, me=me, **kwargs)  # type: ignore[arg-type]
    app._test_snapshots = snaps  # type: ignore[attr-defined]
    return app, clock


def feed_all(app: GputopApp, snapshots: Iterable[HostSnapshot] | None = None) -> None:
    for snap in snapshots if snapshots is not None else app._test_snapshots:  # type: ignore
        app.ingest(snap)
    app.dashboard.refresh_view()


def with_processes(snap: HostSnapshot, procs: Iterable[GpuProcess],
                   dt: float = 1.0) -> HostSnapshot:
    return dataclasses.replace(snap, time=snap.time + dt, processes=tuple(procs))


def table_lines(app: GputopApp) -> list[str]:
    table = app.dashboard.table
    return [table.render_line(y).text.rstrip() for y in range(len(table.rows))]


SIZE = (120, 40)  # the terminal most dashboard tests run in


def plain(renderable: object) -> str:
    """What a rich renderable shows, without styles."""
    console = Console(width=200, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


async def wait_for(pilot: object, condition: object, tries: int = 200) -> None:
    """Let the app run until ``condition()`` holds (a count of pauses, not a time limit)."""
    for _ in range(tries):
        if condition():  # type: ignore[operator]
            return
        await pilot.pause(0.02)  # type: ignore[attr-defined]
    raise AssertionError("condition never became true")


def cluster_app(n_hosts: int = 3) -> GputopApp:
    """Several simulated hosts in one app, their snapshots in ``app._test_snapshots``."""
    snaps: list[HostSnapshot] = []
    for i, scenario in enumerate(["lab", "dgx-h100", "faulty"][:n_hosts]):
        snaps += [dataclasses.replace(s, host=f"{scenario}-{i}")
                  for s in demo_snapshots(scenario, 3)]
    app = GputopApp(clock=lambda: max(s.time for s in snaps), me="alice")
    app._test_snapshots = snaps  # type: ignore[attr-defined]
    return app
