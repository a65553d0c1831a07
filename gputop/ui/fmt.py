"""Formatting for the dashboard: sizes, durations, gauges, sparklines, untrusted text.

No Textual here, only strings and rich Text, so the helpers are cheap to test (and to
import: rich only when a Text is made).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gputop.analysis.durations import format_duration
from gputop.text import visible

if TYPE_CHECKING:
    from rich.text import Text

KIB = 1024
MIB = KIB * 1024
GIB = MIB * 1024


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 host``, ``3 hosts``, ``1 process``, ``2 processes``."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def short_name(name: str | None) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100 80GB HBM3'; the vendor is the same on every card."""
    if not name:
        return "?"
    for prefix in ("NVIDIA GeForce ", "NVIDIA ", "Tesla "):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def safe_text(text: str | None, style: str = "") -> Text:
    """Untrusted text as a rich Text: never parsed as markup, escapes made visible."""
    from rich.text import Text  # here: the start-up skeleton uses fmt before rich loads

    return Text(visible(text), style=style, no_wrap=True, overflow="ellipsis")


def size(value: int | None, unit: int = MIB) -> str:
    """Bytes as a short human size: 512M, 40.1G, 1.2T."""
    if value is None:
        return "-"
    if value >= 1024 * GIB:
        return f"{value / (1024 * GIB):.1f}T"
    if value >= GIB:
        gib = value / GIB
        return f"{gib:.1f}G" if gib < 100 else f"{gib:.0f}G"
    if value >= MIB or unit == MIB:
        return f"{value / MIB:.0f}M"
    return f"{value / KIB:.0f}K"


def duration(seconds: float | None) -> str:
    """Running time as every view shows it (``format_duration``); '-' when unknown."""
    return "-" if seconds is None else format_duration(seconds)


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def level(value: float | None, thresholds: tuple[float, float]) -> str:
    """'ok', 'warn' or 'crit' for a value against (warn, crit); 'idle' when unknown."""
    if value is None:
        return "idle"
    warn, crit = thresholds
    if value >= crit:
        return "crit"
    if value >= warn:
        return "warn"
    return "ok"


_PARTIAL = " ▏▎▍▌▋▊▉"


def bar(fraction: float | None, width: int) -> tuple[str, str]:
    """A gauge of ``width`` cells: (filled part, empty part) so each can be styled."""
    if width <= 0:
        return "", ""
    if fraction is None:
        return "", "╌" * width
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    filled = "█" * full + (_PARTIAL[part] if part else "")
    return filled, " " * (width - len(filled))


_SPARK = "▁▂▃▄▅▆▇█"


def _spark_char(value: float | None) -> str:
    if value is None:
        return " "
    v = min(max(value, 0.0), 100.0)
    return _SPARK[min(int(v / 100.0 * len(_SPARK)), len(_SPARK) - 1)]


def sparkline(
    series: Sequence[tuple[float, float]], width: int, now: float, span: float
) -> str:
    """Fixed 0-100 sparkline of the last ``span`` seconds, one cell per span/width.

    Each cell shows the highest value of its time slot (a short spike stays visible);
    a slot with no sample is a blank, so gaps in observation show as gaps.  Slots are
    fixed in time (slot k holds [k*step, (k+1)*step)), the last one holding ``now``: as
    time goes on the line shifts by whole cells, and ``SparkTrack`` can keep it up to date
    from the new samples alone.
    """
    if width <= 0:
        return ""
    return "".join(_spark_char(cell) for cell in _slots(series, width, now, span))


def _fresh(series: Sequence[tuple[float, float]], last: tuple[float, float] | None) -> int | None:
    """How many samples at the end of ``series`` are newer than ``last``, the newest one
    fed before; None when ``series`` does not hold ``last`` where it should (it is not
    the series that was fed: start again)."""
    if last is None:
        return len(series)
    if not series:  # nothing left of what was fed (another host's panel, a long gap)
        return None
    fresh = 0
    for sample in reversed(series):
        if sample[0] <= last[0]:
            return fresh if sample == last else None
        fresh += 1
    return fresh  # every sample is newer than the last one fed (a pause, a gap)


Reader = Callable[[float], Sequence[tuple[float, float]]]  # a series from a time on


def feed_from(last: tuple[float, float] | None, read: Reader, since: float,
              feed: Callable[[Sequence[tuple[float, float]]], None]) -> None:
    """Feed the samples after ``last`` (the newest one fed, None: nothing yet) read from
    its time on, or the series from ``since`` where it no longer holds ``last``: a tick
    then reads the new samples from the history, not the window (720 at 0.25 s)."""
    if last is not None:
        fresh = read(last[0])
        if _fresh(fresh, last) is not None:
            feed(fresh)
            return
    feed(read(since))


class SparkTrack:
    """``sparkline`` of a series that grows only at its newest end, kept up to date.

    ``feed`` takes the whole series each tick but reads only the samples newer than the
    last one it saw (walking back from the end), so a tick costs the new samples and the
    cells drawn, not the window: at 0.25 s refresh a 3-minute window is 720 samples, and
    recomputing four lines of them per panel per tick grew the tick as the window filled.
    ``keep``: the most cells ever drawn; older slots are dropped.
    """

    def __init__(self, step: float, keep: int) -> None:
        self.step = step
        self.keep = max(keep, 1)
        self._slots: dict[int, float] = {}
        self._last: tuple[float, float] | None = None  # the newest sample fed
        self._newest = 0
        # The last line drawn, (width, last slot, text), and the lowest slot changed
        # since: a tick redraws only the cells from there (most ticks: the newest one)
        # and shifts the rest, instead of all `width` cells of every line every tick.
        self._drawn: tuple[int, int, str] | None = None
        self._touched: int | None = None

    def feed(self, series: Sequence[tuple[float, float]]) -> None:
        fresh = _fresh(series, self._last)
        if fresh is None:  # not the series fed before (another host, a reset): afresh
            self._slots, self._newest, self._last = {}, 0, None
            self._drawn = self._touched = None
            fresh = len(series)
        if not fresh:
            return
        slots, step = self._slots, self.step
        touched = self._touched
        for t, value in series[len(series) - fresh:]:
            k = math.floor(t / step)
            old = slots.get(k)
            if old is None or value > old:
                slots[k] = value
                if touched is None or k < touched:
                    touched = k
            if k > self._newest:
                self._newest = k
        self._touched = touched
        self._last = series[-1]
        if len(slots) > 2 * self.keep:  # amortised: a dict rebuilt every `keep` slots
            oldest = self._newest - self.keep
            self._slots = {k: v for k, v in slots.items() if k > oldest}

    def follow(self, read: Reader, since: float) -> None:
        """``feed`` from ``read(t)``, the series from time ``t`` on, asking only for what
        is new: from the newest sample fed, or from ``since`` (the oldest this line
        draws) the first time and when the series no longer holds that sample."""
        feed_from(self._last, read, since, self.feed)

    def line(self, width: int, now: float) -> str:
        """The last ``width`` cells up to ``now``, as ``sparkline`` over width*step
        seconds draws them from a series that ends at or before ``now``."""
        if width <= 0:
            return ""
        last = math.floor(now / self.step)
        first = last - width + 1
        redraw = first  # the first slot whose cell is drawn afresh
        kept = ""  # the cells before it, from the last line drawn
        drawn = self._drawn
        # (A line reaching back to slots `feed` may have dropped is drawn afresh, as
        # the dropped slots are blank: only when `now` lags the newest sample.)
        if (drawn is not None and drawn[0] == width and drawn[1] <= last
                and first > self._newest - self.keep):
            shift = last - drawn[1]
            # Slots after the last line's end were never drawn, and changed ones are
            # drawn again; the cells before both are the last line's, shifted.
            redraw = drawn[1] + 1 if self._touched is None else min(self._touched,
                                                                      drawn[1] + 1)
            redraw = max(redraw, first)
            kept = drawn[2][shift:shift + redraw - first]
        get = self._slots.get
        text = kept + "".join(_spark_char(get(k)) for k in range(redraw, last + 1))
        self._drawn, self._touched = (width, last, text), None
        return text


class WindowStats:
    """Lowest, mean and highest value of the last ``span`` seconds of a series that grows
    only at its newest end; ``feed`` reads the new samples only (as ``SparkTrack``)."""

    def __init__(self, span: float) -> None:
        self.span = span
        self._reset()

    def _reset(self) -> None:
        self._window: deque[tuple[float, float]] = deque()
        self._low: deque[tuple[float, float]] = deque()  # increasing values
        self._high: deque[tuple[float, float]] = deque()  # decreasing values
        self._sum: float = 0
        self._dropped = 0  # samples left since the sum was last added up afresh
        self._last: tuple[float, float] | None = None  # the newest sample fed

    def feed(self, series: Sequence[tuple[float, float]], now: float) -> None:
        fresh = _fresh(series, self._last)
        if fresh is None:  # not the series fed before: afresh
            self._reset()
            fresh = len(series)
        for t, value in series[len(series) - fresh:]:
            if t > now:
                break
            self._window.append((t, value))
            self._sum += value
            while self._low and self._low[-1][1] >= value:
                self._low.pop()
            self._low.append((t, value))
            while self._high and self._high[-1][1] <= value:
                self._high.pop()
            self._high.append((t, value))
            self._last = (t, value)
        start = now - self.span
        window = self._window
        while window and window[0][0] < start:
            self._sum -= window.popleft()[1]
            self._dropped += 1
        if self._dropped > len(window):  # amortised: no rounding residue builds up
            self._sum, self._dropped = sum(v for _, v in window), 0
        while self._low and self._low[0][0] < start:
            self._low.popleft()
        while self._high and self._high[0][0] < start:
            self._high.popleft()

    def follow(self, read: Reader, now: float) -> None:
        """``feed`` from ``read(t)``, the series from time ``t`` on (SparkTrack.follow)."""
        feed_from(self._last, read, now - self.span, lambda series: self.feed(series, now))

    def stats(self) -> tuple[float, float, float] | None:
        """(lowest, mean, highest), or None for an empty window."""
        if not self._window:
            return None
        return self._low[0][1], self._sum / len(self._window), self._high[0][1]


def chart(series: Sequence[tuple[float, float]], width: int, height: int, now: float,
          span: float, top: float) -> list[str]:
    """A ``height``-row bar chart of the last ``span`` seconds, top row first, scaled so
    that ``top`` fills a column.  Slots as ``sparkline``'s (the highest value of each, a
    slot with no sample blank): the same chart, taller, with eight steps a row."""
    if width <= 0 or height <= 0:
        return []
    steps = len(_SPARK)
    scale = 1.0 / top if top > 0 else 0.0
    levels = [None if v is None else min(max(v * scale, 0.0), 1.0)
              for v in _slots(series, width, now, span)]
    rows = []
    for row in range(height - 1, -1, -1):  # the top row first
        cells = []
        for level in levels:
            # a sample is never drawn as nothing: at least the lowest step of row 0
            eighths = -1 if level is None else max(round(level * height * steps), 1)
            eighths -= row * steps
            cells.append(" " if eighths <= 0 else _SPARK[min(eighths, steps) - 1])
        rows.append("".join(cells))
    return rows


def _slots(series: Sequence[tuple[float, float]], width: int, now: float,
           span: float) -> list[float | None]:
    """The highest value of each of ``width`` time slots ending with the one holding
    ``now`` (None: no sample in it)."""
    step = span / width
    last = math.floor(now / step)
    first = last - width + 1
    cells: list[float | None] = [None] * width
    for t, value in series:
        if t > now:
            continue
        k = math.floor(t / step)
        if k < first:
            continue
        old = cells[k - first]
        cells[k - first] = value if old is None or value > old else old
    return cells
