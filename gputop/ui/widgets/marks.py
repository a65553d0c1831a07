"""Check boxes and radio buttons whose state shows in their shape, not only in colour:
Textual draws ``▐X▌`` for both states and tells them apart by colour alone, which a
colour-blind user, a monochrome terminal or NO_COLOR cannot read (``▐X▌`` beside
"0 selected").  Here an unchecked box is ``▐ ▌`` and a checked one ``▐X▌``; an unchosen
radio button ``▐ ▌``, the chosen one ``▐●▌``."""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from textual.strip import Strip
from textual.widgets import RadioButton, SelectionList
from textual.widgets._toggle_button import ToggleButton

CHECKED = ToggleButton.BUTTON_INNER  # "X"
EMPTY = " "


class MarkedSelectionList(SelectionList[Any]):
    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        segments = list(strip)
        if len(segments) < 3 or segments[1].text != ToggleButton.BUTTON_INNER:
            return strip
        index = self.scroll_offset.y + y
        if not 0 <= index < self.option_count:
            return strip
        chosen = self.get_option_at_index(index).value in self.selected
        segments[1] = Segment(CHECKED if chosen else EMPTY, segments[1].style)
        return Strip(segments, strip.cell_length)


class MarkedRadioButton(RadioButton):
    def render(self) -> Any:
        self.BUTTON_INNER = RadioButton.BUTTON_INNER if self.value else EMPTY
        return super().render()
