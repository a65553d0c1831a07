"""Round-3 fixes: compact history width, the cluster cursor, help order, gc after startup."""

from __future__ import annotations

import gc

from rich.style import Style
from test_ui_support import START, demo_app, feed_all

from gputop.model import Gpu, HostSnapshot
from gputop.ui.app import GputopApp
from gputop.ui.screens import cluster
from gputop.ui.screens.cluster import TextLines
from gputop.ui.screens.help import HelpScreen
from gputop.ui.widgets.gpu_panel import PanelData, compact_sparkline


def _series(seconds: int, now: float, dip_at: float) -> list[tuple[float, float]]:
    """One sample a second at 90 %, with one 10 s stretch at 0 % ``dip_at`` seconds ago."""
    return [(now - age, 0.0 if dip_at - 10 < age <= dip_at else 90.0)
            for age in range(seconds, -1, -1)]


def test_a_wider_compact_line_reaches_further_back() -> None:
    now = START
    data = PanelData(gpu=Gpu(index=0), util_series=_series(600, now, dip_at=200),
                     now=now, span=180.0, kept=600.0)
    narrow = compact_sparkline(data, 20)  # 20 cells of 3 s: the last minute
    wide = compact_sparkline(data, 100)  # 100 cells of 3 s: the last five minutes
    assert len(narrow) == 20 and len(wide) == 100
    assert " " not in narrow and " " not in wide  # every slot had samples
    assert min(narrow) == max(narrow)  # the dip 200 s ago is out of reach...
    dips = [i for i, c in enumerate(wide) if c != wide[-1]]
    assert dips and all(100 - 200 // 3 - 4 <= i <= 100 - 190 // 3 + 1 for i in dips)  # ...not here


def test_compact_line_stops_at_the_history_kept() -> None:
    now = START
    data = PanelData(gpu=Gpu(index=0), util_series=_series(120, now, dip_at=0),
                     now=now, span=180.0, kept=120.0)
    line = compact_sparkline(data, 100)
    assert len(line) == 100
    # 120 s kept = 40 cells of 3 s; the rest of the width is not pretend history.
    assert line[:60].strip() == "" and " " not in line[61:]


async def test_compact_row_uses_its_free_width_for_history() -> None:
    app, _ = demo_app("dgx-h100", history=200)
    async with app.run_test(size=(120, 24)) as pilot:
        feed_all(app)
        await pilot.pause()
        panel = app.dashboard.gpu_panel(0)
        assert panel is not None and panel.has_class("-compact")
        line = panel.render().plain
        after = line.split(" P0 ", 1)[1]
        assert "   " not in after  # no gap between the P-state and the history
        spark = after.split(" ⚠")[0]
        assert len(spark) >= 30  # was at most 40 and about 7 cells drawn
        assert len(line) == panel.content_region.width


async def test_compact_row_marks_the_slots_before_the_first_sample() -> None:
    app, _ = demo_app("dgx-h100", history=5)
    async with app.run_test(size=(120, 24)) as pilot:
        feed_all(app)
        await pilot.pause()
        panel = app.dashboard.gpu_panel(0)
        assert panel is not None and panel.has_class("-compact")
        text = panel.render()
        line = text.plain
        dots = line.index("·")
        assert line[dots:].startswith("·" * 20)
        spans = [s for s in text.spans if s.start <= dots < s.end]
        assert spans and all("dim" in str(s.style) for s in spans)


def _host(name: str) -> HostSnapshot:
    gpus = tuple(Gpu(index=i, util_gpu=90 + i, mem_used=60 * 2**30, mem_total=80 * 2**30)
                 for i in range(4))
    return HostSnapshot(host=name, time=START, gpus=gpus)


async def test_cluster_cursor_reverses_the_name_and_keeps_the_cells_colours() -> None:
    app = GputopApp(clock=lambda: START, me="alice")
    async with app.run_test(size=(120, 30)) as pilot:
        app.ingest(_host("node-01"))
        app.ingest(_host("node-02"))
        cluster.open_cluster(app)
        await pilot.pause()
        widget = app.screen.query_one(TextLines)
        widget.focus()
        await pilot.pause()
        assert widget.cursor == 0 and widget.has_focus

        def cells(y: int) -> list[tuple[int, str, Style]]:
            out, x = [], 0
            for seg in widget.render_line(y):
                out.append((x, seg.text, seg.style or Style()))
                x += len(seg.text)
            return out

        cursor_row, other_row = cells(0), cells(1)
        reversed_at = [x for x, text, style in cursor_row if style.reverse and text.strip()]
        assert reversed_at and max(reversed_at) < cluster.NAME_WIDTH
        # A GPU cell looks the same on the cursor's row as on any other row.
        cell_style = {text: style.bgcolor for _, text, style in other_row if "90" in text}
        cursor_cell = {text: style.bgcolor for _, text, style in cursor_row if "90" in text}
        assert cell_style and cell_style == cursor_cell
        # The rest of the cursor's row is marked, just not reversed.
        blank = [style.bgcolor for x, text, style in cursor_row
                 if x > cluster.NAME_WIDTH and not text.strip()]
        assert blank and all(bg == cluster.ROW_BACKGROUND.bgcolor for bg in blank)


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


async def test_startup_objects_are_frozen_once_and_handed_back_on_exit() -> None:
    assert gc.get_freeze_count() == 0
    app, _ = demo_app("lab")
    async with app.run_test(size=(120, 40)) as pilot:
        feed_all(app)
        await pilot.pause()
        await pilot.pause()
        frozen = gc.get_freeze_count()
        assert frozen > 1000  # the widget tree, CSS and modules
        feed_all(app)
        await pilot.pause()
        await pilot.pause()
        # Once, not every refresh (frozen objects still die by reference count, so the
        # count may drop).
        assert gc.get_freeze_count() <= frozen
    assert gc.get_freeze_count() == 0
