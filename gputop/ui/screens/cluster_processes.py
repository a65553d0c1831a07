"""Every host's GPU processes in one list with a HOST column (``p`` on the dashboard
or the cluster overview), filterable by host, user, label, job, container, pod or words.

Enter on a process goes back to the dashboard of its host, where kill and reserve act.
The rows and the filter are ui/cluster_cells.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.screen import Screen
from textual.widgets import Footer, Static

from gputop.ui import fmt
from gputop.ui.cluster_cells import NAME_WIDTH, PROC_HEADER, ProcFilter, process_rows
from gputop.ui.keys import bindings
from gputop.ui.screens.cluster import ClusterScreen
from gputop.ui.widgets.filter_input import FilterInput
from gputop.ui.widgets.text_lines import TextLines

if TYPE_CHECKING:
    from textual import getters

    from gputop.ui.app import GputopApp


class ClusterProcessesScreen(Screen[None]):
    """Every host's GPU processes in one list with a HOST column."""

    BINDINGS: ClassVar[list[BindingType]] = bindings("cluster_processes")
    DEFAULT_CSS = """
    ClusterProcessesScreen #procs-header { height: 1; padding: 0 0; text-style: bold; }
    ClusterProcessesScreen #procs-list { height: 1fr; }
    """

    if TYPE_CHECKING:
        app = getters.app(GputopApp)

    def __init__(self, query: str = "") -> None:
        super().__init__()
        self.where = ProcFilter.parse(query)
        self.query_text = query
        self.keys: list[tuple[str, int]] = []

    def compose(self) -> ComposeResult:
        yield Static(Text(PROC_HEADER), id="procs-header")
        yield TextLines(NAME_WIDTH, id="procs-list")
        yield FilterInput(value=self.query_text,
                          placeholder="host: user: label: job: container: pod: or words; "
                                      "Esc clears",
                          id="procs-filter")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_data()
        self.query_one(TextLines).focus()
        self.set_interval(self.app.interval, self.refresh_data)

    def refresh_data(self) -> None:
        state = self.app.state
        snaps = [state.snapshots[h] for h in state.snapshots]
        rows = process_rows(snaps, state.flags, self.where)
        self.keys = [(snap.host, proc.pid) for snap, proc, _ in rows]
        header = Text(PROC_HEADER)
        header.append(f"   {fmt.count(len(rows), 'process', 'processes')}", "dim")
        if self.query_text:
            header.append(f"   filter: {self.query_text}", "italic")
        self.query_one("#procs-header", Static).update(header)
        self.query_one(TextLines).set_rows([line for _, _, line in rows])

    @on(TextLines.Chosen)
    def _chosen(self, event: TextLines.Chosen) -> None:
        if 0 <= event.index < len(self.keys):
            host = self.keys[event.index][0]
            # Back to the dashboard of that host, where kill and reserve act.
            self.app.pop_screen()
            if isinstance(self.app.screen, ClusterScreen):
                self.app.screen.dismiss(None)
            self.app.show_host(host)

    def action_filter(self) -> None:
        self.query_one("#procs-filter", FilterInput).open()

    @on(FilterInput.Filtered, "#procs-filter")
    def _changed(self, event: FilterInput.Filtered) -> None:
        self._filter(event.value)

    @on(FilterInput.Closed, "#procs-filter")
    def _filter_closed(self, event: FilterInput.Closed) -> None:
        self._filter(event.value)
        self.query_one(TextLines).focus()

    def _filter(self, text: str) -> None:
        self.query_text = text
        self.where = ProcFilter.parse(text)
        self.refresh_data()

    def action_leave(self) -> None:
        box = self.query_one("#procs-filter", FilterInput)
        if box.is_open or self.query_text:
            box.close(keep=False)
            return
        self.app.pop_screen()


def open_processes(app: GputopApp) -> None:
    """``p`` on the dashboard or the overview: the processes of every host (the main table
    shows one)."""
    if not isinstance(app.screen, ClusterProcessesScreen):
        app.push_screen(ClusterProcessesScreen())
