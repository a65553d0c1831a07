"""One answer to "who holds this card": a reservation of one MIG device holds that device,
not its card (gputop/analysis/holders.py), and every renderer says so through the host view
model (gputop/analysis/hostview.py): `--once`, `--watch`, the start-up skeleton, the GPU
panel, the cluster cell, `--json`, `serve`, the ledger and `pick`, on the simulator's MIG
node; and the jobs an exporter names for a card read the same in each view that shows them."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import cli
from helpers.feeds import QueueFeed
from helpers.ui import demo_snapshots, plain

from gputop.analysis import hostview
from gputop.analysis.holders import holders
from gputop.analysis.pick import MIG_UNIT, Want, rank, rank_devices
from gputop.commands import exposition, watch
from gputop.commands.once import json_document, render_text
from gputop.config import Config, analysis_settings
from gputop.ledger import query, store
from gputop.ledger.writer import Recorder
from gputop.model import HostSnapshot, Reservation, Workload
from gputop.options import SourceOptions
from gputop.ui import cluster_cells, skeleton
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


# -- every renderer, from the host view model ---------------------------------------------------
#
# zoe runs nothing on the MIG node, so what the ledger charges her is the reservation alone.
# Held until a day after the real clock: --watch judges reservations at the real time.
UNTIL = time.time() + 86400
CARD, MIG = "0", DEVICE.label  # a whole-card reservation, and one of the MIG device 0:3
JOB = Workload(kind="slurm", id="4242")  # the job an exporter names for card 2 (no MIG)


def _held_by_zoe(unit: str) -> HostSnapshot:
    mig = unit == MIG
    return _reserved(Reservation(gpu=0, user="zoe", until=UNTIL, since=NOW,
                                 gpu_uuid=SNAP.gpus[0].uuid,
                                 mig_uuid=DEVICE.uuid if mig else None,
                                 mig_device=DEVICE.index if mig else None))


def _with_job() -> HostSnapshot:
    gpus = list(SNAP.gpus)
    gpus[2] = dataclasses.replace(gpus[2], workloads=(JOB,))
    return dataclasses.replace(SNAP, gpus=tuple(gpus))


def _once_units(text: str) -> set[str]:
    """The units `--once` (and each `--watch` frame) says zoe holds."""
    return {line.split()[1] for line in text.splitlines()
            if line.startswith("  GPU ") and " reserved by zoe " in line}


def _watch_frame(snap: HostSnapshot) -> str:
    """One `--watch` frame of ``snap``, from a feed that replays it."""
    feed = QueueFeed([snap.host], user="alice")
    feed.put(snap)
    out = io.StringIO()
    asyncio.run(watch._loop([feed], 0.1, analysis_settings(Config()),  # type: ignore[list-item]
                            SourceOptions(timeout=60), out, 1, lambda s: 0))
    return out.getvalue()


def _skeleton_units(snap: HostSnapshot) -> set[str]:
    frame = skeleton.lines(snap, 200, 40, 1.0, NOW, ("pid", "user", "command"))
    (card,) = ["".join(text for text, _style in line) for line in frame
               if line and line[0][0].startswith(" 0 ")]
    words = card.split()
    return {words[i - 1] if words[i - 1] == MIG else CARD
            for i, word in enumerate(words) if word == "RSV" and words[i + 1] == "zoe"}


def _serve_units(snap: HostSnapshot) -> set[str]:
    text = exposition.render(exposition.families(snap, [], {}, {}, None))
    return {MIG if f'GPU_I_ID="{DEVICE.gi}"' in line else CARD
            for line in text.splitlines()
            if line.startswith("gputop_gpu_reserved{") and 'owner="zoe"' in line}


def _ledger_hours(snap: HostSnapshot, tmp_path: Path) -> float:
    """What one hour of ``snap`` charges zoe against her quota, in GPU-hours."""
    path = tmp_path / "ledger.sqlite"
    recorder = Recorder(store.open_writer(str(path)), 3600.0, 1024**2)
    assert recorder.record(snap)
    hours = query.quota_hours(recorder.conn, NOW - 7200, NOW + 7200)
    recorder.conn.close()
    return hours.get("zoe", 0.0)


@pytest.mark.parametrize("unit", [CARD, MIG])
def test_every_plain_renderer_names_the_unit_held(unit: str, tmp_path: Path) -> None:
    snap = _held_by_zoe(unit)
    shown = hostview.view(snap, NOW)
    card = shown.card(0)
    assert card is not None
    # The model: the card is held, or the device and not its card.
    assert card.reserved is (unit == CARD)
    assert [r.user for d in card.devices for r in d.holders] == (["zoe"] if unit == MIG else [])
    assert [(h.unit, h.gpu) for h in shown.holds] == [(unit, 0)]
    # --once and --watch: "GPU 0:3 reserved by zoe", never "GPU 0" for a device (issue 36.1).
    assert _once_units(render_text([snap], width=None, now=NOW)) == {unit}
    assert _once_units(_watch_frame(snap)) == {unit}
    # The start-up skeleton, as its panel will: "RSV zoe" on the card, "0:3 RSV zoe" for it.
    assert _skeleton_units(snap) == {unit}
    # serve: the card's series, or the instance's (GPU_I_ID).
    assert _serve_units(snap) == {unit}
    # The cluster cell marks a reserved card only; a device of it leaves the cell as it was.
    assert _card_marks(snap, 0) == (" R" if unit == CARD else "  ")
    assert (cluster_cells.gpu_class(snap.gpus[0], snap, NOW) == cluster_cells.RESERVED) is (
        unit == CARD)
    # The ledger: a card-hour for the card; for the device its part of the card (1g.10gb of
    # an 80 GB H100: its memory over the card's, about an eighth), not the whole card.
    share = DEVICE.mem_total / SNAP.gpus[0].mem_total if unit == MIG else 1.0
    assert 0.1 < share <= 1.0
    assert _ledger_hours(snap, tmp_path) == pytest.approx(share)
    # --json names the device, whichever view reads it back.
    (entry,) = json_document([snap], NOW)["hosts"][0]["reservations"]
    assert entry["mig_device"] == (DEVICE.index if unit == MIG else None)


@pytest.mark.parametrize("unit", [CARD, MIG])
async def test_the_panel_names_the_unit_held(unit: str) -> None:
    app = GputopApp(clock=lambda: NOW, me="alice")
    async with app.run_test(size=(160, 50)) as pilot:
        app.ingest(_held_by_zoe(unit))
        await pilot.pause()
        lines = plain(app.dashboard.gpu_panel(0).render()).splitlines()
        on_card = "RSV zoe" in lines[0]
        on_device = any(line.lstrip().startswith(MIG) and "RSV zoe" in line for line in lines)
        assert (on_card, on_device) == (unit == CARD, unit == MIG)


def test_a_job_on_a_card_reads_the_same_in_once_watch_and_the_model() -> None:
    snap = _with_job()
    card = hostview.view(snap, NOW).card(2)
    assert card is not None and card.jobs == JOB.label == "slurm:4242"
    assert all(not c.jobs for c in hostview.view(snap, NOW).cards if c.gpu.index != 2)
    for text in (render_text([snap], width=None, now=NOW), _watch_frame(snap)):
        lines = text.splitlines()
        (at,) = [i for i, line in enumerate(lines) if "jobs:" in line]
        assert lines[at] == f"     jobs: {JOB.label}"
        # under card 2's line (and its MIG state), not another card's
        card_lines = [line for line in lines[:at] if line[:3].strip().isdigit()]
        assert card_lines[-1].startswith("  2  ")


async def test_the_panel_shows_the_job_of_its_card() -> None:
    app = GputopApp(clock=lambda: NOW, me="alice")
    async with app.run_test(size=(160, 50)) as pilot:
        app.ingest(_with_job())
        await pilot.pause()
        shown = [plain(app.dashboard.gpu_panel(i).render()) for i in range(4)]
        assert [f"jobs {JOB.label}" in text for text in shown] == [False, False, True, False]


def test_the_issue_s_commands_name_the_mig_device(tmp_path: Path) -> None:
    """`gputop --demo mig reserve --gpus 0:1 --for 1h --note t`, then `--once`, `--json`
    and one `--watch` frame, as real processes; --demo keeps its store under $TMPDIR."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("GPUTOP_HOSTS", None)
    env.pop("GPUTOP_RESERVATIONS_DIR", None)

    def gputop(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "gputop.cli", *args], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    gputop("--demo", "mig", "reserve", "--gpus", "0:1", "--for", "1h", "--note", "t")
    held = [line for line in gputop("--demo", "mig", "--once").splitlines()
            if line.startswith("  GPU ") and " reserved by " in line]
    assert len(held) == 1 and held[0].startswith("  GPU 0:1 reserved by ")
    assert held[0].endswith("  t")
    (entry,) = json.loads(gputop("--demo", "mig", "--json"))["hosts"][0]["reservations"]
    assert (entry["gpu"], entry["mig_device"]) == (0, 1)
    proc = subprocess.Popen([sys.executable, "-c", cli.MAIN_CODE, "--demo", "mig", "--once",
                             "--watch", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while not _frame_done(seen) and time.monotonic() < deadline:
            seen.append(proc.stdout.readline())
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    held = [line for line in seen if line.startswith("  GPU ") and " reserved by " in line]
    assert len(held) == 1 and held[0].startswith("  GPU 0:1 reserved by ")


def _frame_done(lines: list[str]) -> bool:
    """Whether a whole --watch frame was read: its process table follows the reservations."""
    return any(line.split()[:2] == ["GPU", "PID"] for line in lines)
