"""The GPU panels: sparklines and history rows, compact rows, thresholds and badges,
panels that follow the host and the terminal size."""

from __future__ import annotations

import dataclasses

from helpers.ui import SIZE, START, demo_app, demo_snapshots, feed_all

from gputop.config import parse_config
from gputop.model import Gpu, Reservation
from gputop.ui.app import GputopApp
from gputop.ui.widgets.gpu_panel import (
    GpuPanel,
    PanelData,
    compact_sparkline,
    history_stats,
    span_label,
)


def _series(seconds: int, now: float, dip_at: float) -> list[tuple[float, float]]:
    """One sample a second at 90 %, with one 10 s stretch at 0 % ``dip_at`` seconds ago."""
    return [(now - age, 0.0 if dip_at - 10 < age <= dip_at else 90.0)
            for age in range(seconds, -1, -1)]


def test_a_wider_compact_line_reaches_further_back() -> None:
    now = START
    data = PanelData(gpu=Gpu(index=0), util_series=_series(600, now, dip_at=200),
                     now=now, span=180.0, kept=600.0)
    narrow = compact_sparkline(data, 20)  # 20 cells of 3 s: the last minute
    wide = compact_sparkline(data, 100)  # 100 cells of 3 s: the last five minutes
    assert len(narrow) == 20 and len(wide) == 100
    assert " " not in narrow and " " not in wide  # every slot had samples
    assert min(narrow) == max(narrow)  # the dip 200 s ago is out of reach...
    dips = [i for i, c in enumerate(wide) if c != wide[-1]]
    assert dips and all(100 - 200 // 3 - 4 <= i <= 100 - 190 // 3 + 1 for i in dips)  # ...not here


def test_compact_line_stops_at_the_history_kept() -> None:
    now = START
    data = PanelData(gpu=Gpu(index=0), util_series=_series(120, now, dip_at=0),
                     now=now, span=180.0, kept=120.0)
    line = compact_sparkline(data, 100)
    assert len(line) == 100
    # 120 s kept = 40 cells of 3 s; the rest of the width is not pretend history.
    assert line[:60].strip() == "" and " " not in line[61:]


async def test_compact_row_uses_its_free_width_for_history() -> None:
    app, _ = demo_app("dgx-h100", history=200)
    async with app.run_test(size=(120, 24)) as pilot:
        feed_all(app)
        await pilot.pause()
        panel = app.dashboard.gpu_panel(0)
        assert panel is not None and panel.has_class("-compact")
        line = panel.render().plain
        after = line.split(" P0 ", 1)[1]
        assert "   " not in after  # no gap between the P-state and the history
        spark = after.split(" ⚠")[0]
        assert len(spark) >= 30  # was at most 40 and about 7 cells drawn
        assert len(line) == panel.content_region.width


async def test_compact_row_marks_the_slots_before_the_first_sample() -> None:
    app, _ = demo_app("dgx-h100", history=5)
    async with app.run_test(size=(120, 24)) as pilot:
        feed_all(app)
        await pilot.pause()
        panel = app.dashboard.gpu_panel(0)
        assert panel is not None and panel.has_class("-compact")
        text = panel.render()
        line = text.plain
        dots = line.index("·")
        assert line[dots:].startswith("·" * 20)
        spans = [s for s in text.spans if s.start <= dots < s.end]
        assert spans and all("dim" in str(s.style) for s in spans)


def test_span_label_reads_like_people_say_it() -> None:
    assert span_label(180.0) == "3m"
    assert span_label(90.0) == "90s"
    assert span_label(3600.0) == "1h"
    assert span_label(5400.0) == "90m"


def test_history_stats_over_the_window_only() -> None:
    series = [(0.0, 100.0), (50.0, 10.0), (100.0, 40.0), (110.0, 70.0)]
    # The sample at t=0 is outside the last 60 s and must not count.
    assert history_stats(series, now=110.0, span=60.0) == " min  10 avg  40 max  70%"
    empty = history_stats([], now=110.0, span=60.0)
    assert "-" in empty and len(empty) == len(history_stats(series, 110.0, 60.0))


async def test_history_rows_are_labelled_with_their_window_and_numbers() -> None:
    app, _ = demo_app("lab", history=181)
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        panel = app.dashboard.gpu_panel(3)
        assert panel is not None and not panel.has_class("-compact")
        assert panel.data is not None and panel.data.span == 180.0
        history = panel.render().plain.splitlines()[2]
        assert history.startswith("util 3m ") and " mem 3m " in history
        # The panel reads the history itself (PanelData.read), only what it has not seen.
        series = app.state.history.gpu_series(panel.data.host, 3, "util_gpu")
        utils = [v for t, v in series if panel.data.now - 180.0 <= t <= panel.data.now]
        expected = f"min{min(utils):>4.0f} avg{sum(utils) / len(utils):>4.0f} max" \
            f"{max(utils):>4.0f}%"
        assert expected in history
        # GPU 3's load moves in the lab scenario, so its line cannot be one flat bar.
        util_spark = history.split(" min")[0][len("util 3m "):]
        assert len(set(util_spark.strip())) >= 2
        # Everything fits the panel: nothing of the mem row is cut off.
        assert history.rstrip().endswith("%")
        assert len(history) <= panel.content_region.width


def shown_panels(app: GputopApp) -> list[GpuPanel]:
    return [p for p in app.query(GpuPanel) if p.display and p.region.height]


async def test_threshold_colours_from_config_and_reservation_badge() -> None:
    config = parse_config(
        "thresholds:\n  util: [10, 20]\ncolors:\n  crit: magenta\n", "c.yaml"
    )
    app, clock = demo_app("lab", config=config)
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        snap = app.state.snapshot
        assert snap is not None
        busy = next(g for g in snap.gpus if (g.util_gpu or 0) >= 20)
        reservation = Reservation(gpu=busy.index, user="[b]bob", until=clock.now + 3600,
                                  since=clock.now - 60, note="tonight")
        expired = Reservation(gpu=busy.index, user="carol", until=clock.now - 1,
                              since=clock.now - 99)
        app.ingest(dataclasses.replace(snap, reservations=(reservation, expired)))
        app.dashboard.refresh_view()
        await pilot.pause()
        panel = app.dashboard.gpu_panel(busy.index)
        text = panel.render()
        util_figure = f"{busy.util_gpu}%"
        start = text.plain.index(util_figure)
        styles = [str(span.style) for span in text.spans if span.start <= start < span.end]
        assert "magenta" in styles
        assert "RSV [b]bob 1h00m tonight" in text.plain
        assert "carol" not in text.plain  # an expired reservation counts for nothing


async def test_switching_hosts_rebuilds_the_gpu_panels() -> None:

    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        for snap in demo_snapshots("dgx-h100", 2):
            app.ingest(snap)
        assert set(app.state.snapshots) == {"lab", "dgx-h100"}
        await pilot.pause()
        assert len(shown_panels(app)) == 4
        app.show_host("dgx-h100")
        await pilot.pause()
        assert len(shown_panels(app)) == 8
        rows = app.dashboard.table.rows
        assert rows and all(r.key[0] == "dgx-h100" for r in rows)
        app.show_host("lab")
        await pilot.pause()
        app.show_host("dgx-h100")
        app.show_host("lab")
        await pilot.pause()
        assert len(shown_panels(app)) == 4
        assert app.dashboard.gpu_panel(5) is None
        assert [p.index for p in shown_panels(app)] == [0, 1, 2, 3]
        assert all(p.data is not None and p.data.gpu.name == "NVIDIA GeForce RTX 3090"
                   for p in shown_panels(app))
        assert "(one of 2 hosts" in app.query_one("#header").render().plain


async def test_resize_switches_between_full_and_compact_panels() -> None:
    app, _ = demo_app("dgx-h100")
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        panel = app.dashboard.gpu_panel(0)
        assert panel is not None and not panel.has_class("-compact")
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        await pilot.pause()
        assert panel.has_class("-compact") and panel.size.height == 1
        await pilot.resize_terminal(160, 50)
        await pilot.pause()
        await pilot.pause()
        assert not panel.has_class("-compact")


async def test_a_cards_own_jobs_are_shown_under_it() -> None:
    from helpers.ui import START

    from gputop.model import Gpu, HostSnapshot, Workload

    job = Workload(kind="k8s", id="ml/train-7f9c", namespace="ml", pod="train-7f9c")
    gpus = (Gpu(index=0, util_gpu=90, mem_used=2**30, mem_total=2**34, workloads=(job,)),
            Gpu(index=1, util_gpu=5, mem_used=0, mem_total=2**34))
    app = GputopApp(clock=lambda: START, me="alice")
    async with app.run_test(size=(160, 50)) as pilot:
        app.ingest(HostSnapshot(host="dcgm-1", time=START, gpus=gpus, missing=("processes",)))
        await pilot.pause()
        with_job, without = app.dashboard.gpu_panel(0), app.dashboard.gpu_panel(1)
        assert with_job is not None and without is not None
        assert "jobs k8s:ml/train-7f9c" in with_job.render().plain
        assert "jobs" not in without.render().plain
