"""The real HostAssembler against the simulator (the sim is the test double for NVML)."""

from __future__ import annotations

import copy
import time
from collections import Counter
from typing import Any

import pytest

from gputop import model
from gputop.model import HostSnapshot
from gputop.sources import nvml as nvml_source
from gputop.sources import sim
from gputop.sources.assembler import DEVSCAN_EVERY_S, HostAssembler, memory_unaccounted
from gputop.sources.backend import NoDriverError
from gputop.sources.hostsource import nvml_collector
from gputop.sources.nvml import cpulist, cuda_version_string, decode_clock_events, normalize_bus_id

T0 = 1_800_000_000.0
SCENARIOS = ("dgx-h100", "lab", "faulty")


class Clock:
    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class Counting:
    """Wraps a SimNvml and counts calls per function; can hide or corrupt functions.

    Hiding a function plays an older pynvml; corrupting one plays the driver bug the
    collector must survive.  Everything else is the simulator itself.
    """

    def __init__(
        self,
        inner: Any,
        hide: tuple[str, ...] = (),
        corrupt: dict[str, Any] | None = None,
    ) -> None:
        self._inner = inner
        self._hide = set(hide)
        self._corrupt = corrupt or {}
        self.calls: Counter[str] = Counter()
        self.args: dict[str, list[tuple]] = {}

    def __getattr__(self, name: str) -> Any:
        if name in self._hide:
            raise AttributeError(name)
        value = getattr(self._inner, name)
        if not name.startswith("nvml") or not callable(value):
            return value
        corrupt = self._corrupt.get(name)

        def call(*args: Any) -> Any:
            self.calls[name] += 1
            self.args.setdefault(name, []).append(args)
            result = value(*args)
            return corrupt(result) if corrupt else result

        return call


def make(
    scenario: str | sim.Scenario, clock: Clock | None = None, **proxy: Any
) -> tuple[HostAssembler, sim.SimNvml, Counting, Clock]:
    clock = clock or Clock()
    if isinstance(scenario, str):
        scenario = sim.load_scenario(scenario)
    nvml = sim.SimNvml(scenario, clock=clock)
    counting = Counting(nvml, **proxy)
    collector = nvml_collector(counting, sim.SimProcs(nvml), host="h", demo=True, clock=clock)
    return collector, nvml, counting, clock


def snap_of(collector: HostAssembler) -> HostSnapshot:
    return HostSnapshot.from_dict(collector.collect())


def field_names(cls: type) -> set[str]:
    import dataclasses

    return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_collects_a_complete_snapshot(name: str) -> None:
    collector, nvml, _, clock = make(name)
    first = collector.collect()
    clock.now += 1.0
    data = collector.collect()
    # The dict speaks the model's language exactly: no unknown keys anywhere.
    assert set(data) <= field_names(HostSnapshot)
    for gpu in data["gpus"]:
        assert set(gpu) <= field_names(model.Gpu)
        for link in gpu.get("nvlinks", ()):
            assert set(link) <= field_names(model.NvLink)
    for proc in data["processes"]:
        assert set(proc) <= field_names(model.GpuProcess)
    assert set(first) == set(data)

    snap = HostSnapshot.from_dict(data)
    scenario = nvml.scenario
    assert snap.state == model.HOST_OK
    assert snap.demo is True and snap.source == "sim"
    assert snap.hostname == scenario.host["hostname"]
    assert snap.driver_version == scenario.host["driver_version"]
    assert snap.cuda_version == scenario.host["cuda_version"]
    assert len(snap.gpus) == len(scenario.gpus)
    for gpu, spec in zip(snap.gpus, scenario.gpus, strict=True):
        assert gpu.state == model.GPU_OK
        assert gpu.name == spec["name"]
        assert gpu.mem_total == spec["mem_total_mib"] * 1024 * 1024
        assert 0 <= gpu.util_gpu <= 100
        assert 0 <= gpu.mem_used <= gpu.mem_total
        assert gpu.power_limit == pytest.approx(spec["power_limit_w"])
        assert gpu.temp_slowdown == spec["temp_slowdown"]
        assert gpu.clock_sm is not None and gpu.clock_sm <= gpu.clock_sm_max
        assert gpu.pcie_width is not None and gpu.pcie_width <= gpu.pcie_width_max
        assert gpu.clock_event_reasons is not None
        assert gpu.cpu_affinity is not None
        assert gpu.numa_node == spec["numa"]
    # Every simulated process the scenario lists on a GPU shows up, hidden ones marked.
    listed = {(p.gpu, p.pid) for p in snap.processes}
    expected = {
        (gpu, p["pid"]) for p in scenario.processes for gpu in p["gpus"] if p["state"] != "X"
    }
    assert listed == expected
    for proc in snap.processes:
        assert proc.simulated is True
        assert proc.type in ("C", "G", "C+G")
        assert proc.sm_util is not None
        if proc.visible:
            assert proc.user and proc.command and proc.start_ticks is not None
        else:
            assert proc.user is None and proc.command is None


def test_hidden_pid_is_kept_and_marked() -> None:
    collector, nvml, _, _ = make("lab")
    snap = snap_of(collector)
    hidden = [p for p in nvml.scenario.processes if p["hidden"]]
    assert hidden
    for spec in hidden:
        rows = [p for p in snap.processes if p.pid == spec["pid"]]
        assert rows and all(not p.visible for p in rows)
        assert rows[0].gpu_mem is not None


def test_zombie_and_jupyter_facts_come_through() -> None:
    collector, _, _, _ = make("lab")
    snap = snap_of(collector)
    states = {p.pid: p.state for p in snap.processes}
    assert "Z" in states.values()
    kernels = [p for p in snap.processes if p.kernel_file]
    assert len(kernels) >= 2
    assert {k.kernel_file_exists for k in kernels} == {True, False}
    assert all(k.kernel_file.endswith(".json") for k in kernels)


def test_injected_not_supported_is_none_for_that_field_only() -> None:
    collector, nvml, _, clock = make("dgx-h100")
    before = snap_of(collector)
    nvml.set_not_supported(0, "Temperature")
    nvml.set_not_supported(None, "PcieThroughput")
    clock.now += 1.0
    after = snap_of(collector)
    g0, g1 = after.gpus[0], after.gpus[1]
    assert before.gpus[0].temp is not None
    assert g0.temp is None
    assert g1.temp is not None
    assert g0.state == model.GPU_OK
    # Everything else on GPU 0 is still read.
    assert g0.util_gpu is not None and g0.mem_used is not None and g0.power_draw is not None
    assert g0.temp_slowdown is not None  # a threshold is another field
    assert all(g.pcie_tx_kbs is None and g.pcie_rx_kbs is None for g in after.gpus)
    assert all(g.pcie_gen is not None for g in after.gpus)


def test_consumer_card_unsupported_fields_are_none_not_zero() -> None:
    collector, _, _, _ = make("lab")
    snap = snap_of(collector)
    for gpu in snap.gpus:
        assert gpu.ecc_mode is None
        assert gpu.ecc_volatile_uncorrected is None
        assert gpu.retired_pages_dbe is None
        assert gpu.serial is None
        assert gpu.fan is not None and gpu.fans  # consumer cards do report fans


def test_gpu_lost_mid_run_marks_that_gpu_only() -> None:
    collector, nvml, _, clock = make("dgx-h100")
    first = snap_of(collector)
    lost_name, lost_uuid = first.gpus[2].name, first.gpus[2].uuid
    assert any(p.gpu == 2 for p in first.processes)
    nvml.lose_gpu(2)
    clock.now += 1.0
    snap = snap_of(collector)
    lost = snap.gpus[2]
    assert lost.state == model.GPU_LOST
    assert lost.error == nvml_source.LOST_TEXT  # in words, once: not NVML's "GPU is lost"
    # The card is still named, so the user knows which one fell off the bus.
    assert (lost.name, lost.uuid) == (lost_name, lost_uuid)
    assert lost.util_gpu is None and lost.mem_used is None
    assert not any(p.gpu == 2 for p in snap.processes)
    others = [g for g in snap.gpus if g.index != 2]
    assert all(g.state == model.GPU_OK and g.util_gpu is not None for g in others)
    assert snap.state == model.HOST_OK


def test_faulty_scenario_loses_gpu_6_after_20_seconds_and_reports_xids() -> None:
    collector, _, _, clock = make("faulty")
    snap = snap_of(collector)
    assert snap.xid_watched is True
    assert snap.xid_events == ()
    clock.now += 10
    snap = snap_of(collector)
    assert sorted((x.gpu, x.xid) for x in snap.xid_events) == [(3, 94), (6, 48)]
    clock.now += 1
    assert snap_of(collector).xid_events == ()  # delivered once
    clock.now += 20
    snap = snap_of(collector)
    assert [(x.gpu, x.xid) for x in snap.xid_events] == [(6, 79)]
    assert snap.gpus[6].state == model.GPU_LOST
    assert [g.index for g in snap.gpus if g.state != model.GPU_OK] == [6]
    g2 = snap.gpus[2]
    assert g2.ecc_volatile_uncorrected and g2.ecc_volatile_uncorrected > 0
    assert g2.remap_pending is True
    g5 = snap.gpus[5]
    assert (g5.pcie_gen, g5.pcie_width, g5.pcie_gen_max, g5.pcie_width_max) == (1, 4, 4, 16)
    down = [link.link for link in snap.gpus[4].nvlinks if link.active is False]
    assert down == [7]
    assert all(g.persistence_mode is False for g in snap.gpus if g.state == model.GPU_OK)


def test_lost_before_first_read_is_still_a_gpu_state() -> None:
    scenario = copy.deepcopy(sim.load_scenario("lab"))
    scenario.faults["lost"] = [{"gpu": 1, "after": 0}]
    collector, _, _, _ = make(scenario)
    snap = snap_of(collector)
    assert snap.gpus[1].state == model.GPU_LOST
    assert snap.gpus[1].name is None  # never read
    assert all(g.state == model.GPU_OK for g in snap.gpus if g.index != 1)
    assert snap.topology and all(1 not in (t.gpu_a, t.gpu_b) for t in snap.topology)


def test_driver_not_loaded_raises_no_driver_error() -> None:
    scenario = copy.deepcopy(sim.load_scenario("dgx-h100"))
    scenario.faults["driver_not_loaded"] = True
    with pytest.raises(NoDriverError) as err:
        make(scenario)
    message = str(err.value)
    # the library loaded, the kernel module is not there: a login node, not "no driver"
    assert "driver is not loaded" in message and "libnvidia-ml.so is installed" in message
    assert "no NVIDIA driver found" not in message and "--demo" in message
    assert "\n" not in message


def test_pids_vanishing_between_calls() -> None:
    collector, nvml, _, clock = make("dgx-h100")
    nvml.add_process(5_900_001, "dave", "python short.py", {1: 2048}, (50, 60))
    nvml.add_process(5_900_002, "dave", "python other.py", {1: 1024}, (10, 20))
    snap = snap_of(collector)
    assert {5_900_001, 5_900_002} <= {p.pid for p in snap.processes}
    nvml.remove_process(5_900_001)
    clock.now += 1
    snap = snap_of(collector)
    pids = {p.pid for p in snap.processes}
    assert 5_900_001 not in pids and 5_900_002 in pids
    assert snap.gpus[1].state == model.GPU_OK


def test_pid_gone_between_nvml_list_and_proc_read() -> None:
    scenario = copy.deepcopy(sim.load_scenario("dgx-h100"))
    victim = scenario.processes[-1]
    victim["vanish_after_list"] = True
    collector, _, _, clock = make(scenario)
    snap = snap_of(collector)
    rows = [p for p in snap.processes if p.pid == victim["pid"]]
    # NVML listed it, /proc no longer had it: kept for this tick and marked not visible.
    assert rows and all(not p.visible and p.user is None for p in rows)
    clock.now += 1
    assert victim["pid"] not in {p.pid for p in snap_of(collector).processes}


def test_static_fields_are_read_once() -> None:
    collector, _, counting, clock = make("dgx-h100")
    for _ in range(3):
        collector.collect()
        clock.now += 1
    n = 8
    calls = counting.calls
    for once in (
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetSerial",
        "nvmlDeviceGetPowerManagementLimitConstraints",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetCpuAffinity",
        "nvmlDeviceGetHandleByIndex",
    ):
        assert calls[once] == n, once
    assert calls["nvmlDeviceGetMaxClockInfo"] == 2 * n
    assert calls["nvmlDeviceGetTemperatureThreshold"] == 3 * n
    assert calls["nvmlDeviceGetNvLinkRemotePciInfo"] == 18 * n
    assert calls["nvmlSystemGetDriverVersion"] == 1
    assert calls["nvmlDeviceGetCount"] == 1
    assert calls["nvmlEventSetCreate"] == 1
    assert calls["nvmlDeviceGetTopologyCommonAncestor"] <= 28  # NVLink pairs need none
    # ...while what changes is read every time.
    assert calls["nvmlDeviceGetUtilizationRates"] == 3 * n
    # Discovery probes 18 links plus the 19th that answers "no such link", once.
    assert calls["nvmlDeviceGetNvLinkState"] == 3 * 18 * n + 19 * n
    assert calls["nvmlEventSetWait"] == 3


def test_process_utilization_passes_the_last_timestamp() -> None:
    collector, _, counting, clock = make("dgx-h100")
    snap = snap_of(collector)
    clock.now += 2
    snap = snap_of(collector)
    clock.now += 2
    collector.collect()
    stamps = [args[1] for args in counting.args["nvmlDeviceGetProcessUtilization"]
              if args[0].index == 0]
    assert stamps[0] == 0
    assert stamps[1] == int(T0 * 1e6)
    assert stamps[2] == int((T0 + 2) * 1e6)
    busy = [p for p in snap.processes if p.gpu == 0 and p.user == "alice"]
    assert busy and all(p.sm_util > 50 for p in busy)


def test_no_new_process_samples_means_zero_not_none() -> None:
    collector, _, _, _ = make("dgx-h100")
    collector.collect()
    # Same instant again: NVML has no samples newer than the last timestamp (NotFound).
    snap = snap_of(collector)
    assert snap.processes and all(p.sm_util == 0 for p in snap.processes)


def test_process_utilization_not_supported_is_none() -> None:
    collector, nvml, _, _ = make("lab")
    nvml.set_not_supported(None, "ProcessUtilization")
    snap = snap_of(collector)
    assert snap.processes and all(p.sm_util is None for p in snap.processes)


def _zero_pids(result: list[Any]) -> list[Any]:
    # What drivers 535.43-535.86 returned through the mismatched _v3 struct: fields shifted.
    return [
        sim.c_nvmlProcessInfo_t(
            pid=0, usedGpuMemory=(1 << 63) + i, gpuInstanceId=0, computeInstanceId=0
        )
        for i, _ in enumerate(result)
    ]


def _huge_memory(result: list[Any]) -> list[Any]:
    # Plausible pids but memory sizes no card has: still garbage.
    return [
        sim.c_nvmlProcessInfo_t(
            pid=p.pid, usedGpuMemory=p.pid << 32, gpuInstanceId=0, computeInstanceId=0
        )
        for p in result
    ]


@pytest.mark.parametrize("garbage", [_zero_pids, _huge_memory])
def test_v3_struct_mismatch_falls_back_to_v2(garbage) -> None:
    corrupt = {
        "nvmlDeviceGetComputeRunningProcesses_v3": garbage,
        "nvmlDeviceGetGraphicsRunningProcesses_v3": garbage,
    }
    good, _, _, _ = make("lab")
    collector, _, counting, clock = make("lab", corrupt=corrupt)
    expected = {(p.gpu, p.pid, p.gpu_mem, p.type) for p in snap_of(good).processes}
    got = {(p.gpu, p.pid, p.gpu_mem, p.type) for p in snap_of(collector).processes}
    assert got == expected and got
    v3_calls = counting.calls["nvmlDeviceGetComputeRunningProcesses_v3"]
    clock.now += 1
    collector.collect()
    # Once v2 worked, the broken call is not tried again.
    assert counting.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == v3_calls
    assert counting.calls["nvmlDeviceGetComputeRunningProcesses_v2"] > 0


def test_missing_v3_function_uses_older_call() -> None:
    hide = (
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
    )
    collector, nvml, _, _ = make("dgx-h100", hide=hide)
    snap = snap_of(collector)
    assert len(snap.processes) == sum(len(p["gpus"]) for p in nvml.scenario.processes)


def test_graphics_and_compute_merge_into_c_plus_g() -> None:
    collector, nvml, _, _ = make("lab")
    nvml.add_process(5_900_010, "bob", "blender --render", {0: 900}, (10, 20), type="C+G")
    nvml.add_process(5_900_011, "bob", "Xorg :0", {0: 100}, (1, 2), type="G")
    snap = snap_of(collector)
    types = {p.pid: p.type for p in snap.processes}
    assert types[5_900_010] == "C+G"
    assert types[5_900_011] == "G"
    row = next(p for p in snap.processes if p.pid == 5_900_010)
    # The simulated allocator grows a little with activity, like a real one.
    assert row.gpu_mem == pytest.approx(900 * 1024 * 1024, rel=0.05)


PID_CG = 5_900_010


def _shrink_cg(result: list[Any]) -> list[Any]:
    # The compute list under-reports the C+G process: the graphics list has the real size.
    return [
        sim.c_nvmlProcessInfo_t(pid=p.pid, usedGpuMemory=(p.usedGpuMemory // 4)
                                if p.pid == PID_CG else p.usedGpuMemory,
                                gpuInstanceId=0, computeInstanceId=0)
        for p in result
    ]


def _cg_not_available(result: list[Any]) -> list[Any]:
    # NVML_VALUE_NOT_AVAILABLE (all ones) in usedGpuMemory: unknown, not 16 EiB.
    return [
        sim.c_nvmlProcessInfo_t(pid=p.pid, usedGpuMemory=(1 << 64) - 1
                                if p.pid == PID_CG else p.usedGpuMemory,
                                gpuInstanceId=0, computeInstanceId=0)
        for p in result
    ]


@pytest.mark.parametrize("compute", [_shrink_cg, _cg_not_available])
def test_c_plus_g_memory_is_the_larger_known_reading(compute) -> None:
    collector, nvml, _, _ = make("lab", corrupt={
        "nvmlDeviceGetComputeRunningProcesses_v3": compute})
    nvml.add_process(PID_CG, "bob", "blender --render", {0: 900}, (10, 20), type="C+G")
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    graphics = {p.pid: p.usedGpuMemory for p in nvml.nvmlDeviceGetGraphicsRunningProcesses_v3(h)}
    row = next(p for p in snap_of(collector).processes if p.pid == PID_CG)
    assert row.type == "C+G"
    assert row.gpu_mem == graphics[PID_CG]


def test_memory_not_available_is_none() -> None:
    corrupt = {f"nvmlDevice{name}": _cg_not_available for name in (
        "GetComputeRunningProcesses_v3", "GetGraphicsRunningProcesses_v3")}
    collector, nvml, _, _ = make("lab", corrupt=corrupt)
    nvml.add_process(PID_CG, "bob", "blender --render", {0: 900}, (10, 20), type="C+G")
    snap = snap_of(collector)
    row = next(p for p in snap.processes if p.pid == PID_CG)
    assert row.gpu_mem is None
    assert [p for p in snap.processes if p.pid != PID_CG and p.gpu_mem is not None]


def _one_zero_pid(result: list[Any]) -> list[Any]:
    return [*result, sim.c_nvmlProcessInfo_t(pid=0, usedGpuMemory=1 << 62, gpuInstanceId=0,
                                            computeInstanceId=0)]


def test_every_variant_garbled_keeps_only_the_plausible_entries() -> None:
    corrupt = {f"nvmlDeviceGetComputeRunningProcesses{v}": _one_zero_pid
               for v in ("_v3", "_v2", "")}
    good, _, _, _ = make("lab")
    collector, _, _, _ = make("lab", corrupt=corrupt)
    expected = {(p.gpu, p.pid, p.gpu_mem) for p in snap_of(good).processes}
    got = {(p.gpu, p.pid, p.gpu_mem) for p in snap_of(collector).processes}
    assert got == expected and got
    assert all(pid > 0 for _, pid, _ in got)


def test_stale_utilization_samples_are_ignored() -> None:
    def with_stale(result: list[Any]) -> list[Any]:
        # A sample older than the timestamp we passed: counted before, or never ours.
        stale = [sim.c_nvmlProcessUtilizationSample_t(
            pid=p.pid, timeStamp=1, smUtil=100, memUtil=100, encUtil=0, decUtil=0)
            for p in result]
        return [*result, *stale]

    good, _, _, good_clock = make("dgx-h100")
    collector, _, _, clock = make(
        "dgx-h100", corrupt={"nvmlDeviceGetProcessUtilization": with_stale})
    for c, k in ((good, good_clock), (collector, clock)):
        c.collect()
        k.now += 2
    expected = {(p.gpu, p.pid): (p.sm_util, p.mem_util) for p in snap_of(good).processes}
    got = {(p.gpu, p.pid): (p.sm_util, p.mem_util) for p in snap_of(collector).processes}
    assert got == expected
    assert any(sm and sm < 100 for sm, _ in got.values())


def test_reserved_memory_and_per_process_memory_utilization() -> None:
    collector, nvml, _, clock = make("dgx-h100")
    collector.collect()
    clock.now += 2
    snap = snap_of(collector)
    for gpu in snap.gpus:
        info = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(gpu.index),
                                            sim.nvmlMemory_v2)
        assert gpu.mem_reserved == info.reserved and gpu.mem_reserved > 0
    h0 = nvml.nvmlDeviceGetHandleByIndex(0)
    samples = {s.pid: s.memUtil for s in nvml.nvmlDeviceGetProcessUtilization(h0, 0)}
    rows = [p for p in snap.processes if p.gpu == 0 and p.pid in samples]
    assert rows and any(samples[p.pid] > 0 for p in rows)
    assert all(p.mem_util == samples[p.pid] for p in rows)


def test_clock_event_reasons_from_the_throttled_card() -> None:
    collector, _, _, _ = make("lab")
    snap = snap_of(collector)
    throttled = [g for g in snap.gpus if "sw_thermal_slowdown" in (g.clock_event_reasons or ())]
    assert throttled
    for gpu in snap.gpus:
        assert decode_clock_events(gpu.clock_event_mask) == gpu.clock_event_reasons


def test_old_pynvml_without_clock_event_reasons_uses_throttle_reasons() -> None:
    new, _, _, _ = make("lab")
    old, _, counting, _ = make("lab", hide=("nvmlDeviceGetCurrentClocksEventReasons",))
    expected = [g.clock_event_mask for g in snap_of(new).gpus]
    assert [g.clock_event_mask for g in snap_of(old).gpus] == expected
    assert counting.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 4


def test_topology_words_and_nvlink_counts() -> None:
    dgx, _, _, _ = make("dgx-h100")
    links = snap_of(dgx).topology
    assert len(links) == 28
    assert {(t.kind, t.nvlinks) for t in links} == {("NV18", 18)}
    lab, nvml, _, _ = make("lab")
    links = snap_of(lab).topology
    assert len(links) == 6
    expected = {pair: kind for pair, kind in nvml.scenario.topology.items()}
    assert {(t.gpu_a, t.gpu_b): t.kind for t in links} == expected
    assert all(t.nvlinks == 0 for t in links)


def test_reservations_are_included(tmp_path) -> None:
    reservations = pytest.importorskip("gputop.actions.reservations")
    # The store checks `until` against the kernel's time of the file: a real start.
    start = time.time()
    clock = Clock(start)
    scenario = sim.load_scenario("lab")
    nvml = sim.SimNvml(scenario, clock=clock)
    collector = nvml_collector(
        nvml, sim.SimProcs(nvml), demo=True, clock=clock, reservations_dir=str(tmp_path)
    )
    result = reservations.reserve(str(tmp_path), [1], start + 3600, "tonight", now=start)
    assert result["ok"], result
    snap = snap_of(collector)
    assert [(r.gpu, r.note) for r in snap.reservations] == [(1, "tonight")]
    clock.now += 7200  # expired reservations count for nothing
    assert snap_of(collector).reservations == ()


def test_device_scan_runs_while_memory_is_unaccounted_at_most_once_a_minute(tmp_path) -> None:
    from gputop.sources.procfs import ProcFs

    def holder(pid: int) -> None:
        fd = tmp_path / str(pid) / "fd"
        fd.mkdir(parents=True)
        (fd / "5").symlink_to("/dev/nvidia0")
        (tmp_path / str(pid) / "cmdline").write_bytes(b"python\0x.py\0")

    holder(101)
    clock = Clock()
    nvml = sim.SimNvml(sim.load_scenario("lab"), clock=clock)
    # /proc here holds none of the scenario's pids: NVML's used memory is unaccounted for.
    collector = nvml_collector(nvml, ProcFs(root=str(tmp_path)), clock=clock)
    assert [h.pid for h in snap_of(collector).device_holders] == [101]
    holder(102)
    for _ in range(5):
        clock.now += DEVSCAN_EVERY_S / 6
        assert [h.pid for h in snap_of(collector).device_holders] == [101]
    clock.now += DEVSCAN_EVERY_S / 6
    snap = snap_of(collector)
    assert [h.pid for h in snap.device_holders] == [101, 102]
    assert snap.device_holders[0].devices == ("/dev/nvidia0",)


def test_memory_unaccounted_only_beyond_the_drivers_share() -> None:
    gib = 1 << 30
    gpus = [{"index": 0, "mem_used": 10 * gib, "mem_total": 80 * gib}]
    held = [{"gpu": 0, "gpu_mem": 10 * gib - (1 << 28)}]  # 256 MiB short: the driver's
    assert not memory_unaccounted(gpus, held)
    assert memory_unaccounted(gpus, [{"gpu": 0, "gpu_mem": 8 * gib}])
    assert memory_unaccounted(gpus, [{"gpu": 0, "gpu_mem": None}])  # cannot rule it out
    assert not memory_unaccounted([{"index": 0, "mem_used": None}], [])


def test_lean_collect_skips_topology_and_nvlink_remotes_not_xids() -> None:
    full, _, full_calls, _ = make("dgx-h100")
    lean_nvml = Counting(sim.SimNvml(sim.load_scenario("dgx-h100"), clock=Clock()))
    lean = nvml_collector(lean_nvml, sim.SimProcs(lean_nvml._inner), host="h", demo=True,
                     clock=Clock(), lean=True)
    a, b = snap_of(full), snap_of(lean)
    assert a.topology and not b.topology
    # XID events are read all the same: --once shows the criticals `check` shows.
    assert a.xid_watched is True and b.xid_watched is True
    for name in ("nvmlDeviceRegisterEvents", "nvmlEventSetCreate"):
        assert lean_nvml.calls[name] == full_calls.calls[name] > 0, name
    name = "nvmlDeviceGetNvLinkRemotePciInfo"
    assert full_calls.calls[name] > 0 and lean_nvml.calls[name] == 0, name
    # The table's figures are the same: only what it never shows was left out.
    assert [(g.util_gpu, g.mem_used, len(g.nvlinks)) for g in a.gpus] == [
        (g.util_gpu, g.mem_used, len(g.nvlinks)) for g in b.gpus]
    assert [p.pid for p in a.processes] == [p.pid for p in b.processes]


def test_helpers() -> None:
    assert cuda_version_string(13010) == "13.1"
    assert cuda_version_string(12040) == "12.4"
    assert cuda_version_string(None) is None
    assert cpulist([0b1111, 0]) == "0-3"
    assert cpulist([(1 << 64) - 1, 0b1]) == "0-64"
    assert cpulist([0b1010_0111]) == "0-2,5,7"
    assert cpulist([0]) is None
    assert normalize_bus_id("00000000:07:00.0") == "0000:07:00.0"
    assert normalize_bus_id(b"0000:B7:00.0") == "0000:b7:00.0"
    assert decode_clock_events(0x60) == ("sw_thermal_slowdown", "hw_thermal_slowdown")
    assert decode_clock_events(0) == ()
    assert decode_clock_events(None) is None


def test_unexpected_failure_on_one_gpu_is_that_gpu_error() -> None:
    seen = []

    def broken(result: Any) -> Any:
        seen.append(result)
        if len(seen) == 2:  # the second GPU read in the first collect
            raise OSError("ioctl failed")
        return result

    collector, _, _, clock = make("lab", corrupt={"nvmlDeviceGetBAR1MemoryInfo": broken})
    snap = snap_of(collector)
    assert [g.state for g in snap.gpus] == ["ok", "error", "ok", "ok"]
    assert "ioctl failed" in snap.gpus[1].error
    assert snap.gpus[1].name == "NVIDIA GeForce RTX 3090"  # identity was read before
    assert snap.state == model.HOST_OK
    assert not any(p.gpu == 1 for p in snap.processes)
    clock.now += 1
    assert [g.state for g in snap_of(collector).gpus] == ["ok"] * 4  # and it recovers
