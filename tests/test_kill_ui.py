"""Killing from the dashboard with Pilot: a real process on a local feed, and --demo.

Nothing may be signalled before the user says yes; the dialog lists what will be hit;
TERM escalates to KILL; a reused pid is refused; another user's process is not offered.
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any

from helpers.procs import alive, snapshot_of, start_sleeper, start_term_ignorer

from gputop.actions.dispatch import ActionEnv
from gputop.config import Config, ReclaimConfig
from gputop.model import GpuProcess, HostSnapshot
from gputop.sources import sim
from gputop.sources.assembler import HostAssembler
from gputop.sources.feed import LocalFeed
from gputop.sources.hostsource import nvml_collector
from gputop.sources.identity import local_identity, named_identity
from gputop.sources.procfs import ProcFs
from gputop.ui.app import GputopApp
from gputop.ui.screens.kill import KillScreen, refusal, targets_table
from gputop.ui.state import row_key

GIB = 1024**3
START = 1_764_680_000.0
SIZE = (150, 45)


class RealCollector:
    """The local collector's job for real pids, minus NVML: /proc facts are live."""

    def __init__(self, gpu_mem: dict[int, int], host: str = "testhost") -> None:
        self.gpu_mem = gpu_mem
        self.host = host
        self.tamper: Any = None  # rewrites each snapshot (e.g. stale start_ticks)

    def snapshot(self) -> HostSnapshot:
        snap = snapshot_of(self.gpu_mem, host=self.host)
        return self.tamper(snap) if self.tamper else snap

    def collect(self) -> dict:
        return self.snapshot().to_dict()


def _app(collector: RealCollector, grace: float = 0.3, readonly: bool = False) -> GputopApp:
    feed = LocalFeed(collector, host=collector.host, identity=local_identity(),
                     dispatch_env=ActionEnv(procs=ProcFs(), readonly=readonly))
    config = Config(reclaim=ReclaimConfig(kill_grace_s=grace))
    # A long interval: the test hands snapshots in itself with ingest().
    return GputopApp([feed], config, interval=3600, readonly=readonly, me="root")


def _notes(app: GputopApp) -> list[str]:
    return [f"{n.title} | {n.message}" for n in app._notifications]


async def _wait_note(pilot: Any, app: GputopApp, text: str, tries: int = 200) -> str:
    for _ in range(tries):
        for note in _notes(app):
            if text in note:
                return note
        await pilot.pause(0.05)
    raise AssertionError(f"no notification with {text!r}: {_notes(app)}")


def _select(app: GputopApp, host: str, pid: int) -> None:
    snap = app.state.snapshots[host]
    proc = next(p for p in snap.processes if p.pid == pid)
    app.state.tagged = {row_key(host, proc)}


def _dialog_text(screen: KillScreen) -> str:
    """The dialog's target table and total, as plain text."""
    from rich.console import Console

    console = Console(width=400, record=True, file=io.StringIO())
    console.print(targets_table(screen.targets))
    return console.export_text() + str(screen.query_one("#kill-total").render())


async def test_nothing_is_signalled_before_yes_then_term_escalates(reaper):
    proc = start_term_ignorer(reaper)
    collector = RealCollector({proc.pid: 6 * GIB})
    app = _app(collector)
    async with app.run_test(size=SIZE) as pilot:
        app.ingest(collector.snapshot())
        app.dashboard.refresh_view()
        await pilot.pause()
        _select(app, "testhost", proc.pid)

        await pilot.press("k")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, KillScreen)
        assert app.focused is not None and app.focused.id == "kill-cancel"
        text = _dialog_text(screen)
        assert str(proc.pid) in text and "root" in text and "testhost" in text
        assert "6.0G" in text
        await pilot.press("enter")  # Cancel has the focus: Enter must not kill
        await pilot.pause()
        assert not isinstance(app.screen, KillScreen)
        assert alive(proc.pid)

        await pilot.press("k")
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, KillScreen) and alive(proc.pid)

        await pilot.press("k")
        await pilot.pause()
        await pilot.press("y")
        note = await _wait_note(pilot, app, "killed")
        assert "ignored SIGTERM" in note
        assert proc.wait(5) == -9


async def test_kill_signal_choice_and_markup_is_literal(reaper):
    proc = start_sleeper(reaper, args=("[bold red]boom[/]", "\x1b[31mred"))
    collector = RealCollector({proc.pid: GIB})
    app = _app(collector)
    async with app.run_test(size=SIZE) as pilot:
        app.ingest(collector.snapshot())
        app.dashboard.refresh_view()
        await pilot.pause()
        _select(app, "testhost", proc.pid)
        await pilot.press("k")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, KillScreen)
        text = _dialog_text(screen)
        assert "[bold red]boom[/]" in text and "\\e[31mred" in text
        await pilot.click("#sig-KILL")
        await pilot.pause()
        assert screen.choice == "KILL"
        await pilot.press("y")
        await _wait_note(pilot, app, "killed")
        assert proc.wait(5) == -9


async def test_reused_pid_is_refused_from_the_ui(reaper):
    proc = start_sleeper(reaper)
    collector = RealCollector({proc.pid: GIB})
    # What the screen shows is an older process that had the same pid.
    collector.tamper = lambda snap: dataclasses.replace(
        snap,
        processes=tuple(
            dataclasses.replace(p, start_ticks=(p.start_ticks or 0) - 5) for p in snap.processes
        ),
    )
    app = _app(collector)
    async with app.run_test(size=SIZE) as pilot:
        app.ingest(collector.snapshot())
        app.dashboard.refresh_view()
        await pilot.pause()
        _select(app, "testhost", proc.pid)
        await pilot.press("k")
        await pilot.pause()
        await pilot.press("y")
        note = await _wait_note(pilot, app, "pid reused")
        assert "not signalled" in note
        assert alive(proc.pid)


async def test_readonly_offers_no_kill(reaper):
    proc = start_sleeper(reaper)
    collector = RealCollector({proc.pid: GIB})
    app = _app(collector, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        app.ingest(collector.snapshot())
        app.dashboard.refresh_view()
        await pilot.pause()
        _select(app, "testhost", proc.pid)
        await pilot.press("k")
        await pilot.pause()
        assert not isinstance(app.screen, KillScreen)
        await _wait_note(pilot, app, "read-only")
        assert alive(proc.pid)


# -- --demo: the simulation only ------------------------------------------------------------


def _demo_app() -> tuple[GputopApp, sim.SimNvml, sim.SimProcs, HostAssembler]:
    nvml = sim.SimNvml(sim.load_scenario("lab"), clock=lambda: START)
    procs = sim.SimProcs(nvml)
    collector = nvml_collector(nvml, procs, host="lab", demo=True, clock=lambda: START)
    feed = LocalFeed(collector, host="lab", identity=named_identity(nvml.scenario.me),
                     dispatch_env=ActionEnv(sim=nvml, procs=procs))
    return GputopApp([feed], Config(), interval=3600, me="alice"), nvml, procs, collector


async def test_demo_kill_offers_only_my_processes_and_changes_the_sim():
    app, _nvml, procs, collector = _demo_app()
    async with app.run_test(size=SIZE) as pilot:
        app.ingest(HostSnapshot.from_dict(collector.collect()))
        app.dashboard.refresh_view()
        await pilot.pause()
        snap = app.state.snapshots["lab"]
        rows = {p.pid: p for p in snap.processes}
        # carol's sweep (not mine), erin's zombie (nothing to signal), my stubborn worker
        app.state.tagged = {row_key("lab", rows[pid]) for pid in (5100021, 5100041, 5100033)}
        await pilot.press("k")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, KillScreen)
        assert [t.pid for t in screen.targets] == [5100033]
        notes = "\n".join(_notes(app))
        assert "pid 5100021 belongs to carol, not you" in notes
        assert "pid 5100041 is a zombie: its parent 5100040 must reap it" in notes
        await pilot.press("y")
        await _wait_note(pilot, app, "killed")
        assert procs.process(5100033) is None
        assert procs.process(5100021) is not None


def test_only_processes_whose_identity_can_be_checked_are_offered():
    mine = GpuProcess(pid=700, gpu=0, user="alice", uid=1001, start_ticks=55, state="S")
    assert refusal(mine, "alice", False) is None
    # Seen by NVML but not in our PID namespace: /proc cannot confirm who it is.
    hidden = dataclasses.replace(mine, visible=False)
    assert "not in this PID namespace" in (refusal(hidden, "alice", True) or "")
    # Without a start time the pid-reuse guard has nothing to compare: never offered.
    unknown = dataclasses.replace(mine, start_ticks=None)
    assert "start time unknown" in (refusal(unknown, "alice", True) or "")
    assert refusal(mine, "bob", False) == "pid 700 belongs to alice, not you"
