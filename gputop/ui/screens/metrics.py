"""One process over time (`m` in its detail view): GPU memory, SM %, memory bandwidth
(its share of the card's memory controller, nvmlDeviceGetProcessUtilization's memUtil),
CPU % and RSS, each a chart of the history window with its latest value and range.

Reads only ``History.process_series`` (analysis/history.py keeps these bounded); redraws
on ``app.state_changed``.  Says so when the process is gone, and keeps its last charts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from gputop.ui import fmt
from gputop.ui.keys import bindings
from gputop.ui.screens.detail import process_title
from gputop.ui.state import RowKey, UiState

if TYPE_CHECKING:
    from textual import getters

    from gputop.ui.app import GputopApp

CHART_ROWS = 3
LABEL = 9  # the left column: a metric's name and its scale


def _pct(value: float) -> str:
    return f"{value:.0f}%"


def _size(value: float) -> str:
    return fmt.size(int(value))


# (history field, title, colour, how a value reads, the chart's top: 100 for a
# percentage; for an amount None, filled in by ``_tops`` with the card's or the host's
# memory, so that a chart says how much of it the process holds)
METRICS: tuple[tuple[str, str, str, Callable[[float], str], float | None], ...] = (
    ("gpu_mem", "GPU memory", "yellow", _size, None),
    ("sm_util", "SM %", "green", _pct, 100.0),
    ("mem_util", "memory bandwidth %", "magenta", _pct, 100.0),
    ("cpu_percent", "CPU %", "cyan", _pct, 100.0),
    ("rss", "RSS (host memory)", "blue", _size, None),
)


def metric_block(series: Sequence[tuple[float, Any]], title: str, style: str,
                 show: Callable[[float], str], top: float | None, width: int,
                 now: float, span: float) -> Text:
    """One metric: a title line with the latest value and range, then its chart."""
    out = Text()
    out.append(title, style="bold")
    if not series:
        out.append("  not measured for this process\n", style="dim")
        return out
    values = [v for _, v in series]
    out.append(f"  now {show(values[-1])}  min {show(min(values))}  max {show(max(values))}\n")
    # CPU % passes 100 with several threads, and an unknown total is no scale: then the
    # chart's top is the most that was seen.
    scale = max(top or 0.0, max(values)) or 1.0
    for i, row in enumerate(fmt.chart(series, width, CHART_ROWS, now, span, scale)):
        label = show(scale) if i == 0 else ("0" if i == CHART_ROWS - 1 else "")
        out.append(f"{label:>{LABEL - 1}} ", style="dim")
        out.append(row + "\n", style=style)
    return out


def _tops(state: UiState, host: str, gpu: int) -> dict[str, float | None]:
    """The amounts' scales: the card's memory for GPU memory (a process on several cards:
    the one it was opened on), the host's for RSS; None where unknown (then the most the
    process held)."""
    snap = state.snapshots.get(host)
    card = snap.gpu(gpu) if snap is not None else None
    return {"gpu_mem": card.mem_total if card is not None else None,
            "rss": snap.mem_total if snap is not None else None}


class MetricsScreen(Screen[None]):
    DEFAULT_CSS = """
    MetricsScreen > VerticalScroll { padding: 0 1; }
    """

    BINDINGS: ClassVar[list[BindingType]] = bindings("metrics")

    if TYPE_CHECKING:
        app = getters.app(GputopApp)

    def __init__(self, key: RowKey) -> None:
        super().__init__()
        self.key = key

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="metrics-title")
            yield Static(id="metrics-body")
        yield Footer()

    def on_mount(self) -> None:
        self.app.state_changed.subscribe(self, self._changed)
        self.redraw()

    def _changed(self, state: UiState) -> None:
        self.redraw()

    def redraw(self) -> None:
        state = self.app.state
        host, pid, ticks, gpu = self.key
        proc = state.process(self.key)
        title = process_title(self.key, proc)
        if proc is not None:
            title.append("  ")
            title.append(fmt.visible(proc.command or "?"), style="dim")
        title.truncate(max(self.size.width - 2, 20), overflow="ellipsis")
        self.query_one("#metrics-title", Static).update(title)
        history = state.history
        snap = state.snapshots.get(host)
        now = snap.time if snap else (history.latest_time(host) or 0.0)
        span = min(history.seconds, 600.0)
        width = max(self.size.width - LABEL - 3, 20)
        body = Text()
        tops = _tops(state, host, gpu)
        for field, name, style, show, top in METRICS:
            series = history.process_series(host, pid, ticks, field)
            top = tops.get(field, top)
            body.append("\n")
            body.append(metric_block(series, name, style, show, top, width, now, span))
        seen = "as observed by gputop"
        if history.simulated(host, now - span):
            seen = "simulated before the demo began, observed since"
        body.append(f"\nlast {span / 60:.0f} min, {seen}; memory bandwidth is this "
                    "process's share of the card's memory controller time", style="dim")
        self.query_one("#metrics-body", Static).update(body)
