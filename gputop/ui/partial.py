"""Repaint only the cells that changed between two renderings of a line-API widget.

Textual rewrites every cell of a dirty region, and a widget's refresh() dirties all of
it: a GPU panel whose clock moved by 15 MHz re-sent its three full lines, a process row
whose age ticked re-sent the whole row.  Comparing the new strips with the ones on screen
and dirtying from the first to the last changed cell of each line keeps the bytes sent
to the terminal close to what actually changed.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip

Cell = tuple[str, "Style | None"]


def _cells(strip: Strip) -> list[Cell] | None:
    """One (character, style) per cell; None when a character is not one cell wide."""
    out: list[Cell] = []
    for segment in strip:
        if segment.control:
            return None
        style = segment.style
        out.extend((char, style) for char in segment.text)
    return out if len(out) == strip.cell_length else None


def changed_regions(old: Sequence[Strip], new: Sequence[Strip]) -> list[Region] | None:
    """Regions (content coordinates) where ``new`` differs from ``old``, from the first to
    the last changed cell of each line; None when the two cannot be compared line by line
    (repaint everything).  Textual (8.x) writes a dirty span from the widget's left edge,
    so what this saves is the unchanged tail of each line, and the unchanged lines."""
    if len(old) != len(new):
        return None
    regions = []
    for y, (before, after) in enumerate(zip(old, new, strict=True)):
        if before is after:
            continue
        a, b = _cells(before), _cells(after)
        if a is None or b is None or len(a) != len(b):
            regions.append(Region(0, y, max(before.cell_length, after.cell_length), 1))
            continue
        if a == b:
            continue
        first = next(i for i in range(len(a)) if a[i] != b[i])
        last = next(i for i in range(len(a) - 1, first - 1, -1) if a[i] != b[i])
        regions.append(Region(first, y, last - first + 1, 1))
    return regions
