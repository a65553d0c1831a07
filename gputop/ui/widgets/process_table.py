"""The process table: a line-API ScrollView, because DataTable re-renders every cell on
any change (110-160 ms a tick measured) while this draws only the visible lines.

Rows are identified by RowKey, so the cursor stays on the same process when a refresh
re-sorts or inserts rows.  Cell text is untrusted (commands, user names) and goes into
Segments as plain strings: nothing is parsed as markup, and control characters were
already made visible by table_model.cell.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.cells import set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from gputop.columns import DEFAULT_COLUMNS, Column
from gputop.ui.cells import layout, right, row_text
from gputop.ui.keys import bindings
from gputop.ui.partial import StyleOnce, changed_regions
from gputop.ui.state import RowKey
from gputop.ui.table_model import Row, cell

CURSOR = "process-table--cursor"


class TableHeader(Widget):
    """Column titles with the sort marker; a click on a title sorts by it."""

    DEFAULT_CSS = """
    TableHeader { height: 1; }
    """

    class SortRequested(Message):
        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    def __init__(self, columns: tuple[str, ...] = DEFAULT_COLUMNS, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.columns = columns
        self.sort_column = "gpu_mem"
        self.sort_reverse = True
        self.marker_width = 1  # matches the table's tag marker column

    def set_columns(self, columns: tuple[str, ...]) -> None:
        if columns != self.columns:
            self.columns = columns
            self.refresh()

    def set_sort(self, column: str, reverse: bool) -> None:
        if (column, reverse) != (self.sort_column, self.sort_reverse):
            self.sort_column, self.sort_reverse = column, reverse
            self.refresh()

    def _layout(self) -> list[tuple[Column, int]]:
        return layout(self.columns, max(self.size.width - self.marker_width, 1))

    def render_line(self, y: int) -> Strip:
        style = self.rich_style
        # Underlined as well as marked, so the sort column reads without colour too.
        sort_style = style + Style(underline=True)
        segments = [Segment(" " * self.marker_width, style)]
        for col, width in self._layout():
            sorted_here = col.id == self.sort_column
            title = col.title + (("▼" if self.sort_reverse else "▲") if sorted_here else "")
            # A title that fills its column puts the marker in the gap after it, so every
            # column shows its direction without widening the table.
            cell_width = width + 1 if len(title) > width else width
            text = right(title, cell_width) if col.right else set_cell_size(title, cell_width)
            segments.append(Segment(text, sort_style if sorted_here else style))
            if cell_width == width:
                segments.append(Segment(" ", style))
        return Strip(segments).adjust_cell_length(self.size.width, style)

    def column_at(self, x: int) -> str | None:
        pos = self.marker_width
        for col, width in self._layout():
            if pos <= x < pos + width + 1:
                return col.id
            pos += width + 1
        return None

    def on_click(self, event: events.Click) -> None:
        column = self.column_at(event.x)
        if column is not None:
            self.post_message(self.SortRequested(column))


class ProcessTable(StyleOnce, ScrollView, can_focus=True):
    """GPU processes, one per line; the cursor follows its RowKey across refreshes."""

    # No `k` for up: k is the kill key, as in htop.
    BINDINGS: ClassVar[list[BindingType]] = [
        *bindings("table"),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("home", "first", "First", show=False),
        Binding("end", "last", "Last", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "process-table--cursor",
        "process-table--tagged",
        "process-table--mine",
        "process-table--flagged",
        "process-table--zombie",
    }

    DEFAULT_CSS = """
    ProcessTable { height: 1fr; overflow-x: hidden; }
    ProcessTable > .process-table--cursor {
        background: $accent 40%; color: auto 95%; text-style: bold;
    }
    ProcessTable:focus > .process-table--cursor { background: $accent; color: auto 95%; }
    ProcessTable > .process-table--tagged { color: $warning; text-style: bold; }
    ProcessTable > .process-table--mine { text-style: bold; }
    ProcessTable > .process-table--flagged { color: $warning; }
    ProcessTable > .process-table--zombie { color: $error; }
    """

    class Highlighted(Message):
        def __init__(self, key: RowKey | None) -> None:
            super().__init__()
            self.key = key

    class Activated(Message):
        def __init__(self, key: RowKey) -> None:
            super().__init__()
            self.key = key

    def __init__(self, columns: tuple[str, ...] = DEFAULT_COLUMNS, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.columns = columns
        self.rows: list[Row] = []
        self.cursor = 0
        self.selected: RowKey | None = None
        self.tagged: set[RowKey] = set()
        self.me: str | None = None
        self.now = 0.0
        # Shown in place of the rows when there are none and the source has no process
        # list at all ("processes: not exported by this source"), not "no processes".
        self.empty_text = ""
        self._index: dict[RowKey, int] = {}
        self._columns_at: tuple[int, list[tuple[Column, int]]] | None = None
        # The visible lines as last drawn, and what they were drawn for (scroll, size,
        # style): set_rows repaints only the cells that changed (gputop/ui/partial.py).
        self._shown: tuple[Any, list[Strip]] | None = None
        self._drawn: dict[RowKey, tuple[Any, Strip]] = {}

    # -- data ----------------------------------------------------------------------

    def set_columns(self, columns: tuple[str, ...]) -> None:
        if columns != self.columns:
            self.columns = columns
            self._columns_at = None
            self.refresh()

    def set_rows(self, rows: list[Row], now: float) -> None:
        """Replace the rows; the cursor stays on the selected key if it is still shown."""
        self.rows = rows
        self.now = now
        self._index = {row.key: i for i, row in enumerate(rows)}
        if self.selected in self._index:
            self.cursor = self._index[self.selected]
        else:
            # The selected process left (or is filtered out): stay at the same height.
            self.cursor = min(self.cursor, max(len(rows) - 1, 0))
        size = Size(self.size.width, len(rows))
        if size != self.virtual_size:  # a new virtual size costs a layout pass
            self.virtual_size = size
        self._set_selected(rows[self.cursor].key if rows else None)
        self._repaint_changes()

    def _view_key(self) -> Any:
        return (int(self.scroll_offset.y), self.scrollable_content_region.width,
                self.scrollable_content_region.height, self.base_style, self.empty_text)

    def _repaint_changes(self) -> None:
        old = self._shown
        key = self._view_key()
        if not self.is_mounted or old is None or old[0] != key:
            self._shown = None
            self.refresh()
            return
        new = self._lines(len(old[1]))
        self._shown = (key, new)
        regions = changed_regions(old[1], new)
        if regions is None:
            self.refresh()
        elif regions:
            self.refresh(*regions)

    def rows_shown(self) -> list[RowKey]:
        """The keys of the rows that pass the view's filters (on screen or scrolled)."""
        return list(self._index)

    def _set_selected(self, key: RowKey | None) -> None:
        if key != self.selected:
            self.selected = key
            self.post_message(self.Highlighted(key))

    def move_to(self, index: int) -> None:
        if not self.rows:
            return
        index = min(max(index, 0), len(self.rows) - 1)
        self.cursor = index
        self._set_selected(self.rows[index].key)
        self._scroll_cursor_visible()
        self._shown = None
        self.refresh()

    def _scroll_cursor_visible(self) -> None:
        top = int(self.scroll_offset.y)
        height = max(self.scrollable_content_region.height, 1)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True)

    # -- actions -------------------------------------------------------------------

    def action_cursor_down(self) -> None:
        self.move_to(self.cursor + 1)

    def action_cursor_up(self) -> None:
        self.move_to(self.cursor - 1)

    def action_page_down(self) -> None:
        self.move_to(self.cursor + max(self.scrollable_content_region.height - 1, 1))

    def action_page_up(self) -> None:
        self.move_to(self.cursor - max(self.scrollable_content_region.height - 1, 1))

    def action_first(self) -> None:
        self.move_to(0)

    def action_last(self) -> None:
        self.move_to(len(self.rows) - 1)

    def on_click(self, event: events.Click) -> None:
        index = int(self.scroll_offset.y) + event.y
        if 0 <= index < len(self.rows):
            self.move_to(index)
            if event.chain >= 2:
                self.post_message(self.Activated(self.rows[index].key))

    # -- drawing -------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        key = self._view_key()
        shown = self._shown
        if shown is None or shown[0] != key:
            shown = self._shown = (key, self._lines(key[2]))
        if y < len(shown[1]):
            return shown[1][y]
        return self._lines(y + 1)[y]

    def _lines(self, count: int) -> list[Strip]:
        """The first ``count`` visible lines (the view's geometry looked up once: each
        look-up is a Textual property computed afresh).  A row drawn last time with the
        same process record, marks and TIME text is the same Strip: a quiet refresh
        formats one cell a row, not ten (``_drawn``, the rows on screen by key)."""
        width = self.scrollable_content_region.width
        top = int(self.scroll_offset.y)
        base = self.base_style
        cols = self._layout(max(width - 1, 1))
        timed = any(col.id == "time" for col, _w in cols)
        drawn, self._drawn = self._drawn, {}
        lines = []
        for index in range(top, top + count):
            if index >= len(self.rows):
                lines.append(self._line(index, width, base, cols))
                continue
            row = self.rows[index]
            key = (row, row.key in self.tagged, index == self.cursor, self.me, width, base,
                   cols, cell("time", row, self.now) if timed else None)
            old = drawn.get(row.key)
            line = old[1] if old is not None and old[0] == key else self._line(
                index, width, base, cols)
            self._drawn[row.key] = (key, line)
            lines.append(line)
        return lines

    def _line(self, index: int, width: int, base: Style,
              cols: list[tuple[Column, int]]) -> Strip:
        if index >= len(self.rows):
            if index == 0 and self.empty_text:
                text = " " + self.empty_text
                return Strip([Segment(text, base + Style(dim=True))]).adjust_cell_length(
                    width, base)
            return Strip.blank(width, base)
        row = self.rows[index]
        values = [cell(col.id, row, self.now) for col, _w in cols]
        tagged = row.key in self.tagged
        text = ("*" if tagged else " ") + row_text(cols, values)
        style = self.row_style(row, index == self.cursor)
        return Strip([Segment(text, style)]).adjust_cell_length(width, style)

    def row_state_classes(self, row: Row, at_cursor: bool) -> list[str]:
        """The component classes of a row, weakest first: later ones win where they
        set the same attribute, so a flag's colour beats "mine" (my forgotten kernel is
        the row to notice) and the cursor, which picks a text colour that contrasts
        with its own background, beats everything."""
        classes = []
        if self.me is not None and row.proc.user == self.me:
            classes.append("process-table--mine")
        if row.proc.state == "Z":
            classes.append("process-table--zombie")
        elif row.flags:
            classes.append("process-table--flagged")
        if row.key in self.tagged:
            classes.append("process-table--tagged")
        if at_cursor:
            classes.append(CURSOR)
        return classes

    def row_style(self, row: Row, at_cursor: bool) -> Style:
        # The cursor's full style: its background blended and "auto" text colour
        # resolved.  The others only what they set, so "mine" (bold) keeps the flag
        # colour instead of bringing back the default text colour.  Once per set of
        # classes and style update (StyleOnce), not once per row and tick.
        return self.combined_style(tuple(self.row_state_classes(row, at_cursor)), CURSOR)

    def _layout(self, width: int) -> list[tuple[Column, int]]:
        # Once per width, not once per drawn line.
        if self._columns_at is None or self._columns_at[0] != width:
            self._columns_at = (width, layout(self.columns, width))
        return self._columns_at[1]

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._shown = None
        self._drawn = {}  # the rows' styles (cursor, tagged...) may be others now
        self.refresh()
