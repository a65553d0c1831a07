"""Injected faults fire as a real driver would report them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gputop.sources import sim

T0 = 1_764_680_000.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def start(name: str, clock: Clock) -> sim.SimNvml:
    nv = sim.SimNvml(sim.load_scenario(name), clock=clock)
    nv.nvmlInit()
    return nv


# Calls that take one handle, as the collector makes them.
PER_HANDLE: list[Callable[[sim.SimNvml, Any], Any]] = [
    lambda nv, h: nv.nvmlDeviceGetName(h),
    lambda nv, h: nv.nvmlDeviceGetUUID(h),
    lambda nv, h: nv.nvmlDeviceGetPciInfo(h),
    lambda nv, h: nv.nvmlDeviceGetUtilizationRates(h),
    lambda nv, h: nv.nvmlDeviceGetMemoryInfo(h),
    lambda nv, h: nv.nvmlDeviceGetTemperature(h, sim.NVML_TEMPERATURE_GPU),
    lambda nv, h: nv.nvmlDeviceGetPowerUsage(h),
    lambda nv, h: nv.nvmlDeviceGetClockInfo(h, sim.NVML_CLOCK_SM),
    lambda nv, h: nv.nvmlDeviceGetPerformanceState(h),
    lambda nv, h: nv.nvmlDeviceGetComputeRunningProcesses(h),
    lambda nv, h: nv.nvmlDeviceGetTotalEccErrors(
        h, sim.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, sim.NVML_VOLATILE_ECC
    ),
    lambda nv, h: nv.nvmlDeviceGetNvLinkState(h, 0),
    lambda nv, h: nv.nvmlDeviceGetCurrPcieLinkWidth(h),
]


def test_gpu_is_lost_after_the_configured_time_and_only_that_gpu() -> None:
    clock = Clock()
    nv = start("faulty", clock)
    lost = nv.nvmlDeviceGetHandleByIndex(6)
    clock.t = T0 + 19.9
    for call in PER_HANDLE:
        call(nv, lost)  # still fine just before
    clock.t = T0 + 20.0
    for call in PER_HANDLE:
        with pytest.raises(sim.NVMLError_GpuIsLost):
            call(nv, lost)
    with pytest.raises(sim.NVMLError_GpuIsLost):
        nv.nvmlDeviceGetHandleByIndex(6)
    assert nv.nvmlDeviceGetCount() == 8  # a lost card is still counted
    other = nv.nvmlDeviceGetHandleByIndex(7)
    for call in PER_HANDLE:
        call(nv, other)


def test_lose_gpu_at_runtime() -> None:
    clock = Clock()
    nv = start("dgx-h100", clock)
    h = nv.nvmlDeviceGetHandleByIndex(2)
    nv.lose_gpu(2, at=T0 + 5)
    assert nv.nvmlDeviceGetName(h)
    clock.t = T0 + 5
    with pytest.raises(sim.NVMLError_GpuIsLost) as err:
        nv.nvmlDeviceGetName(h)
    assert err.value.value == sim.NVML_ERROR_GPU_IS_LOST


def _register_all(nv: sim.SimNvml) -> sim.SimEventSet:
    events = nv.nvmlEventSetCreate()
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        nv.nvmlDeviceRegisterEvents(h, sim.nvmlEventTypeXidCriticalError, events)
    return events


def _drain(nv: sim.SimNvml, events: sim.SimEventSet) -> list[tuple[int, int]]:
    got = []
    while True:
        try:
            data = nv.nvmlEventSetWait_v2(events, 0)
        except sim.NVMLError_Timeout:
            return got
        assert data.eventType == sim.nvmlEventTypeXidCriticalError
        got.append((nv.nvmlDeviceGetIndex(data.device), data.eventData))


def test_xid_events_arrive_in_time_order_once_per_event_set() -> None:
    clock = Clock()
    nv = start("faulty", clock)
    events = _register_all(nv)
    with pytest.raises(sim.NVMLError_Timeout):
        nv.nvmlEventSetWait(events, 0)
    clock.t = T0 + 6
    assert _drain(nv, events) == [(6, 48)]
    clock.t = T0 + 19.5
    assert _drain(nv, events) == [(3, 94), (6, 79)]
    clock.t = T0 + 60
    assert _drain(nv, events) == []  # each event once
    late = nv.nvmlEventSetCreate()
    nv.nvmlDeviceRegisterEvents(
        nv.nvmlDeviceGetHandleByIndex(3), sim.nvmlEventTypeXidCriticalError, late
    )
    assert _drain(nv, late) == [(3, 94)]  # another set sees only its registered GPU
    nv.nvmlEventSetFree(late)
    with pytest.raises(sim.NVMLError_InvalidArgument):
        nv.nvmlEventSetWait(late, 0)


def test_xid_injected_at_runtime_and_wait_times_out_after_its_timeout() -> None:
    clock = Clock()
    nv = start("dgx-h100", clock)
    events = _register_all(nv)
    with pytest.raises(sim.NVMLError_Timeout):
        nv.nvmlEventSetWait_v2(events, 30)  # a real (short) wait with nothing pending
    nv.add_xid(4, 119)
    assert _drain(nv, events) == [(4, 119)]


def test_registering_an_unsupported_event_type_is_not_supported() -> None:
    nv = start("lab", Clock())
    h = nv.nvmlDeviceGetHandleByIndex(0)
    assert not nv.nvmlDeviceGetSupportedEventTypes(h) & sim.nvmlEventTypeDoubleBitEccError
    with pytest.raises(sim.NVMLError_NotSupported):
        nv.nvmlDeviceRegisterEvents(h, sim.nvmlEventTypeDoubleBitEccError, nv.nvmlEventSetCreate())


def test_not_supported_injected_at_runtime_by_any_spelling() -> None:
    nv = start("lab", Clock())
    h = nv.nvmlDeviceGetHandleByIndex(2)
    assert nv.nvmlDeviceGetFanSpeed_v2(h, 0) >= 0
    nv.set_not_supported(2, "fan_speed")
    for call in (lambda: nv.nvmlDeviceGetFanSpeed(h), lambda: nv.nvmlDeviceGetFanSpeed_v2(h, 1)):
        with pytest.raises(sim.NVMLError_NotSupported) as err:
            call()
        assert err.value.value == sim.NVML_ERROR_NOT_SUPPORTED
    other = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceGetFanSpeed(other) >= 0  # only GPU 2
    nv.set_not_supported(2, "nvmlDeviceGetFanSpeed_v2", on=False)
    assert nv.nvmlDeviceGetFanSpeed(h) >= 0
    nv.set_not_supported(None, "PowerUsage")
    for i in range(4):
        with pytest.raises(sim.NVMLError_NotSupported):
            nv.nvmlDeviceGetPowerUsage(nv.nvmlDeviceGetHandleByIndex(i))


def _scenario_file(tmp_path: Path, extra: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\n"
        "gpus:\n  - {numa: 0}\n  - {numa: 0}\n"
        "processes:\n"
        "  - {pid: 5000001, user: alice, cmdline: python a.py, gpus: {0: 100}, util: [10, 20]}\n"
        "  - {pid: 5000002, user: alice, cmdline: python b.py, gpus: {0: 200}, util: [10, 20],\n"
        "     vanish_after_list: true}\n" + extra
    )
    return str(path)


def test_not_supported_from_the_scenario_file(tmp_path: Path) -> None:
    path = _scenario_file(
        tmp_path,
        "faults:\n  not_supported:\n"
        "    - {gpu: 1, fields: [Temperature, TotalEccErrors]}\n"
        "    - {gpu: all, fields: [PcieThroughput]}\n",
    )
    nv = sim.SimNvml(sim.load_scenario(path), clock=Clock())
    nv.nvmlInit()
    h0, h1 = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
    assert nv.nvmlDeviceGetTemperature(h0, sim.NVML_TEMPERATURE_GPU) > 0
    with pytest.raises(sim.NVMLError_NotSupported):
        nv.nvmlDeviceGetTemperature(h1, sim.NVML_TEMPERATURE_GPU)
    with pytest.raises(sim.NVMLError_NotSupported):
        nv.nvmlDeviceGetTotalEccErrors(h1, 1, 0)
    for h in (h0, h1):
        with pytest.raises(sim.NVMLError_NotSupported):
            nv.nvmlDeviceGetPcieThroughput(h, sim.NVML_PCIE_UTIL_RX_BYTES)


def test_driver_not_loaded(tmp_path: Path) -> None:
    path = _scenario_file(tmp_path, "faults:\n  driver_not_loaded: true\n")
    nv = sim.SimNvml(sim.load_scenario(path), clock=Clock())
    with pytest.raises(sim.NVMLError_DriverNotLoaded) as err:
        nv.nvmlInit()
    assert str(err.value) == "Driver Not Loaded"
    with pytest.raises(sim.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()


def test_a_process_vanishes_between_the_list_and_the_utilization_call(tmp_path: Path) -> None:
    nv = sim.SimNvml(sim.load_scenario(_scenario_file(tmp_path, "")), clock=Clock())
    nv.nvmlInit()
    procs = sim.SimProcs(nv)
    h = nv.nvmlDeviceGetHandleByIndex(0)
    listed = {p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h)}
    assert listed == {5000001, 5000002}
    sampled = {s.pid for s in nv.nvmlDeviceGetProcessUtilization(h, 0)}
    assert sampled == {5000001}
    assert set(procs.process_info(listed)) == {5000001}
    assert {p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h)} == {5000001}


def test_faulty_node_health_facts() -> None:
    nv = start("faulty", Clock())
    h = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    unc, vol = sim.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, sim.NVML_VOLATILE_ECC
    assert nv.nvmlDeviceGetTotalEccErrors(h[2], unc, vol) == 3
    assert nv.nvmlDeviceGetTotalEccErrors(h[0], unc, vol) == 0
    assert nv.nvmlDeviceGetRemappedRows(h[2]) == (1, 4, 1, 0)
    assert nv.nvmlDeviceGetCurrPcieLinkGeneration(h[5]) == 1
    assert nv.nvmlDeviceGetCurrPcieLinkWidth(h[5]) == 4
    assert nv.nvmlDeviceGetMaxPcieLinkGeneration(h[5]) == 4
    assert nv.nvmlDeviceGetMaxPcieLinkWidth(h[5]) == 16
    assert nv.nvmlDeviceGetCurrPcieLinkWidth(h[4]) == 16
    states = [nv.nvmlDeviceGetNvLinkState(h[4], link) for link in range(12)]
    assert states.count(sim.NVML_FEATURE_DISABLED) == 1 and states[7] == 0
    for peer in (0, 5):
        assert all(nv.nvmlDeviceGetNvLinkState(h[peer], link) for link in range(12))
    assert {nv.nvmlDeviceGetPersistenceMode(x) for x in h} == {sim.NVML_FEATURE_DISABLED}
    nv.set_nvlink_down(4, 7, down=False)
    assert nv.nvmlDeviceGetNvLinkState(h[4], 7) == sim.NVML_FEATURE_ENABLED


def test_consumer_cards_have_no_ecc_and_no_nvlink() -> None:
    nv = start("lab", Clock())
    h = nv.nvmlDeviceGetHandleByIndex(0)
    for call in (
        lambda: nv.nvmlDeviceGetEccMode(h),
        lambda: nv.nvmlDeviceGetTotalEccErrors(h, 1, 0),
        lambda: nv.nvmlDeviceGetRetiredPages(h, 1),
        lambda: nv.nvmlDeviceGetRemappedRows(h),
        lambda: nv.nvmlDeviceGetNvLinkState(h, 0),
        lambda: nv.nvmlDeviceGetSerial(h),
    ):
        with pytest.raises(sim.NVMLError_NotSupported):
            call()
    h3 = nv.nvmlDeviceGetHandleByIndex(3)
    with pytest.raises(sim.NVMLError_NotSupported):
        nv.nvmlDeviceGetEncoderUtilization(h3)
    assert nv.nvmlDeviceGetEncoderUtilization(h)[0] == 0
