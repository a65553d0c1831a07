"""Is a card's memory growing towards full?  A straight-line forecast over a window.

Pure: it reads (time, bytes used) samples and returns a rate and a time to full, or None.
"Growing" means rising in every third of the window, so a step up (a model loading)
followed by a plateau is not growth however the line through it slopes: labs watch
exactly this trend to see an out-of-memory coming, and a model load is not one.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from gputop.records import Record, record

PARTS = 3  # the window is cut in this many parts; memory must rise in each
MIN_SAMPLES_PER_PART = 2


@record(frozen=True, slots=True)
class Trend(Record):
    rate: float  # bytes per second, > 0
    eta: float  # seconds until the line reaches the total (0 when already there)


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (x, y) points; None when x does not vary."""
    n = len(points)
    if n < 2:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def forecast(
    series: Sequence[tuple[float, float]], total: float, now: float, window: float
) -> Trend | None:
    """The trend of ``series`` (oldest first) over the last ``window`` seconds before ``now``.

    None unless the samples cover most of the window (minutes of observation, not a
    blip) and memory rose within every part of it.
    """
    if total <= 0 or window <= 0:
        return None
    # Bounds found by bisection, and the fit made only once every part has risen: the rule
    # runs every tick on every card, and memory that is flat somewhere (nearly always)
    # then costs a few look-ups instead of a walk of five minutes of samples.
    lo = bisect_left(series, now - window, key=_time)
    hi = bisect_right(series, now, lo, key=_time)
    if hi - lo < PARTS * MIN_SAMPLES_PER_PART:
        return None
    first, last = series[lo][0], series[hi - 1][0]
    span = last - first
    if span < window * 0.8:
        return None
    width = span / PARTS
    for part in range(PARTS):
        start = first + part * width
        a = bisect_left(series, start, lo, hi, key=_time)
        b = bisect_right(series, start + width, a, hi, key=_time)
        if b - a < MIN_SAMPLES_PER_PART or float(series[b - 1][1]) <= float(series[a][1]):
            return None
    points = [(t, float(v)) for t, v in series[lo:hi]]
    rate = slope(points)
    if rate is None or rate <= 0:
        return None
    left = max(total - points[-1][1], 0.0)
    return Trend(rate=rate, eta=left / rate)


def _time(sample: tuple[float, float]) -> float:
    return sample[0]
