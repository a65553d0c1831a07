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
