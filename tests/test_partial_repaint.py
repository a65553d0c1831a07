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


def reference(old: list[Strip], new: list[Strip]) -> list[Region]:
    """Cell by cell, as changed_regions was first written (one-cell characters only)."""
    out = []
    for y, (a, b) in enumerate(zip(old, new, strict=True)):
        ca = [(ch, seg.style) for seg in a for ch in seg.text]
        cb = [(ch, seg.style) for seg in b for ch in seg.text]
        changed = [i for i in range(len(ca)) if ca[i] != cb[i]]
        if changed:
            out.append(Region(changed[0], y, changed[-1] - changed[0] + 1, 1))
    return out


def test_the_text_only_path_finds_what_a_cell_by_cell_walk_finds() -> None:
    # Lines as the process table and panels make them: runs of a few styles whose text
    # changes (a figure, TIME ticking) or whose style changes (a row under the cursor).
    import random

    rng = random.Random(27)
    styles = [BOLD, RED, Style(dim=True)]
    for _ in range(2000):
        cuts = sorted(rng.sample(range(1, 40), rng.randint(0, 4)))
        text = "".join(rng.choice("ab 0123") for _ in range(40))
        pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, 40], strict=True)]
        old_styles = [rng.choice(styles) for _ in pieces]
        new_text = list(text)
        for _ in range(rng.randint(0, 3)):
            new_text[rng.randrange(40)] = rng.choice("ab 0123")
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
