"""The header and host lines dirty only the cells that changed (issue 27, bytes).

Every refresh brings a new snapshot, and the two top lines were repainted whole each
time, 342 and 683 bytes at 200 columns, though the header's text ("data 1s old") is the
same most seconds and the host line's histories move every few seconds.  Textual keeps
what a widget asked to have sent in ``_repaint_regions`` (widget coordinates; the
compositor takes them on the next frame): these tests read it right after an update.
"""

from __future__ import annotations

import dataclasses

from helpers.ui import demo_snapshots
from textual.app import App, ComposeResult
from textual.geometry import Region

from gputop.model import HostSnapshot
from gputop.ui.widgets.header import HeaderBar, HostLine

WIDTH = 200


class TopLines(App[None]):
    def compose(self) -> ComposeResult:
        yield HeaderBar()
        yield HostLine()


def pending(widget: HeaderBar | HostLine) -> set[Region]:
    return set(widget._repaint_regions)


def same_but(snap: HostSnapshot, **fields: object) -> HostSnapshot:
    """The next refresh's snapshot: a new object, a second later, ``fields`` changed."""
    return dataclasses.replace(snap, time=snap.time + 1, **fields)  # type: ignore[arg-type]


async def test_a_header_whose_text_did_not_change_sends_nothing() -> None:
    snap = demo_snapshots("lab", 1)[0]
    app = TopLines()
    async with app.run_test(size=(WIDTH, 4)) as pilot:
        header = app.query_one(HeaderBar)
        header.update_data(snap, 1.0, snap.time + 1)
        await pilot.pause()
        assert "1s old" in header.render().plain  # type: ignore[union-attr]
        assert not pending(header)

        later = same_but(snap)
        header.update_data(later, 1.0, later.time + 1)  # a new snapshot, still "1s old"
        assert not pending(header)

        header.update_data(later, 1.0, later.time + 2)  # "2s old": that cell only
        line = header.render().plain  # type: ignore[union-attr]
        assert pending(header) == {Region(line.index("2s old"), 0, 1, 1)}


async def test_the_host_line_sends_from_the_first_to_the_last_changed_cell() -> None:
    snap = demo_snapshots("lab", 1)[0]
    assert snap.cpu_percent is not None and snap.load
    app = TopLines()
    async with app.run_test(size=(WIDTH, 4)) as pilot:
        host = app.query_one(HostLine)
        host.update_data(snap, [], "")
        await pilot.pause()
        assert not pending(host)

        host.update_data(same_but(snap), [], "")
        assert not pending(host)  # the same figures in a new snapshot

        load = (snap.load[0] + 1.0, *snap.load[1:])
        host.update_data(same_but(snap, load=load), [], "")
        line = host.render().plain  # type: ignore[union-attr]
        start = line.index("LOAD ") + len("LOAD ")
        (region,) = pending(host)
        # The first load figure, not the line from its left edge; the CPU bar before it
        # and the process count after it are not sent again.
        assert region.y == 0 and start <= region.x < start + 4
        assert region.x + region.width <= start + 4

        await pilot.pause()
        host.update_data(same_but(snap, load=load), [], "ALL GPUS")  # a filter's status
        (region,) = pending(host)
        assert region.x > start  # at the end of the line, after the histories
