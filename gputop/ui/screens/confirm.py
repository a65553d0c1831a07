"""A yes/no question for actions that are easy to get wrong (R releasing every card).

Cancel has the focus, so a stray Enter does nothing; the keys come from the registry
(scope "confirm") and are shown in the dialog.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from gputop.ui.keys import bindings


class ConfirmScreen(ModalScreen[bool]):
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical {
        width: 80%; max-width: 90; height: auto;
        border: thick $warning; background: $surface; padding: 1 2;
    }
    ConfirmScreen #confirm-title { text-style: bold; margin-bottom: 1; }
    ConfirmScreen #confirm-buttons { height: auto; margin-top: 1; align-horizontal: right; }
    ConfirmScreen #confirm-buttons Button { margin-left: 2; }
    ConfirmScreen #confirm-keys { color: $text-muted; }
    """

    BINDINGS: ClassVar[list[BindingType]] = bindings("confirm")

    def __init__(self, title: str, body: Text, yes: str) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(self.title_text), id="confirm-title")
            yield Static(self.body, id="confirm-body")
            with Horizontal(id="confirm-buttons"):
                yield Button("Cancel", id="confirm-no", variant="primary")
                yield Button(self.yes, id="confirm-yes", variant="warning")
            yield Label(f"y: {self.yes.lower()} · n or Esc: cancel", id="confirm-keys")

    def on_mount(self) -> None:
        self.query_one("#confirm-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm-yes")

    def action_yes(self) -> None:
        self.dismiss(True)

    def action_no(self) -> None:
        self.dismiss(False)
