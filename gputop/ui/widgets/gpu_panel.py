"""One GPU: gauges, clocks, P-state, a fixed 0-100 sparkline, warning and reservation badges.

A plain render() widget (not ProgressBar, not Sparkline: Textual's Sparkline rescales to
its data's min and max, which makes an idle card's noise look like a full load).  It
refreshes only when what it would draw changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from rich.text import Text
from textual import events
from textual.message import Message
from textual.strip import Strip

from gputop.analysis.hostview import CardView, card_view
from gputop.config import DEFAULT_COLORS, DEFAULT_THRESHOLDS
from gputop.model import (
    CRITICAL,
    GPU_OK,
    SEVERITY_ORDER,
    Gpu,
    HealthWarning,
)
from gputop.ui import fmt
from gputop.ui.partial import Lines, StyleOnce, changed_regions

# Clock events that are not a slowdown anyone should look at.
BENIGN_CLOCK_EVENTS = frozenset(
    {"gpu_idle", "applications_clocks_setting", "display_clock_setting"}
)

# Memory history in its own colour: a full card is not a warning in itself.
HISTORY_MEM_STYLE = "cyan dim"

SEVERITY_BADGE = {"critical": ("✖", "crit"), "warning": ("⚠", "warn"), "info": ("ℹ", "idle")}


@dataclass
class PanelData:
    gpu: Gpu
    util_series: list[tuple[float, float]] = field(default_factory=list)
    mem_series: list[tuple[float, float]] = field(default_factory=list)
    warnings: list[HealthWarning] = field(default_factory=list)
    # Its holders, MIG lines and jobs, as every view shows them (analysis/hostview.py);
    # None: built from the card alone, held by nobody.
    card: CardView | None = None
    now: float = 0.0
    span: float = 180.0  # seconds of history the sparkline covers
    kept: float = 0.0  # seconds of history kept; a compact row may show up to this much
    # The series only grow at their newest end from tick to tick (the live history): the
    # panel then reads only their new samples.  False (a ledger range): drawn afresh.
    appending: bool = True
    host: str = ""  # whose card: panels are reused when the dashboard shows another host
    # The live history, ``read("util" or "mem", t)``: the samples from time ``t`` on.
    # Given (the dashboard), each line and figure reads only the samples it has not seen,
    # and the two series above are left empty: a tick then costs the new samples, not the
    # 720 of a 3-minute window at 0.25 s, copied twice per card.
    read: Callable[[str, float], Sequence[tuple[float, float]]] | None = None

    @property
    def view(self) -> CardView:
        return self.card or card_view(self.gpu)


class GpuPanel(StyleOnce):
    """Full (3 lines) or compact (1 line), chosen by the app through the `-compact` class."""

    DEFAULT_CSS = """
    GpuPanel { height: 3; padding: 0 1; }
    GpuPanel.-compact { height: 1; }
    GpuPanel.-selected { background: $accent 30%; }
    GpuPanel:hover { background: $boost; }
    """

    class Clicked(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(
        self,
        index: int,
        thresholds: dict[str, tuple[float, float]] | None = None,
        colors: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.index = index
        self.thresholds = thresholds or dict(DEFAULT_THRESHOLDS)
        self.palette = colors or dict(DEFAULT_COLORS)
        self.data: PanelData | None = None
        self._strips: list[Strip] = []
        self._strips_key: Any = None
        self._drawn: list[tuple[Any, Strip]] = []  # Lines.strips' lines, reused unchanged
        self._stats: tuple[str, str] = ("", "")
        # Kept from tick to tick, fed the new samples only (fmt.SparkTrack): by (series,
        # seconds per cell), and by (series, span).
        self._tracks: dict[tuple[str, float], fmt.SparkTrack] = {}
        self._windows: dict[tuple[str, float], fmt.WindowStats] = {}
        self._tracked: tuple[str, str | None] | None = None  # (host, UUID) they follow

    def update_data(self, data: PanelData) -> None:
        self.data = data
        card = (data.host, data.gpu.uuid)
        if card != self._tracked:  # another host's card in this panel: start afresh
            self._tracks.clear()
            self._windows.clear()
            self._tracked = card
        compact = self.has_class("-compact")
        # Each figure is computed once per tick and kept for render().
        self._stats = (self._window_stats("util", data), self._window_stats("mem", data))
        self._fit_height(data, compact)
        self._repaint_changes()

    def _series(self, name: str, data: PanelData) -> list[tuple[float, float]]:
        return data.util_series if name == "util" else data.mem_series

    def _spark(self, name: str, data: PanelData, cells: int, step: float) -> str:
        """``cells`` cells of ``step`` seconds of a series up to now, as fmt.sparkline
        draws them, from the new samples only while the series is ``appending``."""
        series = self._series(name, data)
        if not data.appending or cells <= 0:
            return fmt.sparkline(series, cells, data.now, cells * step)
        track = self._tracks.get((name, step))
        if track is None or track.keep < cells:
            if len(self._tracks) >= 8:  # widths and spans come and go; keep the few in use
                self._tracks.clear()
            track = self._tracks[(name, step)] = fmt.SparkTrack(step, cells)
        if data.read is not None:
            track.follow(partial(data.read, name), data.now - cells * step)
        else:
            track.feed(series)
        return track.line(cells, data.now)

    def _window_stats(self, name: str, data: PanelData) -> str:
        series = self._series(name, data)
        if not data.appending:
            return history_stats(series, data.now, data.span)
        window = self._windows.get((name, data.span))
        if window is None:
            if len(self._windows) >= 4:
                self._windows.clear()
            window = self._windows[(name, data.span)] = fmt.WindowStats(data.span)
        if data.read is not None:
            window.follow(partial(data.read, name), data.now)
        else:
            window.feed(series, data.now)
        return format_stats(window.stats())

    def _repaint_changes(self) -> None:
        """Draw the lines and dirty only the cells that differ from what is on screen
        (gputop/ui/partial.py): a figure that moved but reads the same, a history whose
        cells did not change, draw nothing."""
        key = self._key()
        old = self._strips if self._strips_key == key and self.is_mounted else None
        self._strips, self._strips_key = self._draw(), key
        regions = None if old is None else changed_regions(old, self._strips)
        if regions is None:
            self.refresh()
        elif regions:
            self.refresh(*regions)

    def _key(self) -> Any:
        return (self.size, self.has_class("-compact"), self.base_style)

    def _draw(self) -> list[Strip]:
        return self._lines().strips(max(self.size.width, 1), self.base_style, self._drawn)

    def _fit_height(self, data: PanelData, compact: bool) -> None:
        """A MIG card's full panel grows by one line per MIG device."""
        extra = (len(data.gpu.mig_devices) + (1 if data.gpu.mig_note else 0)
                 + (1 if data.view.jobs else 0))
        height = 1 if compact else 3 + extra
        if self.styles.height is None or self.styles.height.value != height:
            self.styles.height = height

    def on_click(self, event: events.Click) -> None:
        self.post_message(self.Clicked(self.index))

    # -- drawing -------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        # Line API with strips kept from the last update: Textual's conversion of a Text
        # full of styled spans cost more than everything else in a tick.
        if self._key() != self._strips_key:  # resized, restyled: drawn afresh
            self._strips, self._strips_key = self._draw(), self._key()
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.base_style)

    def render(self) -> Text:
        return self._lines().text()

    def _lines(self) -> Lines:
        if self.data is None:
            out = Lines()
            out.append(f"GPU {self.index}: waiting for data…", style="dim")
            return out
        width = max(self.content_region.width, 20)
        if self.has_class("-compact"):
            return self._compact(self.data, width)
        return self._full(self.data, width)

    def _style(self, level: str) -> str:
        return self.palette.get(level, "")

    def _gauge(self, out: Lines, label: str, value: float | None, fraction: float | None,
               kind: str, width: int, figure: str) -> None:
        level = fmt.level(value, self.thresholds[kind])
        filled, empty = fmt.bar(fraction, width)
        out.append(label, style="bold")
        out.append("▕", style="dim")
        out.append(filled, style=self._style(level))
        out.append(empty, style="dim")
        out.append("▏", style="dim")
        out.append(figure, style=self._style(level) if value is not None else "dim")

    def _badges(self, data: PanelData) -> Lines:
        out = Lines()
        counts: dict[str, int] = {}
        for w in data.warnings:
            counts[w.severity] = counts.get(w.severity, 0) + 1
        for severity in sorted(counts, key=lambda s: SEVERITY_ORDER.get(s, 9)):
            mark, level = SEVERITY_BADGE.get(severity, ("?", "idle"))
            out.append(f" {mark}{counts[severity]}", style=f"bold {self._style(level)}")
        for r in data.view.holders:
            left = fmt.duration(r.until - data.now)
            out.append(" RSV ", style="bold reverse")
            out.append(fmt.visible(r.user))
            out.append(f" {left}", style="dim")
            if r.note:
                # The note is the reason colleagues read; it is untrusted text like a command.
                out.append(" ")
                out.append(fmt.visible(r.note), style="italic")
        return out

    def _lost(self, gpu: Gpu, width: int) -> Lines:
        out = Lines()
        out.append(f"{gpu.index} ", style="bold")
        out.append(f"GPU {gpu.state.upper()}", style=f"bold reverse {self._style('crit')}")
        out.append(" " + fmt.visible(gpu.error or "no data from this card"))
        return out

    def _full(self, data: PanelData, width: int) -> Lines:
        gpu = data.gpu
        if gpu.state != GPU_OK:
            return self._lost(gpu, width)
        out = Lines()
        # line 1: identity, P-state, clocks, badges
        out.append(f"{gpu.index} ", style="bold")
        out.append(fmt.visible(fmt.short_name(gpu.name)), style="bold")
        if gpu.pstate is not None:
            out.append(f"  P{gpu.pstate}")
        if gpu.clock_sm is not None:
            top = f"/{gpu.clock_sm_max}" if gpu.clock_sm_max else ""
            out.append(f"  SM {gpu.clock_sm}{top} MHz")
        if gpu.clock_mem is not None:
            out.append(f"  MEM {gpu.clock_mem} MHz")
        if gpu.util_mem is not None:  # nvitop's %GMBW: the memory controller's busy time
            out.append(f"  MBW {gpu.util_mem}%")
        slowed = [r for r in gpu.clock_event_reasons or () if r not in BENIGN_CLOCK_EVENTS]
        if slowed:
            out.append("  " + ",".join(slowed), style=self._style("warn"))
        if data.view.mig_summary:
            out.append(f"  {data.view.mig_summary}", style="bold")
        out.append_text(self._badges(data))
        facts = gpu_facts(gpu)
        if facts:  # last: what a narrow panel cuts first
            out.append("  " + " · ".join(facts), style="dim")
        out.append("\n")
        # line 2: gauges, widths shared out over the line
        fixed = 5 + 6 + 2 + 5 + 12 + 2 + 6 + 5 + 2 + 5 + 11 + 2 + 5 + 4
        bar_w = max((width - fixed) // 4, 3)
        self._gauge(out, "UTIL", gpu.util_gpu, _frac(gpu.util_gpu, 100), "util", bar_w,
                    f"{fmt.percent(gpu.util_gpu):>4}")
        out.append("  ")
        mem_pct = gpu.mem_percent
        self._gauge(out, "MEM", mem_pct, _frac(mem_pct, 100), "mem", bar_w,
                    f"{fmt.size(gpu.mem_used)}/{fmt.size(gpu.mem_total)}".rjust(12))
        out.append("  ")
        self._gauge(out, "TEMP", gpu.temp, _frac(gpu.temp, 100), "temp", bar_w,
                    f"{'-' if gpu.temp is None else gpu.temp:>3}°C")
        out.append("  ")
        power_pct = _pct_of(gpu.power_draw, gpu.power_limit)
        power = "-" if gpu.power_draw is None else f"{gpu.power_draw:.0f}"
        limit = f"/{gpu.power_limit:.0f}" if gpu.power_limit else ""
        self._gauge(out, "POW", power_pct, _frac(power_pct, 100), "power", bar_w,
                    f"{power}{limit}W".rjust(9))
        out.append("  FAN ", style="bold")
        fan_level = fmt.level(gpu.fan, self.thresholds["fan"])
        out.append(fmt.percent(gpu.fan) if gpu.fan is not None else "N/A",
                   style=self._style(fan_level) if gpu.fan is not None else "dim")
        out.append("\n")
        # line 3: history on a fixed 0-100 scale, labelled with the window it covers
        half = max((width - 2) // 2, 12)
        # Muted: the history is context for the gauges above it, not a second set of gauges.
        util_stat, mem_stat = self._stats
        self._history(out, "util", data.util_series, data, half, f"{self._style('ok')} dim",
                      util_stat)
        out.append("  ")
        self._history(out, "mem", data.mem_series, data, half, HISTORY_MEM_STYLE, mem_stat)
        self._mig_rows(out, data, bar_w)
        return out

    def _mig_rows(self, out: Lines, data: PanelData, bar_w: int) -> None:
        """One line per MIG device, its gauges in the columns of the card's."""
        for line in data.view.devices:
            dev = line.device
            out.append("\n")
            out.append(f"  {line.label:<4}", style="bold")
            out.append(f"{line.title:<21}")
            self._gauge(out, "SM", dev.sm_active, _frac(dev.sm_active, 100), "util", bar_w,
                        f"{line.activity:>9}")
            out.append("  ")
            mem_pct = _pct_of(dev.mem_used, dev.mem_total)
            self._gauge(out, "MEM", mem_pct, _frac(mem_pct, 100), "mem", bar_w,
                        f"{fmt.size(dev.mem_used)}/{fmt.size(dev.mem_total)}".rjust(12))
            out.append(f"  BAR1 {fmt.size(dev.bar1_used)}/{fmt.size(dev.bar1_total)}",
                       style="dim")
            for r in line.holders:
                out.append(" RSV ", style="bold reverse")
                out.append(fmt.visible(r.user))
                out.append(f" {fmt.duration(r.until - data.now)}", style="dim")
            out.append(f"  {fmt.visible(dev.uuid or '')}", style="dim")
            if line.jobs:  # the instance's own (dcgm-exporter's pod on its GPU_I_ID)
                out.append("  jobs ", style="bold")
                out.append(fmt.visible(line.jobs))
        if data.gpu.mig_note:
            out.append("\n")
            out.append(f"  {fmt.visible(data.gpu.mig_note)}", style=self._style("warn"))
        if data.view.jobs:  # the jobs its exporter names (dcgm-exporter's pod, hpc_job)
            out.append("\n")
            out.append("  jobs ", style="bold")
            out.append(fmt.visible(data.view.jobs))

    def _history(self, out: Lines, label: str, series: list[tuple[float, float]],
                 data: PanelData, width: int, style: str, stat: str) -> None:
        window = span_label(data.span)
        spark_w = max(width - len(label) - len(window) - 2 - len(stat), 4)
        out.append(label, style="bold")
        out.append(f" {window} ", style="dim")
        out.append(self._spark(label, data, spark_w, data.span / spark_w), style=style)
        out.append(stat, style="dim")

    def _compact(self, data: PanelData, width: int) -> Lines:
        gpu = data.gpu
        if gpu.state != GPU_OK:
            return self._lost(gpu, width)
        out = Lines()
        out.append(f"{gpu.index:>2} ", style="bold")
        out.append(fmt.visible(fmt.short_name(gpu.name))[:14].ljust(14), style="bold")
        bar_w = max(min((width - 64) // 3, 12), 3)
        self._gauge(out, " ", gpu.util_gpu, _frac(gpu.util_gpu, 100), "util", bar_w,
                    f"{fmt.percent(gpu.util_gpu):>4}")
        mem_pct = gpu.mem_percent
        self._gauge(out, " ", mem_pct, _frac(mem_pct, 100), "mem", bar_w,
                    f"{fmt.size(gpu.mem_used)}/{fmt.size(gpu.mem_total)}".rjust(12))
        temp_level = fmt.level(gpu.temp, self.thresholds["temp"])
        out.append(f" {'-' if gpu.temp is None else gpu.temp:>3}°C",
                   style=self._style(temp_level))
        power_pct = _pct_of(gpu.power_draw, gpu.power_limit)
        power_level = fmt.level(power_pct, self.thresholds["power"])
        power = "-" if gpu.power_draw is None else f"{gpu.power_draw:.0f}"
        # The cap and the fan, as nvitop's 80-column row has them (issue 39.8).
        cap = f"/{gpu.power_limit:.0f}" if gpu.power_limit else ""
        out.append(f" {power:>3}{cap}W", style=self._style(power_level))
        if gpu.fan is not None:
            out.append(" fan", style="dim")
            out.append(f"{fmt.percent(gpu.fan):>4}",
                       style=self._style(fmt.level(gpu.fan, self.thresholds["fan"])))
        if gpu.pstate is not None:
            out.append(f" P{gpu.pstate}")
        if gpu.mig_mode:
            out.append(f" MIG×{len(gpu.mig_devices)}", style="bold")
        badges = self._badges(data)
        spark_w = max(width - out.cell_len - 1 - badges.cell_len, 0)
        if spark_w >= 4:
            out.append(" ")
            line = self._spark("util", data, *compact_cells(data, spark_w)).rjust(spark_w)
            # Slots before the first sample are a dim track, not blank: at startup the
            # line is there, only still empty, rather than a gap in the row.
            seen = len(line) - len(line.lstrip(" "))
            out.append("·" * seen, style="dim")
            out.append(line[seen:], style=self._style("ok"))
        out.append_text(badges)
        return out


def gpu_facts(gpu: Gpu) -> list[str]:
    """The card's settings as nvidia-smi's first table shows them, the unknown left out."""
    facts = []
    if gpu.pci_bus_id:
        facts.append(fmt.visible(gpu.pci_bus_id))

    def on_off(label: str, value: bool | None) -> None:
        if value is not None:
            facts.append(f"{label} {'on' if value else 'off'}")

    on_off("persist", gpu.persistence_mode)
    on_off("ECC", gpu.ecc_mode)
    if gpu.compute_mode:
        facts.append(f"compute {fmt.visible(gpu.compute_mode)}")
    on_off("MIG", gpu.mig_mode)
    return facts


def history_reach(span: float, kept: float, compact: bool, width: int) -> float:
    """Seconds of history a panel draws: one span, or a compact row's span/60 per cell."""
    if not compact:
        return span
    return min(kept, max(span, width * span / 60))


def compact_cells(data: PanelData, width: int) -> tuple[int, float]:
    """How many cells of how many seconds a compact row of ``width`` free cells draws.

    A cell is span/60 seconds, as on the full panel's 60-cell signature, so a wider
    terminal shows further back (up to the history kept) instead of the same minutes
    stretched thinner.
    """
    step = data.span / 60
    cells = width
    if data.kept > 0:
        cells = min(width, max(int(data.kept / step), 1))
    return cells, step


def compact_sparkline(data: PanelData, width: int) -> str:
    """The compact row's history: all the row's free cells at the full panel's resolution
    (``compact_cells``), right-aligned."""
    cells, step = compact_cells(data, width)
    return fmt.sparkline(data.util_series, cells, data.now, cells * step).rjust(width)


def span_label(seconds: float) -> str:
    """The history window as people say it: '3m', '90s', '1h'."""
    whole = round(seconds)
    if whole > 86400 and whole % 86400 == 0:
        return f"{whole // 86400}d"
    if whole >= 3600 and whole % 3600 == 0:
        return f"{whole // 3600}h"
    if whole >= 60 and whole % 60 == 0:
        return f"{whole // 60}m"
    return f"{whole}s"


def history_stats(series: list[tuple[float, float]], now: float, span: float) -> str:
    """' min  92 avg  95 max 100%' over the window: the numbers behind a fixed-scale line.

    Fixed width, so the panels' history rows line up.
    """
    values = [v for t, v in series if now - span <= t <= now]
    if not values:
        return format_stats(None)
    return format_stats((min(values), sum(values) / len(values), max(values)))


def format_stats(stats: tuple[float, float, float] | None) -> str:
    """(lowest, mean, highest) as the history row shows them; None: no samples."""
    if stats is None:
        return " min   - avg   - max   - "
    low, mean, high = stats
    return f" min{low:>4.0f} avg{mean:>4.0f} max{high:>4.0f}%"


def _frac(value: float | None, top: float) -> float | None:
    return None if value is None else value / top


def _pct_of(value: float | None, limit: float | None) -> float | None:
    if value is None or not limit:
        return None
    return 100.0 * value / limit


def worst(warnings: list[HealthWarning]) -> str | None:
    if not warnings:
        return None
    return min((w.severity for w in warnings), key=lambda s: SEVERITY_ORDER.get(s, 9),
               default=CRITICAL)
