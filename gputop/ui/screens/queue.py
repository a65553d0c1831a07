"""The `gputop run` line of every host (the dashboard's Q): who runs, who waits and why."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from gputop.analysis import queue_plan
from gputop.analysis.durations import format_duration
from gputop.model import HostSnapshot
from gputop.ui import fmt
from gputop.ui.keys import bindings

if TYPE_CHECKING:
    from gputop.ui.app import GputopApp


def queue_text(snapshots: list[HostSnapshot], now: float) -> Text:
    """Every host's jobs, running first, then the line; the default policy's order (a
    host's own policy file is read only by `gputop run` there)."""
    out = Text(no_wrap=True, overflow="ellipsis")
    rows = [row for snap in snapshots for row in queue_plan.listing(snap, queue_plan.Policy(), now)]
    if not rows:
        out.append("no `gputop run` jobs on any host", style="dim")
        return out
    for n, row in enumerate(rows):
        if n:
            out.append("\n")
        if row["state"] == "running":
            state = "on GPU " + ",".join(map(str, row["gpus_held"]))
            out.append(f"{state:<12}", style="bold green")
        elif row["position"] is None:
            out.append(f"{'never':<12}", style="bold red")
        else:
            out.append(f"#{row['position']:<11}", style="bold yellow")
        out.append(f"{fmt.visible(row['host'])}  {row['id']}  ", style="bold")
        out.append(f"{fmt.visible(row['user']):<10} {row['priority']:<6} ")
        out.append(f"{format_duration(row['waited_s']):>7}  ", style="dim")
        out.append(fmt.visible(row["command"]))
        if row["why"]:
            out.append(f"\n{'':12}{fmt.visible(row['why'])}", style="dim")
    return out


class QueueScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = bindings("queue")

    DEFAULT_CSS = """
    QueueScreen .title { padding: 1 1 0 1; text-style: bold; }
    QueueScreen #jobs { padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("Queue: `gputop run` jobs (running, then in line)", classes="title")
            yield Static(id="jobs")
        yield Footer()

    def on_mount(self) -> None:
        app: Any = self.app
        app.state_changed.subscribe(self, self._pull)
        self._pull()

    def _pull(self, _state: object = None) -> None:
        if not self.is_attached:
            return
        app: Any = self.app
        self.query_one("#jobs", Static).update(
            queue_text(list(app.state.snapshots.values()), app.clock()))


def open_queue(app: GputopApp) -> None:
    app.push_screen(QueueScreen())
