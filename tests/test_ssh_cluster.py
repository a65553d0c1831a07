"""The cluster overview screen (Pilot): 64 hosts x 8 GPUs on 200x60, totals, navigation."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from helpers.feeds import QueueFeed

from gputop import model
from gputop.model import Gpu, GpuProcess, HostSnapshot, Reservation
from gputop.ui import cluster_cells
from gputop.ui.app import GputopApp
from gputop.ui.screens import cluster
from gputop.ui.screens.cluster import ClusterScreen
from gputop.ui.screens.cluster_processes import ClusterProcessesScreen
from gputop.ui.widgets.text_lines import TextLines

GIB = 1024**3
NOW = time.time()


def _gpu(i: int, util: int, mem_gib: float, state: str = model.GPU_OK) -> Gpu:
    return Gpu(index=i, state=state, util_gpu=util, mem_used=int(mem_gib * GIB),
               mem_total=80 * GIB, name="NVIDIA H100 80GB HBM3")


def _host(n: int) -> HostSnapshot:
    name = f"node{n:02d}"
    labels = ("a100",) if n % 2 else ("h100", "train")
    if n == 3:
        return model.error_snapshot(name, NOW, model.HOST_UNREACHABLE, "Connection refused",
                                    labels=labels)
    if n == 4:
        return model.error_snapshot(name, NOW, model.HOST_AUTH_FAILED, "authentication failed",
                                    labels=labels)
    gpus = []
    for i in range(8):
        if i < 4:
            gpus.append(_gpu(i, 0, 0.0))  # free
        elif i == 7 and n == 5:
            gpus.append(_gpu(i, 0, 0.0, state=model.GPU_LOST))
        else:
            gpus.append(_gpu(i, 90, 60.0))
    procs = [GpuProcess(pid=1000 + i, gpu=i, gpu_mem=60 * GIB, sm_util=90, user=f"user{n}",
                        command="python train.py") for i in range(4, 8)]
    reservations = ()
    if n == 6:
        reservations = (Reservation(gpu=0, user="carol", until=NOW + 3600, since=NOW - 60),)
    return HostSnapshot(host=name, time=NOW, gpus=tuple(gpus), processes=tuple(procs),
                        reservations=reservations, labels=labels)


def _app() -> GputopApp:
    return GputopApp(feeds=[], clock=lambda: NOW)


def _lines(widget: TextLines) -> list[str]:
    return [widget.line_text(y) for y in range(widget.size.height)]


def test_totals_count_free_busy_broken_reserved() -> None:
    snaps = [_host(n) for n in range(64)]
    result = cluster_cells.totals(snaps, {}, NOW)
    assert result.hosts == 64
    assert result.states == {"ok": 62, "unreachable": 1, "auth failed": 1}
    # 62 hosts x 4 free cards, minus the reserved one; host 5 lost one card.
    assert result.gpus[cluster_cells.RESERVED] == 1
    assert result.gpus[cluster_cells.FREE] == 62 * 4 - 1
    assert result.gpus[cluster_cells.BROKEN] == 1
    assert result.gpus[cluster_cells.BUSY] == 62 * 4 - 1


def test_idle_memory_uses_orphan_flags() -> None:
    class Flags:
        idle = True
        orphan = False
        zombie = False

    snap = _host(10)
    flags = {snap.host: {snap.processes[0].key: Flags()}}
    result = cluster_cells.totals([snap], flags, NOW)
    assert result.idle_procs == 1 and result.idle_mem == 60 * GIB


async def test_64_hosts_fit_200x60() -> None:
    app = _app()
    async with app.run_test(size=(200, 60)) as pilot:
        for n in range(64):
            app.ingest(_host(n))
        cluster.open_cluster(app)
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ClusterScreen)
        widget = screen.query_one(TextLines)
        text = "\n".join(_lines(widget))
        for n in range(64):
            assert f"node{n:02d}" in text, f"node{n:02d} not visible"
        assert "unreachable" in text and "auth failed" in text
        assert "LOST" in text  # the lost card on node05
        assert widget.size.width <= 200
        # Visible, not merely laid out: the widget lies inside the 200x60 terminal.
        assert widget.region.bottom <= 60 and widget.region.right <= 200, widget.region
        assert widget.size.height > 0
        totals_text = str(screen.query_one("#cluster-totals").render())
        assert "64 hosts" in totals_text and "broken" in totals_text


async def test_enter_opens_host_and_escape_returns() -> None:
    app = _app()
    async with app.run_test(size=(200, 60)) as pilot:
        for n in range(8):
            app.ingest(_host(n))
        app.dashboard.action_cluster()
        await pilot.pause()
        assert isinstance(app.screen, ClusterScreen)
        # Problems first: the two hosts that are down, then the one with a lost card.
        assert app.screen.order[:3] == ["node03", "node04", "node05"]
        await pilot.press("down", "down", "down")
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, ClusterScreen)
        assert app.state.host == "node00"
        # Esc on the dashboard (no filters) goes back to the overview.
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, ClusterScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ClusterScreen)


async def test_filter_hosts_by_label() -> None:
    app = _app()
    async with app.run_test(size=(200, 60)) as pilot:
        for n in range(10):
            app.ingest(_host(n))
        app.dashboard.action_cluster()
        await pilot.pause()
        await pilot.press("slash", *"a100", "enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ClusterScreen)
        # node03 is down: first; node05 (a lost card) next; then the hosts file's order.
        assert screen.order == ["node03", "node05", "node01", "node07", "node09"]


async def test_host_names_are_not_markup() -> None:
    app = _app()
    evil = "[red]x[/]"
    async with app.run_test(size=(200, 30)) as pilot:
        app.ingest(HostSnapshot(host=evil, time=NOW, gpus=(_gpu(0, 0, 0),)))
        app.ingest(_host(1))
        app.dashboard.action_cluster()
        await pilot.pause()
        text = "\n".join(_lines(app.screen.query_one(TextLines)))
        assert evil in text


async def test_all_processes_with_host_column_and_filters() -> None:
    app = _app()
    async with app.run_test(size=(200, 60)) as pilot:
        for n in range(6):
            app.ingest(_host(n))
        app.dashboard.action_cluster()
        await pilot.pause()
        await pilot.press("p")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ClusterProcessesScreen)
        assert {h for h, _ in screen.keys} == {"node00", "node01", "node02", "node05"}
        assert "HOST" in str(screen.query_one("#procs-header").render())
        await pilot.press("slash", *"user:user1", "enter")
        await pilot.pause()
        assert {h for h, _ in screen.keys} == {"node01"}
        screen.where = cluster_cells.ProcFilter.parse("label:train")
        screen.refresh_data()
        assert {h for h, _ in screen.keys} == {"node00", "node02"}
        screen.where = cluster_cells.ProcFilter.parse("host:node05")
        screen.refresh_data()
        assert {h for h, _ in screen.keys} == {"node05"}
        assert len(screen.keys) == 4


class _TwoHostFeed(QueueFeed):
    """A feed of two fixed snapshots (the SSH feed is tested against sshd elsewhere)."""

    def __init__(self) -> None:
        super().__init__(["node00", "node01"])

    async def run(self, interval: float, emit: Callable[[HostSnapshot], None]) -> None:
        emit(_host(0))
        emit(_host(1))


async def test_many_hosts_start_on_the_overview() -> None:
    app = GputopApp(feeds=[_TwoHostFeed()], clock=lambda: NOW)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, ClusterScreen)
        for _ in range(50):
            if len(app.state.snapshots) == 2:
                break
            await pilot.pause(0.05)
        app.screen.refresh_data()
        text = "\n".join(_lines(app.screen.query_one(TextLines)))
        assert "node00" in text and "node01" in text


async def test_dashboard_over_real_ssh(sshd_hosts: Any) -> None:
    """The app fed by SshFeed from a hosts file via opener.open_feeds, against real sshd."""
    from gputop.config import Config
    from gputop.options import SourceOptions
    from gputop.sources.opener import open_feeds
    from gputop.sources.ssh import SshFeed

    feeds = open_feeds(SourceOptions(hosts_file=str(sshd_hosts.hosts_yaml())), Config())
    assert len(feeds) == 1 and isinstance(feeds[0], SshFeed)
    names = [h.name for h in sshd_hosts.hosts]
    app = GputopApp(feeds, interval=0.3)
    async with app.run_test(size=(200, 60)) as pilot:
        for _ in range(300):
            snaps = app.state.snapshots
            if all(n in snaps and snaps[n].state == model.HOST_OK for n in names):
                break
            await pilot.pause(0.05)
        assert all(app.state.snapshots[n].state == model.HOST_OK for n in names)
        screen = app.screen
        assert isinstance(screen, ClusterScreen)
        screen.refresh_data()
        text = "\n".join(_lines(screen.query_one(TextLines)))
        for name in names:
            assert name in text
        reply = await app.request(names[0], {"op": "reservations"})
        assert reply["ok"] is True
