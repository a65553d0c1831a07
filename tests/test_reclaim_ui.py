"""The reclaim view (``o``): what it lists after 31 simulated minutes, one confirmation
for several kills, and the memory nobody owns."""

from __future__ import annotations

import asyncio
import dataclasses
import io
from typing import Any

from rich.console import Console

from gputop.actions.dispatch import ActionEnv
from gputop.config import Config
from gputop.model import DeviceHolder, HostSnapshot
from gputop.sources import sim
from gputop.sources.feed import LocalFeed
from gputop.sources.hostsource import nvml_collector
from gputop.sources.identity import named_identity
from gputop.ui.app import GputopApp
from gputop.ui.screens.kill import KillScreen, targets_from_rows, targets_table
from gputop.ui.screens.reclaim import ReclaimScreen

START = 1_764_680_000.0
SIZE = (150, 45)
GIB = 1024**3


class ManualFeed:
    """The lab's LocalFeed for actions, but snapshots come only from the test (ingest):
    a background poll landing between two ingests would bring older flags back."""

    def __init__(self, inner: LocalFeed) -> None:
        self.inner = inner
        self.hosts = inner.hosts
        self.capabilities = inner.capabilities
        self.identity = inner.identity
        self.process_details = inner.process_details

    async def run(self, interval: float, emit: Any) -> None:
        await asyncio.Event().wait()

    async def request(self, host: str, request: dict) -> dict:
        return await self.inner.request(host, request)

    async def close(self) -> None:
        await self.inner.close()


class Lab:
    """The lab scenario on a clock the test moves, behind a real LocalFeed."""

    def __init__(self, me: str = "alice") -> None:
        self.now = START
        scenario = dataclasses.replace(sim.load_scenario("lab"), me=me)
        self.nvml = sim.SimNvml(scenario, clock=lambda: self.now)
        self.procs = sim.SimProcs(self.nvml)
        self.collector = nvml_collector(self.nvml, self.procs, host="lab", demo=True,
                                   clock=lambda: self.now)
        env = ActionEnv(sim=self.nvml, procs=self.procs)
        self.feed = ManualFeed(LocalFeed(self.collector, host="lab",
                                         identity=named_identity(me), dispatch_env=env))

    def app(self) -> GputopApp:
        return GputopApp([self.feed], Config(), interval=3600, me=self.nvml.scenario.me,
                         clock=lambda: self.now)

    def observe(self, app: GputopApp, minutes: int) -> HostSnapshot:
        """Feed the app one snapshot a minute for ``minutes`` simulated minutes."""
        snap = None
        for _ in range(minutes + 1):
            snap = HostSnapshot.from_dict(self.collector.collect())
            app.ingest(snap)
            self.now += 60
        assert snap is not None
        return snap


def _notes(app: GputopApp) -> list[str]:
    return [f"{n.title} | {n.message}" for n in app._notifications]


async def _until(pilot: Any, check: Any, tries: int = 200) -> None:
    for _ in range(tries):
        if check():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not reached")


async def _open_reclaim(app: GputopApp, pilot: Any) -> ReclaimScreen:
    """Press `o`: the reclaim view is the screen."""
    await pilot.press("o")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, ReclaimScreen)
    return screen


async def test_orphan_listed_at_once_idle_kernel_after_thirty_minutes():
    lab = Lab()
    app = lab.app()
    async with app.run_test(size=SIZE) as pilot:
        snap = lab.observe(app, 1)
        screen = await _open_reclaim(app, pilot)
        # alice's kernel whose server died: orphaned.  Her stubborn worker is orphaned
        # too but computing (not offered); her live notebook's kernel is not idle *yet*.
        assert [k[1] for k in screen.entries] == [5100034]
        (entry,) = screen.entries.values()
        assert entry.mem == sum(p.gpu_mem or 0 for p in snap.processes if p.pid == 5100034)
        assert entry.mem > 10 * GIB
        why = str(screen.query_one("#reclaim-why").render())
        assert "orphan: its notebook server is gone; re-parented to systemd --user" in why
        # The scenario's GPU 1 has 600 MiB that no process explains (over the driver floor).
        ghost = str(screen.query_one("#reclaim-ghost").render())
        assert "lab GPU 1: 600M used by no listed process" in ghost

        lab.observe(app, 31)
        await pilot.pause()
        pids = [k[1] for k in screen.entries]
        assert pids == [5100032, 5100034]  # largest first: 21 GiB then 11 GiB
        idle = screen.entries[next(k for k in screen.entries if k[1] == 5100032)]
        assert idle.flags.idle and idle.flags.kernel and not idle.flags.orphan
        summary = str(screen.query_one("#reclaim-summary").render())
        assert "2 orphaned or idle processes (yours)" in summary


async def test_several_killed_after_one_confirmation():
    lab = Lab()
    app = lab.app()
    async with app.run_test(size=SIZE) as pilot:
        lab.observe(app, 31)
        screen = await _open_reclaim(app, pilot)
        await pilot.press("a")
        await pilot.pause()
        assert "2 selected" in str(screen.query_one("#reclaim-summary").render())
        await pilot.press("k")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, KillScreen)
        assert sorted(t.pid for t in dialog.targets) == [5100032, 5100034]
        assert lab.procs.process(5100032) is not None  # nothing before yes
        await pilot.press("y")
        await _until(pilot, lambda: sum("exited" in n for n in _notes(app)) == 2)
        assert lab.procs.process(5100032) is None and lab.procs.process(5100034) is None
        assert isinstance(app.screen, ReclaimScreen)  # one dialog, no second question
        lab.observe(app, 0)
        await pilot.pause()
        assert screen.entries == {}
        assert "Nothing to reclaim" in str(screen.query_one("#reclaim-summary").render())
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ReclaimScreen)


async def test_the_kill_dialog_from_reclaim_shows_the_flags_and_reasons_of_the_table():
    """The same process killed from `o` or from the main table: the same FLAGS and
    reasons in the dialog (issue 24: `-` and no reasons from the reclaim view)."""
    lab = Lab()
    app = lab.app()
    async with app.run_test(size=SIZE) as pilot:
        lab.observe(app, 31)
        await _open_reclaim(app, pilot)
        await pilot.press("a")
        await pilot.press("k")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, KillScreen)
        from_reclaim = {t.pid: (t.flags, t.notes) for t in dialog.targets}
        await pilot.press("n")
        await pilot.pause()
        state = app.state
        rows = [("lab", p) for p in state.snapshots["lab"].processes
                if p.pid in from_reclaim]
        from_table = {t.pid: (t.flags, t.notes) for t in targets_from_rows(
            rows, state.snapshots, state.flags, lambda host: app.identity(host).user)}
        assert from_reclaim == from_table
        flags, notes = from_reclaim[5100034]
        assert set(flags) == {"kernel", "orphan", "idle"}
        assert any(n.startswith("orphan: its notebook server is gone") for n in notes)
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(targets_table(dialog.targets))
        row = next(line for line in console.export_text().splitlines() if "5100034" in line)
        assert "ORPH" in row and "KERN" in row, row


async def test_check_boxes_show_their_state_in_shape_not_only_colour():
    lab = Lab()
    app = lab.app()
    async with app.run_test(size=SIZE) as pilot:
        lab.observe(app, 31)
        screen = await _open_reclaim(app, pilot)

        def boxes() -> list[str]:
            lines = [screen.selection.render_line(y).text for y in range(len(screen.entries))]
            return [line[:3] for line in lines]

        assert boxes() == ["▐ ▌", "▐ ▌"]  # "0 selected": no box reads as ticked
        await pilot.press("space")
        await pilot.pause()
        assert boxes() == ["▐X▌", "▐ ▌"]
        await pilot.press("k")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, KillScreen)
        marks = {b.id: str(b.render())[:3] for b in dialog.query("RadioButton")}
        assert marks == {"sig-TERM": "▐●▌", "sig-KILL": "▐ ▌", "sig-INT": "▐ ▌"}, marks


async def test_root_sees_everyone_and_ghost_memory_is_shown():
    lab = Lab(me="root")
    app = lab.app()
    async with app.run_test(size=SIZE) as pilot:
        snap = lab.observe(app, 0)
        gpu0 = snap.gpu(0)
        assert gpu0 is not None and gpu0.mem_used is not None
        ghost = dataclasses.replace(
            snap,
            time=snap.time + 1,
            gpus=tuple(
                dataclasses.replace(g, mem_used=(g.mem_used or 0) + 6 * GIB)
                if g.index == 0 else g
                for g in snap.gpus
            ),
            device_holders=(
                DeviceHolder(pid=777001, user="mallory", command="python [red]hidden[/]",
                             devices=("/dev/nvidia0",)),
            ),
            device_scan_note="3 processes not readable (not root)",
        )
        app.ingest(ghost)
        screen = await _open_reclaim(app, pilot)
        assert "(all users (root))" in str(screen.query_one("#reclaim-summary").render())
        text = str(screen.query_one("#reclaim-ghost").render())
        assert "lab GPU 0: 6.0G used by no listed process" in text
        assert "pid 777001 mallory python [red]hidden[/] holds /dev/nvidia0" in text
        assert "device scan incomplete: 3 processes not readable (not root)" in text
