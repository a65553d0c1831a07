"""Simulated values move like real ones, stay physical, and replay exactly."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from gputop.sources import sim

T0 = 1_764_680_000.0


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def start(name: str | sim.Scenario, clock: Clock, seed: int | None = None) -> sim.SimNvml:
    scenario = sim.load_scenario(name) if isinstance(name, str) else name
    nv = sim.SimNvml(scenario, clock=clock, seed=seed)
    nv.nvmlInit()
    return nv


def read(nv: sim.SimNvml, i: int) -> dict[str, Any]:
    h = nv.nvmlDeviceGetHandleByIndex(i)
    out: dict[str, Any] = {
        "util": nv.nvmlDeviceGetUtilizationRates(h).gpu,
        "util_mem": nv.nvmlDeviceGetUtilizationRates(h).memory,
        "mem": nv.nvmlDeviceGetMemoryInfo(h, version=sim.nvmlMemory_v2),
        "temp": nv.nvmlDeviceGetTemperature(h, sim.NVML_TEMPERATURE_GPU),
        "power": nv.nvmlDeviceGetPowerUsage(h),
        "limit": nv.nvmlDeviceGetEnforcedPowerLimit(h),
        "sm": nv.nvmlDeviceGetClockInfo(h, sim.NVML_CLOCK_SM),
        "sm_max": nv.nvmlDeviceGetMaxClockInfo(h, sim.NVML_CLOCK_SM),
        "mclk": nv.nvmlDeviceGetClockInfo(h, sim.NVML_CLOCK_MEM),
        "mclk_max": nv.nvmlDeviceGetMaxClockInfo(h, sim.NVML_CLOCK_MEM),
        "pstate": nv.nvmlDeviceGetPerformanceState(h),
        "reasons": nv.nvmlDeviceGetCurrentClocksEventReasons(h),
        "shutdown": nv.nvmlDeviceGetTemperatureThreshold(
            h, sim.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
        ),
        "bar1": nv.nvmlDeviceGetBAR1MemoryInfo(h),
        "tx": nv.nvmlDeviceGetPcieThroughput(h, sim.NVML_PCIE_UTIL_TX_BYTES),
        "fans": [
            nv.nvmlDeviceGetFanSpeed_v2(h, f) for f in range(nv.nvmlDeviceGetNumFans(h))
        ],
    }
    return out


SCENARIOS = ["dgx-h100", "lab", "faulty-without-loss"]


def _scenario(name: str) -> sim.Scenario:
    if name == "faulty-without-loss":
        scenario = sim.load_scenario("faulty")
        scenario.faults["lost"] = []  # this test reads every GPU for an hour
        return scenario
    return sim.load_scenario(name)


@pytest.mark.parametrize("name", SCENARIOS)
def test_values_stay_in_physical_ranges_over_an_hour(name: str) -> None:
    clock = Clock()
    nv = start(_scenario(name), clock)
    seen_utils: set[int] = set()
    for step in range(0, 3600, 61):
        clock.t = T0 + step
        for i in range(nv.nvmlDeviceGetCount()):
            r = read(nv, i)
            seen_utils.add(r["util"])
            assert 0 <= r["util"] <= 100
            assert 0 <= r["util_mem"] <= 100
            mem = r["mem"]
            assert mem.used >= 0 and mem.used + mem.reserved + mem.free == mem.total
            assert 5 <= r["temp"] < r["shutdown"]
            assert 0 < r["power"] <= r["limit"]
            assert 0 < r["sm"] <= r["sm_max"] and 0 < r["mclk"] <= r["mclk_max"]
            assert r["pstate"] in (0, 2, 8)
            assert 0 <= r["bar1"].bar1Used <= r["bar1"].bar1Total
            assert r["tx"] >= 0
            assert all(0 <= f <= 100 for f in r["fans"])
    assert len(seen_utils) > 5  # the values move


def test_same_seed_and_clock_replay_exactly_and_another_seed_differs() -> None:
    def trace(seed: int) -> list[tuple[int, int, int]]:
        clock = Clock()
        nv = start("lab", clock, seed=seed)
        out = []
        for step in range(0, 600, 17):
            clock.t = T0 + step
            for i in range(4):
                r = read(nv, i)
                out.append((r["util"], r["temp"], r["power"]))
        return out

    assert trace(1) == trace(1)
    assert trace(1) != trace(2)


def test_a_frozen_clock_freezes_every_value() -> None:
    clock = Clock()
    nv = start("dgx-h100", clock)
    first = [read(nv, i) for i in range(8)]
    again = [read(nv, i) for i in range(8)]
    assert [(r["util"], r["temp"], r["power"], r["sm"]) for r in first] == [
        (r["util"], r["temp"], r["power"], r["sm"]) for r in again
    ]


def test_utilization_wanders_within_the_process_band() -> None:
    clock = Clock()
    scenario = sim.load_scenario("dgx-h100")
    for proc in scenario.processes:
        proc["dips"] = []  # the checkpoint dips have their own tests below
    nv = start(scenario, clock)
    utils = []
    for step in range(0, 1800, 10):
        clock.t = T0 + step
        utils.append(read(nv, 0)["util"])
    # rank 0 runs at 91-100 % in the scenario
    assert min(utils) >= 91 and max(utils) <= 100
    assert len(set(utils)) >= 5


def test_temperature_lags_utilization_while_power_follows_at_once() -> None:
    clock = Clock()
    nv = start("faulty", clock)
    idle = read(nv, 7)  # GPU 7 of the faulty node has nothing running
    assert idle["util"] == 0
    nv.add_process(5_299_999, "alice", "python burn.py", {7: 1000}, util=(100, 100))
    clock.t = T0 + 1
    hot_now = read(nv, 7)
    assert hot_now["util"] == 100
    assert hot_now["power"] > 3 * idle["power"]  # power follows load immediately
    temps = []
    for step in (1, 20, 40, 60, 80, 120):
        clock.t = T0 + step
        temps.append(read(nv, 7)["temp"])
    assert temps[0] < temps[2] < temps[4]  # heating up over a minute or so
    assert temps[-1] - temps[0] >= 15
    assert temps[0] - idle["temp"] <= 12  # not there yet at first


def test_fans_follow_temperature() -> None:
    clock = Clock()
    nv = start("lab", clock)
    pairs = []
    for step in range(0, 1200, 30):
        clock.t = T0 + step
        for i in range(4):
            r = read(nv, i)
            pairs.append((r["temp"], r["fans"][0]))
    for temp_a, fan_a in pairs:
        for temp_b, fan_b in pairs:
            if temp_a >= temp_b + 3:
                assert fan_a >= fan_b
    # And they do move: a constant fan would pass the order check above.
    (cool_temp, cool_fan), (hot_temp, hot_fan) = min(pairs), max(pairs)
    assert hot_temp - cool_temp >= 10, pairs
    assert hot_fan > cool_fan, (min(pairs), max(pairs))


def test_clocks_and_pstate_drop_when_a_card_goes_idle() -> None:
    clock = Clock()
    nv = start("lab", clock)
    busy = read(nv, 0)
    assert busy["pstate"] == 0 and busy["sm"] > 1500
    assert not busy["reasons"] & sim.nvmlClocksEventReasonGpuIdle
    for pid in (5100012, 5100090, 5100005):  # everything on GPU 0
        assert nv.remove_process(pid)
    idle = read(nv, 0)
    assert idle["pstate"] == 8 and idle["sm"] == 210 and idle["mclk"] == 405
    assert idle["reasons"] & sim.nvmlClocksEventReasonGpuIdle
    assert idle["power"] < busy["power"] / 4


def test_thermally_throttled_card_reports_reasons_and_slower_clocks() -> None:
    clock = Clock()
    nv = start("lab", clock)
    throttled = read(nv, 1)
    thermal = (
        sim.nvmlClocksEventReasonSwThermalSlowdown | sim.nvmlClocksEventReasonHwThermalSlowdown
    )
    assert throttled["reasons"] & thermal == thermal
    assert throttled["sm"] < 0.75 * throttled["sm_max"]
    assert throttled["temp"] >= 85
    assert read(nv, 0)["reasons"] & thermal == 0


def test_memory_follows_the_processes_and_is_freed_when_one_exits() -> None:
    clock = Clock()
    nv = start("lab", clock)
    h = nv.nvmlDeviceGetHandleByIndex(2)
    before = nv.nvmlDeviceGetMemoryInfo(h, version=sim.nvmlMemory_v2).used
    listed = {p.pid: p.usedGpuMemory for p in nv.nvmlDeviceGetComputeRunningProcesses(h)}
    assert sum(listed.values()) <= before
    assert nv.remove_process(5100032)
    after = nv.nvmlDeviceGetMemoryInfo(h, version=sim.nvmlMemory_v2).used
    assert before - after == listed[5100032]
    assert 5100032 not in {p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h)}
    assert not nv.remove_process(5100032)


def test_unaccounted_memory_is_used_but_owned_by_no_listed_process() -> None:
    clock = Clock()
    nv = start("lab", clock)
    h = nv.nvmlDeviceGetHandleByIndex(1)
    used = nv.nvmlDeviceGetMemoryInfo(h, version=sim.nvmlMemory_v2).used
    listed = sum(p.usedGpuMemory for p in nv.nvmlDeviceGetComputeRunningProcesses(h))
    assert used - listed == 600 * sim.MIB


def test_graphics_and_compute_lists_split_by_type() -> None:
    nv = start("lab", Clock())
    h = nv.nvmlDeviceGetHandleByIndex(0)
    graphics = {p.pid for p in nv.nvmlDeviceGetGraphicsRunningProcesses(h)}
    compute = {p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h)}
    assert graphics == {5100005}
    assert 5100005 not in compute and 5100012 in compute


def test_process_utilization_samples_and_not_found_like_nvml() -> None:
    clock = Clock()
    nv = start("dgx-h100", clock)
    h = nv.nvmlDeviceGetHandleByIndex(7)
    samples = nv.nvmlDeviceGetProcessUtilization(h, 0)
    by_pid = {s.pid: s for s in samples}
    assert set(by_pid) == {5001008, 5002001}
    assert by_pid[5001008].smUtil >= 90 and by_pid[5002001].smUtil <= 6
    newest = max(s.timeStamp for s in samples)
    with pytest.raises(sim.NVMLError_NotFound):
        nv.nvmlDeviceGetProcessUtilization(h, newest)  # nothing newer yet
    clock.t += 2
    assert nv.nvmlDeviceGetProcessUtilization(h, newest)


def test_topology_and_affinity() -> None:
    nv = start("lab", Clock())
    hs = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
    anc = nv.nvmlDeviceGetTopologyCommonAncestor
    assert anc(hs[0], hs[1]) == sim.NVML_TOPOLOGY_SINGLE  # PIX
    assert anc(hs[0], hs[2]) == sim.NVML_TOPOLOGY_NODE
    assert anc(hs[1], hs[3]) == sim.NVML_TOPOLOGY_SYSTEM
    assert anc(hs[2], hs[2]) == sim.NVML_TOPOLOGY_INTERNAL
    words = nv.nvmlDeviceGetCpuAffinity(hs[3], 1)
    cpus = [c for c in range(64) if words[0] >> c & 1]
    assert cpus == sim.parse_cpulist("12-23,36-47")
    assert nv.nvmlDeviceGetMemoryAffinity(hs[3], 1, sim.NVML_AFFINITY_SCOPE_NODE) == [0b10]


def test_dgx_nvlinks_all_up_through_switches() -> None:
    nv = start("dgx-h100", Clock())
    h = nv.nvmlDeviceGetHandleByIndex(5)
    states = [nv.nvmlDeviceGetNvLinkState(h, link) for link in range(18)]
    assert states == [sim.NVML_FEATURE_ENABLED] * 18
    with pytest.raises(sim.NVMLError_NotSupported):
        nv.nvmlDeviceGetNvLinkState(h, 18)
    kinds = {nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, link) for link in range(18)}
    assert kinds == {sim.NVML_NVLINK_DEVICE_TYPE_SWITCH}
    remotes = {nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId for link in range(18)}
    assert remotes == set(sim.load_scenario("dgx-h100").nvswitches)


def test_a_reader_thread_and_a_writer_thread_do_not_trip_each_other() -> None:
    # The collector reads in a worker thread while actions change the process table.
    clock = Clock()
    nv = start("dgx-h100", clock)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                for i in range(8):
                    h = nv.nvmlDeviceGetHandleByIndex(i)
                    nv.nvmlDeviceGetComputeRunningProcesses(h)
                    nv.nvmlDeviceGetMemoryInfo(h)
        except BaseException as exc:  # reported by the assert below
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    for n in range(300):
        nv.add_process(5_400_000 + n, "bob", "python x.py", {n % 8: 10}, util=(1, 2))
        nv.remove_process(5_400_000 + n - 1)
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive()  # a deadlock would leave it waiting, with no error
    assert errors == []


DIPPING = """\
name: dipping
gpus: [{}]
processes:
  - pid: 100
    user: a
    cmdline: "python train.py"
    age: 1h
    gpus: {0: 1000}
    util: [80, 90]
    dips:
      - {every: 10m, duration: 30s, util: [0, 10], at: 100s}
      - {every: 30m, duration: 90s, util: [40, 50], at: 25m}
"""


def test_periodic_dips_replace_the_band_for_their_duration(tmp_path: Path) -> None:
    path = tmp_path / "dipping.yaml"
    path.write_text(DIPPING)
    clock = Clock()
    nv = start(sim.load_scenario(str(path)), clock)
    started = T0 - 3600
    seen = {"ckpt": 0, "eval": 0, "train": 0}
    for step in range(0, 3 * 3600, 5):
        clock.t = T0 + step
        r = read(nv, 0)
        since = clock.t - started
        if (since - 100) % 600 < 30:
            seen["ckpt"] += 1
            assert r["util"] <= 10, step
        elif (since - 1500) % 1800 < 90:
            seen["eval"] += 1
            assert 40 <= r["util"] <= 50, step
        else:
            seen["train"] += 1
            assert 80 <= r["util"] <= 90, step
    # 18 checkpoints of 6 samples, 6 evals of 18 samples (less what overlaps a checkpoint)
    assert seen["ckpt"] == 18 * 6
    assert 80 <= seen["eval"] <= 6 * 18
    # power follows the dip at once
    clock.t = started + 600 * 7 + 110
    low = read(nv, 0)["power"]
    clock.t = started + 600 * 7 + 200
    assert read(nv, 0)["power"] > low * 3


def test_dgx_h100_ranks_pause_together_in_the_screenshot_window() -> None:
    # gputop --screenshot steps 180 s from when the simulator starts; the checkpoint dip
    # sits 100-130 s in, so the pictures show one.
    clock = Clock()
    nv = start("dgx-h100", clock)
    clock.t = T0 + 60
    assert all(read(nv, i)["util"] >= 85 for i in range(8))
    for at in (101, 115, 129):
        clock.t = T0 + at
        assert all(read(nv, i)["util"] <= 15 for i in range(8)), at
    clock.t = T0 + 140
    assert all(read(nv, i)["util"] >= 85 for i in range(8))


@pytest.mark.parametrize(
    ("dips", "message"),
    [
        ("{every: 30s, duration: 40s}", "dips.duration: expected 0 < duration < every"),
        ("{duration: 40s}", "dips.every: missing (required)"),
        ("[{every: 1m, duration: 5s, when: 3}]", "dips.0.when: unknown key"),
        ("{every: 1m, duration: 5s, util: [9, 1]}", "dips.util: expected [low, high]"),
    ],
)
def test_bad_dips_name_file_line_and_key(tmp_path: Path, dips: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(DIPPING.split("    dips:")[0] + f"    dips: {dips}\n")
    with pytest.raises(sim.ScenarioError) as err:
        sim.load_scenario(str(path))
    assert str(err.value).startswith(f"{path}:10: processes.0.{message}")  # the dips line
