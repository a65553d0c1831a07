"""The one search/filter bar of the dashboard, the cluster overview and the all-processes
view: hidden until opened, its text always stripped, Enter keeps the filter and Esc (the
screen's binding) clears it."""

from __future__ import annotations

from textual import on
from textual.message import Message
from textual.widgets import Input


class FilterInput(Input):
    DEFAULT_CSS = """
    FilterInput { display: none; }
    FilterInput.-visible { display: block; }
    """

    class _Event(Message):
        def __init__(self, box: FilterInput, value: str) -> None:
            super().__init__()
            self.box = box
            self.value = value

        @property
        def control(self) -> FilterInput:
            return self.box

    class Filtered(_Event):
        """The filter text changed (stripped)."""

    class Closed(_Event):
        """The bar was closed: ``value`` is the filter that stays ("" when cleared)."""

    @property
    def text(self) -> str:
        return self.value.strip()

    @property
    def is_open(self) -> bool:
        return self.has_class("-visible")

    def open(self) -> None:
        self.add_class("-visible")
        self.focus()

    def close(self, keep: bool) -> None:
        if not keep:
            self.clear()
        self.remove_class("-visible")
        self.post_message(self.Closed(self, self.text))

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        event.stop()
        self.post_message(self.Filtered(self, self.text))

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.close(keep=True)
