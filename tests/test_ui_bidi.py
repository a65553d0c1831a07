"""Bidirectional overrides and zero-width characters in host names, user names, commands
and notes never reach the terminal raw, in any view; a huge command line is capped."""

from __future__ import annotations

import dataclasses

from helpers.ui import START, demo_snapshots, with_processes
from rich.cells import cell_len

from gputop.model import Gpu, HostSnapshot, Reservation
from gputop.ui import cluster_cells
from gputop.ui.app import GputopApp
from gputop.ui.screens import cluster
from gputop.ui.screens.detail import MAX_COMMAND_CHARS, DetailScreen

RLO, ZWSP = "\u202e", "\u200b"
HOST = f"node{RLO}exe.txt{ZWSP}\x1b[2J"
USER = f"mal{ZWSP}lory{RLO}"
COMMAND = f"python {RLO}gnp.exe train.py " + "x" * 200_000


def _hostile() -> list[HostSnapshot]:
    snaps = [dataclasses.replace(s, host=HOST) for s in demo_snapshots("lab", 2)]
    last = snaps[-1]
    evil = dataclasses.replace(last.processes[0], pid=4242, user=USER, command=COMMAND,
                               cmdline=tuple(COMMAND.split(" ")), gpu_mem=10**12)
    reserved = Reservation(gpu=0, user=USER, until=last.time + 3600, since=last.time,
                           note=f"ok{RLO}")
    snaps[-1] = dataclasses.replace(with_processes(last, [evil, *last.processes[1:]], 0.0),
                                    reservations=(reserved,))
    plain = HostSnapshot(host="node-02", time=START, gpus=(Gpu(index=0),))
    return [*snaps, plain]


def _assert_escaped(svg: str, where: str) -> None:
    assert RLO not in svg and ZWSP not in svg and "\x1b" not in svg, where
    assert "\\u202e" in svg, where


async def test_no_view_shows_bidi_or_zero_width_characters_raw() -> None:
    snaps = _hostile()
    app = GputopApp(clock=lambda: snaps[-2].time, me="alice")
    async with app.run_test(size=(160, 50)) as pilot:
        for snap in snaps[:-1]:
            app.ingest(snap)
        app.ingest(snaps[-1])
        app.show_host(HOST)
        app.dashboard.refresh_view()
        await pilot.pause()
        _assert_escaped(app.export_screenshot(), "dashboard")

        index = next(i for i, r in enumerate(app.dashboard.table.rows) if r.proc.pid == 4242)
        app.dashboard.table.move_to(index)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        _assert_escaped(app.export_screenshot(), "detail")
        shown = str(app.screen.query_one("#detail-command").content)
        more = len(COMMAND) - MAX_COMMAND_CHARS + len("\\u202e") - 1
        assert shown.endswith(f"... ({more} more bytes)") and len(shown) < 5000
        await pilot.press("escape")
        await pilot.pause()

        cluster.open_cluster(app)
        await pilot.pause()
        _assert_escaped(app.export_screenshot(), "cluster")
        await pilot.press("p")
        await pilot.pause()
        _assert_escaped(app.export_screenshot(), "cluster processes")


def test_cluster_rows_stay_aligned_whatever_the_host_name() -> None:
    now = START
    widths = set()
    for name in ("node-02", HOST, "节点-日本語-名前-長い", f"a{ZWSP * 30}b"):
        snap = HostSnapshot(host=name, time=now, gpus=(Gpu(index=0, util_gpu=5),))
        line = cluster_cells.host_line(snap, now, set(), 100)
        text = line.plain
        assert RLO not in text and ZWSP not in text
        # the state column starts at the same cell for every host
        widths.add(cell_len(text[: text.index(" ok") if " ok" in text else 0]))
        assert cell_len(text) == 100
    assert len(widths) == 1, widths
