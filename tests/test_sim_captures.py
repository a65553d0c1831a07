"""The scenarios look like real cards: their static fields are read off real captures.

The captures (tests/fixtures/nvidia-smi/, see SOURCES.md there) were recorded on real
GPUs; each value below is parsed from them, not typed in, and compared with what the
simulator answers through its NVML calls.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gputop.sources import sim

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"
T0 = 1_764_680_000.0


def query_section(capture: str, heading: str) -> list[str]:
    """The lines of one `nvidia-smi -q` section of an nvidia_gpu_exporter capture."""
    lines = (FIXTURES / capture).read_text(encoding="utf-8").splitlines()
    start = lines.index(f"# {heading}")
    body_start = start + 3  # the heading, the command, the rule
    end = next(i for i in range(body_start, len(lines)) if lines[i].startswith("#####"))
    return lines[body_start:end]


def q(section: list[str], *path: str) -> str:
    """Value of a nested `-q` key: q(section, "Max Clocks", "SM") -> "1980 MHz"."""
    i, indent = 0, -1
    for depth, key in enumerate(path):
        last = depth == len(path) - 1
        for j in range(i, len(section)):
            line = section[j]
            name, _, value = line.partition(" : ")
            this_indent = len(line) - len(line.lstrip())
            if this_indent <= indent and line.strip():
                break  # left the parent block
            if name.strip() == key and this_indent > indent:
                if last:
                    return value.strip()
                i, indent = j + 1, this_indent
                break
        else:
            raise KeyError(path)
    raise KeyError(path)


def number(text: str) -> float:
    match = re.search(r"-?\d+(?:\.\d+)?", text)
    assert match, text
    return float(match.group())


def dgx() -> tuple[sim.SimNvml, Any]:
    nv = sim.SimNvml(sim.load_scenario("dgx-h100"), clock=lambda: T0)
    nv.nvmlInit()
    return nv, nv.nvmlDeviceGetHandleByIndex(0)


H100_LOAD = "load :: query (-q)"
H100_IDLE = "idle :: query (-q)"
H100 = "capture-h100-80gb-hbm3-590.txt"


def test_dgx_identity_versions_and_memory_match_the_h100_capture() -> None:
    cap = query_section(H100, H100_LOAD)
    nv, h = dgx()
    assert nv.nvmlDeviceGetName(h) == q(cap, "Product Name")
    assert nv.nvmlSystemGetDriverVersion() == q(cap, "Driver Version")
    cuda = nv.nvmlSystemGetCudaDriverVersion()
    assert f"{cuda // 1000}.{cuda % 1000 // 10}" == q(cap, "CUDA Version")
    mem = nv.nvmlDeviceGetMemoryInfo(h, version=sim.nvmlMemory_v2)
    assert mem.total == number(q(cap, "FB Memory Usage", "Total")) * sim.MIB
    assert mem.reserved == number(q(cap, "FB Memory Usage", "Reserved")) * sim.MIB
    bar1 = nv.nvmlDeviceGetBAR1MemoryInfo(h)
    assert bar1.bar1Total == number(q(cap, "BAR1 Memory Usage", "Total")) * sim.MIB
    pci = nv.nvmlDeviceGetPciInfo(h)
    assert pci.pciDeviceId == int(q(cap, "PCI", "Device Id"), 16)
    assert pci.pciSubSystemId == int(q(cap, "PCI", "Sub System Id"), 16)


def test_dgx_power_limits_match_the_h100_capture() -> None:
    cap = query_section(H100, H100_LOAD)
    nv, h = dgx()
    watts = {
        key: number(q(cap, "GPU Power Readings", key)) * 1000
        for key in ("Current Power Limit", "Default Power Limit", "Min Power Limit",
                    "Max Power Limit")
    }
    assert nv.nvmlDeviceGetEnforcedPowerLimit(h) == watts["Current Power Limit"]
    assert nv.nvmlDeviceGetPowerManagementLimit(h) == watts["Current Power Limit"]
    assert nv.nvmlDeviceGetPowerManagementDefaultLimit(h) == watts["Default Power Limit"]
    assert nv.nvmlDeviceGetPowerManagementLimitConstraints(h) == [
        watts["Min Power Limit"], watts["Max Power Limit"]
    ]
    # Under load the real card drew 588-630 W; the simulated training job is in that range.
    draw = number(q(cap, "GPU Power Readings", "Average Power Draw"))
    assert abs(nv.nvmlDeviceGetPowerUsage(h) / 1000 - draw) < 60


def test_dgx_thermal_thresholds_match_the_h100_t_limits() -> None:
    idle = query_section(H100, H100_IDLE)
    nv, h = dgx()
    # The capture gives offsets from the operating limit (T.Limit): the idle card sat at
    # its current temperature plus its remaining headroom below that limit.
    limit = number(q(idle, "Temperature", "GPU Current Temp")) + number(
        q(idle, "Temperature", "GPU T.Limit Temp")
    )
    shutdown = limit - number(q(idle, "Temperature", "GPU Shutdown T.Limit Temp"))
    slowdown = limit - number(q(idle, "Temperature", "GPU Slowdown T.Limit Temp"))
    max_op = limit - number(q(idle, "Temperature", "GPU Max Operating T.Limit Temp"))
    th = nv.nvmlDeviceGetTemperatureThreshold
    assert th(h, sim.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) == shutdown
    assert th(h, sim.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) == slowdown
    assert th(h, sim.NVML_TEMPERATURE_THRESHOLD_GPU_MAX) == max_op


def test_dgx_clocks_pcie_and_modes_match_the_h100_capture() -> None:
    cap = query_section(H100, H100_LOAD)
    idle = query_section(H100, H100_IDLE)
    nv, h = dgx()
    mx = nv.nvmlDeviceGetMaxClockInfo
    assert mx(h, sim.NVML_CLOCK_SM) == number(q(cap, "Max Clocks", "SM"))
    assert mx(h, sim.NVML_CLOCK_GRAPHICS) == number(q(cap, "Max Clocks", "Graphics"))
    assert mx(h, sim.NVML_CLOCK_MEM) == number(q(cap, "Max Clocks", "Memory"))
    assert mx(h, sim.NVML_CLOCK_VIDEO) == number(q(cap, "Max Clocks", "Video"))
    # Under load the real card ran at its maximum clocks in P0, like the training job.
    assert nv.nvmlDeviceGetClockInfo(h, sim.NVML_CLOCK_SM) == number(q(cap, "Clocks", "SM"))
    assert f"P{nv.nvmlDeviceGetPerformanceState(h)}" == q(cap, "Performance State")
    assert nv.nvmlDeviceGetMaxPcieLinkGeneration(h) == number(
        q(cap, "PCI", "GPU Link Info", "PCIe Generation", "Max")
    )
    assert nv.nvmlDeviceGetCurrPcieLinkGeneration(h) == number(
        q(cap, "PCI", "GPU Link Info", "PCIe Generation", "Current")
    )
    assert nv.nvmlDeviceGetMaxPcieLinkWidth(h) == number(
        q(cap, "PCI", "GPU Link Info", "Link Width", "Max")
    )
    assert q(cap, "Persistence Mode") == "Enabled"
    assert nv.nvmlDeviceGetPersistenceMode(h) == sim.NVML_FEATURE_ENABLED
    assert q(cap, "ECC Mode", "Current") == "Enabled"
    assert nv.nvmlDeviceGetEccMode(h) == [sim.NVML_FEATURE_ENABLED] * 2
    assert q(cap, "MIG Mode", "Current") == "Disabled"
    assert nv.nvmlDeviceGetMigMode(h)[0] == sim.NVML_DEVICE_MIG_DISABLE
    assert q(cap, "Compute Mode") == "Default"
    assert nv.nvmlDeviceGetComputeMode(h) == sim.NVML_COMPUTEMODE_DEFAULT
    # What an idle H100 shows when its job ends: P0 still (persistence on), low SM clock.
    for pid in [p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h)]:
        nv.remove_process(pid)
    assert f"P{nv.nvmlDeviceGetPerformanceState(h)}" == q(idle, "Performance State")
    assert nv.nvmlDeviceGetClockInfo(h, sim.NVML_CLOCK_SM) == number(q(idle, "Clocks", "SM"))
    assert nv.nvmlDeviceGetClockInfo(h, sim.NVML_CLOCK_MEM) == number(
        q(idle, "Clocks", "Memory")
    )


def test_dgx_not_available_fields_match_the_h100_capture() -> None:
    cap = query_section(H100, H100_LOAD)
    nv, h = dgx()
    assert q(cap, "Fan Speed") == "N/A"
    assert nv.nvmlDeviceGetNumFans(h) == 0
    with pytest.raises(sim.NVMLError_NotSupported):
        nv.nvmlDeviceGetFanSpeed(h)
    assert q(cap, "Retired Pages", "Single Bit ECC") == "N/A"
    with pytest.raises(sim.NVMLError_NotSupported):
        nv.nvmlDeviceGetRetiredPages(h, sim.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    # HBM3 remaps rows instead, and reports them.
    assert q(cap, "Remapped Rows", "Pending") == "No"
    assert nv.nvmlDeviceGetRemappedRows(h) == (0, 0, 0, 0)


# -- consumer cards: which fields say N/A -------------------------------------------------

# A field in the capture -> the NVML call that would read it on a simulated lab card.
LAB_CALLS: dict[str, Callable[[sim.SimNvml, Any], Any]] = {
    "serial": lambda nv, h: nv.nvmlDeviceGetSerial(h),
    "mig": lambda nv, h: nv.nvmlDeviceGetMigMode(h),
    "ecc_mode": lambda nv, h: nv.nvmlDeviceGetEccMode(h),
    "ecc_errors": lambda nv, h: nv.nvmlDeviceGetTotalEccErrors(
        h, sim.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, sim.NVML_VOLATILE_ECC
    ),
    "retired_pages": lambda nv, h: nv.nvmlDeviceGetRetiredPages(
        h, sim.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    ),
    "remapped_rows": lambda nv, h: nv.nvmlDeviceGetRemappedRows(h),
    "mem_max_temp": lambda nv, h: nv.nvmlDeviceGetTemperatureThreshold(
        h, sim.NVML_TEMPERATURE_THRESHOLD_MEM_MAX
    ),
    "fan": lambda nv, h: nv.nvmlDeviceGetFanSpeed(h),
    "shutdown_temp": lambda nv, h: nv.nvmlDeviceGetTemperatureThreshold(
        h, sim.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
    ),
    "slowdown_temp": lambda nv, h: nv.nvmlDeviceGetTemperatureThreshold(
        h, sim.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    ),
    "power_limit": lambda nv, h: nv.nvmlDeviceGetEnforcedPowerLimit(h),
    "max_sm_clock": lambda nv, h: nv.nvmlDeviceGetMaxClockInfo(h, sim.NVML_CLOCK_SM),
    "pcie_gen": lambda nv, h: nv.nvmlDeviceGetCurrPcieLinkGeneration(h),
    "persistence": lambda nv, h: nv.nvmlDeviceGetPersistenceMode(h),
}


def rtx3080_fields() -> dict[str, str]:
    gpu = ET.parse(FIXTURES / "xml-rtx-3080-536.xml").getroot().find("gpu")
    assert gpu is not None

    def text(path: str) -> str:
        node = gpu.find(path)
        assert node is not None, path
        return (node.text or "").strip()

    return {
        "serial": text("serial"),
        "mig": text("mig_mode/current_mig"),
        "ecc_mode": text("ecc_mode/current_ecc"),
        "ecc_errors": text("ecc_errors/volatile/dram_uncorrectable"),
        "retired_pages": text("retired_pages/double_bit_retirement/retired_count"),
        "remapped_rows": text("remapped_rows"),
        "mem_max_temp": text("temperature/gpu_temp_max_mem_threshold"),
        "fan": text("fan_speed"),
        "shutdown_temp": text("temperature/gpu_temp_max_threshold"),
        "slowdown_temp": text("temperature/gpu_temp_slow_threshold"),
        "power_limit": text("gpu_power_readings/current_power_limit"),
        "max_sm_clock": text("max_clocks/sm_clock"),
        "pcie_gen": text("pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
        # This capture came from Windows (WDDM), where persistence mode does not exist;
        # on Linux it is a supported setting (the 4080 capture shows Disabled).
        "persistence": "Disabled",
    }


def rtx4080_fields() -> dict[str, str]:
    cap = query_section("capture-rtx-4080-super-595.txt", "load :: query (-q)")
    return {
        "serial": q(cap, "Serial Number"),
        "mig": q(cap, "MIG Mode", "Current"),
        "ecc_mode": q(cap, "ECC Mode", "Current"),
        "ecc_errors": q(cap, "ECC Errors", "Volatile", "DRAM Uncorrectable"),
        "retired_pages": q(cap, "Retired Pages", "Double Bit ECC"),
        "remapped_rows": q(cap, "Remapped Rows"),
        "mem_max_temp": q(cap, "Temperature", "Memory Max Operating Temp"),
        "fan": q(cap, "Fan Speed"),
        "shutdown_temp": q(cap, "Temperature", "GPU Shutdown Temp"),
        "slowdown_temp": q(cap, "Temperature", "GPU Slowdown Temp"),
        "power_limit": q(cap, "GPU Power Readings", "Current Power Limit"),
        "max_sm_clock": q(cap, "Max Clocks", "SM"),
        "pcie_gen": q(cap, "PCI", "GPU Link Info", "PCIe Generation", "Current"),
        "persistence": q(cap, "Persistence Mode"),
    }


@pytest.mark.parametrize("capture", [rtx3080_fields, rtx4080_fields])
def test_lab_not_supported_pattern_matches_a_consumer_card(
    capture: Callable[[], dict[str, str]],
) -> None:
    fields = capture()
    assert set(fields) == set(LAB_CALLS)
    missing = {k for k, v in fields.items() if v in ("N/A", "[N/A]", "Not Supported")}
    assert {"serial", "ecc_mode", "ecc_errors", "remapped_rows"} <= missing  # sanity
    nv = sim.SimNvml(sim.load_scenario("lab"), clock=lambda: T0)
    nv.nvmlInit()
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        for field, call in LAB_CALLS.items():
            if field in missing:
                with pytest.raises(sim.NVMLError_NotSupported):
                    call(nv, h)
            else:
                assert call(nv, h) is not None, field


def test_lab_thresholds_and_idle_clocks_match_the_same_chip_family() -> None:
    # The RTX 3080 capture is the same GA102 chip as the simulated 3090s.
    fields = rtx3080_fields()
    gpu = ET.parse(FIXTURES / "xml-rtx-3080-536.xml").getroot().find("gpu")
    assert gpu is not None
    nv = sim.SimNvml(sim.load_scenario("lab"), clock=lambda: T0)
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    th = nv.nvmlDeviceGetTemperatureThreshold
    assert th(h, sim.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) == number(fields["shutdown_temp"])
    assert th(h, sim.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) == number(fields["slowdown_temp"])
    max_gpu = gpu.findtext("temperature/gpu_temp_max_gpu_threshold") or ""
    assert th(h, sim.NVML_TEMPERATURE_THRESHOLD_GPU_MAX) == number(max_gpu)
    assert nv.nvmlDeviceGetMaxClockInfo(h, sim.NVML_CLOCK_SM) == number(fields["max_sm_clock"])
    assert nv.nvmlDeviceGetCurrPcieLinkGeneration(h) == number(fields["pcie_gen"])
    # The capture's card was idle: P8 at 210 MHz SM / 405 MHz memory, as an idle lab card.
    for pid in (5100012, 5100090, 5100005):
        nv.remove_process(pid)
    assert f"P{nv.nvmlDeviceGetPerformanceState(h)}" == gpu.findtext("performance_state")
    assert nv.nvmlDeviceGetClockInfo(h, sim.NVML_CLOCK_SM) == number(
        gpu.findtext("clocks/sm_clock") or ""
    )
    assert nv.nvmlDeviceGetClockInfo(h, sim.NVML_CLOCK_MEM) == number(
        gpu.findtext("clocks/mem_clock") or ""
    )


def test_faulty_static_fields_match_the_a100_capture() -> None:
    gpu = ET.parse(FIXTURES / "xml-a100-sxm4-mig-535.xml").getroot().find("gpu")
    assert gpu is not None

    def value(path: str) -> float:
        return number(gpu.findtext(path) or "")

    nv = sim.SimNvml(sim.load_scenario("faulty"), clock=lambda: T0)
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceGetName(h) == gpu.findtext("product_name")
    mem = nv.nvmlDeviceGetMemoryInfo(h, version=sim.nvmlMemory_v2)
    assert mem.total == value("fb_memory_usage/total") * sim.MIB
    assert mem.reserved == value("fb_memory_usage/reserved") * sim.MIB
    bar1 = nv.nvmlDeviceGetBAR1MemoryInfo(h)
    assert bar1.bar1Total == value("bar1_memory_usage/total") * sim.MIB
    limit = value("gpu_power_readings/current_power_limit")
    assert nv.nvmlDeviceGetEnforcedPowerLimit(h) == limit * 1000
    assert nv.nvmlDeviceGetPowerManagementLimitConstraints(h) == [
        value("gpu_power_readings/min_power_limit") * 1000,
        value("gpu_power_readings/max_power_limit") * 1000,
    ]
    th = nv.nvmlDeviceGetTemperatureThreshold
    assert th(h, sim.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) == value(
        "temperature/gpu_temp_max_threshold"
    )
    assert th(h, sim.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) == value(
        "temperature/gpu_temp_slow_threshold"
    )
    assert th(h, sim.NVML_TEMPERATURE_THRESHOLD_GPU_MAX) == value(
        "temperature/gpu_temp_max_gpu_threshold"
    )
    assert th(h, sim.NVML_TEMPERATURE_THRESHOLD_MEM_MAX) == value(
        "temperature/gpu_temp_max_mem_threshold"
    )
    mx = nv.nvmlDeviceGetMaxClockInfo
    assert mx(h, sim.NVML_CLOCK_SM) == value("max_clocks/sm_clock")
    assert mx(h, sim.NVML_CLOCK_MEM) == value("max_clocks/mem_clock")
    assert mx(h, sim.NVML_CLOCK_VIDEO) == value("max_clocks/video_clock")
    device_id = int(gpu.findtext("pci/pci_device_id") or "", 16)
    assert nv.nvmlDeviceGetPciInfo(h).pciDeviceId == device_id
    assert nv.nvmlDeviceGetMaxPcieLinkGeneration(h) == value(
        "pci/pci_gpu_link_info/pcie_gen/max_link_gen"
    )
