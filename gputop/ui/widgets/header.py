"""The top lines: which host, which driver, how fresh the data is; then CPU, memory, load."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from rich.text import Text
from textual.widget import Widget

from gputop.model import HealthWarning, HostSnapshot
from gputop.ui import fmt, headline
from gputop.ui.partial import RepaintsChanges
from gputop.ui.widgets.gpu_panel import HISTORY_MEM_STYLE, SEVERITY_BADGE, span_label


class HeaderBar(RepaintsChanges, Widget):
    DEFAULT_CSS = """
    HeaderBar { height: 1; background: $panel; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.snapshot: HostSnapshot | None = None
        self.interval = 1.0
        self.now = 0.0
        self.hosts = 1
        self._signature: Any = None

    def update_data(self, snapshot: HostSnapshot | None, interval: float, now: float,
                    hosts: int = 1) -> None:
        self.snapshot, self.interval, self.now, self.hosts = snapshot, interval, now, hosts
        # Age in whole seconds: a tick where nothing else changed redraws only if it shows.
        signature = (id(snapshot), interval, hosts, self._age_text())
        if signature != self._signature:
            self._signature = signature
            self.repaint_changes()

    def _age_text(self) -> str:
        if self.snapshot is None:
            return ""
        return headline.age_text(self.now, self.snapshot)

    def render(self) -> Text:
        out = Text(no_wrap=True, overflow="ellipsis")
        for text, style in headline.header_parts(self.snapshot, self.interval, self.now,
                                                  self.hosts, self.size.width >= 110):
            out.append(text, style=style)
        return out


@dataclass(frozen=True)
class HostHistory:
    """The host's CPU and memory use (0-100 %) over the window the GPU panels show:
    ``read("cpu" or "mem", t)`` gives the samples from time ``t`` on, so that the line
    reads what is new since it last drew, not the window."""

    read: Callable[[str, float], Sequence[tuple[float, float]]]
    now: float
    span: float


SPARK_MIN = 8  # narrower than this a history says nothing: leave it out
SPARK_MAX = 40


class HostLine(RepaintsChanges, Widget):
    DEFAULT_CSS = """
    HostLine { height: 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.snapshot: HostSnapshot | None = None
        self.warnings: list[HealthWarning] = []
        self.status = ""
        self.history: HostHistory | None = None
        self._signature: Any = None
        # The histories' lines, fed the new samples only: by (series, seconds per cell),
        # for the host they follow.
        self._tracks: dict[tuple[str, float], fmt.SparkTrack] = {}
        self._tracked: str | None = None

    def update_data(self, snapshot: HostSnapshot | None, warnings: list[HealthWarning],
                    status: str, history: HostHistory | None = None) -> None:
        self.snapshot, self.warnings, self.status = snapshot, warnings, status
        self.history = history
        host = snapshot.host if snapshot is not None else None
        if host != self._tracked:  # another host's lines: start afresh
            self._tracks.clear()
            self._tracked = host
        signature = (id(snapshot), tuple(w.key for w in warnings), status)
        if signature != self._signature:
            self._signature = signature
            self.repaint_changes()

    def render(self) -> Text:
        out = Text(no_wrap=True, overflow="ellipsis")
        snap = self.snapshot
        if snap is None:
            return out
        cpu = snap.cpu_percent
        filled, empty = fmt.bar(None if cpu is None else cpu / 100, 10)
        out.append(" CPU ", style="bold")
        out.append("▕" + filled, style="green")
        out.append(empty + "▏", style="dim")
        out.append(fmt.percent(cpu))
        if snap.cpu_count:
            out.append(f" of {snap.cpu_count}", style="dim")
        out.append("  MEM ", style="bold")
        used = None
        if snap.mem_total is not None and snap.mem_available is not None:
            used = snap.mem_total - snap.mem_available
        frac = used / snap.mem_total if used is not None and snap.mem_total else None
        filled, empty = fmt.bar(frac, 10)
        out.append("▕" + filled, style="green")
        out.append(empty + "▏", style="dim")
        out.append(f"{fmt.size(used)}/{fmt.size(snap.mem_total)}")
        if snap.load:
            out.append("  LOAD ", style="bold")
            out.append(" ".join(f"{x:.2f}" for x in snap.load))
        out.append(f"  PROCS {len(snap.processes)}", style="bold")
        counts: dict[str, int] = {}
        for w in self.warnings:
            counts[w.severity] = counts.get(w.severity, 0) + 1
        for severity in ("critical", "warning", "info"):
            if counts.get(severity):
                mark, level = SEVERITY_BADGE[severity]
                colour = {"crit": "red", "warn": "yellow", "idle": "blue"}[level]
                out.append(f"  {mark} {counts[severity]}", style=f"bold {colour}")
        status = Text("  " + self.status, style="bold cyan") if self.status else Text()
        self._histories(out, self.size.width - out.cell_len - status.cell_len)
        out.append_text(status)
        return out

    def _histories(self, out: Text, room: int) -> None:
        """CPU and memory sparklines on the GPU panels' fixed scale, where they fit."""
        history = self.history
        if history is None:
            return
        window = span_label(history.span)
        label_w = len(f"  cpu {window} ")
        spark_w = min((room - 2 * label_w) // 2, SPARK_MAX)
        if spark_w < SPARK_MIN:
            return
        for label, style in (("cpu", "green dim"), ("mem", HISTORY_MEM_STYLE)):
            out.append(f"  {label}", style="bold")
            out.append(f" {window} ", style="dim")
            out.append(self._line(label, history, spark_w), style=style)

    def _line(self, label: str, history: HostHistory, cells: int) -> str:
        """``cells`` cells of a history, as fmt.sparkline draws its window."""
        step = history.span / cells
        track = self._tracks.get((label, step))
        if track is None or track.keep < cells:
            if len(self._tracks) >= 4:  # widths come and go; keep the two in use
                self._tracks.clear()
            track = self._tracks[(label, step)] = fmt.SparkTrack(step, cells)
        track.follow(partial(history.read, label), history.now - history.span)
        return track.line(cells, history.now)
