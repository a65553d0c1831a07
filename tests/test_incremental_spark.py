"""Sparklines and window figures kept up to date from the new samples only (issue 27):
they equal what a recomputation over the whole window draws, tick after tick, and a
panel's tick costs the same whatever the refresh rate packs into the window."""

from __future__ import annotations

import random

import pytest
from helpers.calls import count_calls

from gputop.model import Gpu
from gputop.ui import fmt
from gputop.ui.widgets.gpu_panel import GpuPanel, PanelData, format_stats, history_stats


def _ticks(refresh: float, seconds: float, seed: int) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    t, out = 1_764_680_000.0, []
    while t < 1_764_680_000.0 + seconds:
        # Integer percents and fractions, gaps of a missed refresh now and then.
        value = float(rng.randrange(101)) if rng.random() < 0.5 else rng.random() * 100
        if rng.random() > 0.05:
            out.append((t, value))
        t += refresh
    return out


@pytest.mark.parametrize(("refresh", "width", "span"), [
    (0.25, 60, 180.0), (1.0, 43, 180.0), (2.0, 100, 300.0), (0.7, 17, 60.0)])
def test_a_track_draws_what_the_whole_window_draws(refresh: float, width: int,
                                                   span: float) -> None:
    samples = _ticks(refresh, 3 * span, seed=width)
    track = fmt.SparkTrack(span / width, width)
    stats = fmt.WindowStats(span)
    for n in range(1, len(samples) + 1, 3):  # three new samples a tick
        seen = samples[:n]
        now = seen[-1][0] + refresh / 2
        track.feed(seen)
        stats.feed(seen, now)
        assert track.line(width, now) == fmt.sparkline(seen, width, now, span), n
        assert format_stats(stats.stats()) == history_stats(seen, now, span), n
    assert track.line(width, now).strip()  # it drew something


def test_a_line_shifts_by_whole_cells() -> None:
    # One sample per 3 s cell, values rising: each new cell moves the line one cell left.
    samples = [(3.0 * k, float(k % 100)) for k in range(100)]
    before = fmt.sparkline(samples[:80], 20, samples[79][0], 60.0)
    after = fmt.sparkline(samples[:81], 20, samples[80][0], 60.0)
    assert after[:-1] == before[1:]


def _tick_calls(refresh: float) -> int:
    """Python calls of one panel's figures for one tick, after a full window."""
    panel = GpuPanel(0)
    span = 180.0
    samples = [(1_764_680_000.0 + i * refresh, 40.0 + i % 7)
               for i in range(int(2 * span / refresh))]
    window = int(span / refresh)

    def data(n: int) -> PanelData:
        now = samples[n - 1][0]
        return PanelData(gpu=Gpu(index=0), util_series=samples[n - window:n],
                         mem_series=samples[n - window:n], now=now, span=span, kept=600.0)

    step = int(4 / refresh)  # the samples of 4 s: one or more new cells
    n = len(samples) - step
    panel._spark("util", data(n), 60, span / 60)  # the first tick reads the whole window
    panel._window_stats("util", data(n))
    later = data(n + step)
    return count_calls(lambda: (panel._spark("util", later, 60, span / 60),
                                panel._window_stats("util", later)))


def test_a_panel_tick_does_not_grow_with_the_samples_in_its_window() -> None:
    # 720 samples in the window at 0.25 s, 90 at 2 s: the tick reads the new samples of
    # 4 s (16 and 2) and draws 60 cells either way.
    fast, slow = _tick_calls(0.25), _tick_calls(2.0)
    assert slow > 20  # the hook saw the feeding and drawing
    assert fast < slow + 16 * 8  # a few calls per new sample, nothing per window sample


def test_a_tick_draws_only_the_cells_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    # 60 cells of 3 s; a tick of 4 s adds samples to the newest cell and one or two new
    # ones: those are drawn, the other cells are the last line's, shifted.
    span, width = 180.0, 60
    samples = [(1_000.0 + i * 0.25, 40.0 + i % 7) for i in range(1440)]
    track = fmt.SparkTrack(span / width, width)
    track.feed(samples[:1424])
    track.line(width, samples[1423][0])
    expected = fmt.sparkline(samples, width, samples[-1][0], span)
    drawn: list[float | None] = []
    real = fmt._spark_char
    monkeypatch.setattr(fmt, "_spark_char", lambda v: drawn.append(v) or real(v))
    track.feed(samples)
    assert track.line(width, samples[-1][0]) == expected
    assert 1 <= len(drawn) <= 3


def test_another_series_is_drawn_afresh() -> None:
    # The dashboard reuses panels for another host's cards: other times, other values.
    span, width = 60.0, 20
    busy = [(1000.0 + i, 90.0) for i in range(60)]
    idle = [(1000.5 + i, 5.0) for i in range(60)]
    track, stats = fmt.SparkTrack(span / width, width), fmt.WindowStats(span)
    for series in (busy, idle):
        now = series[-1][0]
        track.feed(series)
        stats.feed(series, now)
        assert track.line(width, now) == fmt.sparkline(series, width, now, span)
        assert format_stats(stats.stats()) == history_stats(series, now, span)


async def test_a_panel_shown_for_another_host_forgets_the_first() -> None:
    from gputop.ui.app import GputopApp

    app = GputopApp()
    async with app.run_test(size=(160, 50)):
        panel = GpuPanel(0)
        await app.screen.mount(panel)
        busy = [(1000.0 + i, 90.0) for i in range(200)]
        idle = [(1000.5 + i, 5.0) for i in range(200)]
        for host, series in (("a", busy), ("b", idle)):
            panel.update_data(PanelData(gpu=Gpu(index=0, uuid="GPU-x"), util_series=series,
                                        mem_series=series, now=series[-1][0], span=180.0,
                                        host=host))
        assert panel._stats[0] == history_stats(idle, idle[-1][0], 180.0)
        assert "█" not in panel._spark("util", panel.data, 60, 3.0)


def test_a_line_redrawn_from_its_changes_equals_one_drawn_afresh() -> None:
    # Ticks of every size, pauses longer than the line, a clock that stops, a width that
    # changes and another series: the shifted line with its changed cells redrawn
    # is always the line a fresh track draws from the same samples.
    rng = random.Random(27)
    span, width = 60.0, 30
    track = fmt.SparkTrack(span / width, 2 * width)
    series: list[tuple[float, float]] = []
    t = 5_000.0
    for tick in range(3000):
        if rng.random() < 0.01:  # another host's series, its clock a little behind
            series, t = [], t - 100 - rng.random() * 100
        t += rng.choice([0.1, 0.25, 1.0, 2.5, 7.0, 70.0]) if rng.random() < 0.9 else 0.0
        for _ in range(rng.randrange(4)):
            t += rng.random()
            series.append((t, rng.random() * 100))
        if rng.random() < 0.02:
            width = rng.choice([20, 30, 45])
        now = (series[-1][0] if series else t) + rng.random() * 3
        track.feed(series)
        fresh = fmt.SparkTrack(span / 30, 2 * width)
        fresh.feed(series)
        line = track.line(width, now)
        assert line == fresh.line(width, now) == fmt.sparkline(
            series, width, now, width * span / 30), tick
    assert line.strip()  # the last tick drew samples
