"""The `gputop run` line of every host (the dashboard's Q): who runs, who waits and why,
and the jobs that ended last (their history, as `gputop queue --history` reads it)."""

from __future__ import annotations

import time
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


HISTORY_SHOWN = 10  # the last finished jobs under the line
HISTORY_RELOAD_S = 5.0  # the history files are read at most this often
STATUS_STYLE = {"success": "green", "failed": "bold red", "cancelled": "yellow",
                "running": "bold green", "pending": "dim"}


def history_text(rows: list[dict[str, Any]], now: float, most: int = HISTORY_SHOWN) -> Text:
    """The last finished jobs, newest first: when, which, whose, how it ended."""
    out = Text(no_wrap=True, overflow="ellipsis")
    done = [row for row in rows if row["status"] != "running"][:most]
    if not done:
        out.append("no finished `gputop run` jobs in the last 7 days", style="dim")
        return out
    for n, row in enumerate(done):
        if n:
            out.append("\n")
        ago = format_duration(max(0.0, now - (row["ended"] or row["updated"])))
        out.append(f"{ago + ' ago':>12}  ", style="dim")
        out.append(f"{row['id']}", style="bold")
        out.append(f"{'#' + str(row['attempt']) if row['attempt'] > 1 else '':<4}")
        out.append(f"{fmt.visible(str(row['user'])):<10} ")
        out.append(f"{row['status']:<10}", style=STATUS_STYLE.get(row["status"], ""))
        code = (f"exit {row['exit_code']}" if row["exit_code"] is not None
                else f"signal {row['signal']}" if row["signal"] else "")
        why = ", ".join(part for part in (row["reason"] or "", code) if part)
        out.append(f"{fmt.visible(why):<24} ")
        gpus = ",".join(map(str, row["gpus"]))
        ran = format_duration(row["ran_s"]) if row["ran_s"] is not None else "-"
        out.append(f"GPU {gpus or '-':<8} ran {ran:>7}  ", style="dim")
        out.append(fmt.visible(str(row["command"])))
    return out


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
            yield Static("Last finished (mine, and the ledger's)", classes="title")
            yield Static(id="history")
        yield Footer()

    def __init__(self, history_paths: list[str] | None = None) -> None:
        super().__init__()
        self.history_paths = history_paths  # None: this user's own, and the ledger's
        self._history: list[dict[str, Any]] = []
        self._history_at = -HISTORY_RELOAD_S

    def on_mount(self) -> None:
        app: Any = self.app
        app.state_changed.subscribe(self, self._pull)
        self._pull()

    def _pull(self, _state: object = None) -> None:
        if not self.is_attached:
            return
        app: Any = self.app
        snapshots = list(app.state.snapshots.values())
        now = app.clock()
        self.query_one("#jobs", Static).update(queue_text(snapshots, now))
        self.query_one("#history", Static).update(
            history_text(self._finished(snapshots, now), now))

    def _finished(self, snapshots: list[HostSnapshot], now: float) -> list[dict[str, Any]]:
        """The history rows, read again every HISTORY_RELOAD_S; none for a demo (the
        simulator's jobs leave none, and this user's real ones are not its)."""
        if snapshots and all(snap.demo for snap in snapshots):
            return []
        if time.monotonic() - self._history_at >= HISTORY_RELOAD_S:
            from gputop.ledger import jobs

            self._history_at = time.monotonic()
            paths = self.history_paths if self.history_paths is not None else jobs.read_paths()
            self._history = jobs.read(paths, now - 7 * 86400.0)
        return self._history


def open_queue(app: GputopApp) -> None:
    app.push_screen(QueueScreen())
