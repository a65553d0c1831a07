"""Issue 19: MIG devices as the unit of pick and reserve.

Ranking is pure (the simulator's MIG node); the store runs on real files with real
processes as other users (the workers of test_reservations), including a parent and one
of its MIG devices reserved at the same moment by two users.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from test_reservations import NOBODY, WorkerPool, base, directory, workers  # noqa: F401

from gputop.actions import reservations as store
from gputop.analysis.health.reservations import warnings as reservation_warnings
from gputop.analysis.pick import Want, rank, rank_devices
from gputop.model import HostSnapshot, Reservation, mig_map
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector

REPO = Path(__file__).resolve().parent.parent
GIB = 1 << 30
ALICE = 10019  # bare uids: the store names users by the files' owners


def _snapshot() -> HostSnapshot:
    clock = lambda: 1_800_000_000.0  # noqa: E731
    nvml = sim.SimNvml("mig", clock=clock)
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="mig", demo=True, clock=clock)
    collector.collect()
    return HostSnapshot.from_dict(collector.collect())


SNAP = _snapshot()
CARD0 = SNAP.gpus[0]
MIGS = mig_map(SNAP.gpus)
UUIDS = {g.index: g.uuid for g in SNAP.gpus}


def _held(*reservations: Reservation) -> HostSnapshot:
    return dataclasses.replace(SNAP, reservations=reservations)


def _mig_res(slot: int, user: str, card: int = 0) -> Reservation:
    dev = SNAP.gpus[card].mig_devices[slot]
    return Reservation(gpu=card, user=user, until=SNAP.time + 600, since=SNAP.time,
                       mig_uuid=dev.uuid, mig_device=slot)


# -- ranking -------------------------------------------------------------------------------


def test_two_mig_devices_with_ten_gigabytes_free() -> None:
    snap = dataclasses.replace(SNAP, gpus=SNAP.gpus[:2])  # the two MIG cards only
    ranking = rank_devices(snap, Want(min_free_mem=9 * GIB, share=True), SNAP.time)
    # the four empty 1g.10gb instances; equal free memory: card, then slot order
    assert [c.label for c in ranking.chosen] == ["0:3", "0:5", "0:6", "1:3"]
    assert [c.device for c in ranking.chosen[:2]] == [_uuid(3), _uuid(5)]
    assert ranking.rejected["0:1"] == "1.0 GiB free"  # bob's server fills it
    # without --share, bob's MIG device is out before its memory is looked at
    assert rank_devices(snap, Want(min_free_mem=9 * GIB), SNAP.time).rejected["0:1"] == (
        "in use by another user (bob)")


def test_without_filters_only_instances_without_processes() -> None:
    ranking = rank_devices(SNAP, Want(), SNAP.time)
    labels = {c.label for c in ranking.chosen}
    assert {"0:3", "0:5", "0:6", "1:3", "2"} <= labels
    assert "0:2" not in labels and ranking.rejected["0:2"] == "in use by another user (carol)"
    carol = rank_devices(SNAP, Want(me="carol"), SNAP.time)
    assert carol.rejected["0:2"] == "2 process(es) running"
    # the MIG cards themselves are not units, for cards-only callers either
    assert 0 not in rank(SNAP, Want(), SNAP.time).indexes


def test_max_util_needs_gpm_activity() -> None:
    ranking = rank_devices(SNAP, Want(max_util=10), SNAP.time)
    labels = {c.label for c in ranking.chosen}
    assert "0:3" in labels  # GPM says idle
    assert ranking.rejected["1:3"].startswith("utilization unknown")  # no GPM on card 1


def test_a_reserved_card_reserves_its_instances_and_an_instance_only_itself() -> None:
    card = Reservation(gpu=0, user="bob", until=SNAP.time + 600, since=SNAP.time)
    ranking = rank_devices(_held(card), Want(me="alice"), SNAP.time)
    assert ranking.rejected["0:3"] == "reserved by bob"
    mine = rank_devices(_held(card), Want(me="bob"), SNAP.time)
    assert "0:3" in {c.label for c in mine.chosen}
    one = rank_devices(_held(_mig_res(3, "bob")), Want(me="alice"), SNAP.time)
    assert one.rejected["0:3"] == "reserved by bob"
    assert "0:5" in {c.label for c in one.chosen}


def test_an_intruder_on_a_reserved_instance_is_warned() -> None:
    out = reservation_warnings(_held(_mig_res(2, "alice")), SNAP.time, "alice")
    assert [(w.code, w.gpu) for w in out] == [("reserved-by-other", 0)]
    assert "carol runs pid" in out[0].message and "GPU 0:2" in out[0].message
    # bob on 0:1 does not intrude on alice's 0:2
    assert all("bob" not in w.message for w in out)


# -- the store -----------------------------------------------------------------------------


def _uuid(slot: int, card: int = 0) -> str:
    return str(SNAP.gpus[card].mig_devices[slot].uuid)


def test_reserve_a_mig_device_by_label_and_uuid(directory: str) -> None:  # noqa: F811
    now = time.time()
    out = store.reserve(directory, ["0:3"], now + 600, gpu_uuids=UUIDS, mig_devices=MIGS)
    assert out["ok"], out
    (held,) = store.list_active(directory, now)
    assert (held["gpu"], held["mig_device"], held["mig_uuid"]) == (0, 3, _uuid(3))
    assert held["gpu_uuid"] == UUIDS[0]
    assert os.path.exists(os.path.join(directory, f"{_uuid(3)}.1.json"))
    assert Reservation.from_dict(held).label == "0:3"
    again = store.reserve(directory, [_uuid(3)], now + 900, gpu_uuids=UUIDS, mig_devices=MIGS)
    assert again["ok"] and "extended GPU 0:3" in again["message"]
    bad = store.reserve(directory, ["0:9"], now + 600, gpu_uuids=UUIDS, mig_devices=MIGS)
    assert bad["ok"] is False and "no MIG device 0:9" in bad["message"]
    released = store.release(directory, ["0:3"], gpu_uuids=UUIDS, mig_devices=MIGS)
    assert released["ok"] and "released GPU 0:3" in released["message"]


def test_parent_and_instance_exclude_each_other_across_users(
    directory: str, workers: WorkerPool  # noqa: F811
) -> None:
    now = time.time()
    alice, bob = workers[ALICE], workers[NOBODY]
    args: dict[str, Any] = {"gpu_uuids": UUIDS, "mig_devices": MIGS}
    assert alice.call("reserve", gpus=["0:1"], until=now + 600, note="", **args)["ok"]
    out = bob.call("reserve", gpus=[0], until=now + 600, note="", **args)
    assert out["ok"] is False and out["holder"] == f"uid {ALICE}"
    assert bob.call("reserve", gpus=["0:2"], until=now + 600, note="", **args)["ok"]
    # the card of someone else's instance, and an instance of someone else's card
    assert alice.call("reserve", gpus=[1], until=now + 600, note="", **args)["ok"]
    out = bob.call("reserve", gpus=["1:0"], until=now + 600, note="", **args)
    assert out["ok"] is False and "GPU 1:0 is reserved by" in out["message"]
    # my own card's instance is fine
    assert alice.call("reserve", gpus=["1:0"], until=now + 600, note="", **args)["ok"]
    held = {(r["gpu"], r["mig_device"]): r["uid"] for r in store.list_active(directory, now)}
    assert held == {(0, 1): ALICE, (0, 2): NOBODY, (1, None): ALICE, (1, 0): ALICE}


def test_race_between_a_parent_and_its_instance(
    directory: str, workers: WorkerPool  # noqa: F811
) -> None:
    args: dict[str, Any] = {"gpu_uuids": UUIDS, "mig_devices": MIGS}
    alice, bob = workers[ALICE], workers[NOBODY]
    until = time.time() + 3600
    for round_no in range(10):
        card = round_no % 2  # cards 0 and 1 are both in MIG mode
        slot = f"{card}:0"
        # both are blocked on stdin, then wake up together
        alice.send("reserve", gpus=[card], until=until, note="", **args)
        bob.send("reserve", gpus=[slot], until=until, note="", **args)
        answers = [alice.read(), bob.read()]
        assert sum(a["ok"] for a in answers) == 1, answers
        active = store.list_active(directory)
        assert len(active) == 1
        winner = "uid 10019" if answers[0]["ok"] else "nobody"
        assert answers[1 if answers[0]["ok"] else 0]["holder"] == winner
        # root releases anyone's: the next round starts empty
        assert store.release(directory, [card, slot], **args)["ok"]
        assert store.list_active(directory) == []
    assert store.scan(directory)["problems"] == []


def test_a_mig_record_must_say_its_device(directory: str) -> None:  # noqa: F811
    now = time.time()
    store.ensure_directory(directory)
    record = {"gpu": 0, "uuid": _uuid(4), "user": "root", "uid": 0, "since": now,
              "until": now + 60, "note": "", "host": "h"}  # no mig_device
    Path(directory, f"{_uuid(4)}.1.json").write_text(json.dumps(record))
    found = store.scan(directory, now)
    assert found["reservations"] == []
    assert "'mig_device' must be given" in found["problems"][0]


# -- the command line ----------------------------------------------------------------------


def _pick(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.yaml"
    config.write_text(f"reservations: {{dir: {tmp_path / 'store'}}}\n")
    return subprocess.run(
        [sys.executable, "-m", "gputop.cli", "pick", "--demo", "mig", "--config", str(config),
         *args], capture_output=True, text=True, timeout=60, cwd=REPO)


def test_pick_prints_mig_uuids(tmp_path: Path) -> None:
    out = _pick(tmp_path, "--count", "1", "--min-free-mem", "9G", "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["mig_uuid"].startswith("MIG-") and row["mem_free"] >= 9 * GIB
    plain = _pick(tmp_path, "--count", "1", "--min-free-mem", "9G")
    assert plain.stdout == f"CUDA_VISIBLE_DEVICES={row['mig_uuid']}\n"


def test_one_answer_is_whole_cards_or_one_mig_device_never_both(tmp_path: Path) -> None:
    # Issue 25: "--count 2" once printed "2,MIG-...": a CUDA process sees one MIG device
    # and nothing beside it.  Card 2 is the only free whole card; four MIG devices are free.
    two = _pick(tmp_path, "--count", "2")
    assert two.returncode == 4 and two.stdout == ""
    assert "only 1 of 2 requested GPUs qualify (GPU 0: in MIG mode" in two.stderr
    assert ("4 MIG device(s) qualify, but one process sees only one MIG device: ask for one"
            " (--count 1) per process") in two.stderr
    # Fit first: one GPU asked for, a MIG device is enough; --whole asks for the card.
    one = _pick(tmp_path, "--count", "1", "--json")
    assert [r["mig_uuid"] is not None for r in json.loads(one.stdout)] == [True]
    whole = _pick(tmp_path, "--count", "1", "--whole", "--json")
    assert [(r["index"], r["mig_uuid"]) for r in json.loads(whole.stdout)] == [(2, None)]
    for count in ("1", "2", "4"):
        for extra in ((), ("--min-free-mem", "9G"), ("--share",), ("--whole",)):
            out = _pick(tmp_path, "--count", count, "--json", *extra)
            if out.returncode == 0:
                rows = json.loads(out.stdout)
                kinds = {r["mig_uuid"] is None for r in rows}
                assert len(rows) == int(count) and len(kinds) == 1, (count, extra, rows)
                assert kinds == {True} or len(rows) == 1
            else:
                assert out.returncode == 4, out.stderr


def test_choose_is_the_one_rule() -> None:
    """pick's pure rule on the simulator's MIG node (card 2 free, card 3 bob's)."""
    from gputop.analysis.pick import choose

    one = choose(SNAP, Want(1), SNAP.time)
    assert [u.label for u in one.units] == ["0:3"]  # most free first; a MIG device fits
    assert [u.label for u in choose(SNAP, Want(1, whole=True), SNAP.time).units] == ["2"]
    assert choose(SNAP, Want(2), SNAP.time).units == ()
    # --share lets bob's card 3 in (limits or not), and then two whole cards qualify
    shared = choose(SNAP, Want(2, share=True), SNAP.time)
    assert sorted(u.label for u in shared.units) == ["2", "3"]
    # a request no MIG device meets takes a whole card
    big = choose(SNAP, Want(1, min_free_mem=40 * GIB), SNAP.time)
    assert [u.label for u in big.units] == ["2"]
