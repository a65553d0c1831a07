"""The dashboard driven with Pilot: every key, filters, selection across refreshes, screens."""

from __future__ import annotations

import asyncio
import dataclasses

from helpers.feeds import QueueFeed
from helpers.ui import (
    START,
    Clock,
    demo_app,
    demo_snapshots,
    feed_all,
    table_lines,
    with_processes,
)
from textual.widgets import Input, Static

from gputop.config import parse_config
from gputop.model import HostSnapshot
from gputop.ui.app import GputopApp
from gputop.ui.screens.detail import DetailScreen
from gputop.ui.screens.help import HelpScreen
from gputop.ui.widgets.gpu_panel import GpuPanel
from gputop.ui.widgets.header import HeaderBar, HostLine
from gputop.ui.widgets.process_table import TableHeader

SIZE = (120, 40)


def pids(app: GputopApp) -> list[int]:
    return [row.proc.pid for row in app.dashboard.table.rows]


async def test_first_snapshot_fills_panels_host_line_and_table() -> None:
    app, _clock = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.pause()
        snap = app.state.snapshot
        assert snap is not None and snap.host == "lab"
        assert len(app.query(GpuPanel)) == len(snap.gpus) == 4
        assert len(app.dashboard.table.rows) == len(snap.processes)
        header = str(app.query_one(HeaderBar).render())
        assert "DEMO" in header and "4 GPUs" in header and "0s old" in header
        assert snap.driver_version in header
        assert "PROCS" in str(app.query_one(HostLine).render())


async def test_sort_keys_and_header_click() -> None:
    app, clock = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.pause()
        mems = [row.proc.gpu_mem or -1 for row in app.dashboard.table.rows]
        assert mems == sorted(mems, reverse=True)  # default: GPU memory, biggest first

        await pilot.press("N")
        assert app.dashboard.sort_column == "pid" and pids(app) == sorted(pids(app))
        await pilot.press("I")
        assert pids(app) == sorted(pids(app), reverse=True)

        await pilot.press("P")
        cpus = [row.proc.cpu_percent or -1 for row in app.dashboard.table.rows]
        assert app.dashboard.sort_column == "cpu" and cpus == sorted(cpus, reverse=True)

        await pilot.press("T")
        # unknown start times (a pid in another namespace) count as just started
        starts = [row.proc.start_time or clock.now for row in app.dashboard.table.rows]
        # longest running first
        assert app.dashboard.sort_column == "time" and starts == sorted(starts)

        await pilot.press("S")
        assert app.dashboard.sort_column == "sm"
        sms = [-1 if row.proc.sm_util is None else row.proc.sm_util
               for row in app.dashboard.table.rows]
        assert sms == sorted(sms, reverse=True) and len(set(sms)) > 1

        await pilot.press("f6")  # next column after SM%
        assert app.dashboard.sort_column == "cpu"
        await pilot.press("greater_than_sign")
        assert app.dashboard.sort_column == "rss"
        await pilot.press("less_than_sign")
        assert app.dashboard.sort_column == "cpu"

        # a click on the USER title sorts by user; a second click inverts
        header = app.query_one(TableHeader)
        x = next(x for x in range(SIZE[0]) if header.column_at(x) == "user")
        await pilot.click(TableHeader, offset=(x + 1, 0))
        users = [row.proc.user or "" for row in app.dashboard.table.rows]
        assert app.dashboard.sort_column == "user" and users == sorted(users)
        await pilot.click(TableHeader, offset=(x + 1, 0))
        assert app.dashboard.sort_reverse is True
        users = [row.proc.user or "" for row in app.dashboard.table.rows]
        assert users == sorted(users, reverse=True) and len(set(users)) > 1
        assert "USER▼" in header.render_line(0).text


async def test_selection_follows_the_process_across_refreshes() -> None:
    app, clock = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.press("N", "home")  # by pid, from the top: a known order
        await pilot.press("j", "j", "down")
        key = app.state.selected
        assert key is not None and app.dashboard.table.cursor == 3
        snap = app.state.snapshot
        assert snap is not None
        # next refresh: the selected process now holds the least memory, and a new
        # process with a lower pid appears at the top
        chosen = next(p for p in snap.processes if (p.pid, p.gpu) == (key[1], key[3]))
        others = [p for p in snap.processes if p is not chosen]
        newcomer = dataclasses.replace(others[0], pid=1, start_ticks=5)
        moved = dataclasses.replace(chosen, gpu_mem=1)
        clock.now += 1
        app.ingest(with_processes(snap, [newcomer, *others, moved]))
        app.dashboard.refresh_view()
        await pilot.pause()
        assert app.state.selected == key
        assert app.dashboard.table.rows[app.dashboard.table.cursor].key == key
        assert app.dashboard.table.cursor == 4  # shifted down by the newcomer
        await pilot.press("M")  # re-sort by memory: it is last now, still selected
        assert app.dashboard.table.rows[app.dashboard.table.cursor].key == key
        assert app.dashboard.table.cursor == len(app.dashboard.table.rows) - 1

        # the process exits: the cursor stays at the same height, on another row
        clock.now += 1
        app.ingest(with_processes(snap, [newcomer, *others], dt=2))
        app.dashboard.refresh_view()
        await pilot.pause()
        assert app.state.selected != key
        assert app.dashboard.table.cursor == len(app.dashboard.table.rows) - 1


async def test_pid_reuse_is_not_the_selected_process() -> None:
    app, _clock = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.press("N", "home", "down")
        key = app.state.selected
        assert key is not None
        snap = app.state.snapshot
        assert snap is not None
        reused = [dataclasses.replace(p, start_ticks=(p.start_ticks or 0) + 1)
                  if (p.pid, p.gpu) == (key[1], key[3]) else p for p in snap.processes]
        app.ingest(with_processes(snap, reused))
        app.dashboard.refresh_view()
        await pilot.pause()
        assert app.state.selected != key
        assert app.state.selected is not None and app.state.selected[1] == key[1]


async def test_filters_mine_user_gpu_and_clear() -> None:
    app, _ = demo_app("lab", me="alice")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        everyone = len(app.dashboard.table.rows)
        users = {row.proc.user for row in app.dashboard.table.rows}
        assert {"alice", "bob"} <= users

        await pilot.press("m")
        assert {row.proc.user for row in app.dashboard.table.rows} == {"alice"}
        assert "mine (alice)" in app.dashboard.filter_status()
        await pilot.press("m")
        assert len(app.dashboard.table.rows) == everyone

        # u: only the selected process's user
        await pilot.press("N")
        bob_index = next(i for i, r in enumerate(app.dashboard.table.rows) if r.proc.user == "bob")
        app.dashboard.table.move_to(bob_index)
        await pilot.press("u")
        assert {row.proc.user for row in app.dashboard.table.rows} == {"bob"}
        await pilot.press("u")
        assert len(app.dashboard.table.rows) == everyone

        # g: the selected row's GPU (bob's training job is on GPU 0); ] and [ step
        assert app.state.selected_process().gpu == 0
        await pilot.press("g")
        assert app.state.selected_gpu == 0
        assert {row.proc.gpu for row in app.dashboard.table.rows} == {0}
        assert app.dashboard.gpu_panel(0).has_class("-selected")
        await pilot.press("right_square_bracket")
        assert {row.proc.gpu for row in app.dashboard.table.rows} == {1}
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert app.state.selected_gpu is None and len(app.dashboard.table.rows) == everyone

        # a click on a GPU panel filters to it; Esc clears every filter
        await pilot.click(".gpu-2")
        assert app.state.selected_gpu == 2
        assert {row.proc.gpu for row in app.dashboard.table.rows} == {2}
        await pilot.press("m")
        await pilot.press("escape")
        assert app.state.selected_gpu is None and not app.dashboard.mine
        assert len(app.dashboard.table.rows) == everyone


async def test_search_over_command_and_user() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        everyone = len(app.dashboard.table.rows)
        await pilot.press("slash")
        assert app.focused is not None and app.focused.id == "search"
        await pilot.press(*"resnet")
        assert app.dashboard.search == "resnet"
        assert app.dashboard.table.rows and all("resnet" in (r.proc.command or "")
                                      for r in app.dashboard.table.rows)
        await pilot.press("enter")  # keeps the filter, back to the table
        assert app.focused is app.dashboard.table and len(app.dashboard.table.rows) < everyone
        assert "/resnet" in app.dashboard.filter_status()

        await pilot.press("f3")
        assert app.focused is not None and app.focused.id == "search"
        app.query_one("#search", Input).value = "erin"  # replaces the kept text
        await pilot.pause()
        assert {r.proc.user for r in app.dashboard.table.rows} == {"erin"}  # matched by user
        await pilot.press("escape")  # in the box: clears the search and closes it
        assert app.dashboard.search == "" and len(app.dashboard.table.rows) == everyone
        assert app.focused is app.dashboard.table


async def test_tag_several_processes() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.press("N", "home")
        first, second = app.dashboard.table.rows[0].key, app.dashboard.table.rows[1].key
        await pilot.press("space", "space")
        assert app.state.tagged == {first, second}
        assert app.dashboard.table.cursor == 2
        assert "2 tagged" in app.dashboard.filter_status()
        assert table_lines(app)[0].startswith("*")
        assert [host for host, _ in app.state.tagged_processes()] == ["lab", "lab"]
        await pilot.press("up", "up", "space")
        assert app.state.tagged == {second}


async def test_help_lists_active_bindings_with_remapped_keys() -> None:
    config = parse_config("keys:\n  kill: x,f9\n", "test.yaml")
    app, _ = demo_app("lab", config=config)
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        rows = {desc: keys for keys, desc, _id in app.screen.rows}
        ids = {desc: binding_id for _keys, desc, binding_id in app.screen.rows}
        assert ids["Kill"] == "kill"  # the id the config's keys: section remaps
        assert "x" in rows["Kill"] and "k" not in rows["Kill"].split(", ")
        assert "q" in rows["Quit"] and "f10" in rows["Quit"].lower()
        assert "Command palette" in rows
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("q")  # closes help, does not quit
        assert not isinstance(app.screen, HelpScreen) and app.is_running


async def test_detail_view_shows_the_selected_process_and_updates() -> None:
    app, clock = demo_app("lab", history=5)
    async with app.run_test(size=(120, 50)) as pilot:
        feed_all(app)
        await pilot.press("N", "home", "down")
        proc = app.state.selected_process()
        assert proc is not None
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        command = _plain(screen.query_one("#detail-command", Static).content).strip()
        assert command == " ".join(proc.cmdline)
        facts = _plain(screen.query_one("#detail-facts", Static).content)
        assert proc.user is not None
        assert "GPU memory" in facts and proc.user in facts and "started" in facts
        history = _plain(screen.query_one("#detail-history", Static).content)
        assert "GPU-MEM" in history and "SM %" in history
        # parent chain from the simulator is not available without a feed: the snapshot's
        parents = _plain(screen.query_one("#detail-parents", Static).content)
        assert str(proc.ppid) in parents

        # the process exits while the view is open
        snap = app.state.snapshot
        assert snap is not None
        clock.now += 1
        app.ingest(with_processes(snap, [p for p in snap.processes if p.pid != proc.pid]))
        await pilot.pause()
        assert "no longer listed" in _plain(screen.query_one("#detail-title", Static).content)
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailScreen)


def _plain(renderable: object) -> str:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


async def test_quit_keys() -> None:
    for key in ("q", "f10"):
        app, _ = demo_app("lab")
        async with app.run_test(size=SIZE) as pilot:
            feed_all(app)
            await pilot.press(key)
            await pilot.pause()
            assert not app.is_running
        assert app.return_code == 0


async def test_remapped_quit_key_from_config() -> None:
    config = parse_config("keys:\n  quit: x\n", "test.yaml")
    app, _ = demo_app("lab", config=config)
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.press("q")
        assert app.is_running
        await pilot.press("x")
        await pilot.pause()
        assert not app.is_running


async def test_readonly_refuses_actions_without_calling_them() -> None:
    app, _ = demo_app("lab", readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        for key in ("k", "f9", "r", "R"):
            await pilot.press(key)
        await pilot.pause()
        messages = [n.message for n in app._notifications]
        assert len([m for m in messages if "read-only" in m]) == 4
        assert app.screen is app.dashboard
        assert "READ-ONLY" in app.dashboard.filter_status()


async def test_feed_worker_delivers_snapshots_and_header_shows_age() -> None:
    snaps = demo_snapshots("dgx-h100", 2)
    clock = Clock(snaps[0].time)
    feed = QueueFeed(["dgx-h100"])
    app = GputopApp([feed], clock=clock, interval=0.1, me="alice")
    async with app.run_test(size=SIZE) as pilot:
        feed.put(snaps[0])
        for _ in range(100):
            await pilot.pause(0.02)
            if app.dashboard.table.rows:
                break
        assert len(app.dashboard.table.rows) == len(snaps[0].processes)
        assert app.state.feeds["dgx-h100"] is feed
        # collection hangs: no new snapshot while time passes; the header says how old
        clock.now += 12
        await pilot.pause(0.3)
        header = app.query_one(HeaderBar).render()
        assert "12s old" in header.plain
        assert any("red" in str(span.style) for span in header.spans
                   if "12s old" in header.plain[span.start:span.end])
        feed.put(snaps[1])
        for _ in range(100):
            await pilot.pause(0.02)
            if app.state.version >= 2:
                break
        assert app.state.snapshot is snaps[1]


class BrokenFeed:
    def __init__(self) -> None:
        self.hosts = ["broken"]

    async def run(self, interval: float, emit: object) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("probe fell over")

    async def request(self, host: str, request: dict) -> dict:
        return {"ok": False}

    async def close(self) -> None:
        return None


async def test_a_failing_feed_is_reported_and_others_keep_going() -> None:
    good = QueueFeed(["dgx-h100"])
    snaps = demo_snapshots("dgx-h100", 1)
    app = GputopApp([good, BrokenFeed()], clock=Clock(snaps[0].time), interval=0.1)
    async with app.run_test(size=SIZE) as pilot:
        good.put(snaps[0])
        for _ in range(100):
            await pilot.pause(0.02)
            if app.dashboard.table.rows and app._notifications:
                break
        assert app.is_running
        assert any("probe fell over" in n.message for n in app._notifications)
        assert len(app.dashboard.table.rows) == len(snaps[0].processes)


async def test_layout_80x24_compact_and_240x70_two_columns() -> None:
    app, _ = demo_app("dgx-h100")
    async with app.run_test(size=(80, 24)) as pilot:
        feed_all(app)
        await pilot.pause()
        panels = list(app.query(GpuPanel))
        assert len(panels) == 8 and all(p.has_class("-compact") for p in panels)
        assert all(p.size.height == 1 for p in panels)
        assert app.dashboard.table.size.height >= 5  # the processes still get room
        assert all(len(line) <= 80 for line in table_lines(app))
    app, _ = demo_app("dgx-h100")
    async with app.run_test(size=(240, 70)) as pilot:
        feed_all(app)
        await pilot.pause()
        panels = list(app.query(GpuPanel))
        assert not any(p.has_class("-compact") for p in panels)
        assert panels[0].region.y == panels[1].region.y  # side by side
        assert panels[0].size.height == 3
        assert app.dashboard.table.size.height >= 30


async def test_sparkline_history_shown_in_full_panels() -> None:
    app, _ = demo_app("lab", history=130)
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        panel = app.dashboard.gpu_panel(0)
        assert not panel.has_class("-compact")
        assert panel.data is not None and panel.data.read is not None
        assert len(panel.data.read("util", panel.data.now - 180.0)) >= 120
        lines = panel.render().plain.splitlines()
        assert len(lines) == 3
        spark = lines[2]
        assert sum(ch in "▁▂▃▄▅▆▇█" for ch in spark) > 40


async def test_start_at_time_of_snapshot_is_frozen_clock_safe() -> None:
    # a snapshot "from the future" (clock skew between hosts) never shows a negative age
    app = GputopApp(clock=Clock(START - 5), me="alice")
    snap: HostSnapshot = demo_snapshots("lab", 1)[0]
    async with app.run_test(size=SIZE) as pilot:
        app.ingest(snap)
        app.dashboard.refresh_view()
        await pilot.pause()
        assert "0s old" in app.query_one(HeaderBar).render().plain
