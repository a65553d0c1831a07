"""changed_regions: which cells of a line-API widget need sending again (issue 14)."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip

from gputop.ui.partial import changed_regions

RED, BOLD = Style(color="red"), Style(bold=True)


def strip(*parts: tuple[str, Style]) -> Strip:
    return Strip([Segment(text, style) for text, style in parts])


def test_only_the_changed_cells_of_changed_lines() -> None:
    old = [strip(("GPU 0  ", BOLD), ("90%", RED), ("  idle", BOLD)), strip(("same", BOLD))]
    new = [strip(("GPU 0  ", BOLD), ("91%", RED), ("  idle", BOLD)), strip(("same", BOLD))]
    assert changed_regions(old, new) == [Region(8, 0, 1, 1)]
    assert changed_regions(old, old) == []


def test_a_style_change_alone_is_a_change() -> None:
    old = [strip(("abc", BOLD))]
    new = [strip(("a", BOLD), ("b", RED), ("c", BOLD))]
    assert changed_regions(old, new) == [Region(1, 0, 1, 1)]


def test_wide_characters_or_a_new_line_count_repaint_more() -> None:
    old = [strip(("ab", BOLD))]
    assert changed_regions(old, [strip(("界", BOLD))]) == [Region(0, 0, 2, 1)]
    assert changed_regions(old, old + old) is None


async def test_a_process_row_whose_age_ticked_is_sent_from_its_changed_column() -> None:
    """Textual's compositor writes a changed span from the start of the segment it begins
    in: with one segment a row, a TIME column that ticked re-sent the row from column 0."""
    import io

    from helpers.ui import demo_app, feed_all
    from rich.console import Console
    from textual._compositor import ChopsUpdate

    app, clock = demo_app("lab")
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        table = app.dashboard.table
        rows = len(table.rows)
        before = [table.render_line(y) for y in range(rows)]
        clock.now += 1.0
        app.dashboard.refresh_view()
        await pilot.pause()
        after = [table.render_line(y) for y in range(rows)]
    regions = changed_regions(before, after)
    assert rows > 2 and regions

    def sent(line: Strip, region: Region) -> int:
        out = io.StringIO()
        console = Console(file=out, force_terminal=True, color_system="truecolor",
                          width=200, legacy_windows=False)
        update = ChopsUpdate([{0: line}], [(0, region.x, region.right)],
                             [[line.cell_length]])
        # The visible cells written (escape codes left out).
        return len(Strip(list(Segment.strip_styles(
            Segment.filter_control(list(console.render(update)))))).text)

    ticked = [(after[r.y], r) for r in regions if r.x > 40]
    assert ticked, regions  # the age column, far from the left edge
    for line, region in ticked:
        whole = Strip([Segment(line.text, Style())])  # one segment: the row as before
        assert sent(whole, region) >= region.right
        # From the start of the changed column's segment: under half of the row up to it.
        assert region.width <= sent(line, region) < region.right / 2
