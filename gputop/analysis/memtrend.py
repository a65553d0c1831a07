"""Is a card's memory growing towards full?  A straight-line forecast over a window.

Pure: it reads (time, bytes used) samples and returns a rate and a time to full, or None.
"Growing" means rising in every third of the window, so a step up (a model loading)
followed by a plateau is not growth however the line through it slopes: labs watch
exactly this trend to see an out-of-memory coming, and a model load is not one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PARTS = 3  # the window is cut in this many parts; memory must rise in each
MIN_SAMPLES_PER_PART = 2


@dataclass(frozen=True, slots=True)
class Trend:
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
    """The trend of ``series`` over the last ``window`` seconds before ``now``.

    None unless the samples cover most of the window (minutes of observation, not a
    blip) and memory rose within every part of it.
    """
    if total <= 0 or window <= 0:
        return None
    start = now - window
    points = [(t, float(v)) for t, v in series if start <= t <= now]
    if len(points) < PARTS * MIN_SAMPLES_PER_PART:
        return None
    first, last = points[0][0], points[-1][0]
    span = last - first
    if span < window * 0.8:
        return None
    width = span / PARTS
    for part in range(PARTS):
        lo = first + part * width
        hi = lo + width
        inside = [v for t, v in points if lo <= t <= hi]
        if len(inside) < MIN_SAMPLES_PER_PART or inside[-1] <= inside[0]:
            return None
    rate = slope(points)
    if rate is None or rate <= 0:
        return None
    left = max(total - points[-1][1], 0.0)
    return Trend(rate=rate, eta=left / rate)
