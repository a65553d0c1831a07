"""memtrend.forecast by bisection equals the plain definition: filter the window, every
third must rise, then the least-squares line (random series, flat, rising, stepped)."""

from __future__ import annotations

import random

import pytest

from gputop.analysis import memtrend


def by_filtering(series: list[tuple[float, float]], total: float, now: float,
                 window: float) -> memtrend.Trend | None:
    points = [(t, float(v)) for t, v in series if now - window <= t <= now]
    if len(points) < 6 or points[-1][0] - points[0][0] < window * 0.8:
        return None
    width = (points[-1][0] - points[0][0]) / 3
    for part in range(3):
        lo = points[0][0] + part * width
        inside = [v for t, v in points if lo <= t <= lo + width]
        if len(inside) < 2 or inside[-1] <= inside[0]:
            return None
    rate = memtrend.slope(points)
    if rate is None or rate <= 0:
        return None
    return memtrend.Trend(rate, max(total - points[-1][1], 0.0) / rate)


@pytest.mark.parametrize("seed", range(8))
def test_forecast_equals_the_plain_definition(seed: int) -> None:
    rng = random.Random(seed)
    t, used, series = 1000.0, 10.0, []
    found = 0
    for _ in range(900):
        t += rng.choice((0.25, 1.0, 2.0, 7.0))
        used = max(0.0, used + rng.choice((-1, 0, 0, 1, 2, 3)) * rng.random())
        series.append((t, used))
        for window in (60.0, 300.0):
            want = by_filtering(series, 500.0, t, window)
            assert memtrend.forecast(series, 500.0, t, window) == want
            found += want is not None
    assert found > 0  # the rising cases were reached, not only the flat ones
