"""Round-2 dashboard polish: history rows, screenshots, several hosts, screen-scoped keys."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from test_ui_support import START, demo_app, demo_snapshots, feed_all

from gputop.model import Gpu, HostSnapshot, Reservation
from gputop.ui.app import GputopApp
from gputop.ui.screens import cluster
from gputop.ui.screens.cluster import ClusterProcessesScreen, ClusterScreen, TextLines
from gputop.ui.screens.kill import KillScreen
from gputop.ui.screenshots import (
    CLUSTER,
    CLUSTER_DOWN,
    CLUSTER_HOSTS,
    SHOTS,
    _shoot,
    cluster_history,
    load,
)
from gputop.ui.screenshots import demo_app as screenshot_app
from gputop.ui.widgets.gpu_panel import history_stats, span_label
from gputop.ui.widgets.header import HeaderBar, HostLine


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
        utils = [v for t, v in panel.data.util_series if t >= panel.data.now - 180.0]
        expected = f"min{min(utils):>4.0f} avg{sum(utils) / len(utils):>4.0f} max" \
            f"{max(utils):>4.0f}%"
        assert expected in history
        # GPU 3's load moves in the lab scenario, so its line cannot be one flat bar.
        util_spark = history.split(" min")[0][len("util 3m "):]
        assert len(set(util_spark.strip())) >= 2
        # Everything fits the panel: nothing of the mem row is cut off.
        assert history.rstrip().endswith("%")
        assert len(history) <= panel.content_region.width


async def test_header_and_host_line_keep_their_spaces_in_the_svg() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=(80, 24)) as pilot:
        feed_all(app)
        await pilot.pause()
        line = app.query_one(HostLine).render().plain
        assert "% of 48" in line and "  LOAD " in line
        svg = app.export_screenshot()
        # Without it librsvg drops leading spaces of every styled run ("16%of 48").
        assert svg.count('xml:space="preserve"') == 1
        assert "&#160;of&#160;48" in svg


def _cluster_app(n_hosts: int = 3) -> GputopApp:
    snaps: list[HostSnapshot] = []
    for i, scenario in enumerate(["lab", "dgx-h100", "faulty"][:n_hosts]):
        snaps += [dataclasses.replace(s, host=f"{scenario}-{i}")
                  for s in demo_snapshots(scenario, 3)]
    app = GputopApp(clock=lambda: max(s.time for s in snaps), me="alice")
    app._test_snapshots = snaps  # type: ignore[attr-defined]
    return app


async def test_p_on_the_dashboard_lists_every_host_with_a_host_column() -> None:
    app = _cluster_app()
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        header = app.query_one(HeaderBar).render().plain
        assert "one of 3 hosts" in header and "p: all processes" in header
        # The dashboard's own table is one host's.
        assert {row.key[0] for row in app.dashboard.table.rows} == {app.state.host}
        await pilot.press("p")
        await pilot.pause()
        assert isinstance(app.screen, ClusterProcessesScreen)
        widget = app.screen.query_one(TextLines)
        lines = [widget.line_text(y) for y in range(len(widget.rows))]
        hosts = {line.split()[0] for line in lines}
        assert hosts == {"lab-0", "dgx-h100-1", "faulty-2"}
        expected = sum(len(app.state.snapshots[h].processes) for h in hosts)
        assert len(lines) == expected
        # The orphan flags reach the all-hosts table (lab has a zombie and orphans).
        assert any(" ZOMB " in line for line in lines if line.startswith("lab-0"))
        assert "(not in this PID namespace)" in "\n".join(lines)
        # Enter on a row opens that host's dashboard.
        await pilot.press("end", "enter")
        await pilot.pause()
        assert app.screen is app.dashboard
        assert app.state.host == lines[-1].split()[0]


async def test_dashboard_keys_do_not_act_under_another_screen() -> None:
    app = _cluster_app()
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, ClusterScreen)
        footer_keys = {b.binding.action for b in app.screen.active_bindings.values()
                       if app.check_action(b.binding.action, ())}
        assert "kill" not in footer_keys and "sort_next" not in footer_keys
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, ClusterScreen)  # no kill dialog behind the overview
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, KillScreen)  # the same key works on the dashboard


def _eight_gpu_host(name: str, reserved: int | None = None) -> HostSnapshot:
    gpus = tuple(Gpu(index=i, util_gpu=90 + i, mem_used=60 * 2**30, mem_total=80 * 2**30)
                 for i in range(8))
    held = () if reserved is None else (
        Reservation(gpu=reserved, user="dave", until=START + 3600, since=START),)
    return HostSnapshot(host=name, time=START, gpus=gpus, reservations=held)


async def test_cluster_at_80_columns_shows_every_card() -> None:
    app = GputopApp(clock=lambda: START, me="alice")
    async with app.run_test(size=(80, 24)) as pilot:
        app.ingest(_eight_gpu_host("wide-node-01"))
        app.ingest(_eight_gpu_host("wide-node-02", reserved=7))
        cluster.open_cluster(app)
        await pilot.pause()
        widget = app.screen.query_one(TextLines)
        first = widget.line_text(0)
        assert len(first) <= 80
        for i in range(8):
            assert f"{90 + i}" in first, f"GPU {i} cut off: {first!r}"
        assert widget.line_text(1).rstrip().endswith("R")
        totals_text = str(app.screen.query_one("#cluster-totals").render())
        assert "cell: util%" in totals_text and "mem%" not in totals_text
    app = GputopApp(clock=lambda: START, me="alice")
    async with app.run_test(size=(160, 40)) as pilot:
        app.ingest(_eight_gpu_host("wide-node-01"))
        cluster.open_cluster(app)
        await pilot.pause()
        # Wide enough: util and memory per card ("90 75").
        assert " 90 75" in app.screen.query_one(TextLines).line_text(0)


def test_reservation_marker_is_not_painted_in_the_cells_colour() -> None:
    snap = _eight_gpu_host("n", reserved=2)
    cell = cluster.gpu_cell(snap.gpus[2], cluster.RESERVED, warned=False, reserved=True)
    assert cell.plain.endswith("R")
    card_style = cluster.GPU_STYLES[cluster.RESERVED]
    assert cell.style == ""  # no base style that would cover the markers
    r_spans = [s for s in cell.spans if cell.plain[s.start:s.end] == "R"]
    assert r_spans and all(str(s.style) != card_style for s in r_spans)


async def test_replayed_demo_snapshots_act_as_the_apps_user() -> None:
    app, _ = demo_app("lab", me="alice")
    async with app.run_test(size=(120, 40)) as pilot:
        feed_all(app)
        await pilot.pause()
        who = app.identity(app.state.host)
        assert (who.user, who.is_root) == ("alice", False)


def test_cluster_demo_hosts_are_deterministic() -> None:
    first = cluster_history(5)
    second = cluster_history(5)
    assert [s.to_dict() for s in first] == [s.to_dict() for s in second]
    names = {s.host for s in first}
    assert names == {h[1] for h in CLUSTER_HOSTS} | {h[0] for h in CLUSTER_DOWN}
    # Two machines of one kind differ (another seed), as real ones would.
    h100 = {s.host: s for s in first if s.host.startswith("dgx-h100")}
    assert h100["dgx-h100-07"].gpus != h100["dgx-h100-08"].gpus


def test_screenshot_list_covers_the_new_screens() -> None:
    screens = {shot[4] for shot in SHOTS}
    assert {"ClusterScreen", "ClusterProcessesScreen", "ReclaimScreen",
            "ReserveScreen"} <= screens


async def test_cluster_screenshot_twice_is_identical(tmp_path: Path) -> None:
    shot = next(s for s in SHOTS if s[0] == "cluster-80x24")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = await _shoot(*shot, outdir=tmp_path / "a")
    two = await _shoot(*shot, outdir=tmp_path / "b")
    assert one is not None and two is not None
    text = Path(one).read_text()
    assert text == Path(two).read_text()
    assert "dgx-h100-08" in text and "lab-gpu-05" in text


async def test_cluster_demo_app_starts_on_the_first_host() -> None:
    app = screenshot_app(CLUSTER, seconds=3)
    async with app.run_test(size=(160, 50)) as pilot:
        await load(pilot)
        assert app.state.host == CLUSTER_HOSTS[0][1]
        assert len(app.state.snapshots) == len(CLUSTER_HOSTS) + len(CLUSTER_DOWN)
