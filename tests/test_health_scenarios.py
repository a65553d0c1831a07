"""Health rules on snapshots the real collector produces from the simulator's scenarios.

The clock is a plain variable: moving it forward delivers the faulty node's timed XIDs and
its lost GPU without sleeping.
"""

from __future__ import annotations

import dataclasses

import pytest

from gputop.analysis import health
from gputop.analysis.health import Thresholds, WarningTracker
from gputop.analysis.history import History
from gputop.model import CRITICAL, INFO, WARNING, HostSnapshot
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector

START = 1_764_680_000.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


class Node:
    """One simulated host: scenario + SimNvml + the real collector, on a test clock."""

    def __init__(self, scenario: str) -> None:
        self.clock = Clock()
        self.nvml = sim.SimNvml(sim.load_scenario(scenario), clock=self.clock)
        self.collector = nvml_collector(
            self.nvml, sim.SimProcs(self.nvml), host=scenario, demo=True, clock=self.clock
        )

    def snapshot(self, at: float | None = None) -> HostSnapshot:
        if at is not None:
            self.clock.now = START + at
        return HostSnapshot.from_dict(self.collector.collect())


def by_code(found: list) -> dict[tuple[str, int | None], str]:
    return {(w.code, w.gpu): w.severity for w in found}


def test_faulty_node_criticals_over_time() -> None:
    node = Node("faulty")
    tracker = WarningTracker(linger=30, xid_hold=3600)
    first = node.snapshot(at=0)
    found = health.warnings(first)
    codes = by_code(found)
    assert codes[("ecc-uncorrected", 2)] == CRITICAL
    assert codes[("remap-pending", 2)] == CRITICAL
    assert codes[("pcie-width", 5)] == WARNING
    assert codes[("nvlink-down", 4)] == WARNING
    # persistence is off on all eight cards: one host-level line, not eight
    assert codes[("persistence-off", None)] == INFO
    assert len([w for w in found if w.code == "persistence-off"]) == 1
    assert ("gpu-lost", 6) not in codes  # not yet
    tracker.update(first.host, found, first.time)

    seen: set[tuple[str, int | None]] = set()
    for at in (6, 9, 19.5, 21):
        snap = node.snapshot(at=at)
        fresh = health.warnings(snap)
        seen |= set(by_code(fresh))
        tracker.update(snap.host, fresh, snap.time)
    assert {("xid-48", 6), ("xid-94", 3), ("xid-79", 6), ("gpu-lost", 6)} <= seen
    current = by_code(tracker.current())
    # XIDs are one-off events: the tracker keeps them after their snapshot has passed
    assert current[("xid-48", 6)] == CRITICAL
    assert current[("xid-94", 3)] == CRITICAL
    assert current[("xid-79", 6)] == CRITICAL
    assert current[("gpu-lost", 6)] == CRITICAL
    xid79 = next(w for w in tracker.current() if w.code == "xid-79")
    assert "fallen off the bus" in xid79.message
    assert xid79.since == pytest.approx(START + 19, abs=1.5)


def test_faulty_node_pcie_gen_is_reported_while_busy() -> None:
    snap = Node("faulty").snapshot(at=0)
    gpu5 = snap.gpu(5)
    assert gpu5 is not None and gpu5.pcie_gen == 1 and gpu5.pcie_width == 4
    busy = dataclasses.replace(gpu5, util_gpu=90)
    idle = dataclasses.replace(gpu5, util_gpu=0)
    assert ("pcie-gen", 5) in by_code(health.warnings(_only(snap, busy)))
    assert ("pcie-gen", 5) not in by_code(health.warnings(_only(snap, idle)))


def _only(snap: HostSnapshot, gpu) -> HostSnapshot:  # type: ignore[no-untyped-def]
    return dataclasses.replace(snap, gpus=(gpu,), processes=(), xid_events=())


@pytest.mark.parametrize("scenario", ["dgx-h100", "lab"])
def test_healthy_scenarios_have_no_critical(scenario: str) -> None:
    node = Node(scenario)
    history = History(seconds=600)
    for at in (0, 1, 2, 30, 60):
        snap = node.snapshot(at=at)
        history.add(snap)
        found = health.warnings(snap, history, Thresholds(), snap.time)
        assert [w for w in found if w.severity == CRITICAL] == [], found
        # no hardware fault codes on cards that are fine
        bad = {"gpu-lost", "ecc-uncorrected", "remap-pending", "remap-failure",
               "retired-pages-pending", "pcie-width", "pcie-gen", "nvlink-down",
               "fan-stopped", "power-brake", "hw-slowdown", "temp-shutdown"}
        assert not bad & {w.code for w in found}, found


def test_dgx_node_holding_most_memory_is_quiet() -> None:
    snap = Node("dgx-h100").snapshot(at=0)
    assert all((g.mem_percent or 0) > 80 for g in snap.gpus)  # busy: the case at stake
    assert health.warnings(snap) == []
    # the classic alert is one config key away, and reads the config
    loud = health.warnings(snap, None, Thresholds(mem_percent=80), snap.time)
    assert {w.code for w in loud} == {"mem-high"} and len(loud) == len(snap.gpus)


def test_lab_box_thermal_throttle_is_a_warning() -> None:
    snap = Node("lab").snapshot(at=0)
    found = health.warnings(snap)
    thermal = [w for w in found if w.code == "thermal-slowdown"]
    assert len(thermal) == 1
    assert thermal[0].severity == WARNING
    gpu = snap.gpu(thermal[0].gpu)  # type: ignore[arg-type]
    assert gpu is not None and gpu.clock_event_reasons
    assert {"hw_thermal_slowdown", "sw_thermal_slowdown"} & set(gpu.clock_event_reasons)


def test_injected_faults_on_a_healthy_node() -> None:
    node = Node("dgx-h100")
    node.nvml.set_nvlink_down(3, 5)
    node.nvml.add_xid(1, 13, at=START + 1)
    node.nvml.add_xid(2, 74, at=START + 1)
    node.snapshot(at=0)
    snap = node.snapshot(at=2)
    codes = by_code(health.warnings(snap))
    assert codes[("nvlink-down", 3)] == WARNING
    assert codes[("xid-13", 1)] == WARNING  # the application's fault
    assert codes[("xid-74", 2)] == CRITICAL
    node.nvml.lose_gpu(7)
    codes = by_code(health.warnings(node.snapshot(at=3)))
    assert codes[("gpu-lost", 7)] == CRITICAL


def test_unsupported_fields_raise_no_alarm() -> None:
    node = Node("dgx-h100")
    for field in ("TotalEccErrors", "RemappedRows", "RetiredPagesPendingStatus",
                  "CurrPcieLinkWidth", "FanSpeed", "Temperature"):
        node.nvml.set_not_supported(None, field)
    snap = node.snapshot(at=0)
    assert all(g.ecc_volatile_uncorrected is None for g in snap.gpus)
    found = health.warnings(snap)
    assert not [w for w in found if w.severity == CRITICAL]
    assert "pcie-width" not in {w.code for w in found}


def test_idle_process_needs_observed_minutes() -> None:
    node = Node("lab")
    history = History(seconds=600, process_seconds=3 * 3600)
    found: list = []
    for minute in range(0, 45, 1):
        snap = node.snapshot(at=minute * 60)
        history.add(snap)
        found = health.warnings(snap, history, Thresholds(), snap.time)
    # the lab scenario has a card held at 0 % by a forgotten process
    idle = [w for w in found if w.code == "idle-memory"]
    assert idle, [w.code for w in found]
    assert all(w.severity == INFO and w.pid is not None for w in idle)
    assert all(w.since is not None and snap.time - w.since >= 30 * 60 for w in idle)
