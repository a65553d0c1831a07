"""A refresh where little changed does little (issue 27, round three): the histories are
read from the newest sample each line saw, not the window; a process row whose record,
marks and TIME are the same is not formatted again; the host line draws what a
sparkline over its whole window draws.  Counted in samples and calls, never in time."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from helpers.ui import START, Clock, demo_snapshots

from gputop.config import Config
from gputop.model import HostSnapshot
from gputop.ui import fmt
from gputop.ui.app import GputopApp
from gputop.ui.widgets.header import HostHistory, HostLine
from gputop.ui.widgets.process_table import ProcessTable

SIZE = (200, 50)


def retimed(snap: HostSnapshot, t: float, cpu: float = 10.0) -> HostSnapshot:
    """The same readings at another time: a host where nothing moved but the clock."""
    return dataclasses.replace(snap, time=t, cpu_percent=cpu)


async def samples_read_by_one_refresh(uptime: float, refresh: float = 0.25) -> list[int]:
    """The samples each read of the dashboard's histories handed out in one refresh
    after ``uptime`` seconds, two snapshots after the one drawn before."""
    first = demo_snapshots("lab", 1)[0]
    clock = Clock(START)
    app = GputopApp(config=Config(), clock=clock, me="alice")
    count = int(uptime / refresh)
    async with app.run_test(size=SIZE) as pilot:
        for i in range(count):
            clock.now = START + i * refresh
            app.ingest(retimed(first, clock.now, 10.0 + i % 7))
            if i in (0, count - 2):  # drawn at the start and once before the counted one
                app.dashboard.refresh_view()
                await pilot.pause()
        dashboard = app.dashboard
        handed: list[int] = []

        def counting(method: Any) -> Any:
            def read(*args: Any) -> Any:
                series = method(*args)
                handed.append(len(series))
                return series
            return read

        dashboard._gpu_series = counting(dashboard._gpu_series)  # type: ignore[method-assign]
        dashboard._host_series = counting(dashboard._host_series)  # type: ignore[method-assign]
        clock.now = START + count * refresh
        app.ingest(retimed(first, clock.now, 30.0))
        dashboard.refresh_view()
        await pilot.pause()
    return handed


async def test_a_refresh_reads_the_new_samples_not_the_window() -> None:
    # At 0.25 s a 3-minute window is 720 samples per series; the panels draw two series
    # per card and the host line two.  After 60 s and after 150 s of history, a refresh
    # hands out the same few samples: per series the last one its lines saw and the two
    # analysed since the last refresh.
    short, long = await samples_read_by_one_refresh(60.0), await samples_read_by_one_refresh(
        150.0)
    cards = len(demo_snapshots("lab", 1)[0].gpus)
    assert short == long
    # Each card's two series and the host's two, read by each line and figure.
    assert len(long) >= 2 * (cards + 1)
    assert set(long) == {3}


async def test_a_quiet_refresh_formats_only_rows_whose_time_text_changed() -> None:
    lab = demo_snapshots("lab", 1)[0]
    # Young processes (TIME in seconds), each started at its own fraction of a second:
    # a quarter of a second on, some show the next second, the others do not.
    procs = tuple(dataclasses.replace(p, start_time=START - 100 - 0.3 * k)
                  for k, p in enumerate(lab.processes))
    first = dataclasses.replace(lab, processes=procs)
    assert len(procs) >= 3
    clock = Clock(START)
    app = GputopApp(config=Config(), clock=clock, me="alice")
    async with app.run_test(size=SIZE) as pilot:
        app.ingest(retimed(first, START))
        app.dashboard.refresh_view()
        await pilot.pause()
        table = app.dashboard.query_one(ProcessTable)
        formatted: list[int] = []
        line = table._line

        def counting(index: int, *args: Any) -> Any:
            if index < len(table.rows):  # not the blank lines below the rows
                formatted.append(index)
            return line(index, *args)

        table._line = counting  # type: ignore[method-assign]
        shown = min(len(table.rows), table.scrollable_content_region.height)
        some = []
        for step in range(1, 9):
            before, clock.now = clock.now, START + 0.25 * step
            app.ingest(retimed(first, clock.now))
            formatted.clear()
            app.dashboard.refresh_view()
            await pilot.pause()
            ticked = [n for n, row in enumerate(table.rows[:shown])
                      if fmt.duration(clock.now - row.proc.start_time)
                      != fmt.duration(before - row.proc.start_time)]
            assert sorted(formatted) == ticked, step
            some.append(0 < len(ticked) < shown)
        assert any(some)  # the steps did show rows ticking beside rows that did not
        # A row the cursor leaves and the row it reaches are drawn again: their marks.
        formatted.clear()
        table.action_cursor_down()
        table.render_line(0)
        assert sorted(formatted) == [0, 1]


def test_the_host_line_draws_what_the_whole_window_draws() -> None:
    # The host line's CPU and memory lines kept from tick to tick (fmt.SparkTrack fed
    # from its reader) against fmt.sparkline over the whole series, with gaps, pauses
    # and a width that changes.
    rng = random.Random(27)
    series: dict[str, list[tuple[float, float]]] = {"cpu": [], "mem": []}
    reads: list[int] = []

    def read(name: str, since: float) -> list[tuple[float, float]]:
        part = [s for s in series[name] if s[0] >= since]
        reads.append(len(part))
        return part

    line = HostLine()
    t = START
    for tick in range(1500):
        t += rng.choice([0.25, 1.0, 2.0, 40.0]) if rng.random() < 0.95 else 0.0
        if rng.random() > 0.05:
            series["cpu"].append((t, rng.random() * 100))
            series["mem"].append((t, 50 + rng.random() * 10))
        cells = rng.choice([40, 40, 40, 23])
        history = HostHistory(read, t, 180.0)
        for name in ("cpu", "mem"):
            assert line._line(name, history, cells) == fmt.sparkline(
                series[name], cells, t, 180.0), (tick, name)
    # What the line read a tick was its newest sample and the new ones, whatever the
    # window held (up to 720 samples at 0.25 s); a new width reads the window once.
    assert sorted(reads)[len(reads) // 2] <= 3
