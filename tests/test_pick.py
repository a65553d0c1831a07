"""Ranking free cards and the reservation warnings: pure functions on snapshots.

The snapshots are the simulator's (the same as --demo) or built by hand where one
field must be exactly so.
"""

from __future__ import annotations

import dataclasses

from gputop import model
from gputop.analysis.health.reservations import warnings as reservation_warnings
from gputop.analysis.pick import Want, pick, rank
from gputop.model import Gpu, GpuProcess, HostSnapshot, Reservation
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector

NOW = 1_764_680_000.0
GIB = 1 << 30


def _gpu(index: int, used_gib: float, util: int | None, **extra: object) -> Gpu:
    return Gpu(
        index=index,
        uuid=f"GPU-{index:04d}",
        mem_total=80 * GIB,
        mem_used=int(used_gib * GIB),
        util_gpu=util,
        **extra,  # type: ignore[arg-type]
    )


def _proc(gpu: int, pid: int, user: str | None, used_gib: float = 1) -> GpuProcess:
    return GpuProcess(pid=pid, gpu=gpu, user=user, gpu_mem=int(used_gib * GIB))


def _snap(gpus, processes=(), reservations=()) -> HostSnapshot:
    return HostSnapshot(
        host="node",
        time=NOW,
        gpus=tuple(gpus),
        processes=tuple(processes),
        reservations=tuple(reservations),
    )


def _res(gpu: int, user: str, minutes: float, note: str = "") -> Reservation:
    return Reservation(gpu=gpu, user=user, until=NOW + minutes * 60, since=NOW - 60, note=note)


def test_best_first_most_free_memory_then_lowest_util_then_index() -> None:
    snap = _snap([_gpu(0, 2, 0), _gpu(1, 0.5, 3), _gpu(2, 0.5, 1), _gpu(3, 0.5, 1)])
    assert rank(snap, Want(), NOW).indexes == [2, 3, 1, 0]
    assert [g.index for g in pick(snap, Want(2), NOW)] == [2, 3]


def test_without_filters_a_card_with_a_process_is_not_free() -> None:
    snap = _snap([_gpu(0, 30, 90), _gpu(1, 0.5, 0)], processes=[_proc(0, 100, "bob", 30)])
    ranking = rank(snap, Want(me="bob"), NOW)
    assert ranking.indexes == [1]
    assert ranking.rejected == {0: "1 process(es) running"}
    assert rank(snap, Want(me="ann"), NOW).rejected == {0: "in use by another user (bob)"}


def test_a_display_server_alone_does_not_make_a_card_busy() -> None:
    xorg = dataclasses.replace(_proc(0, 100, "root"), type="G")
    both = dataclasses.replace(_proc(1, 101, "bob"), type="C+G")
    snap = _snap([_gpu(0, 0.5, 0), _gpu(1, 0.5, 0)], processes=[xorg, both])
    assert rank(snap, Want(), NOW).indexes == [0]


def test_filters_allow_sharing_with_my_own_processes_within_limits() -> None:
    gpus = [_gpu(0, 30, 40), _gpu(1, 70, 10), _gpu(2, 10, 95), _gpu(3, 5, None)]
    procs = [_proc(i, 100 + i, "bob", gpu.mem_used / GIB) for i, gpu in enumerate(gpus)]
    snap = _snap(gpus, procs)
    ranking = rank(snap, Want(me="bob", min_free_mem=20 * GIB, max_util=50), NOW)
    assert ranking.indexes == [0]
    assert ranking.rejected[1] == "10.0 GiB free"
    assert ranking.rejected[2] == "95 % busy"
    assert ranking.rejected[3] == "utilization unknown"
    assert rank(snap, Want(me="bob", min_free_mem=20 * GIB), NOW).indexes == [3, 2, 0]


def test_filters_only_narrow_another_users_card_needs_share() -> None:
    # Issue 25: plain pick refuses bob's card; a stricter pick must not hand it out.
    snap = _snap([_gpu(0, 2, 98), _gpu(1, 0.5, 0)], [_proc(0, 100, "bob", 2)])
    assert rank(snap, Want(me="ann"), NOW).indexes == [1]
    for limits in ({"min_free_mem": GIB}, {"max_util": 100.0},
                   {"min_free_mem": GIB, "max_util": 100.0}):
        strict = rank(snap, Want(me="ann", **limits), NOW)  # type: ignore[arg-type]
        assert strict.indexes == [1], limits
        assert strict.rejected == {0: "in use by another user (bob)"}
        assert rank(snap, Want(me="ann", share=True, **limits), NOW).indexes == [1, 0]  # type: ignore[arg-type]
    # --share alone: any card, best first; a process of an unknown user is not mine.
    assert rank(snap, Want(me="ann", share=True), NOW).indexes == [1, 0]
    nobody = _snap([_gpu(0, 2, 0)], [dataclasses.replace(_proc(0, 100, "x"), user=None)])
    assert rank(nobody, Want(me="ann", min_free_mem=GIB), NOW).rejected == {
        0: "in use by another user (a process of a user gputop cannot see)"}


def test_a_hidden_process_beside_a_named_user_is_said_as_such() -> None:
    # Issue 39.7: "(an unknown user, bob)" read as two users, one called "an unknown user".
    hidden = [dataclasses.replace(_proc(0, 100, "x"), user=None, pid=pid) for pid in (7, 8)]
    one = _snap([_gpu(0, 2, 0)], [_proc(0, 100, "bob"), hidden[0]])
    assert rank(one, Want(me="ann"), NOW).rejected == {
        0: "in use by another user (bob and a process of a user gputop cannot see)"}
    two = _snap([_gpu(0, 2, 0)], [_proc(0, 100, "bob"), _proc(0, 100, "carol"), *hidden])
    assert rank(two, Want(me="ann"), NOW).rejected == {
        0: "in use by another user (bob, carol and 2 processes of users gputop cannot see)"}


def test_filter_limits_are_inclusive_and_unknown_memory_is_refused() -> None:
    # 20 GiB free exactly, 50 % exactly: "at least 20G free", "at most 50 % busy".
    # Cards 0 and 1 hold my own jobs: with limits I may share them.
    gpus = [_gpu(0, 60, 50), _gpu(1, 60.5, 10), _gpu(2, 0, 51),
            dataclasses.replace(_gpu(3, 0, 0), mem_used=None)]
    mine = [_proc(0, 100, "ann", 60), _proc(1, 101, "ann", 60.5)]
    ranking = rank(_snap(gpus, mine), Want(me="ann", min_free_mem=20 * GIB, max_util=50), NOW)
    assert ranking.indexes == [0]
    assert ranking.rejected == {1: "19.5 GiB free", 2: "51 % busy", 3: "memory unknown"}


def test_lost_reserved_and_critical_cards_are_never_picked() -> None:
    gpus = [
        _gpu(0, 0.5, 0),
        Gpu(index=1, state=model.GPU_LOST, error="fallen off the bus"),
        _gpu(2, 0.5, 0),
        _gpu(3, 0.5, 0),
        _gpu(4, 0.5, 0),
    ]
    critical = model.HealthWarning(severity=model.CRITICAL, code="ecc", message="ECC errors", gpu=3)
    minor = model.HealthWarning(severity=model.WARNING, code="pcie-width", message="x4", gpu=4)
    snap = _snap(gpus, reservations=[_res(0, "bob", 60), _res(2, "me", 60), _res(4, "bob", -1)])
    ranking = rank(snap, Want(me="me"), NOW, warnings=[critical, minor])
    # my own reservation is fine to pick; an expired one counts for nothing
    assert ranking.indexes == [2, 4]
    assert ranking.rejected == {
        0: "reserved by bob",
        1: "lost: fallen off the bus",
        3: "ECC errors",
    }
    assert "only 2 of 3 requested GPUs qualify (GPU 0: reserved by bob; " in ranking.shortfall(3)


def test_exclude() -> None:
    snap = _snap([_gpu(0, 0.5, 0), _gpu(1, 0.5, 0)])
    assert rank(snap, Want(exclude=frozenset([0])), NOW).indexes == [1]


def test_demo_scenario_free_cards() -> None:
    """faulty: GPUs 3, 4 and 7 run nothing; the others are busy."""
    clock = [NOW]
    nvml = sim.SimNvml(sim.load_scenario("faulty"), clock=lambda: clock[0])
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="faulty", demo=True,
                          clock=lambda: clock[0])
    snap = HostSnapshot.from_dict(collector.collect())
    assert sorted(rank(snap, Want(), NOW).indexes) == [3, 4, 7]


def test_a_card_whose_processes_could_not_be_read_is_never_picked() -> None:
    # faulty's GPU 3 runs nothing; make its process query fail as a stressed driver does:
    # it may be running a 20 GiB job, so it is "unknown", with the reason.
    clock = [NOW]
    nvml = sim.SimNvml(sim.load_scenario("faulty"), clock=lambda: clock[0])
    nvml.set_error(3, "ComputeRunningProcesses", sim.NVML_ERROR_UNKNOWN)
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="faulty", demo=True,
                          clock=lambda: clock[0])
    snap = HostSnapshot.from_dict(collector.collect())
    gpu3 = snap.gpu(3)
    assert gpu3 is not None and gpu3.state == model.GPU_OK
    assert "ComputeRunningProcesses" in (gpu3.processes_error or "")
    ranking = rank(snap, Want(), NOW)
    assert sorted(ranking.indexes) == [4, 7]
    assert ranking.rejected[3].startswith("processes unknown (")
    assert "GPU 3: processes unknown" in ranking.shortfall(3)
    # a filter that would share the card does not make an unknown card acceptable
    assert 3 not in rank(snap, Want(min_free_mem=GIB, max_util=100), NOW).indexes
    # "not supported" is not an error: a card without the query is read as empty
    nvml.set_error(3, "ComputeRunningProcesses", None)
    nvml.set_not_supported(3, "ComputeRunningProcesses")
    snap = HostSnapshot.from_dict(collector.collect())
    assert snap.gpu(3).processes_error is None  # type: ignore[union-attr]
    assert 3 in rank(snap, Want(), NOW).indexes


def test_reservations_match_cards_by_uuid() -> None:
    # A store shared between hosts: bob reserved GPU 0 of another host (its UUID). The
    # same index here is another card, and free; the card with that UUID is reserved.
    other = dataclasses.replace(_res(0, "bob", 60), gpu_uuid="GPU-0001")
    snap = _snap([_gpu(0, 0.5, 0), _gpu(1, 0.5, 0)], reservations=[other])
    ranking = rank(snap, Want(me="me"), NOW)
    assert ranking.indexes == [0]
    assert ranking.rejected == {1: "reserved by bob"}
    # without a UUID on either side the index is all there is
    legacy = _snap([_gpu(0, 0.5, 0)], reservations=[_res(0, "bob", 60)])
    assert rank(legacy, Want(me="me"), NOW).rejected == {0: "reserved by bob"}


# -- warnings ---------------------------------------------------------------------------


def test_process_of_another_user_on_a_reserved_card() -> None:
    snap = _snap(
        [_gpu(0, 10, 50), _gpu(1, 10, 50)],
        processes=[_proc(0, 11, "alice"), _proc(0, 12, "carol"), _proc(0, 13, "carol"),
                   _proc(1, 14, "bob"), _proc(0, 15, None),
                   dataclasses.replace(_proc(0, 16, "root"), type="G")],
        reservations=[_res(0, "alice", 120), _res(1, "bob", 120)],
    )
    found = reservation_warnings(snap, NOW, "dave")
    assert [(w.code, w.gpu, w.pid, w.severity) for w in found] == [
        ("reserved-by-other", 0, 12, model.WARNING)
    ]
    assert found[0].message.startswith("carol runs pid 12, 13 on GPU 0, reserved by alice until")
    assert found[0].host == "node"


def test_my_reservation_expiring_soon() -> None:
    snap = _snap([_gpu(0, 1, 0), _gpu(1, 1, 0)],
                 reservations=[_res(0, "me", 14), _res(1, "me", 16)])
    found = reservation_warnings(snap, NOW, "me")
    assert [(w.code, w.gpu) for w in found] == [("reservation-expiring", 0)]
    assert found[0].message == "your reservation of GPU 0 ends in 14m00s"
    # someone else's expiring reservation is their business
    assert reservation_warnings(snap, NOW, "other") == []
    assert reservation_warnings(snap, NOW, None) == []


def test_reservation_on_a_lost_card() -> None:
    lost = Gpu(index=0, state=model.GPU_LOST, error="fallen off the bus")
    snap = _snap([lost], reservations=[_res(0, "bob", 120)])
    (warning,) = reservation_warnings(snap, NOW, "me")
    assert warning.code == "reservation-gpu-lost"
    assert warning.message == "GPU 0 reserved by bob is lost"


def test_expired_reservations_give_no_warnings() -> None:
    snap = _snap([Gpu(index=0, state=model.GPU_LOST)], processes=[_proc(0, 5, "x")],
                 reservations=[_res(0, "me", -5)])
    assert reservation_warnings(snap, NOW, "me") == []


def test_health_includes_reservation_warnings() -> None:
    from gputop.analysis import health

    snap = _snap([_gpu(0, 10, 50)], processes=[_proc(0, 12, "carol")],
                 reservations=[_res(0, "alice", 120)])
    snap = dataclasses.replace(snap, xid_watched=True)
    codes = [w.code for w in health.warnings(snap, None, None, NOW, "alice")]
    assert "reserved-by-other" in codes
