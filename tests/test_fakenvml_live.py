"""The fake driver's values that move (tests/fakenvml/README.md, "Values that move"):
waveforms and steps for the gauges, counters that are their integral, GPM metrics that
are means between two samples, all on a frozen scenario clock so every number is exact
(or, for a sampled integral, within its stated error), never on the wall clock's speed.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
from test_fakenvml import on_fake

MIB = 1 << 20
WAVE = {"base": 50, "amp": 30, "period_s": 20}  # 80 at t=5, 50 at t=10, 20 at t=15


def test_gauges_follow_waveforms_and_steps_on_a_frozen_clock(tmp_path: Path) -> None:
    steps = {"steps": [10, 50, 90], "step_s": 2}  # t=5: the third, t=7: the first again
    device: dict[str, Any] = {
        "util_gpu": WAVE, "util_mem": {**WAVE, "clamp": [30, 70]},
        "memory_used_mib": {"base": 1000, "amp": 500, "period_s": 20, "phase_s": 5},
        "temperature": steps, "power_draw_mw": [100000, 200000, 300000, 400000, 500000, 600000],
        "clocks": {"sm": {"base": 1500, "amp": 400, "period_s": 20}}, "fan_speed": steps,
        "pcie": {"tx_kbps": WAVE, "rx_kbps": 7},
        "processes": [{"pid": 4242, "used_mib": steps, "sm_util": WAVE}],
    }
    got = on_fake(tmp_path, {"frozen_time": 5, "devices": [device]}, """
        h = N.nvmlDeviceGetHandleByIndex(0)
        def read():
            u = N.nvmlDeviceGetUtilizationRates(h)
            (p,) = N.nvmlDeviceGetComputeRunningProcesses(h)
            samples = N.nvmlDeviceGetProcessUtilization(h, 0)
            return [u.gpu, u.memory, N.nvmlDeviceGetMemoryInfo(h).used,
                    N.nvmlDeviceGetTemperature(h, 0), N.nvmlDeviceGetPowerUsage(h),
                    N.nvmlDeviceGetClockInfo(h, 1), N.nvmlDeviceGetFanSpeed(h),
                    N.nvmlDeviceGetPcieThroughput(h, 0), N.nvmlDeviceGetPcieThroughput(h, 1),
                    p.usedGpuMemory, samples[0].smUtil]
        out["t5"] = read()
        scenario["frozen_time"] = 7
        rewrite()
        out["t7"] = read()
        scenario["frozen_time"] = 15
        rewrite()
        out["t15"] = read()
    """)
    # memory_used_mib's phase of 5 s puts t=5 at sin(pi) = 0 and t=15 at sin(2 pi) = 0
    mem7 = round(1000 + 500 * math.sin(2 * math.pi * 12 / 20))
    sm7 = round(1500 + 400 * math.sin(2 * math.pi * 7 / 20))
    util7 = round(50 + 30 * math.sin(2 * math.pi * 7 / 20))
    # a bare list steps each second and cycles: power at t=5 is its sixth, at t=7 its second
    assert got["t5"] == [80, 70, 1000 * MIB, 90, 600000, 1900, 90, 80, 7, 90 * MIB, 80]
    assert got["t7"] == [util7, 70, mem7 * MIB, 10, 200000, sm7, 10, util7, 7, 10 * MIB, util7]
    assert got["t15"] == [20, 30, 1000 * MIB, 50, 400000, 1100, 50, 20, 7, 50 * MIB, 20]


def test_counters_are_the_integral_of_their_rates(tmp_path: Path) -> None:
    power = {"base": 300000, "amp": 100000, "period_s": 40}  # mW
    device = {
        "power_draw_mw": power, "energy_mj": 1_000_000,
        "ecc_mode": True,
        "ecc_errors": {"volatile": {"corrected": {"start": 5, "per_s": [1, 3]},
                                    "uncorrected": 2}},
        "pcie": {"replays": {"start": 0, "per_s": 0.5}},
        "nvlink": {"links": 2, "data_tx_kib": {"start": 100, "per_s": 1000}},
    }
    got = on_fake(tmp_path, {"frozen_time": 3, "devices": [device]}, """
        h = N.nvmlDeviceGetHandleByIndex(0)
        def read():
            fields = N.nvmlDeviceGetFieldValues(h, [(N.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 1),
                                                    N.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
                                                    N.NVML_FI_DEV_PCIE_REPLAY_COUNTER])
            return [N.nvmlDeviceGetTotalEnergyConsumption(h),
                    N.nvmlDeviceGetTotalEccErrors(h, 0, 0), N.nvmlDeviceGetTotalEccErrors(h, 1, 0),
                    N.nvmlDeviceGetPcieReplayCounter(h), fields[0].value.ullVal,
                    fields[1].value.ullVal, fields[2].value.uiVal]
        out["t3"] = read()
        scenario["frozen_time"] = 23
        rewrite()
        out["t23"] = read()
    """)

    def energy(t: float) -> float:  # mJ: 1e6 + the integral of power (mW) over [0, t]
        w = 2 * math.pi / 40
        return 1_000_000 + (300000 * t + 100000 / w * (1 - math.cos(w * t))) / 1000

    e3, ecc3, unc3, replays3, tx3, field_e3, field_r3 = got["t3"]
    e23, ecc23, unc23, replays23, tx23, field_e23, field_r23 = got["t23"]
    assert e3 == pytest.approx(energy(3), abs=2) and e23 == pytest.approx(energy(23), abs=2)
    # the rate a reader works out is the mean power over the span, as on a real card
    mean_w = (energy(23) - energy(3)) / 20
    assert (e23 - e3) / 20 == pytest.approx(mean_w, rel=1e-3) and mean_w > 300
    assert (ecc3, ecc23) == (5 + 1 + 3 + 1, 5 + 10 * (1 + 3) + 1 + 3 + 1)
    assert (unc3, unc23) == (2, 2)  # a number: a constant counter
    assert (replays3, replays23) == (1, 11)
    assert (tx3, tx23) == (3100, 23100)
    assert (field_e3, field_r3, field_e23, field_r23) == (e3, replays3, e23, replays23)


def test_the_clock_runs_from_time_origin(tmp_path: Path) -> None:
    # step_s of a million seconds: which step is due does not depend on how fast this runs
    scenario = {"time_origin": time.time() - 1_500_000,
                "devices": [{"util_gpu": {"steps": [11, 22, 33], "step_s": 1_000_000}}]}
    got = on_fake(tmp_path, scenario, """
        h = N.nvmlDeviceGetHandleByIndex(0)
        out["util"] = N.nvmlDeviceGetUtilizationRates(h).gpu
    """)
    assert got["util"] == 22


GPM_BODY = """
h = N.nvmlDeviceGetHandleByIndex(0)
ids = [N.NVML_GPM_METRIC_SM_UTIL, N.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
       N.NVML_GPM_METRIC_DRAM_BW_UTIL, N.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
       N.NVML_GPM_METRIC_PCIE_RX_PER_SEC]
def metrics(first, second):
    request = N.c_nvmlGpmMetricsGet_t()
    request.version = N.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(ids)
    request.sample1, request.sample2 = first, second
    for i, metric in enumerate(ids):
        request.metrics[i].metricId = metric
    got = N.nvmlGpmMetricsGet(request)
    return [[m.nvmlReturn, m.value] for m in got.metrics[:len(ids)]]
samples = [N.nvmlGpmSampleAlloc() for _ in range(3)]
N.nvmlGpmSampleGet(h, samples[0])
scenario["frozen_time"] = 10
rewrite()
N.nvmlGpmSampleGet(h, samples[1])
scenario["frozen_time"] = 12.5
rewrite()
N.nvmlGpmSampleGet(h, samples[2])
out["ten"] = metrics(samples[0], samples[1])
out["later"] = metrics(samples[1], samples[2])
out["same"] = metrics(samples[2], samples[2])
"""


def test_gpm_metrics_are_means_between_two_samples(tmp_path: Path) -> None:
    device = {"gpm": True, "util_gpu": {"steps": [20, 60], "step_s": 5},
              "gpm_tensor_active": {"base": 30, "amp": 20, "period_s": 10},
              "gpm_dram_active": 45,
              "gpm_pcie_tx_mibs": [100, 300], "gpm_pcie_rx_mibs": {"steps": [8], "step_s": 1}}
    got = on_fake(tmp_path, {"frozen_time": 0, "devices": [device]}, GPM_BODY)
    assert [code for code, _ in got["ten"]] == [0] * 5
    # [0, 10]: SM 20 then 60 for 5 s each; a whole period of the sine; 45 flat; 100/300 s
    assert [v for _, v in got["ten"]] == pytest.approx([40, 30, 45, 200, 8], abs=1e-6)
    # [10, 12.5]: SM still 20; the sine's mean over a quarter period from 0; PCIe TX
    # 100, 300, then 100 for the last half second
    quarter = 30 + 20 * (2 / math.pi)
    assert [v for _, v in got["later"]] == pytest.approx([20, quarter, 45, 180, 8], abs=1e-3)
    # one sample twice: no span, so the value at that moment (sin(2.5 pi) = 1)
    assert [v for _, v in got["same"]] == pytest.approx([20, 50, 45, 100, 8], abs=1e-9)


def test_gpm_metrics_a_card_lacks_are_not_supported(tmp_path: Path) -> None:
    device = {"gpm": True, "util_gpu": 70, "gpm_dram_active": [10, 30]}
    got = on_fake(tmp_path, {"frozen_time": 0, "devices": [device]}, GPM_BODY)
    assert got["ten"] == [[0, 70.0], [3, 0.0], [0, 20.0], [3, 0.0], [3, 0.0]]


def test_the_benches_live_machine_moves_every_gauge(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from helpers import fakenvml
    from livegpus import live

    scenario = live(fakenvml.template("dgx8"), origin=0)
    for device in scenario["devices"]:
        for proc in device.get("processes") or ():
            proc["pid"] = 4242
    scenario["frozen_time"] = 0
    got = on_fake(tmp_path, scenario, """
        def read():
            rows = []
            for i in range(N.nvmlDeviceGetCount()):
                h = N.nvmlDeviceGetHandleByIndex(i)
                u = N.nvmlDeviceGetUtilizationRates(h)
                procs = N.nvmlDeviceGetComputeRunningProcesses(h)
                rows.append([u.gpu, u.memory, N.nvmlDeviceGetMemoryInfo(h).used,
                             N.nvmlDeviceGetTemperature(h, 0), N.nvmlDeviceGetPowerUsage(h),
                             N.nvmlDeviceGetClockInfo(h, 1), N.nvmlDeviceGetPcieThroughput(h, 0),
                             N.nvmlDeviceGetPcieThroughput(h, 1),
                             N.nvmlDeviceGetTotalEnergyConsumption(h),
                             procs[0].usedGpuMemory])
            return rows
        out["at0"] = read()
        scenario["frozen_time"] = 7
        rewrite()
        out["at7"] = read()
    """)
    for before, after in zip(got["at0"], got["at7"], strict=True):
        assert all(a != b for a, b in zip(before, after, strict=True)), (before, after)
    # each card at its own phase: no two cards read the same utilization
    assert len({row[0] for row in got["at7"]}) > 4
