"""Issue 19: MIG devices collected through the NVML API, from the simulator and from
gputop's fake driver (tests/fakenvml) read by the real pynvml.

The simulator answers MIG calls as NVML's reference documents them
(https://docs.nvidia.com/deploy/nvml-api/, "Multi Instance GPU Management" and the device
queries): ``nvmlDeviceGetMigDeviceHandleByIndex`` returns NVML_ERROR_NOT_FOUND "if no
valid MIG device was found at index" and NVML_ERROR_INVALID_ARGUMENT for an invalid
index; ``nvmlDeviceGetUtilizationRates`` and ``nvmlDeviceGetProcessUtilization``: "On
MIG-enabled GPUs, querying device utilization rates is not currently supported"
(NOT_SUPPORTED); ``nvmlDeviceGetGpuInstanceId`` / ``GetComputeInstanceId`` on a handle
that is no MIG device: NOT_SUPPORTED, or INVALID_ARGUMENT ("device is invalid") on a
MIG-enabled parent, as the fake driver (checked against real captures) answers.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import fakenvml

from gputop.analysis import mig_display
from gputop.analysis.health import mig as mig_rules
from gputop.analysis.health import warnings
from gputop.model import HostSnapshot, mig_memory
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector
from gputop.sources.mig import NO_PERMISSION_NOTE, profile_of

T0 = 1_800_000_000.0
REPO = Path(__file__).resolve().parent.parent


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _collect(scenario: sim.Scenario | str, rounds: int = 2) -> HostSnapshot:
    clock = Clock()
    nvml = sim.SimNvml(scenario, clock=clock)
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="h", demo=True, clock=clock)
    data: dict[str, Any] = {}
    for _ in range(rounds):
        data = collector.collect()
        clock.now += 2.0
    return HostSnapshot.from_dict(data)


def _scenario(**gpu: Any) -> sim.Scenario:
    base = {"name": "t", "gpus": [{"name": "NVIDIA H100 80GB HBM3", **gpu}], "processes": []}
    return sim.scenario_from_dict(base)


# -- the simulator -------------------------------------------------------------------------


def test_mig_scenario_collects_instances_processes_and_modes() -> None:
    snap = _collect("mig")
    card0, card1, pending, whole = snap.gpus
    assert [d.label for d in card0.mig_devices] == [f"0:{i}" for i in range(7)]
    assert {d.profile for d in card0.mig_devices} == {"1g.10gb"}
    assert [(d.profile, d.gi) for d in card1.mig_devices] == [
        ("3g.40gb", 2), ("2g.20gb", 3), ("1g.10gb", 9), ("1g.10gb", 10)]
    assert card1.mig_devices[0].mem_total == 40320 << 20
    assert all(d.uuid and d.uuid.startswith("MIG-") for d in card0.mig_devices)
    assert card0.mig_free_slices == 0 and card1.mig_free_slices == 0
    # The card's utilization is not the instances': never shown for a MIG card.
    assert card0.util_gpu is None and card1.util_gpu is None and whole.util_gpu is not None
    assert (pending.mig_mode, pending.mig_mode_pending, pending.mig_devices) == (False, True, ())
    on = {p.pid: p for p in snap.processes}
    carol = on[6100003]
    assert (carol.gpu, carol.mig_device, carol.gpu_label) == (0, 2, "0:2")
    assert (carol.gpu_instance_id, carol.compute_instance_id) == (3, 0)
    assert carol.mig_uuid == card0.mig_devices[2].uuid
    assert carol.sm_util is None  # no per-process utilization in MIG mode
    assert on[6100031].gpu_label == "3" and on[6100031].mig_uuid is None
    # memory of an instance is its processes'
    used = sum(p.gpu_mem or 0 for p in snap.processes if p.mig_device == 2 and p.gpu == 0)
    assert card0.mig_devices[2].mem_used == used
    assert mig_memory(card1)[1] == sum(d.mem_total or 0 for d in card1.mig_devices)


def test_gpm_activity_needs_two_samples_and_a_supporting_card() -> None:
    first = _collect("mig", rounds=1)
    assert all(d.sm_active is None for d in first.gpus[0].mig_devices)
    snap = _collect("mig", rounds=2)
    busy = {d.index: d.sm_active for d in snap.gpus[0].mig_devices}
    assert busy[2] is not None and busy[2] >= 80  # a training run (util 80-95)
    assert busy[3] == 0  # nobody there
    assert all(d.sm_active is None for d in snap.gpus[1].mig_devices)  # no GPM on card 1
    assert mig_display.activity(snap.gpus[1].mig_devices[0]) == "n/a (MIG)"


def test_empty_slots_are_skipped_and_keep_their_numbers() -> None:
    snap = _collect(_scenario(mig=True, mig_devices=["3g.40gb", None, "1g.10gb"]))
    (card,) = snap.gpus
    assert [(d.index, d.gi) for d in card.mig_devices] == [(0, 1), (2, 3)]
    assert card.mig_free_slices == 3
    assert mig_display.summary(card) == "MIG on: 2 instances, 3 slices free"


def test_no_permission_is_said_on_the_card_and_warned() -> None:
    snap = _collect(_scenario(mig=True, mig_no_permission=True, mig_devices=["7g.80gb"]))
    (card,) = snap.gpus
    assert card.mig_devices == () and card.mig_note == NO_PERMISSION_NOTE
    assert "NVIDIA_MIG_MONITOR_DEVICES=all" in card.mig_note
    codes = {w.code for w in warnings(snap)}
    assert mig_rules.MIG_UNREADABLE in codes


def test_pending_mode_is_an_info_with_the_reset_hint() -> None:
    snap = _collect("mig")
    found = [w for w in warnings(snap) if w.code == mig_rules.MIG_PENDING]
    assert [(w.gpu, w.severity) for w in found] == [(2, "info")]
    assert "nvidia-smi -r -i 2" in (found[0].hint or "")


def test_sim_answers_mig_calls_as_nvml_documents() -> None:
    nvml = sim.SimNvml(_scenario(mig=True, mig_devices=["1g.10gb", None]))
    plain = sim.SimNvml(_scenario())
    nvml.nvmlInit()
    plain.nvmlInit()
    card = nvml.nvmlDeviceGetHandleByIndex(0)
    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(card, 0)
    assert nvml.nvmlDeviceGetMigDeviceHandleByIndex(card, 0) is mig  # same handle
    assert nvml.nvmlDeviceGetMigMode(card) == [1, 1]
    assert nvml.nvmlDeviceGetMaxMigDeviceCount(card) == 7
    assert nvml.nvmlDeviceIsMigDeviceHandle(mig) == 1
    assert nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig) is card
    assert nvml.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    assert (nvml.nvmlDeviceGetGpuInstanceId(mig), nvml.nvmlDeviceGetComputeInstanceId(mig)) \
        == (1, 0)
    cases = [
        (lambda: nvml.nvmlDeviceGetMigDeviceHandleByIndex(card, 1), sim.NVMLError_NotFound),
        (lambda: nvml.nvmlDeviceGetMigDeviceHandleByIndex(card, 7),
         sim.NVMLError_InvalidArgument),
        (lambda: plain.nvmlDeviceGetMigDeviceHandleByIndex(plain.nvmlDeviceGetHandleByIndex(0),
                                                           0), sim.NVMLError_InvalidArgument),
        (lambda: nvml.nvmlDeviceGetUtilizationRates(mig), sim.NVMLError_NotSupported),
        (lambda: nvml.nvmlDeviceGetUtilizationRates(card), sim.NVMLError_NotSupported),
        (lambda: nvml.nvmlDeviceGetProcessUtilization(card, 0), sim.NVMLError_NotSupported),
        (lambda: nvml.nvmlDeviceGetTemperature(mig, 0), sim.NVMLError_NotSupported),
        (lambda: nvml.nvmlDeviceGetGpuInstanceId(card), sim.NVMLError_InvalidArgument),
        (lambda: plain.nvmlDeviceGetGpuInstanceId(plain.nvmlDeviceGetHandleByIndex(0)),
         sim.NVMLError_NotSupported),
        (lambda: nvml.nvmlGpmMigSampleGet(card, 1, nvml.nvmlGpmSampleAlloc()),
         sim.NVMLError_NotSupported),  # this card's driver has no GPM
    ]
    for call, error in cases:
        with pytest.raises(error):
            call()
    assert nvml.nvmlGpmQueryDeviceSupport(card).isSupportedDevice == 0


@pytest.mark.parametrize(
    ("gpu", "process", "message"),
    [
        ({"mig_devices": ["1g.10gb"]}, None, "MIG devices need mig: true"),
        ({"mig": True, "mig_devices": ["1g.10"]}, None, "expected a profile"),
        ({"mig": True, "mig_devices": ["1g.10gb"] * 8}, None, "at most mig_max_devices"),
        ({"mig": True, "mig_devices": ["1g.10gb"]}, {"mig": 3}, "no MIG device 3"),
    ],
)
def test_bad_mig_scenarios_name_the_key(gpu: dict, process: dict | None, message: str) -> None:
    doc: dict[str, Any] = {"name": "t", "gpus": [gpu], "processes": []}
    if process is not None:
        doc["processes"] = [{"pid": 4000000, "user": "u", "cmdline": "x", "gpus": {0: 10},
                             **process}]
    with pytest.raises(sim.ScenarioError, match=message):
        sim.scenario_from_dict(doc)


def test_profile_from_the_driver_name() -> None:
    assert profile_of("NVIDIA A100-SXM4-40GB MIG 1g.5gb") == "1g.5gb"
    assert profile_of("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb") == "1c.3g.40gb"
    assert profile_of("NVIDIA H100 80GB HBM3") is None


# -- the fake driver, through the real pynvml --------------------------------------------------

COLLECT = """
import json, sys
import pynvml
from gputop.sources.hostsource import nvml_collector
from gputop.sources.procfs import ProcFs
collector = nvml_collector(pynvml, ProcFs())
collector.collect()
print(json.dumps(collector.collect()))
"""


def _fake_scenario() -> dict[str, Any]:
    """The fake's mig template with one empty slot on card 1, and card 4 (a copy of card 1)
    answering NoPermission for its MIG devices."""
    scenario = fakenvml.template("mig")
    scenario["devices"][1]["mig_devices"].insert(1, None)
    no_perm = copy.deepcopy(scenario["devices"][1])
    no_perm.update(uuid="GPU-e47a1d92-0000-4e38-b1f0-9a8c7d6e5f44", pci_bus_id="00000000:BB:00.0",
                   errors={"nvmlDeviceGetMigDeviceHandleByIndex": "NO_PERMISSION"})
    for dev in no_perm["mig_devices"]:
        if dev:
            dev["processes"] = []
    scenario["devices"].append(no_perm)
    return scenario


def _collect_fake(scenario: dict[str, Any], tmp_path: Path) -> HostSnapshot:
    """The second collect of a Collector on the real pynvml and the fake driver (real
    processes stand in for the scenario's)."""
    with fakenvml.processes(scenario):
        path = fakenvml.write_scenario(tmp_path / "mig.scenario", scenario)
        env = fakenvml.environment(path)
        env["PYTHONPATH"] = str(REPO)
        out = subprocess.run([sys.executable, "-c", COLLECT], env=env, capture_output=True,
                             text=True, timeout=120, check=True).stdout
    return HostSnapshot.from_dict(json.loads(out))


def test_collector_on_the_fake_driver_through_real_pynvml(tmp_path: Path) -> None:
    scenario = _fake_scenario()
    snap = _collect_fake(scenario, tmp_path)
    card0, card1, pending, whole, locked = snap.gpus
    spec0 = scenario["devices"][0]["mig_devices"]
    assert [d.gi for d in card0.mig_devices] == list(range(7, 14))
    assert [d.uuid for d in card0.mig_devices] == [m["uuid"] for m in spec0]
    assert card0.mig_devices[0].mem_total == 9856 << 20
    assert card0.mig_devices[6].bar1_total == 16384 << 20  # its own BAR1 in the scenario
    # the empty slot 1 of card 1 is skipped; the others keep their slot numbers
    assert [(d.index, d.profile) for d in card1.mig_devices] == [
        (0, "3g.40gb"), (2, "2g.20gb"), (3, "1g.10gb")]
    assert card0.util_gpu is None and whole.util_gpu is not None
    assert (pending.mig_mode, pending.mig_mode_pending) == (False, True)
    assert locked.mig_devices == () and locked.mig_note == NO_PERMISSION_NOTE
    by_pid = {p.pid: p for p in snap.processes}
    for device in card0.mig_devices + card1.mig_devices:
        spec = next(m for m in scenario["devices"][device.gpu]["mig_devices"]
                    if m and m["uuid"] == device.uuid)
        for proc in spec.get("processes") or ():
            seen = by_pid[proc["pid"]]
            assert (seen.gpu, seen.mig_device, seen.mig_uuid) == (device.gpu, device.index,
                                                                  device.uuid)
            assert (seen.gpu_instance_id, seen.compute_instance_id) == (device.gi, 0)
            assert seen.gpu_mem == proc["used_mib"] << 20
            assert seen.sm_util is None
    assert by_pid[scenario["devices"][3]["processes"][0]["pid"]].mig_device is None
    assert all(d.sm_active is None for d in card0.mig_devices)  # no "gpm" on the card


def test_gpm_activity_through_real_pynvml(tmp_path: Path) -> None:
    # GPM on card 0 only: each GPU instance's SM activity, from two samples a collect apart.
    scenario = fakenvml.template("mig")
    card0 = scenario["devices"][0]
    card0["gpm"] = True
    for dev, busy in zip(card0["mig_devices"], (0, 61, 88, 0, 37, 0, 5), strict=True):
        dev["sm_active"] = busy
    snap = _collect_fake(scenario, tmp_path)
    assert [d.sm_active for d in snap.gpus[0].mig_devices] == [0, 61, 88, 0, 37, 0, 5]
    assert all(d.sm_active is None for d in snap.gpus[1].mig_devices)


def test_mig_devices_from_a_hostile_probe_are_cleaned() -> None:
    gpu = {"index": 0, "mig_mode": True, "mig_devices": [
        "junk", {"gpu": 0, "index": "1"}, {"gpu": 0, "index": 2, "mem_used": "lots",
                                             "profile": "1g\x1b[31m.10gb", "gi": True}]}
    (card,) = HostSnapshot.from_dict({"host": "h", "time": 0.0, "gpus": [gpu]}).gpus
    (dev,) = card.mig_devices
    assert (dev.index, dev.mem_used, dev.gi) == (2, None, None)
    assert "\x1b" not in mig_display.describe(dev)
