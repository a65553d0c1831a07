"""The cluster overview and the processes of all hosts, on replayed snapshots
(tests/test_ssh_cluster.py has them over a real sshd)."""

from __future__ import annotations

import pytest
from helpers.ui import START, cluster_app, feed_all
from rich.style import Style

from gputop.model import Gpu, HostSnapshot, Reservation
from gputop.ui import cluster_cells
from gputop.ui.app import GputopApp
from gputop.ui.screens import cluster
from gputop.ui.screens.cluster_processes import ClusterProcessesScreen
from gputop.ui.screenshots import (
    CLUSTER,
    CLUSTER_DOWN,
    CLUSTER_HOSTS,
    cluster_history,
    load,
)
from gputop.ui.screenshots import demo_app as screenshot_app
from gputop.ui.widgets import text_lines
from gputop.ui.widgets.header import HeaderBar
from gputop.ui.widgets.text_lines import TextLines


def _host(name: str) -> HostSnapshot:
    gpus = tuple(Gpu(index=i, util_gpu=90 + i, mem_used=60 * 2**30, mem_total=80 * 2**30)
                 for i in range(4))
    return HostSnapshot(host=name, time=START, gpus=gpus)


async def test_cluster_cursor_reverses_the_name_and_keeps_the_cells_colours() -> None:
    app = GputopApp(clock=lambda: START, me="alice")
    async with app.run_test(size=(120, 30)) as pilot:
        app.ingest(_host("node-01"))
        app.ingest(_host("node-02"))
        cluster.open_cluster(app)
        await pilot.pause()
        widget = app.screen.query_one(TextLines)
        widget.focus()
        await pilot.pause()
        assert widget.cursor == 0 and widget.has_focus

        def cells(y: int) -> list[tuple[int, str, Style]]:
            out, x = [], 0
            for seg in widget.render_line(y):
                out.append((x, seg.text, seg.style or Style()))
                x += len(seg.text)
            return out

        cursor_row, other_row = cells(0), cells(1)
        reversed_at = [x for x, text, style in cursor_row if style.reverse and text.strip()]
        assert reversed_at and max(reversed_at) < cluster_cells.NAME_WIDTH
        # A GPU cell looks the same on the cursor's row as on any other row.
        cell_style = {text: style.bgcolor for _, text, style in other_row if "90" in text}
        cursor_cell = {text: style.bgcolor for _, text, style in cursor_row if "90" in text}
        assert cell_style and cell_style == cursor_cell
        # The rest of the cursor's row is marked, just not reversed.
        blank = [style.bgcolor for x, text, style in cursor_row
                 if x > cluster_cells.NAME_WIDTH and not text.strip()]
        assert blank and all(bg == text_lines.ROW_BACKGROUND.bgcolor for bg in blank)


async def test_p_on_the_dashboard_lists_every_host_with_a_host_column() -> None:
    app = cluster_app()
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


def _eight_gpu_host(name: str, reserved: int | None = None) -> HostSnapshot:
    gpus = tuple(Gpu(index=i, util_gpu=90 + i, mem_used=60 * 2**30, mem_total=80 * 2**30)
                 for i in range(8))
    held = () if reserved is None else (
        Reservation(gpu=reserved, user="dave", until=START + 3600, since=START),)
    return HostSnapshot(host=name, time=START, gpus=gpus, reservations=held)


async def test_all_processes_draws_under_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_COLOR (Textual's monochrome filter) once crashed on the list's unstyled cells."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = cluster_app()
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        await pilot.press("p")
        await pilot.pause()
        assert isinstance(app.screen, ClusterProcessesScreen)
        assert "lab-0" in app.export_screenshot()
        await pilot.press("escape")
        await pilot.pause()
    assert app.return_code in (None, 0)


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
    cell = cluster_cells.gpu_cell(snap.gpus[2], cluster_cells.RESERVED, warned=False, reserved=True)
    assert cell.plain.endswith("R")
    card_style = cluster_cells.GPU_STYLES[cluster_cells.RESERVED]
    assert cell.style == ""  # no base style that would cover the markers
    r_spans = [s for s in cell.spans if cell.plain[s.start:s.end] == "R"]
    assert r_spans and all(str(s.style) != card_style for s in r_spans)


def test_cluster_demo_hosts_are_deterministic() -> None:
    first = cluster_history(5)
    second = cluster_history(5)
    assert [s.to_dict() for s in first] == [s.to_dict() for s in second]
    names = {s.host for s in first}
    assert names == {h[1] for h in CLUSTER_HOSTS} | {h[0] for h in CLUSTER_DOWN}
    # Two machines of one kind differ (another seed), as real ones would.
    h100 = {s.host: s for s in first if s.host.startswith("dgx-h100")}
    assert h100["dgx-h100-07"].gpus != h100["dgx-h100-08"].gpus


async def test_cluster_demo_app_starts_on_the_first_host() -> None:
    app = screenshot_app(CLUSTER, seconds=3)
    async with app.run_test(size=(160, 50)) as pilot:
        await load(pilot)
        assert app.state.host == CLUSTER_HOSTS[0][1]
        assert len(app.state.snapshots) == len(CLUSTER_HOSTS) + len(CLUSTER_DOWN)


def test_unknown_is_never_free_and_reservations_match_by_uuid() -> None:
    idle = Gpu(index=0, uuid="GPU-a", util_gpu=0, mem_used=0, mem_total=80 << 30)
    snap = HostSnapshot(host="h", time=START, gpus=(idle,))
    assert cluster_cells.gpu_class(idle, snap, START) == cluster_cells.FREE
    # the process list could not be read: it may run a 20 GiB job
    blind = Gpu(index=0, uuid="GPU-a", util_gpu=0, mem_used=0, mem_total=80 << 30,
                processes_error="nvmlDeviceGetComputeRunningProcesses_v3: Unknown Error")
    assert cluster_cells.gpu_class(blind, snap, START) == cluster_cells.UNKNOWN
    # a reservation of GPU 0 of another host (shared store) is not this host's GPU 0
    other = Reservation(gpu=0, user="dave", until=START + 3600, since=START, gpu_uuid="GPU-b")
    shared = HostSnapshot(host="h", time=START, gpus=(idle,), reservations=(other,))
    assert cluster_cells.gpu_class(idle, shared, START) == cluster_cells.FREE
    mine = Reservation(gpu=3, user="dave", until=START + 3600, since=START, gpu_uuid="GPU-a")
    held = HostSnapshot(host="h", time=START, gpus=(idle,), reservations=(mine,))
    assert cluster_cells.gpu_class(idle, held, START) == cluster_cells.RESERVED


async def test_names_that_share_a_prefix_are_shown_whole_at_160x50() -> None:
    from gputop.model import Gpu as Card

    app = GputopApp(clock=lambda: START, me="alice")
    names = [f"127.0.0.1:1940{n}" for n in (1, 2, 3)]
    async with app.run_test(size=(160, 50)) as pilot:
        for name in names:
            gpus = tuple(Card(index=i, util_gpu=50, power_draw=120.0) for i in range(8))
            app.ingest(HostSnapshot(host=name, time=START, gpus=gpus))
        cluster.open_cluster(app)
        await pilot.pause()
        widget = app.screen.query_one(TextLines)
        lines = [widget.line_text(y) for y in range(3)]
        for name, line in zip(names, lines, strict=True):
            assert line.startswith(name), lines  # the whole name, not "127.0.0.1:19…"
        # The cursor's reversed label covers the wider name column.
        assert widget.label_width == len(names[0])


def test_a_name_too_long_for_its_column_keeps_its_end() -> None:
    cut = cluster_cells._name_cells("gpu-node.rack-17.example.org-0042", 13)
    assert len(cut) == 13 and cut.endswith("0042") and "…" in cut


async def test_at_80_columns_a_cut_reason_is_said_in_full_under_the_list() -> None:
    """A down host's line cut its fix (`ssh-keyscan ... >> ~/.ssh/known_hosts`) at 80:
    the screen repeats such reasons in full, the fix on a line of its own."""
    app = screenshot_app(CLUSTER, seconds=3)
    async with app.run_test(size=(80, 24)) as pilot:
        await load(pilot)
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, cluster.ClusterScreen)
        box = app.screen.query_one("#cluster-reasons")
        assert box.display
        shown = [box.render_line(y).text.strip() for y in range(box.size.height)]
        down = {s.host: s.error for s in app.state.snapshots.values() if not s.ok}
        key = next(h for h, e in down.items() if e and "ssh-keyscan" in e)
        fix = (down[key] or "").rpartition(": ")[2]
        assert fix.startswith("ssh-keyscan") and fix in shown  # whole, on one line
        assert all(len(line) <= 78 for line in shown)
        assert all(any(line.startswith(h + ":") for line in shown) for h in down)
    # wide enough for every reason: nothing repeated
    app = screenshot_app(CLUSTER, seconds=3)
    async with app.run_test(size=(200, 50)) as pilot:
        await load(pilot)
        await pilot.press("c")
        await pilot.pause()
        assert not app.screen.query_one("#cluster-reasons").display
