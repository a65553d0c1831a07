"""Repaint only the cells that changed between two renderings of a line-API widget.

Textual rewrites every cell of a dirty region, and a widget's refresh() dirties all of
it: a GPU panel whose clock moved by 15 MHz re-sent its three full lines, a process row
whose age ticked re-sent the whole row.  Comparing the new strips with the ones on screen
and dirtying each run of changed cells keeps the bytes sent to the terminal close to what
actually changed.

On a live machine every gauge moves every refresh, and Textual (8.2) writes a dirty span
from the left edge of the widget it falls in, not from its first cell: the UTIL figure
and the history's last cell changing re-sent the GPU panel's lines from column 0, 7.8 KiB
a refresh at 0.25 s on 8 cards.  ``write_spans_only`` makes the write start at the span.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.control import Control
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._compositor import ChopsUpdate
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

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


# Unchanged cells between two changed runs of a line, below which one span is cheaper
# than two: the second cursor move (CSI row;col H, 6-8 bytes) and the style code sent
# again (10-20 bytes) cost about as much as this many one-byte cells resent.
GAP = 16


def changed_regions(old: Sequence[Strip], new: Sequence[Strip]) -> list[Region] | None:
    """Regions (content coordinates) where ``new`` differs from ``old``: the runs of
    changed cells of each line, runs closer than ``GAP`` joined; None when the two cannot
    be compared line by line (repaint everything).  With ``write_spans_only`` the terminal
    gets those cells; without it, Textual writes each from the widget's left edge."""
    if len(old) != len(new):
        return None
    regions: list[Region] = []
    for y, (before, after) in enumerate(zip(old, new, strict=True)):
        if before is after or before == after:  # most lines of a quiet tick
            continue
        runs = _text_runs(before, after)
        if runs is None:
            runs = _cell_runs(before, after)
        regions.extend(Region(x1, y, x2 - x1, 1) for x1, x2 in _joined(runs))
    return regions


def _joined(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Runs of changed cells in order, those less than GAP apart made one."""
    out: list[tuple[int, int]] = []
    for x1, x2 in runs:
        if out and x1 - out[-1][1] < GAP:
            out[-1] = (out[-1][0], x2)
        else:
            out.append((x1, x2))
    return out


def _text_runs(before: Strip, after: Strip) -> list[tuple[int, int]] | None:
    """[first, last + 1) of the changed characters of each segment of two lines whose
    segments differ in their text only (same styles, same lengths, one cell a character),
    as a process row whose TIME ticked or a panel whose figures moved; None for any other
    pair (``_cell_runs`` compares those)."""
    if len(before) != len(after):
        return None
    for a, b in zip(before, after):  # noqa: B905 (same length, checked above)
        if a.style != b.style or len(a.text) != len(b.text) or a.control or b.control:
            return None
    if len(before.text) != before.cell_length or len(after.text) != after.cell_length:
        return None
    runs = []
    x = 0
    for a, b in zip(before, after):  # noqa: B905 (same length, checked above)
        old, new = a.text, b.text
        if old != new:
            # Equal lengths, different text: the common prefix and suffix do not overlap.
            first = _common_prefix(old, new)
            last = len(old) - _common_prefix(old[::-1], new[::-1])
            if last - first <= GAP:  # a figure that moved: no gap inside worth a move
                runs.append((x + first, x + last))
            else:  # a long piece (a history line): its changed runs, cell by cell
                runs.extend((x + first + i, x + first + j)
                            for i, j in _char_runs(old[first:last], new[first:last]))
        x += len(old)
    return runs


def _char_runs(old: str | list[Cell], new: str | list[Cell]) -> list[tuple[int, int]]:
    """[start, end) of each run of positions where two equally long sequences differ."""
    runs: list[tuple[int, int]] = []
    for i, (a, b) in enumerate(zip(old, new)):  # noqa: B905 (same length)
        if a != b:
            if runs and runs[-1][1] == i:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
    return runs


def _common_prefix(a: str, b: str) -> int:
    """How many leading characters two strings share (bisection over slices: C compares
    a few times, not a Python loop over every character)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _cell_runs(before: Strip, after: Strip) -> list[tuple[int, int]]:
    """The runs of changed cells, character and style, of two lines; the whole line
    where a character is not one cell wide."""
    a, b = _cells(before), _cells(after)
    if a is None or b is None or len(a) != len(b):
        return [(0, max(before.cell_length, after.cell_length))]
    return _char_runs(a, b)


def _write_spans(self: ChopsUpdate, console: Console) -> str:
    """``ChopsUpdate.render_segments`` writing each span's own cells: Textual 8.2's writes
    the widget's line from its left edge (``x``) to the span's end.  A line holding a
    character wider than one cell is written from the widget's edge as before, so a cut
    never falls inside one."""
    out: list[str] = []
    append = out.append
    move_to = Control.move_to
    last_y = self.spans[-1][0]
    for y, x1, x2 in self.spans:
        for end, (x, strip) in zip(self.chop_ends[y], self.chops[y].items()):  # noqa: B905
            if strip is None or x >= x2 or end <= x1:
                continue
            start = x1 if x1 > x and len(strip.text) == strip.cell_length else x
            piece = strip.crop(start - x, min(end, x2) - x)
            append(move_to(start, y).segment.text)
            append(piece.render(console))
        if y != last_y:
            append("\n")
    return "".join(out)


def write_spans_only() -> None:
    """Make Textual's partial screen updates write only the dirty spans (see the module's
    docstring); once, when the UI's widgets are imported.  Textual is pinned exactly
    (pyproject.toml), so the method replaced is the one read here."""
    if ChopsUpdate.render_segments is not _write_spans:
        ChopsUpdate.render_segments = _write_spans  # type: ignore[method-assign]


write_spans_only()


_STYLES: dict[str, Style] = {}


def _style_of(style: str | Style) -> Style:
    if isinstance(style, Style):
        return style
    parsed = _STYLES.get(style)
    if parsed is None:
        parsed = _STYLES[style] = Style.parse(style) if style else Style()
    return parsed


def text_strips(text: Text, width: int, base: Style,
                drawn: list[tuple[Any, Strip]] | None = None) -> list[Strip]:
    """A Text of non-overlapping spans (what the GPU panels and the header lines build)
    as one Strip per line.  ``drawn``: the lines made last time for this widget, updated
    here; a line of the same pieces, width and base is handed back as the same Strip
    (changed_regions then skips it at once): a panel whose history line moved redraws
    that line, not its three."""
    plain = text.plain
    pieces: list[tuple[str, Style]] = []
    pos = 0
    for span in sorted(text.spans, key=lambda sp: sp.start):
        if span.start > pos:
            pieces.append((plain[pos:span.start], base))
        pieces.append((plain[span.start:span.end], base + _style_of(span.style)))
        pos = max(pos, span.end)
    if pos < len(plain):
        pieces.append((plain[pos:], base))
    lines: list[list[Segment]] = [[]]
    for chunk, style in pieces:
        parts = chunk.split("\n")
        for i, part in enumerate(parts):
            if i:
                lines.append([])
            if part:
                lines[-1].append(Segment(part, style))
    if drawn is None:
        return [_strip(line, width, base) for line in lines]
    strips = []
    for y, line in enumerate(lines):
        key = (width, base, *line)
        if y < len(drawn) and drawn[y][0] == key:
            strips.append(drawn[y][1])
            continue
        strip = _strip(line, width, base)
        if y < len(drawn):
            drawn[y] = (key, strip)
        else:
            drawn.append((key, strip))
        strips.append(strip)
    del drawn[len(lines):]
    return strips


Piece = tuple[str, str]  # (text, Rich style string)


class Lines:
    """Lines of (text, style) pieces, built as a Rich ``Text`` is (``append``,
    ``append_text``, ``cell_len``) and drawn as ``text_strips`` draws that Text, without
    the Text: on a live machine every GPU panel changes every refresh, and building its
    Text (each ``append`` measures and sanitises its piece, the spans then sorted and
    cut again into lines) was a third of the panels' tick.  Untrusted text comes through
    ``fmt.visible`` already, as for a Text.  ``strips`` hands back the Strip drawn last
    for a line of the same pieces: an unchanged line costs one comparison of tuples."""

    __slots__ = ("lines",)

    def __init__(self) -> None:
        self.lines: list[list[Piece]] = [[]]

    def append(self, text: str, style: str = "") -> None:
        if "\n" in text:
            first, *rest = text.split("\n")
            self.append(first, style)
            for part in rest:
                self.lines.append([])
                self.append(part, style)
        elif text:
            self.lines[-1].append((text, style))

    def append_text(self, other: Lines) -> None:
        """``other`` after these pieces, its first line continuing the last one."""
        self.lines[-1].extend(other.lines[0])
        self.lines.extend(list(line) for line in other.lines[1:])

    @property
    def cell_len(self) -> int:
        return sum(cell_len(text) for line in self.lines for text, _ in line)

    @property
    def plain(self) -> str:
        return "\n".join("".join(text for text, _ in line) for line in self.lines)

    def text(self) -> Text:
        """The same lines as a Rich Text (what ``render()`` answers)."""
        out = Text(no_wrap=True, overflow="ellipsis")
        for y, line in enumerate(self.lines):
            if y:
                out.append("\n")
            for text, style in line:
                out.append(text, style=style)
        return out

    def strips(self, width: int, base: Style, drawn: list[tuple[Any, Strip]]) -> list[Strip]:
        """One Strip per line, as ``text_strips(self.text(), width, base)``; ``drawn``: the
        lines made last time for this widget, updated here (see ``text_strips``)."""
        strips = []
        for y, line in enumerate(self.lines):
            key = (width, base, line)
            if y < len(drawn) and drawn[y][0] == key:
                strips.append(drawn[y][1])
                continue
            strip = _strip([Segment(text, _combined(base, style)) for text, style in line],
                           width, base)
            if y < len(drawn):
                drawn[y] = (key, strip)
            else:
                drawn.append((key, strip))
            strips.append(strip)
        del drawn[len(self.lines):]
        return strips


_COMBINED: dict[tuple[Style, str], Style] = {}


def _combined(base: Style, style: str) -> Style:
    """``base + Style.parse(style)``, kept: a panel's few styles on its one base."""
    combined = _COMBINED.get((base, style))
    if combined is None:
        if len(_COMBINED) > 1024:  # bases change with themes and hover: keep the recent
            _COMBINED.clear()
        combined = _COMBINED[(base, style)] = base + _style_of(style) if style else base
    return combined


def _strip(line: list[Segment], width: int, base: Style) -> Strip:
    # Neighbouring spans of one style become one segment: one colour code sent, not two.
    return Strip(Segment.simplify(line)).crop_extend(0, width, base)


class StyleOnce(Widget):
    """A widget whose ``base_style`` (its ``rich_style``) is resolved once per style
    update, not once per drawn line: ``rich_style`` walks every ancestor's styles and
    blends their colours, and the process table asked for it twice per row per tick.
    Textual calls ``notify_style_update`` whenever CSS is applied to the widget (a theme,
    a class, hover), which is also when it clears its own component style cache.
    Mix in before the Textual base class: ``class Table(StyleOnce, ScrollView)``."""

    _base_style: Style | None = None
    _row_styles: dict[tuple[str, ...], Style] | None = None

    @property
    def base_style(self) -> Style:
        style = self._base_style
        if style is None:
            style = self._base_style = self.rich_style
        return style

    def combined_style(self, names: tuple[str, ...], partial_except: str | None) -> Style:
        """``base_style`` plus the component classes ``names`` (each only what it sets,
        except ``partial_except``: in full), cached per set of names."""
        cache = self._row_styles
        if cache is None:
            cache = self._row_styles = {}
        style = cache.get(names)
        if style is None:
            style = self.base_style
            for name in names:
                style += self.get_component_rich_style(name, partial=name != partial_except)
            cache[names] = style
        return style

    def notify_style_update(self) -> None:
        self._base_style = None
        self._row_styles = None
        super().notify_style_update()


class RepaintsChanges(StyleOnce):
    """A one-line ``render()`` widget that dirties only the cells of its line that changed.

    ``repaint_changes()`` (call it where ``refresh()`` was called) renders the line, compares
    it with the one drawn last and dirties from its first to its last changed cell, or
    nothing: the header's clock text "1s old" is the same most seconds, and the host
    line's CPU figure changes while its histories, further right, move every few seconds.
    A new size, a line cut by the width (its ellipsis) or a first draw repaint it all.
    The line it compared is the one drawn (``render_line``): Textual's own path would
    render the Text a second time, through its Content, on every repaint.
    Mix in before the Textual base class."""

    _painted: tuple[Any, list[Strip]] | None = None

    def repaint_changes(self) -> None:
        width = self.size.width
        text = self.render()
        assert isinstance(text, Text)
        old = self._painted
        key = (self.size, self.is_mounted)
        if text.cell_len > width or "\n" in text.plain:
            self._painted = None
            self.refresh()
            return
        new = text_strips(text, max(width, 1), self.base_style)
        self._painted = (key, new)
        regions = changed_regions(old[1], new) if old is not None and old[0] == key else None
        if regions is None:
            self.refresh()
        elif regions:
            self.refresh(*regions)

    def render_line(self, y: int) -> Strip:
        painted = self._painted
        if painted is None or painted[0] != (self.size, True) or y >= len(painted[1]):
            # Not painted here (before the first update, cut by the width, resized since):
            # Textual renders ``render()`` itself.
            return super().render_line(y)
        # Textual clears these when it renders the content itself; this line API never
        # does, and each partial repaint adds its region.
        self._dirty_regions.clear()
        return painted[1][y]

    def notify_style_update(self) -> None:
        self._painted = None
        super().notify_style_update()
