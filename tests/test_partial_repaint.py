"""changed_regions: which cells of a line-API widget need sending again (issue 14), and
what Textual then writes to the terminal for them (issue 42: only those cells)."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip

from gputop.ui.partial import GAP, changed_regions

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


def reference(old: list[Strip], new: list[Strip]) -> list[Region]:
    """Cell by cell (one-cell characters only): each run of changed cells, runs less than
    GAP unchanged cells apart joined."""
    out = []
    for y, (a, b) in enumerate(zip(old, new, strict=True)):
        ca = [(ch, seg.style) for seg in a for ch in seg.text]
        cb = [(ch, seg.style) for seg in b for ch in seg.text]
        runs: list[list[int]] = []
        for i in range(len(ca)):
            if ca[i] != cb[i]:
                if runs and i - runs[-1][1] < GAP:
                    runs[-1][1] = i + 1
                else:
                    runs.append([i, i + 1])
        out.extend(Region(x1, y, x2 - x1, 1) for x1, x2 in runs)
    return out


def test_the_text_only_path_finds_what_a_cell_by_cell_walk_finds() -> None:
    # Lines as the process table and panels make them: runs of a few styles whose text
    # changes (a figure, TIME ticking) or whose style changes (a row under the cursor).
    import random

    rng = random.Random(27)
    styles = [BOLD, RED, Style(dim=True)]
    for _ in range(2000):
        cuts = sorted(rng.sample(range(1, 80), rng.randint(0, 6)))
        text = "".join(rng.choice("ab 0123") for _ in range(80))
        pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, 80], strict=True)]
        old_styles = [rng.choice(styles) for _ in pieces]
        new_text = list(text)
        for _ in range(rng.randint(0, 3)):
            new_text[rng.randrange(80)] = rng.choice("ab 0123")
        new_pieces, start = [], 0
        for piece in pieces:
            new_pieces.append("".join(new_text[start:start + len(piece)]))
            start += len(piece)
        new_styles = list(old_styles)
        if rng.random() < 0.3:
            new_styles[rng.randrange(len(new_styles))] = rng.choice(styles)
        old = [strip(*zip(pieces, old_styles, strict=True))]
        new = [strip(*zip(new_pieces, new_styles, strict=True))]
        assert changed_regions(old, new) == reference(old, new), (pieces, new_pieces)


def test_changes_far_apart_on_one_line_are_separate_regions() -> None:
    # a panel's gauge line: the UTIL figure near the left, the power figure near the right
    old = [strip(("UTIL  90%", BOLD), (" " * 60, RED), ("POW 500W", BOLD))]
    new = [strip(("UTIL  91%", BOLD), (" " * 60, RED), ("POW 510W", BOLD))]
    assert changed_regions(old, new) == [Region(7, 0, 1, 1), Region(74, 0, 1, 1)]
    near = [strip(("UTIL  91%", BOLD), (" " * 60, RED), ("POW 500W", BOLD))]
    closer = [strip(("UTIL  92%", BOLD), (" " * 60, RED), ("POW 500W", BOLD))]
    assert changed_regions(near, closer) == [Region(7, 0, 1, 1)]


def written(chops: dict[int, Strip], ends: list[int], spans: list[tuple[int, int, int]],
            width: int = 120) -> str:
    """What Textual writes to the terminal for a partial update of one screen line."""
    from rich.console import Console
    from textual._compositor import ChopsUpdate

    console = Console(width=width, color_system="truecolor", force_terminal=True,
                      legacy_windows=False)
    return ChopsUpdate([chops], spans, [ends]).render_segments(console)


def test_a_dirty_span_is_written_from_its_own_first_cell() -> None:
    # One widget from column 10 to 110; its cells 60 and 61 changed.  Textual 8.2 wrote
    # from column 10 (the widget's edge) on: 52 cells for 2.
    line = strip(("a" * 50, BOLD), ("bc", RED), ("d" * 48, BOLD))
    out = written({0: Strip([Segment(" " * 10)]), 10: line}, [10, 110], [(0, 60, 62)])
    assert out.startswith("\x1b[1;61H")  # CSI row;col H, 1-based: row 0, column 60
    assert "a" not in out and "d" not in out and "bc" in out
    # a span across two widgets: each written from where the span starts in it
    out = written({0: strip(("x" * 10, BOLD)), 10: line}, [10, 110], [(0, 8, 12)])
    assert out.count("x") == 2 and out.count("a") == 2 and "\x1b[1;9H" in out
    assert "\x1b[1;11H" in out


def test_a_line_with_wide_characters_is_written_from_the_widget_edge() -> None:
    # cutting at a cell count could fall inside a two-cell character
    line = strip(("界" * 10, BOLD), ("bc", RED), ("d" * 78, BOLD))
    out = written({0: line}, [100], [(0, 20, 22)])
    assert out.startswith("\x1b[1;1H") and "界" * 10 + "\x1b" in out
