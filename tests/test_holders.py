"""One answer to "who holds this card": a reservation of one MIG device holds that device,
not its card (gputop/analysis/holders.py), and the cluster cell, the GPU panel, `--json`,
`serve` and `pick` all say so, on the simulator's MIG node."""

from __future__ import annotations

import dataclasses

from helpers.ui import demo_snapshots, plain

from gputop.analysis.holders import holders
from gputop.analysis.pick import MIG_UNIT, Want, rank, rank_devices
from gputop.commands import exposition
from gputop.commands.once import json_document
from gputop.model import HostSnapshot, Reservation
from gputop.ui import cluster_cells
from gputop.ui.app import GputopApp
from gputop.ui.screens import cluster
from gputop.ui.widgets.text_lines import TextLines

SNAP = demo_snapshots("mig", 2)[-1]
NOW = SNAP.time
DEVICE = SNAP.gpus[0].mig_devices[3]  # 0:3, an empty 1g.10gb instance


def _reserved(*reservations: Reservation) -> HostSnapshot:
    return dataclasses.replace(SNAP, reservations=reservations)


def _res(user: str, mig: bool = True) -> Reservation:
    return Reservation(gpu=0, user=user, until=NOW + 3600, since=NOW, gpu_uuid=SNAP.gpus[0].uuid,
                       mig_uuid=DEVICE.uuid if mig else None,
                       mig_device=DEVICE.index if mig else None)


HELD = _reserved(_res("bob"))


def _card_marks(snap: HostSnapshot, index: int) -> str:
    """The "!R" marks of one card's cell on its host line."""
    width = cluster_cells.host_width(len(snap.gpus))
    line = cluster_cells.host_line(snap, NOW, set(), width).plain
    start = cluster_cells.NAME_WIDTH + 1 + cluster_cells.STATE_WIDTH + 1
    cell = line[start + index * (cluster_cells.CELL_WIDTH + 1):][:cluster_cells.CELL_WIDTH]
    return cell[-2:]


def test_the_lookup_holds_the_device_not_its_card() -> None:
    held = holders(HELD, NOW)
    assert held.card(0) is None and held.of_card(0) == ()
    assert [r.user for r in held.of_device(DEVICE.uuid)] == ["bob"]
    assert held.of_unit("0:3") == held.of_device(DEVICE.uuid) and held.any_on(SNAP.gpus[0])
    assert holders(HELD, NOW + 3601).of_device(DEVICE.uuid) == ()  # expired holds nothing


def test_cluster_cell_pick_json_and_serve_agree() -> None:
    # The cluster cell: no R on the card, and not counted as a reserved card.
    assert _card_marks(HELD, 0) == "  "
    assert cluster_cells.gpu_class(HELD.gpus[0], HELD, NOW) != cluster_cells.RESERVED
    # ...while a reservation of the whole card is both (the cell is not merely blind).
    whole = _reserved(_res("bob", mig=False))
    assert _card_marks(whole, 0) == " R"
    assert cluster_cells.gpu_class(whole.gpus[0], whole, NOW) == cluster_cells.RESERVED

    # pick: the device is bob's; the card is left out only for being a MIG card.
    assert rank_devices(HELD, Want(me="alice"), NOW).rejected["0:3"] == "reserved by bob"
    assert rank(HELD, Want(me="alice"), NOW).rejected[0] == MIG_UNIT

    # --json: the reservation names the device, and read back it holds the same.
    document = json_document([HELD], NOW)
    (entry,) = document["hosts"][0]["reservations"]
    assert (entry["gpu"], entry["mig_device"], entry["mig_uuid"]) == (0, 3, DEVICE.uuid)
    again = holders(HostSnapshot.from_dict(document["hosts"][0]), NOW)
    assert again.card(0) is None and [r.user for r in again.of_device(DEVICE.uuid)] == ["bob"]

    # serve: the series is the instance's (GPU_I_ID), not the card's.
    text = exposition.render(exposition.families(HELD, [], {}, {}, None))
    (series,) = [x for x in text.splitlines() if x.startswith("gputop_gpu_reserved{")]
    assert f'GPU_I_ID="{DEVICE.gi}"' in series and 'owner="bob"' in series


async def test_the_panel_and_the_overview_agree() -> None:
    app = GputopApp(clock=lambda: NOW, me="alice")
    async with app.run_test(size=(160, 50)) as pilot:
        app.ingest(HELD)
        await pilot.pause()
        lines = plain(app.dashboard.gpu_panel(0).render()).splitlines()
        assert "RSV" not in lines[0]  # the card's own line
        assert any(line.lstrip().startswith("0:3") and "RSV bob" in line for line in lines)
        cluster.open_cluster(app)
        await pilot.pause()
        shown = app.screen.query_one(TextLines).line_text(0)
        start = cluster_cells.NAME_WIDTH + 1 + cluster_cells.STATE_WIDTH + 1
        assert shown[start + cluster_cells.CELL_WIDTH - 1] == " "  # card 0: no R
