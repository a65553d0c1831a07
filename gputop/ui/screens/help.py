"""The help screen: built from the bindings active on the screen it was opened from, so a
key remapped in the config shows as remapped, with the id that remaps it."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gputop.ui.keys import bindings

ABOUT = (
    "Rows: one GPU process each. Flags: KERN Jupyter kernel, ORPH parent gone (normal for a "
    "nohup job; only idle ones or kernels without a server are worth stopping), "
    "IDLE 0 % SM for a while holding memory, ZOMB defunct, HID in another PID namespace. "
    "Click a GPU panel to show only its processes; click a column title to sort."
)


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 80; max-width: 100%; height: auto; max-height: 90%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = bindings("help")

    def __init__(self, rows: list[tuple[str, str, str]],
                 navigation: list[tuple[str, str, str]] | None = None) -> None:
        super().__init__()
        self.own = rows
        self.navigation = navigation or []
        self.rows = rows + self.navigation

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=True, header_style="bold", expand=True)
        table.add_column("Keys", style="bold cyan", no_wrap=True)
        table.add_column("Action")
        # The id is what the config's keys: section remaps (`kill: "x,f9"`).
        table.add_column("Id (config keys:)", style="dim", no_wrap=True)
        for keys, description, binding_id in self.own:
            table.add_row(Text(keys), Text(description), Text(binding_id))
        if self.navigation:
            # The table's own scrolling keys: everyone knows them, so they come last.
            table.add_row(Text(""), Text(""), Text(""))
            table.add_row(Text("Navigation", style="bold"), Text(""), Text(""))
            for keys, description, binding_id in self.navigation:
                table.add_row(Text(keys), Text(description), Text(binding_id))
        with VerticalScroll():
            yield Static(Text("gputop help", style="bold"), id="help-title")
            yield Static(table, id="help-keys")
            yield Static(Text(ABOUT, style="dim"), id="help-about")
            yield Static(Text("Esc or q closes this help.", style="dim"))

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
