"""The dashboard's keys, mouse, help and command palette: each acts on what is on
screen, or says why not."""

from __future__ import annotations

from helpers.ui import SIZE, cluster_app, demo_app, feed_all, plain, wait_for
from textual.command import CommandPalette
from textual.widgets import Static

from gputop.config import Config, parse_config
from gputop.options import SourceOptions
from gputop.sources.opener import open_feeds
from gputop.ui.app import GputopApp
from gputop.ui.screens.cluster import ClusterScreen
from gputop.ui.screens.detail import DetailScreen
from gputop.ui.screens.help import HelpScreen
from gputop.ui.screens.kill import KillScreen
from gputop.ui.widgets.process_table import TableHeader


async def test_help_lists_gputop_actions_before_navigation() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=(120, 40)) as pilot:
        feed_all(app)
        await pilot.press("question_mark")
        screen = app.screen
        assert isinstance(screen, HelpScreen)
        own = [desc for _, desc, _id in screen.own]
        navigation = [desc for _, desc, _id in screen.navigation]
        assert own[0] == "Quit" and "Kill" in own and "Command palette" in own
        assert "Up" in navigation and "Down" in navigation and "Page down" in navigation
        assert not set(own) & set(navigation)
        assert [desc for _, desc, _id in screen.rows] == own + navigation


async def test_dashboard_keys_do_not_act_under_another_screen() -> None:
    app = cluster_app()
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, ClusterScreen)
        footer_keys = {b.binding.action for b in app.screen.active_bindings.values()
                       if app.check_action(b.binding.action, ())}
        assert "kill" not in footer_keys and "sort_next" not in footer_keys
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, ClusterScreen)  # no kill dialog behind the overview
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, KillScreen)  # the same key works on the dashboard


async def test_mouse_click_selects_a_row_and_double_click_opens_detail() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.press("N", "home")
        table_y = app.dashboard.table.region.y
        await pilot.click(offset=(10, table_y + 2))
        assert app.dashboard.table.cursor == 2
        assert app.state.selected == app.dashboard.table.rows[2].key
        await pilot.click(offset=(10, table_y + 2), times=2)
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        assert app.screen.key == app.dashboard.table.rows[2].key


async def test_command_palette_opens() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, CommandPalette)


async def test_columns_from_config() -> None:
    config = parse_config("columns: [pid, user, command]\n", "c.yaml")
    app, _ = demo_app("lab", config=config)
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        header = app.query_one(TableHeader).render_line(0).text
        assert header.split() == ["PID", "USER", "COMMAND"]
        await pilot.press("f6")  # sorting cycles over the shown columns only
        assert app.dashboard.sort_column in ("pid", "user", "command")
        visited = [app.dashboard.sort_column]
        for _ in range(3):
            await pilot.press("f6")
            visited.append(app.dashboard.sort_column)
        assert set(visited) == {"pid", "user", "command"} and visited[3] == visited[0]


async def test_navigation_keys_end_page_home() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=(120, 30)) as pilot:
        feed_all(app)
        last = len(app.dashboard.table.rows) - 1
        await pilot.press("end")
        assert app.dashboard.table.cursor == last
        await pilot.press("home")
        assert app.dashboard.table.cursor == 0
        await pilot.press("pagedown")
        table = app.dashboard.table
        assert table.cursor == min(last, table.scrollable_content_region.height - 1)
        await pilot.press("pageup")
        assert app.dashboard.table.cursor == 0
        await pilot.press("up")  # stays at the top
        assert app.dashboard.table.cursor == 0


async def test_screen_keys_open_something_or_say_why() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        main = app.screen
        for key in ("o", "t", "w", "c", "r"):
            before = len(app._notifications)
            await pilot.press(key)
            await pilot.pause()
            opened = app.screen is not main
            told = len(app._notifications) > before
            assert opened or told, key
            while app.screen is not main:
                await pilot.press("escape")
                await pilot.pause()
        assert app.is_running


async def test_command_palette_runs_dashboard_commands() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Sort by PID" in titles and "Mine" in titles and "Kill" in titles
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"sort by pid")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert app.dashboard.sort_column == "pid"


async def test_detail_with_the_demo_feed_reads_parents_from_the_source() -> None:
    app = GputopApp(open_feeds(SourceOptions(demo="lab"), Config()), interval=0.2, me="alice")
    async with app.run_test(size=(120, 50)) as pilot:
        await wait_for(pilot, lambda: len(app.dashboard.table.rows) > 3)
        kernel = next(i for i, r in enumerate(app.dashboard.table.rows)
                      if "ipykernel" in (r.proc.command or "") and r.proc.ppid not in (None, 1))
        app.dashboard.table.move_to(kernel)
        proc = app.state.selected_process()
        assert proc is not None
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, DetailScreen)
        await wait_for(pilot, lambda: screen.chain is not None)
        parents = plain(screen.query_one("#detail-parents", Static).content)
        assert str(proc.ppid) in parents and "jupyter" in parents
        assert len(screen.chain or []) >= 1
        facts = plain(screen.query_one("#detail-facts", Static).content)
        assert "cwd" in facts and "kernel: Jupyter kernel" in facts


async def test_replayed_demo_snapshots_act_as_the_apps_user() -> None:
    app, _ = demo_app("lab", me="alice")
    async with app.run_test(size=(120, 40)) as pilot:
        feed_all(app)
        await pilot.pause()
        who = app.identity(app.state.host)
        assert (who.user, who.is_root) == ("alice", False)
