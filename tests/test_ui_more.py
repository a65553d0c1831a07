"""More of the dashboard: live demo feed detail view, mouse on rows, command palette,
config columns and thresholds, reservation badges."""

from __future__ import annotations

import dataclasses

from rich.console import Console
from test_ui_support import demo_app, feed_all
from textual.command import CommandPalette
from textual.widgets import Static

from gputop.config import Config, parse_config
from gputop.model import Reservation
from gputop.options import SourceOptions
from gputop.sources.opener import open_feeds
from gputop.ui.app import GputopApp
from gputop.ui.screens.detail import DetailScreen
from gputop.ui.widgets.gpu_panel import GpuPanel
from gputop.ui.widgets.process_table import TableHeader

SIZE = (120, 40)


def plain(renderable: object) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


async def wait_for(pilot: object, condition: object, tries: int = 200) -> None:
    for _ in range(tries):
        if condition():  # type: ignore[operator]
            return
        await pilot.pause(0.02)  # type: ignore[attr-defined]
    raise AssertionError("condition never became true")


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


async def test_threshold_colours_from_config_and_reservation_badge() -> None:
    config = parse_config(
        "thresholds:\n  util: [10, 20]\ncolors:\n  crit: magenta\n", "c.yaml"
    )
    app, clock = demo_app("lab", config=config)
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        snap = app.state.snapshot
        assert snap is not None
        busy = next(g for g in snap.gpus if (g.util_gpu or 0) >= 20)
        reservation = Reservation(gpu=busy.index, user="[b]bob", until=clock.now + 3600,
                                  since=clock.now - 60, note="tonight")
        expired = Reservation(gpu=busy.index, user="carol", until=clock.now - 1,
                              since=clock.now - 99)
        app.ingest(dataclasses.replace(snap, reservations=(reservation, expired)))
        app.dashboard.refresh_view()
        await pilot.pause()
        panel = app.dashboard.gpu_panel(busy.index)
        text = panel.render()
        util_figure = f"{busy.util_gpu}%"
        start = text.plain.index(util_figure)
        styles = [str(span.style) for span in text.spans if span.start <= start < span.end]
        assert "magenta" in styles
        assert "RSV [b]bob 1h00m tonight" in text.plain
        assert "carol" not in text.plain  # an expired reservation counts for nothing


def shown_panels(app: GputopApp) -> list[GpuPanel]:
    return [p for p in app.query(GpuPanel) if p.display and p.region.height]


async def test_switching_hosts_rebuilds_the_gpu_panels() -> None:
    from test_ui_support import demo_snapshots

    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        for snap in demo_snapshots("dgx-h100", 2):
            app.ingest(snap)
        assert set(app.state.snapshots) == {"lab", "dgx-h100"}
        await pilot.pause()
        assert len(shown_panels(app)) == 4
        app.show_host("dgx-h100")
        await pilot.pause()
        assert len(shown_panels(app)) == 8
        rows = app.dashboard.table.rows
        assert rows and all(r.key[0] == "dgx-h100" for r in rows)
        app.show_host("lab")
        await pilot.pause()
        app.show_host("dgx-h100")
        app.show_host("lab")
        await pilot.pause()
        assert len(shown_panels(app)) == 4
        assert app.dashboard.gpu_panel(5) is None
        assert [p.index for p in shown_panels(app)] == [0, 1, 2, 3]
        assert all(p.data is not None and p.data.gpu.name == "NVIDIA GeForce RTX 3090"
                   for p in shown_panels(app))
        assert "(one of 2 hosts" in app.query_one("#header").render().plain


async def test_resize_switches_between_full_and_compact_panels() -> None:
    app, _ = demo_app("dgx-h100")
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        panel = app.dashboard.gpu_panel(0)
        assert panel is not None and not panel.has_class("-compact")
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        await pilot.pause()
        assert panel.has_class("-compact") and panel.size.height == 1
        await pilot.resize_terminal(160, 50)
        await pilot.pause()
        await pilot.pause()
        assert not panel.has_class("-compact")


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
