"""``TextLines``: rows of rich Text with a cursor, for lists too long or too wide for a
DataTable (the cluster overview's hosts, every host's processes).

Only the visible lines are rendered; an update that changes nothing visible costs one
comparison per row.  With ``column_width`` the rows wrap into columns when there are more
of them than the widget is high.  Enter posts ``TextLines.Chosen`` with the row's index.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, overload

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gputop.ui.keys import bindings

COLUMN_GAP = 1
ROW_BACKGROUND = Style(bgcolor="grey27")  # the cursor's row; cells keep their colours


class LazyRows(Sequence[Text]):
    """Rows built when first drawn (then kept): a 1,000-host overview shows 50 of them,
    and building every line each refresh was most of the dashboard's time."""

    def __init__(self, count: int, build: Callable[[int], Text]) -> None:
        self.length = count
        self.build = build
        self.built: dict[int, Text] = {}

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> Text: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Text]: ...

    def __getitem__(self, index: int | slice) -> Text | Sequence[Text]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.length))]
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(index)
        found = self.built.get(index)
        if found is None:
            found = self.built[index] = self.build(index)
        return found

    def __eq__(self, other: object) -> bool:
        return other is self  # new data: drawn anew (comparing would build every row)

    __hash__ = None  # type: ignore[assignment]


class TextLines(ScrollView, can_focus=True):
    """Rows of rich Text with a cursor, drawn line by line; wraps into columns if asked.

    ``label_width``: the cells at the start of a row that name it (a host name), the part
    the cursor reverses.
    """

    # Rows are cut to the widget's width: never a horizontal scrollbar, which took the
    # last line of the list (with 100 hosts, End stopped one host short).
    DEFAULT_CSS = "TextLines { overflow-x: hidden; }"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
        Binding("left", "move_column(-1)", show=False),
        Binding("right", "move_column(1)", show=False),
        Binding("pageup", "move(-20)", show=False),
        Binding("pagedown", "move(20)", show=False),
        Binding("home", "move(-100000)", show=False),
        Binding("end", "move(100000)", show=False),
        *bindings("lines"),
    ]

    class Chosen(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, label_width: int, column_width: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rows: Sequence[Text] = []
        self.cursor = 0
        self.label_width = label_width
        self.column_width = column_width  # 0: one column as wide as the widget

    def set_rows(self, rows: Sequence[Text], column_width: int | None = None) -> None:
        """``rows``: a list, or a LazyRows that builds only the lines drawn."""
        if column_width is not None:
            self.column_width = column_width
        if rows == self.rows:
            return
        self.rows = rows
        self.cursor = min(self.cursor, max(0, len(rows) - 1))
        self._layout()
        self.refresh()

    def _columns(self) -> int:
        height = max(1, self.size.height)
        if not self.column_width or len(self.rows) <= height:
            return 1
        return max(1, min(self.size.width // (self.column_width + COLUMN_GAP), math.ceil(
            len(self.rows) / height)))

    def _per_column(self) -> int:
        return max(1, math.ceil(len(self.rows) / self._columns()))

    def _layout(self) -> None:
        self.virtual_size = Size(self.size.width, self._per_column())

    def on_resize(self) -> None:
        self._layout()
        self._scroll_to_cursor()  # a header that grew a line must not hide the cursor
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        row = y + self.scroll_offset.y
        columns = self._columns()
        per = self._per_column()
        col_width = width if columns == 1 else self.column_width + COLUMN_GAP
        segments: list[Segment] = []
        for col in range(columns):
            index = col * per + row
            if row >= per or index >= len(self.rows):
                text = Text(" " * col_width)
            else:
                text = self.rows[index].copy()
                text.truncate(col_width, pad=True)
                if index == self.cursor:
                    self._highlight(text, col_width)
            segments.extend(text.render(self.app.console))
        # Every segment gets the widget's style under its own: a plain one has none
        # (None), which Textual's monochrome filter (NO_COLOR) cannot handle.
        base = self.rich_style
        return Strip(segments).adjust_cell_length(width, base).apply_style(base)

    def _highlight(self, text: Text, width: int) -> None:
        # Only the row's label is reversed: reversing the overview's GPU cells turned
        # their colours (the point of the overview) into something else.  The rest of the
        # line gets a background under the cells' own, so the eye can follow the row across.
        name = min(self.label_width, width)
        if self.has_focus:
            text.stylize_before(ROW_BACKGROUND, 0, width)
            text.stylize(Style(reverse=True, bold=True), 0, name)
        else:
            text.stylize(Style(underline=True), 0, name)

    def line_text(self, y: int) -> str:
        """The plain text of one visible line (tests, screen readers)."""
        return self.render_line(y).text

    def hidden(self) -> tuple[list[int], list[int]]:
        """The indices of the rows above and below the visible lines (the fold)."""
        per, top = self._per_column(), self.scroll_offset.y
        height = max(1, self.size.height)
        above: list[int] = []
        below: list[int] = []
        for index in range(len(self.rows)):
            row = index % per
            if row < top:
                above.append(index)
            elif row >= top + height:
                below.append(index)
        return above, below

    def action_move(self, step: int) -> None:
        if not self.rows:
            return
        self.cursor = max(0, min(len(self.rows) - 1, self.cursor + step))
        self._scroll_to_cursor()
        self.refresh()

    def action_move_column(self, step: int) -> None:
        if self._columns() > 1:
            self.action_move(step * self._per_column())

    def _scroll_to_cursor(self) -> None:
        row = self.cursor % self._per_column()
        top = self.scroll_offset.y
        height = max(1, self.size.height)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + height:
            self.scroll_to(y=row - height + 1, animate=False)

    def action_choose(self) -> None:
        if self.rows:
            self.post_message(self.Chosen(self.cursor))

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()
