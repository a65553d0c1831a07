"""A scenario-driven simulated NVML, for ``--demo`` and for tests.

``SimNvml`` behaves like the ``pynvml`` module (nvidia-ml-py): the same function names,
argument orders, return shapes (objects with the same attribute names as pynvml's
structs), ``NVMLError`` subclasses chosen by ``NVMLError.__new__`` and ``NVML_*`` constants
with the same values.  The collector is handed either ``pynvml`` or a ``SimNvml`` and
cannot tell them apart.  ``SimProcs`` is the matching fake of ``procfs.ProcFs`` for the
simulated processes, plus ``signal()`` which acts only on the simulation.

Values are pure functions of (seed, clock time): a frozen clock gives frozen values, so
tests and screenshots are reproducible, and a running clock makes them move like real
ones (utilization wanders in a band, temperature lags it, power and fans follow).

Standard library only at module level: this file is shipped to remote test hosts.
PyYAML is imported lazily, only to read scenario files.

Scenario files (gputop/scenarios/*.yaml, or any path given to ``load_scenario``): the
keys and their defaults are the ``_HOST_KEYS``, ``_GPU_KEYS``, ``_PROC_KEYS`` and
``_FAULT_KEYS`` tables below; the built-in files show each in use.  In short:

    name, description, hostname, driver_version, cuda_version, me (who "I" am), seed,
    cpu_count, mem_total_gib, uptime_days
    model: {GPU keys shared by every card}     gpus: [{GPU keys per card}, ...]
    topology: {default: auto|PIX|PXB|PHB|NODE|SYS, pairs: {"0-1": PIX}}
    nvswitches: [bus ids]                      (the far end of switch NVLinks)
    processes: [{pid, user, cmdline, ppid, state, age: 3h, gpus: {index: MiB},
                 util: [low, high], type: C|G|C+G, hidden, ignores_term,
                 kernel_file_exists, vanish_after_list,
                 dips: [{every: 10m, duration: 30s, util: [low, high], at: 100s}]}, ...]
    faults: {driver_not_loaded, lost: [{gpu, after}], xid: [{gpu, xid, at}],
             not_supported: [{gpu: N|all, fields: [FanSpeed, ...]}],
             nvlink_down: [{gpu, link}]}

A field name in ``not_supported`` is the pynvml function without ``nvmlDeviceGet``
(``FanSpeed`` covers ``nvmlDeviceGetFanSpeed`` and ``_v2``).  Every mistake raises
``ScenarioError("file:line: key: what is wrong")``.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------------------
# Constants: values copied from nvidia-ml-py's pynvml.py (not imported: a remote host
# running the sim may not have it).

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1

NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_COUNT = 2
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2
NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3
NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN = 4
NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR = 5
NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX = 6
NVML_TEMPERATURE_THRESHOLD_GPS_CURR = 7
NVML_TEMPERATURE_THRESHOLD_COUNT = 8

NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_CLOCK_COUNT = 4

NVML_PSTATE_0 = 0
NVML_PSTATE_2 = 2
NVML_PSTATE_8 = 8
NVML_PSTATE_15 = 15
NVML_PSTATE_UNKNOWN = 32

NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_MEMORY_ERROR_TYPE_COUNT = 2
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_ECC_COUNTER_TYPE_COUNT = 2

NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_PAGE_RETIREMENT_CAUSE_COUNT = 2

NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_PCIE_UTIL_COUNT = 2

NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_CPU = 40
NVML_TOPOLOGY_SYSTEM = 50

NVML_COMPUTEMODE_DEFAULT = 0
NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1
NVML_COMPUTEMODE_PROHIBITED = 2
NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3
NVML_COMPUTEMODE_COUNT = 4

NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1

NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF

NVML_AFFINITY_SCOPE_NODE = 0
NVML_AFFINITY_SCOPE_SOCKET = 1

NVML_INIT_FLAG_NO_GPUS = 1
NVML_INIT_FLAG_NO_ATTACH = 2

nvmlMemory_v2 = 0x02000028

# Clock event ("throttle") reason bits; pynvml spells these in camel case.
nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksEventReasonUserDefinedClocks = 0x0000000000000002
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksEventReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSyncBoost = 0x0000000000000010
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksEventReasonDisplayClockSetting = 0x0000000000000100
nvmlClocksEventReasonNone = 0x0000000000000000
nvmlClocksEventReasonAll = 0x00000000000001FF
nvmlClocksThrottleReasonGpuIdle = nvmlClocksEventReasonGpuIdle
nvmlClocksThrottleReasonApplicationsClocksSetting = nvmlClocksEventReasonApplicationsClocksSetting
nvmlClocksThrottleReasonUserDefinedClocks = nvmlClocksEventReasonUserDefinedClocks
nvmlClocksThrottleReasonSwPowerCap = nvmlClocksEventReasonSwPowerCap
nvmlClocksThrottleReasonHwSlowdown = nvmlClocksEventReasonHwSlowdown
nvmlClocksThrottleReasonSyncBoost = nvmlClocksEventReasonSyncBoost
nvmlClocksThrottleReasonSwThermalSlowdown = nvmlClocksEventReasonSwThermalSlowdown
nvmlClocksThrottleReasonHwThermalSlowdown = nvmlClocksEventReasonHwThermalSlowdown
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = nvmlClocksEventReasonHwPowerBrakeSlowdown
nvmlClocksThrottleReasonDisplayClockSetting = nvmlClocksEventReasonDisplayClockSetting
nvmlClocksThrottleReasonBoardLimit = 0x0000000000000200
nvmlClocksThrottleReasonReliability = 0x0000000000000400
nvmlClocksThrottleReasonNone = 0x0000000000000000
nvmlClocksThrottleReasonAll = 0x00000000000007FF

# Event types.
nvmlEventTypeSingleBitEccError = 0x0000000000000001
nvmlEventTypeDoubleBitEccError = 0x0000000000000002
nvmlEventTypePState = 0x0000000000000004
nvmlEventTypeXidCriticalError = 0x0000000000000008
nvmlEventTypeClock = 0x0000000000000010
nvmlEventTypePowerSourceChange = 0x0000000000000080
nvmlEventTypeNone = 0x0000000000000000
# pynvml has no NVML_EVENT_TYPE_* names; these aliases follow the C header's spelling.
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = nvmlEventTypeXidCriticalError
NVML_EVENT_TYPE_SINGLE_BIT_ECC_ERROR = nvmlEventTypeSingleBitEccError
NVML_EVENT_TYPE_DOUBLE_BIT_ECC_ERROR = nvmlEventTypeDoubleBitEccError

# What NVML puts in an unsigned field it cannot fill (gpuInstanceId without MIG).
NVML_VALUE_NOT_AVAILABLE_UINT = 0xFFFFFFFF

_THROTTLE_BITS = {
    "gpu_idle": nvmlClocksEventReasonGpuIdle,
    "applications_clocks": nvmlClocksEventReasonApplicationsClocksSetting,
    "sw_power_cap": nvmlClocksEventReasonSwPowerCap,
    "hw_slowdown": nvmlClocksEventReasonHwSlowdown,
    "sync_boost": nvmlClocksEventReasonSyncBoost,
    "sw_thermal": nvmlClocksEventReasonSwThermalSlowdown,
    "hw_thermal": nvmlClocksEventReasonHwThermalSlowdown,
    "hw_power_brake": nvmlClocksEventReasonHwPowerBrakeSlowdown,
    "display_clock": nvmlClocksEventReasonDisplayClockSetting,
}

_TOPOLOGY_KINDS = {
    "PIX": NVML_TOPOLOGY_SINGLE,
    "PXB": NVML_TOPOLOGY_MULTIPLE,
    "PHB": NVML_TOPOLOGY_HOSTBRIDGE,
    "NODE": NVML_TOPOLOGY_NODE,
    "SYS": NVML_TOPOLOGY_SYSTEM,
}

_COMPUTE_MODES = {
    "Default": NVML_COMPUTEMODE_DEFAULT,
    "Exclusive_Thread": NVML_COMPUTEMODE_EXCLUSIVE_THREAD,
    "Prohibited": NVML_COMPUTEMODE_PROHIBITED,
    "Exclusive_Process": NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
}

# Simulated pids start above the kernel's hard PID_MAX_LIMIT (2**22 = 4,194,304 on 64-bit
# Linux; systemd raises pid_max to exactly that), so no real process can ever have one.
SIM_PID_BASE = 5_000_000
LINUX_PID_MAX_LIMIT = 4_194_304

# USER_HZ: /proc/PID/stat start times are in these ticks on every Linux we target.
CLOCK_TICKS = 100

MIB = 1024 * 1024
GIB = 1024 * MIB

# --------------------------------------------------------------------------------------
# Errors: the same mechanism as pynvml, so ``NVMLError(3)`` is an ``NVMLError_NotSupported``
# and ``except sim.NVMLError_GpuIsLost`` works.


class NVMLError(Exception):
    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: RUF012 (pynvml's name)
    value: int

    def __new__(cls, value: int, *args: Any) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int | None = None, *args: Any) -> None:
        super().__init__(self.value)

    def __str__(self) -> str:
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (NVMLError, (self.value,))


_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_MEMORY: "Insufficient Memory",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


def _error_class_name(const_name: str) -> str:
    # NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost, exactly as pynvml derives it.
    words = const_name[len("NVML_ERROR_") :].split("_")
    return "NVMLError_" + "".join(w.capitalize() for w in words)


def _make_error_classes() -> dict[str, type[NVMLError]]:
    classes: dict[str, type[NVMLError]] = {}
    for const_name, value in sorted(globals().items()):
        if not const_name.startswith("NVML_ERROR_") or not isinstance(value, int):
            continue

        def new(cls: type[NVMLError], *args: Any, _value: int = value) -> NVMLError:
            return NVMLError.__new__(cls, _value)

        name = _error_class_name(const_name)
        cls = type(name, (NVMLError,), {"__new__": new, "__module__": __name__})
        NVMLError._valClassMapping[value] = cls
        classes[name] = cls
    return classes


_ERROR_CLASSES = _make_error_classes()
globals().update(_ERROR_CLASSES)
# Named here so linters and readers see the ones the collector uses.
NVMLError_NotSupported: type[NVMLError] = _ERROR_CLASSES["NVMLError_NotSupported"]
NVMLError_GpuIsLost: type[NVMLError] = _ERROR_CLASSES["NVMLError_GpuIsLost"]
NVMLError_DriverNotLoaded: type[NVMLError] = _ERROR_CLASSES["NVMLError_DriverNotLoaded"]
NVMLError_Timeout: type[NVMLError] = _ERROR_CLASSES["NVMLError_Timeout"]
NVMLError_NotFound: type[NVMLError] = _ERROR_CLASSES["NVMLError_NotFound"]
NVMLError_Uninitialized: type[NVMLError] = _ERROR_CLASSES["NVMLError_Uninitialized"]
NVMLError_InvalidArgument: type[NVMLError] = _ERROR_CLASSES["NVMLError_InvalidArgument"]
NVMLError_NoPermission: type[NVMLError] = _ERROR_CLASSES["NVMLError_NoPermission"]


class NVMLLibraryMismatchError(Exception):
    """pynvml raises this for an unversioned call the library cannot serve; never here."""


def nvmlExceptionClass(nvmlErrorCode: int) -> type[NVMLError]:
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError(f"nvmlErrorCode {nvmlErrorCode} is not valid")
    return NVMLError._valClassMapping[nvmlErrorCode]


# --------------------------------------------------------------------------------------
# Return objects with pynvml's attribute names.


class _Struct:
    """A plain record; pynvml returns ctypes structs with these attribute names."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}: {v}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__


class c_nvmlMemory_t(_Struct):
    total: int
    free: int
    used: int


class c_nvmlMemory_v2_t(_Struct):
    version: int
    total: int
    reserved: int
    free: int
    used: int


class c_nvmlBAR1Memory_t(_Struct):
    bar1Total: int
    bar1Free: int
    bar1Used: int


class c_nvmlUtilization_t(_Struct):
    gpu: int
    memory: int


class nvmlPciInfo_t(_Struct):
    busIdLegacy: str
    domain: int
    bus: int
    device: int
    pciDeviceId: int
    pciSubSystemId: int
    busId: str


class c_nvmlProcessInfo_t(_Struct):
    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int
    computeInstanceId: int


class c_nvmlProcessUtilizationSample_t(_Struct):
    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int
    encUtil: int
    decUtil: int


class c_nvmlEventData_t(_Struct):
    device: Any
    eventType: int
    eventData: int
    gpuInstanceId: int
    computeInstanceId: int


class SimDeviceHandle:
    """Opaque like pynvml's c_nvmlDevice_t; the same object for the same index."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<SimDeviceHandle {self.index}>"


class SimEventSet:
    __slots__ = ("delivered", "freed", "registered")

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # gpu index -> event type mask
        self.delivered: set[int] = set()  # ids of XID events already returned
        self.freed = False


# --------------------------------------------------------------------------------------
# Scenarios


class ScenarioError(ValueError):
    """A scenario that cannot be used; the message names file, line and key."""


@dataclass
class Scenario:
    """A checked scenario: host facts, fully merged GPU specs, processes and faults."""

    name: str
    description: str
    source: str  # file path, or "<synthetic>"
    host: dict[str, Any]
    gpus: list[dict[str, Any]]
    processes: list[dict[str, Any]]
    topology: dict[tuple[int, int], str]
    faults: dict[str, Any]
    me: str
    seed: int = 0
    nvswitches: list[str] = field(default_factory=list)


_SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"

# Key -> (kind, default).  Kinds: int, num, str, bool, list, band (two numbers lo <= hi),
# strlist.  A default of None means "not set".
_HOST_KEYS: dict[str, tuple[str, Any]] = {
    "name": ("str", None),
    "description": ("str", ""),
    "hostname": ("str", "sim-host"),
    "driver_version": ("str", "590.48.01"),
    "cuda_version": ("str", "13.1"),
    "nvml_version": ("str", None),
    "me": ("str", "alice"),
    "seed": ("int", 0),
    "cpu_count": ("int", 64),
    "cpu_percent": ("band", [5, 20]),
    "mem_total_gib": ("num", 512),
    "mem_available_gib": ("band", None),
    "uptime_days": ("num", 30),
    "model": ("dict", None),
    "gpus": ("list", None),
    "processes": ("list", []),
    "topology": ("dict", None),
    "nvswitches": ("strlist", []),
    "faults": ("dict", None),
}

_GPU_KEYS: dict[str, tuple[str, Any]] = {
    "name": ("str", "NVIDIA Simulated GPU"),
    "uuid": ("str", None),
    "serial": ("str", None),
    "bus_id": ("str", None),
    "pci_device_id": ("int", 0x233010DE),
    "pci_subsystem_id": ("int", 0x16C110DE),
    "numa": ("int", 0),
    "cpu_affinity": ("str", None),
    "mem_total_mib": ("int", 81559),
    "mem_reserved_mib": ("int", 479),
    "unaccounted_mib": ("int", 0),
    "bar1_total_mib": ("int", 131072),
    "mem_util_ratio": ("num", 0.3),
    "enc_util": ("band", [0, 0]),
    "dec_util": ("band", [0, 0]),
    "power_limit_w": ("num", 700),
    "power_default_limit_w": ("num", None),
    "power_min_limit_w": ("num", 200),
    "power_max_limit_w": ("num", None),
    "power_idle_w": ("num", 70),
    "power_load_w": ("num", None),
    "temp_idle": ("num", 35),
    "temp_load": ("num", 65),
    "temp_shutdown": ("int", 95),
    "temp_slowdown": ("int", 89),
    "temp_max_operating": ("int", 87),
    "temp_mem_max": ("int", None),
    "fans": ("int", 0),
    "fan_min": ("int", 30),
    "clock_sm_max": ("int", 1980),
    "clock_mem_max": ("int", 2619),
    "clock_video_max": ("int", 1545),
    "clock_sm_idle": ("int", 345),
    "clock_mem_idle": ("int", None),
    "throttle_clock_factor": ("num", 0.7),
    "pstate_idle": ("int", 0),
    "pcie_gen": ("int", 5),
    "pcie_gen_max": ("int", None),
    "pcie_gpu_gen_max": ("int", None),
    "pcie_width": ("int", 16),
    "pcie_width_max": ("int", None),
    "pcie_load_kbs": ("int", 400_000),
    "persistence": ("bool", True),
    "compute_mode": ("str", "Default"),
    "mig": ("bool", False),
    "ecc": ("bool", True),
    "ecc_volatile_corrected": ("int", 0),
    "ecc_volatile_uncorrected": ("int", 0),
    "ecc_aggregate_corrected": ("int", 0),
    "ecc_aggregate_uncorrected": ("int", 0),
    "retired_pages_sbe": ("int", 0),
    "retired_pages_dbe": ("int", 0),
    "retired_pages_pending": ("bool", False),
    "remapped_correctable": ("int", 0),
    "remapped_uncorrectable": ("int", 0),
    "remap_pending": ("bool", False),
    "remap_failure": ("bool", False),
    "nvlinks": ("int", 0),
    "nvlink_remote": ("str", "switch"),
    "nvlink_peers": ("dict", None),
    "throttle": ("strlist", []),
    "not_supported": ("strlist", []),
    "event_types": ("int", None),
}

_PROC_KEYS: dict[str, tuple[str, Any]] = {
    "pid": ("int", None),
    "user": ("str", None),
    "uid": ("int", None),
    "ppid": ("int", 1),
    "cmdline": ("cmdline", None),
    "state": ("str", "S"),
    "age": ("duration", 3600),
    "gpus": ("gpumem", {}),
    "util": ("band", [0, 0]),
    "type": ("str", "C"),
    "hidden": ("bool", False),
    "ignores_term": ("bool", False),
    "cpu_percent": ("band", None),
    "rss_mib": ("int", 512),
    "kernel_file_exists": ("bool", None),
    "vanish_after_list": ("bool", False),
    "dips": ("dips", []),
}

# A periodic dip in a process's utilization (a checkpoint save, an evaluation pass):
# `duration` seconds out of every `every`, starting `at` seconds into each period counted
# from the process's start.
_DIP_KEYS: dict[str, tuple[str, Any]] = {
    "every": ("duration", None),
    "duration": ("duration", None),
    "util": ("band", [0, 0]),
    "at": ("duration", 0.0),
}

_FAULT_KEYS: dict[str, tuple[str, Any]] = {
    "driver_not_loaded": ("bool", False),
    "lost": ("list", []),
    "xid": ("list", []),
    "not_supported": ("list", []),
    "nvlink_down": ("list", []),
}

_DURATION_RE = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)d)?\s*(?:(\d+(?:\.\d+)?)h)?\s*"
                          r"(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*$")


def parse_duration(text: str | float | int) -> float:
    """'2d', '3h30m', '45m', '90s' or a number of seconds -> seconds."""
    if isinstance(text, bool):
        raise ValueError("expected a duration like 3h30m")
    if isinstance(text, (int, float)):
        return float(text)
    match = _DURATION_RE.match(text)
    if not match or not any(match.groups()):
        raise ValueError(f"expected a duration like 3h30m, got {text!r}")
    d, h, m, s = (float(g) if g else 0.0 for g in match.groups())
    return d * 86400 + h * 3600 + m * 60 + s


def normalize_field(name: str) -> str:
    """'FanSpeed', 'nvmlDeviceGetFanSpeed_v2', 'fan_speed' -> 'fanspeed'."""
    key = name.strip()
    if key.startswith("nvmlDeviceGet"):
        key = key[len("nvmlDeviceGet") :]
    key = re.sub(r"_v\d+$", "", key)
    return key.replace("_", "").lower()


class _Checker:
    """Type checks for one scenario document, with line numbers for messages."""

    def __init__(self, source: str, lines: dict[tuple[Any, ...], int]) -> None:
        self.source = source
        self.lines = lines

    def fail(self, path: tuple[Any, ...], message: str) -> ScenarioError:
        line = None
        probe = path
        while probe and line is None:
            line = self.lines.get(probe)
            probe = probe[:-1]
        where = f"{self.source}:{line}" if line else self.source
        key = ".".join(str(p) for p in path) or "(top level)"
        return ScenarioError(f"{where}: {key}: {message}")

    def mapping(
        self, data: Any, path: tuple[Any, ...], schema: dict[str, tuple[str, Any]]
    ) -> dict[str, Any]:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise self.fail(path, f"expected a mapping, got {type(data).__name__}")
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key not in schema:
                known = ", ".join(sorted(schema))
                raise self.fail((*path, key), f"unknown key (known keys: {known})")
            out[key] = self.value(value, (*path, key), schema[key][0])
        return out

    def value(self, value: Any, path: tuple[Any, ...], kind: str) -> Any:
        if value is None:
            return None
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(path, f"expected an integer, got {value!r}")
            return value
        if kind == "num":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.fail(path, f"expected a number, got {value!r}")
            return float(value)
        if kind == "str":
            if isinstance(value, (dict, list, bool)):
                raise self.fail(path, f"expected text, got {value!r}")
            return str(value)
        if kind == "bool":
            if not isinstance(value, bool):
                raise self.fail(path, f"expected true or false, got {value!r}")
            return value
        if kind in ("list", "strlist"):
            if not isinstance(value, list):
                raise self.fail(path, f"expected a list, got {value!r}")
            if kind == "strlist":
                for i, item in enumerate(value):
                    if not isinstance(item, str):
                        raise self.fail((*path, i), f"expected text, got {item!r}")
            return list(value)
        if kind == "dict":
            if not isinstance(value, dict):
                raise self.fail(path, f"expected a mapping, got {value!r}")
            return value
        if kind == "band":
            ok = (
                isinstance(value, list)
                and len(value) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
                and value[0] <= value[1]
            )
            if not ok:
                raise self.fail(path, f"expected [low, high] with low <= high, got {value!r}")
            return [float(value[0]), float(value[1])]
        if kind == "duration":
            try:
                return parse_duration(value)
            except ValueError as exc:
                raise self.fail(path, str(exc)) from None
        if kind == "dips":
            return self.dips(value, path)
        if kind == "cmdline":
            if isinstance(value, str):
                return value.split()
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return list(value)
            raise self.fail(path, f"expected a list of arguments, got {value!r}")
        if kind == "gpumem":
            # {gpu index: MiB} or a list of gpu indexes (then memory comes from mem_mib).
            if not isinstance(value, dict):
                raise self.fail(path, f"expected a mapping of GPU index to MiB, got {value!r}")
            out = {}
            for k, v in value.items():
                if isinstance(k, bool) or not isinstance(k, int):
                    raise self.fail((*path, k), f"GPU index must be an integer, got {k!r}")
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                    raise self.fail((*path, k), f"expected MiB >= 0, got {v!r}")
                out[k] = float(v)
            return out
        raise AssertionError(kind)

    def dips(self, value: Any, path: tuple[Any, ...]) -> list[dict[str, Any]]:
        """One dip mapping or a list of them, each with every > duration > 0."""
        items = value if isinstance(value, list) else [value]
        out = []
        for i, item in enumerate(items):
            where = (*path, i) if isinstance(value, list) else path
            dip = self.mapping(item, where, _DIP_KEYS)
            for key in ("every", "duration"):
                if dip.get(key) is None:
                    raise self.fail((*where, key), "missing (required)")
            if not 0 < dip["duration"] < dip["every"]:
                raise self.fail((*where, "duration"),
                                f"expected 0 < duration < every ({dip['every']:g} s), "
                                f"got {dip['duration']:g} s")
            out.append({k: (dip[k] if dip.get(k) is not None else d)
                        for k, (_, d) in _DIP_KEYS.items()})
        return out


def _line_map(
    node: Any, path: tuple[Any, ...], out: dict[tuple[Any, ...], int], key_of: Callable[[Any], Any]
) -> None:
    import yaml  # lazily: the module itself is stdlib-only

    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_of(key_node)
            out[(*path, key)] = key_node.start_mark.line + 1
            _line_map(value_node, (*path, key), out, key_of)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[(*path, i)] = item.start_mark.line + 1
            _line_map(item, (*path, i), out, key_of)


def _read_yaml(path: Path) -> tuple[Any, dict[tuple[Any, ...], int]]:
    try:
        import yaml
    except ImportError:  # pragma: no cover - pyyaml is a dependency
        raise ScenarioError(f"{path}: reading scenario files needs PyYAML") from None
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from None
    # One parse gives both the node tree (for line numbers) and the data; libyaml's
    # parser when pyyaml was built with it, because the pure-Python one costs ~30 ms
    # per built-in scenario on the --once --demo path.
    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = loader_class(text)
    lines: dict[tuple[Any, ...], int] = {}

    # Keys get their own constructor: a key that fails to construct (the merge key "<<")
    # must leave no state behind in the loader that builds the data.
    keys = yaml.constructor.SafeConstructor()

    def key_of(key_node: Any) -> Any:
        if not isinstance(key_node, yaml.ScalarNode):
            return key_node.value  # a complex key: no scenario key looks like this
        try:
            return keys.construct_object(key_node, deep=True)
        except yaml.YAMLError:
            keys.recursive_objects.clear()
            return key_node.value

    try:
        node = loader.get_single_node()
        if node is None:
            return None, lines
        # The line map first: constructing the data flattens merge keys in the tree.
        _line_map(node, (), lines, key_of)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ScenarioError(f"{path}{line}: not valid YAML: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    return data, lines


def scenario_from_dict(
    data: Any, source: str = "<dict>", lines: dict[tuple[Any, ...], int] | None = None
) -> Scenario:
    """Check a scenario document and build a Scenario; errors name source, line, key."""
    chk = _Checker(source, lines or {})
    top = chk.mapping(data, (), _HOST_KEYS)
    for required in ("name", "gpus"):
        if top.get(required) is None:
            raise chk.fail((required,), "missing (required)")
    host = {k: (top[k] if top.get(k) is not None else d) for k, (_, d) in _HOST_KEYS.items()}
    if host["nvml_version"] is None:
        major = host["cuda_version"].split(".")[0]
        host["nvml_version"] = f"{major}.{'.'.join(host['driver_version'].split('.')[:2])}"
    seed = int(host["seed"])

    model = chk.mapping(top.get("model"), ("model",), _GPU_KEYS)
    gpus: list[dict[str, Any]] = []
    for i, raw in enumerate(host["gpus"]):
        spec = chk.mapping(raw, ("gpus", i), _GPU_KEYS)
        merged = {k: d for k, (_, d) in _GPU_KEYS.items()}
        merged.update({k: v for k, v in model.items() if v is not None})
        merged.update({k: v for k, v in spec.items() if v is not None})
        _complete_gpu(merged, i, seed, chk, ("gpus", i))
        gpus.append(merged)
    if not gpus:
        raise chk.fail(("gpus",), "at least one GPU is needed")

    processes = []
    seen: set[int] = set()
    for i, raw in enumerate(host["processes"]):
        proc = chk.mapping(raw, ("processes", i), _PROC_KEYS)
        merged = {k: d for k, (_, d) in _PROC_KEYS.items()}
        merged.update({k: v for k, v in proc.items() if v is not None})
        if proc.get("pid") is None:
            raise chk.fail(("processes", i, "pid"), "missing (required)")
        if merged["pid"] in seen:
            raise chk.fail(("processes", i, "pid"), f"pid {merged['pid']} appears twice")
        seen.add(merged["pid"])
        for key in ("user", "cmdline"):
            if merged[key] is None:
                raise chk.fail(("processes", i, key), "missing (required)")
        for gpu in merged["gpus"]:
            if not 0 <= gpu < len(gpus):
                raise chk.fail(("processes", i, "gpus", gpu), f"no GPU {gpu} in this scenario")
        if merged["type"] not in ("C", "G", "C+G"):
            raise chk.fail(("processes", i, "type"), "expected C, G or C+G")
        if not re.fullmatch(r"[RSDZTtXIW]", merged["state"]):
            raise chk.fail(("processes", i, "state"), "expected one letter: R S D Z T ...")
        if merged["uid"] is None:
            merged["uid"] = 0 if merged["user"] == "root" else 1000 + zlib.crc32(
                merged["user"].encode()
            ) % 9000
        processes.append(merged)

    topology = _topology(top.get("topology"), gpus, chk)
    faults = _faults(top.get("faults"), len(gpus), chk)
    return Scenario(
        name=host["name"],
        description=host["description"],
        source=source,
        host=host,
        gpus=gpus,
        processes=processes,
        topology=topology,
        faults=faults,
        me=host["me"],
        seed=seed,
        nvswitches=list(host["nvswitches"]),
    )


def _complete_gpu(
    g: dict[str, Any], index: int, seed: int, chk: _Checker, path: tuple[Any, ...]
) -> None:
    """Fill the values that default to other values, and check the ones that must agree."""
    h = _mix(seed * 7919 + index)
    if g["uuid"] is None:
        hx = f"{_mix(h):016x}{_mix(h + 1):016x}"
        g["uuid"] = f"GPU-{hx[:8]}-{hx[8:12]}-{hx[12:16]}-{hx[16:20]}-{hx[20:32]}"
    if g["serial"] is None:
        g["serial"] = f"{1650000000000 + h % 9999999:013d}"
    if g["bus_id"] is None:
        g["bus_id"] = f"00000000:{0x18 + 0x10 * index:02X}:00.0"
    if not re.fullmatch(r"[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]", g["bus_id"]):
        raise chk.fail((*path, "bus_id"), f"expected like 00000000:18:00.0, got {g['bus_id']!r}")
    g["bus_id"] = g["bus_id"].upper()
    for key, base in (
        ("power_default_limit_w", "power_limit_w"),
        ("power_max_limit_w", "power_limit_w"),
        ("clock_mem_idle", "clock_mem_max"),
        ("pcie_gen_max", "pcie_gen"),
        ("pcie_width_max", "pcie_width"),
    ):
        if g[key] is None:
            g[key] = g[base]
    if g["pcie_gpu_gen_max"] is None:
        g["pcie_gpu_gen_max"] = g["pcie_gen_max"]
    if g["power_load_w"] is None:
        g["power_load_w"] = 0.92 * g["power_limit_w"]
    if g["compute_mode"] not in _COMPUTE_MODES:
        raise chk.fail((*path, "compute_mode"), f"expected one of {', '.join(_COMPUTE_MODES)}")
    for name in g["throttle"]:
        if name not in _THROTTLE_BITS:
            raise chk.fail((*path, "throttle"), f"unknown reason {name!r} "
                           f"(known: {', '.join(_THROTTLE_BITS)})")
    if not g["temp_slowdown"] <= g["temp_shutdown"]:
        raise chk.fail((*path, "temp_slowdown"), "must not be above temp_shutdown")
    if g["mem_reserved_mib"] + g["unaccounted_mib"] > g["mem_total_mib"]:
        raise chk.fail((*path, "unaccounted_mib"), "more than the card's memory")
    if g["nvlink_remote"] not in ("switch", "peers"):
        raise chk.fail((*path, "nvlink_remote"), "expected 'switch' or 'peers'")
    if g["nvlinks"] > NVML_NVLINK_MAX_LINKS:
        raise chk.fail((*path, "nvlinks"), f"at most {NVML_NVLINK_MAX_LINKS}")
    if g["cpu_affinity"] is not None:
        try:
            parse_cpulist(g["cpu_affinity"])
        except ValueError as exc:
            raise chk.fail((*path, "cpu_affinity"), str(exc)) from None
    g["not_supported"] = {normalize_field(f) for f in g["not_supported"]}
    g["index"] = index


def _topology(
    raw: Any, gpus: list[dict[str, Any]], chk: _Checker
) -> dict[tuple[int, int], str]:
    """Pairs -> PCIe path kind.  Default: NODE within a NUMA node, SYS across."""
    raw = raw or {}
    default = raw.get("default", "auto")
    if default != "auto" and default not in _TOPOLOGY_KINDS:
        raise chk.fail(("topology", "default"), f"expected auto or one of {list(_TOPOLOGY_KINDS)}")
    out: dict[tuple[int, int], str] = {}
    for a in range(len(gpus)):
        for b in range(a + 1, len(gpus)):
            if default == "auto":
                out[(a, b)] = "NODE" if gpus[a]["numa"] == gpus[b]["numa"] else "SYS"
            else:
                out[(a, b)] = default
    for key in raw:
        if key not in ("default", "pairs"):
            raise chk.fail(("topology", key), "unknown key (known keys: default, pairs)")
    pairs = raw.get("pairs") or {}
    if not isinstance(pairs, dict):
        raise chk.fail(("topology", "pairs"), "expected a mapping like {'0-1': PIX}")
    for key, kind in pairs.items():
        match = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", str(key))
        if not match:
            raise chk.fail(("topology", "pairs", key), "expected a key like '0-1'")
        a, b = sorted((int(match.group(1)), int(match.group(2))))
        if a == b or b >= len(gpus):
            raise chk.fail(("topology", "pairs", key), "not a pair of GPUs in this scenario")
        if kind not in _TOPOLOGY_KINDS:
            raise chk.fail(("topology", "pairs", key), f"expected one of {list(_TOPOLOGY_KINDS)}")
        out[(a, b)] = kind
    return out


def _faults(raw: Any, n_gpus: int, chk: _Checker) -> dict[str, Any]:
    f = chk.mapping(raw, ("faults",), _FAULT_KEYS)
    out: dict[str, Any] = {k: (f[k] if f.get(k) is not None else d)
                           for k, (_, d) in _FAULT_KEYS.items()}

    def gpu_of(item: Any, path: tuple[Any, ...], allow_all: bool = False) -> int | None:
        if not isinstance(item, dict) or "gpu" not in item:
            raise chk.fail(path, "expected a mapping with a 'gpu' key")
        gpu = item["gpu"]
        if allow_all and gpu == "all":
            return None
        if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < n_gpus:
            raise chk.fail((*path, "gpu"), f"no GPU {gpu!r} in this scenario")
        return gpu

    def seconds(item: dict[str, Any], key: str, path: tuple[Any, ...]) -> float:
        try:
            return parse_duration(item.get(key, 0))
        except ValueError as exc:
            raise chk.fail((*path, key), str(exc)) from None

    def only(item: dict[str, Any], keys: Iterable[str], path: tuple[Any, ...]) -> None:
        for key in item:
            if key not in keys:
                raise chk.fail((*path, key), f"unknown key (known keys: {', '.join(keys)})")

    lost = []
    for i, item in enumerate(out["lost"]):
        path = ("faults", "lost", i)
        gpu = gpu_of(item, path)
        only(item, ("gpu", "after"), path)
        lost.append({"gpu": gpu, "after": seconds(item, "after", path)})
    xids = []
    for i, item in enumerate(out["xid"]):
        path = ("faults", "xid", i)
        gpu = gpu_of(item, path)
        only(item, ("gpu", "xid", "at"), path)
        xid = item.get("xid")
        if isinstance(xid, bool) or not isinstance(xid, int) or xid <= 0:
            raise chk.fail((*path, "xid"), f"expected a positive XID number, got {xid!r}")
        xids.append({"gpu": gpu, "xid": xid, "at": seconds(item, "at", path)})
    unsupported = []
    for i, item in enumerate(out["not_supported"]):
        path = ("faults", "not_supported", i)
        gpu = gpu_of(item, path, allow_all=True)
        only(item, ("gpu", "fields"), path)
        fields = item.get("fields")
        if not isinstance(fields, list) or not all(isinstance(x, str) for x in fields):
            raise chk.fail((*path, "fields"), "expected a list of field names like FanSpeed")
        unsupported.append({"gpu": gpu, "fields": [normalize_field(x) for x in fields]})
    down = []
    for i, item in enumerate(out["nvlink_down"]):
        path = ("faults", "nvlink_down", i)
        gpu = gpu_of(item, path)
        only(item, ("gpu", "link"), path)
        link = item.get("link")
        if isinstance(link, bool) or not isinstance(link, int) or link < 0:
            raise chk.fail((*path, "link"), f"expected a link number, got {link!r}")
        down.append({"gpu": gpu, "link": link})
    out.update(lost=lost, xid=xids, not_supported=unsupported, nvlink_down=down)
    return out


def scenario_dir() -> Path:
    return _SCENARIO_DIR


def list_scenarios() -> list[tuple[str, str]]:
    """Built-in scenarios as (name, description), sorted by name."""
    found = []
    for path in sorted(_SCENARIO_DIR.glob("*.yaml")):
        try:
            scenario = load_scenario(str(path))
        except ScenarioError:
            continue
        found.append((scenario.name, scenario.description))
    return sorted(found)


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name ('dgx-h100') or a YAML file by path."""
    path = Path(name_or_path).expanduser()
    looks_like_path = os.sep in name_or_path or name_or_path.endswith((".yaml", ".yml"))
    if not looks_like_path:
        builtin = _SCENARIO_DIR / f"{name_or_path}.yaml"
        if builtin.is_file():
            path = builtin
        elif not path.is_file():
            names = ", ".join(sorted(p.stem for p in _SCENARIO_DIR.glob("*.yaml")))
            raise ScenarioError(f"{name_or_path}: no such scenario (built-in: {names})")
    if not path.is_file():
        raise ScenarioError(f"{path}: no such scenario file")
    data, lines = _read_yaml(path)
    return scenario_from_dict(data, str(path), lines)


# --------------------------------------------------------------------------------------
# Deterministic noise: a hash of (seed, key, step), smoothly interpolated.  A pure
# function of time, so a frozen clock freezes every value and the same clock replays.

_MASK64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finalizer: a cheap, well-spread integer hash."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _rand01(seed: int, key: int, step: int) -> float:
    return _mix(_mix((seed * 1_000_003) ^ key) ^ (step & _MASK64)) / 2.0**64


def _smooth(seed: int, key: int, t: float, period: float) -> float:
    x = t / period
    step = math.floor(x)
    frac = x - step
    frac = frac * frac * (3.0 - 2.0 * frac)
    a = _rand01(seed, key, step)
    return a + (_rand01(seed, key, step + 1) - a) * frac


def wander(seed: int, key: int, t: float) -> float:
    """A value in [0, 1) that drifts over ~30 s with faster small wiggles."""
    return 0.7 * _smooth(seed, key, t, 30.0) + 0.3 * _smooth(seed, key ^ 0x5BD1E995, t, 4.0)


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise ValueError(f"expected a cpulist like 0-55,112-167, got {text!r}")
        lo = int(match.group(1))
        hi = int(match.group(2) or lo)
        if hi < lo:
            raise ValueError(f"range {part!r} runs backwards")
        cpus.extend(range(lo, hi + 1))
    return cpus


def _clamp(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


# --------------------------------------------------------------------------------------
# The simulated library


@dataclass
class _Proc:
    """A live simulated process (mutable: it can exit)."""

    pid: int
    user: str
    uid: int
    ppid: int
    cmdline: list[str]
    state: str
    start_time: float
    gpus: dict[int, float]  # gpu index -> MiB
    util: list[float]
    type: str = "C"
    hidden: bool = False
    ignores_term: bool = False
    cpu_percent: list[float] | None = None
    rss_mib: int = 512
    kernel_file_exists: bool | None = None
    vanish_after_list: bool = False
    dips: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _GpuState:
    util: int
    util_mem: int
    mem_used: int  # bytes, not counting the reserved part
    temp: int
    power_mw: int
    fan: int | None
    clock_sm: int
    clock_mem: int
    clock_video: int
    pstate: int
    reasons: int
    pcie_tx: int
    pcie_rx: int
    enc: int
    dec: int
    proc_util: dict[int, tuple[int, int]]  # pid -> (sm, mem)
    proc_mem: dict[int, int]  # pid -> bytes


class SimNvml:
    """A simulated NVML with pynvml's names: ``sim.nvmlDeviceGetMemoryInfo(h).used``."""

    def __init__(
        self,
        scenario: Scenario | str,
        clock: Callable[[], float] = time.time,
        seed: int | None = None,
    ) -> None:
        if isinstance(scenario, str):
            scenario = load_scenario(scenario)
        self.scenario = scenario
        self.clock = clock
        self.seed = scenario.seed if seed is None else seed
        self.t0 = clock()
        self._lock = threading.RLock()
        self._init_count = 0
        self._handles = [SimDeviceHandle(i) for i in range(len(scenario.gpus))]
        self._procs: dict[int, _Proc] = {}
        for spec in scenario.processes:
            self._procs[spec["pid"]] = _Proc(
                pid=spec["pid"],
                user=spec["user"],
                uid=spec["uid"],
                ppid=spec["ppid"],
                cmdline=list(spec["cmdline"]),
                state=spec["state"],
                start_time=self.t0 - spec["age"],
                gpus=dict(spec["gpus"]),
                util=list(spec["util"]),
                type=spec["type"],
                hidden=spec["hidden"],
                ignores_term=spec["ignores_term"],
                cpu_percent=spec["cpu_percent"],
                rss_mib=spec["rss_mib"],
                kernel_file_exists=spec["kernel_file_exists"],
                vanish_after_list=spec["vanish_after_list"],
                dips=[dict(d) for d in spec["dips"]],
            )
        faults = scenario.faults
        self.driver_not_loaded: bool = faults["driver_not_loaded"]
        self._lost_at: dict[int, float] = {}
        for item in faults["lost"]:
            self._lost_at[item["gpu"]] = self.t0 + item["after"]
        self._xids: list[dict[str, Any]] = []
        for item in faults["xid"]:
            self.add_xid(item["gpu"], item["xid"], at=self.t0 + item["at"])
        self._unsupported: dict[int, set[str]] = {
            i: set(g["not_supported"]) for i, g in enumerate(scenario.gpus)
        }
        for item in faults["not_supported"]:
            targets = range(len(scenario.gpus)) if item["gpu"] is None else [item["gpu"]]
            for i in targets:
                self._unsupported[i].update(item["fields"])
        self._links_down: set[tuple[int, int]] = {
            (item["gpu"], item["link"]) for item in faults["nvlink_down"]
        }
        self._version = 0  # bumped when processes change: invalidates the state cache
        self._cache: dict[tuple[int, int, int], _GpuState] = {}
        self._grid_cache: dict[tuple[int, int, float], float] = {}
        self._gpu_procs: dict[int, list[_Proc]] | None = None

    # ---- test and demo controls -------------------------------------------------------

    def add_process(
        self,
        pid: int,
        user: str,
        cmdline: list[str] | str,
        gpus: dict[int, float],
        util: tuple[float, float] | list[float] = (0.0, 0.0),
        *,
        uid: int | None = None,
        ppid: int = 1,
        state: str = "S",
        age: float = 0.0,
        type: str = "C",
        hidden: bool = False,
        ignores_term: bool = False,
        rss_mib: int = 512,
        kernel_file_exists: bool | None = None,
    ) -> None:
        """Start a simulated process holding ``gpus`` ({index: MiB})."""
        if isinstance(cmdline, str):
            cmdline = cmdline.split()
        for gpu in gpus:
            if not 0 <= gpu < len(self._handles):
                raise ValueError(f"no GPU {gpu} in scenario {self.scenario.name}")
        if uid is None:
            uid = 0 if user == "root" else 1000 + zlib.crc32(user.encode()) % 9000
        with self._lock:
            self._procs[pid] = _Proc(
                pid=pid, user=user, uid=uid, ppid=ppid, cmdline=list(cmdline), state=state,
                start_time=self.clock() - age, gpus={int(k): float(v) for k, v in gpus.items()},
                util=[float(util[0]), float(util[1])], type=type, hidden=hidden,
                ignores_term=ignores_term, rss_mib=rss_mib,
                kernel_file_exists=kernel_file_exists,
            )
            self._changed()

    def remove_process(self, pid: int) -> bool:
        """The process exits and its GPU memory is freed; False if it was not there."""
        with self._lock:
            gone = self._procs.pop(pid, None) is not None
            if gone:
                self._changed()
            return gone

    def set_process_state(self, pid: int, state: str) -> None:
        with self._lock:
            self._procs[pid].state = state
            self._changed()

    def lose_gpu(self, index: int, at: float | None = None) -> None:
        """From clock time ``at`` (default now) every call on this GPU raises GpuIsLost."""
        self._lost_at[index] = self.clock() if at is None else at

    def add_xid(self, gpu: int, xid: int, at: float | None = None) -> None:
        """Queue an XID event on ``gpu`` delivered from clock time ``at`` (default now)."""
        with self._lock:
            when = self.clock() if at is None else at
            self._xids.append({"id": len(self._xids), "gpu": gpu, "xid": xid, "at": when})
            self._xids.sort(key=lambda e: (e["at"], e["id"]))

    def set_not_supported(self, gpu: int | None, field_name: str, on: bool = True) -> None:
        """Make one field (e.g. 'FanSpeed', 'TotalEccErrors') NotSupported on a GPU or all."""
        key = normalize_field(field_name)
        targets = range(len(self._handles)) if gpu is None else [gpu]
        for i in targets:
            if on:
                self._unsupported[i].add(key)
            else:
                self._unsupported[i].discard(key)

    def set_nvlink_down(self, gpu: int, link: int, down: bool = True) -> None:
        if down:
            self._links_down.add((gpu, link))
        else:
            self._links_down.discard((gpu, link))

    def processes(self) -> dict[int, _Proc]:
        """The live simulated processes (a copy of the table), for SimProcs."""
        with self._lock:
            return dict(self._procs)

    def is_lost(self, index: int) -> bool:
        at = self._lost_at.get(index)
        return at is not None and self.clock() >= at

    # ---- internals ---------------------------------------------------------------------

    def _changed(self) -> None:
        self._version += 1
        self._cache.clear()
        self._grid_cache.clear()
        self._gpu_procs = None

    def _check_init(self) -> None:
        if self._init_count <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: Any, field_name: str | None = None) -> dict[str, Any]:
        """Resolve a handle, raising what real NVML would for this GPU and field."""
        self._check_init()
        if not isinstance(handle, SimDeviceHandle) or handle.index >= len(self._handles):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if self.is_lost(handle.index):
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if field_name is not None and normalize_field(field_name) in self._unsupported[
            handle.index
        ]:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return self.scenario.gpus[handle.index]

    def _procs_by_gpu(self) -> dict[int, list[_Proc]]:
        if self._gpu_procs is None:
            table: dict[int, list[_Proc]] = {i: [] for i in range(len(self._handles))}
            for proc in self._procs.values():
                for gpu in proc.gpus:
                    table[gpu].append(proc)
            self._gpu_procs = table
        return self._gpu_procs

    def _proc_util(self, proc: _Proc, gpu: int, t: float) -> float:
        if proc.state in ("Z", "T", "X") or proc.util[1] <= 0 or t <= proc.start_time:
            return 0.0
        lo, hi = proc.util
        for n, dip in enumerate(proc.dips):
            if (t - proc.start_time - dip["at"]) % dip["every"] < dip["duration"]:
                lo, hi = dip["util"]
                return lo + (hi - lo) * wander(self.seed, (proc.pid * 64 + gpu) * 8 + n + 1, t)
        return lo + (hi - lo) * wander(self.seed, proc.pid * 64 + gpu, t)

    def _util_at(self, gpu: int, t: float) -> float:
        total = sum(self._proc_util(p, gpu, t) for p in self._procs_by_gpu()[gpu])
        return min(total, 100.0)

    def _lagged_util(self, index: int, t: float, util_now: float) -> float:
        """Utilization smoothed over the last ~80 s: what the temperature follows.

        The look-back points sit on a fixed 20 s grid so that each is computed once
        and cached, not re-summed over every process on every call.
        """
        step = 20.0
        base = math.floor(t / step) * step
        total = 0.30 * util_now
        for i, weight in enumerate((0.25, 0.20, 0.15, 0.10)):
            when = base - step * i
            key = (index, self._version, when)
            past = self._grid_cache.get(key)
            if past is None:
                if len(self._grid_cache) > 4096:
                    self._grid_cache.clear()
                past = self._util_at(index, when)
                self._grid_cache[key] = past
            total += weight * past
        return total

    def _state(self, index: int) -> _GpuState:
        t = self.clock()
        # 0.1 s buckets: one collector tick reads ~40 fields and should see one moment.
        key = (index, self._version, math.floor(t * 10))
        with self._lock:
            state = self._cache.get(key)
            if state is None:
                if len(self._cache) > 256:
                    self._cache.clear()
                state = self._compute(index, t)
                self._cache[key] = state
            return state

    def _compute(self, index: int, t: float) -> _GpuState:
        g = self.scenario.gpus[index]
        seed = self.seed
        procs = self._procs_by_gpu()[index]
        proc_util: dict[int, tuple[int, int]] = {}
        proc_mem: dict[int, int] = {}
        total = 0.0
        ratio = g["mem_util_ratio"]
        for proc in procs:
            u = self._proc_util(proc, index, t)
            total += u
            proc_util[proc.pid] = (round(u), round(u * ratio))
            # Memory follows activity a little (activations, caching allocator growth).
            grow = 0.97 + 0.03 * (u / 100.0)
            proc_mem[proc.pid] = int(proc.gpus[index] * grow) * MIB
        util = min(total, 100.0)
        lagged = self._lagged_util(index, t, util)
        throttled = 0
        for name in g["throttle"]:
            throttled |= _THROTTLE_BITS[name]
        jitter = wander(seed, index * 31 + 7, t) - 0.5
        temp = g["temp_idle"] + (g["temp_load"] - g["temp_idle"]) * lagged / 100.0 + 2 * jitter
        temp = _clamp(temp, 0, g["temp_shutdown"] - 1)
        power = g["power_idle_w"] + (g["power_load_w"] - g["power_idle_w"]) * (util / 100.0)
        power *= 1.0 + 0.04 * jitter
        power = _clamp(power, 1.0, g["power_limit_w"])
        fan = None
        if g["fans"] > 0:
            span = max(g["temp_max_operating"] - g["temp_idle"], 1)
            heat = _clamp((temp - g["temp_idle"]) / span, 0.0, 1.0)
            fan = round(g["fan_min"] + (100 - g["fan_min"]) * heat)
        busy = bool(procs)
        mem_used = sum(proc_mem.values()) + g["unaccounted_mib"] * MIB
        mem_used = min(mem_used, (g["mem_total_mib"] - g["mem_reserved_mib"]) * MIB)
        if busy:
            pstate = NVML_PSTATE_0
            boost = _clamp(0.35 + util / 50.0, 0.0, 1.0)
            sm = g["clock_sm_idle"] + (g["clock_sm_max"] - g["clock_sm_idle"]) * boost
            mclk = g["clock_mem_max"]
            video = g["clock_video_max"]
        else:
            pstate = g["pstate_idle"]
            sm = g["clock_sm_idle"]
            mclk = g["clock_mem_idle"]
            video = round(g["clock_video_max"] * 0.5)
        reasons = throttled
        if throttled & ~nvmlClocksEventReasonGpuIdle:
            sm *= g["throttle_clock_factor"]
        if util < 1.0:
            reasons |= nvmlClocksEventReasonGpuIdle
        pcie = g["pcie_load_kbs"] * (util / 100.0) + 300
        enc_lo, enc_hi = g["enc_util"]
        dec_lo, dec_hi = g["dec_util"]
        return _GpuState(
            util=round(util),
            util_mem=round(util * ratio),
            mem_used=mem_used,
            temp=round(temp),
            power_mw=round(power * 1000),
            fan=fan,
            clock_sm=round(sm),
            clock_mem=round(mclk),
            clock_video=round(video),
            pstate=pstate,
            reasons=reasons,
            pcie_tx=round(pcie * (0.45 + 0.1 * wander(seed, index * 31 + 11, t))),
            pcie_rx=round(pcie * (0.9 + 0.2 * wander(seed, index * 31 + 13, t))),
            enc=round(enc_lo + (enc_hi - enc_lo) * wander(seed, index * 31 + 17, t)),
            dec=round(dec_lo + (dec_hi - dec_lo) * wander(seed, index * 31 + 19, t)),
            proc_util=proc_util,
            proc_mem=proc_mem,
        )

    # ---- library and system ------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        if self.driver_not_loaded:
            raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
        with self._lock:
            self._init_count += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        with self._lock:
            self._init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return self.scenario.host["driver_version"]

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check_init()
        major, _, minor = self.scenario.host["cuda_version"].partition(".")
        return int(major) * 1000 + int(minor or 0) * 10

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.nvmlSystemGetCudaDriverVersion()

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._check_init()
        return self.scenario.host["nvml_version"]

    def nvmlSystemGetHicVersion(self) -> list[Any]:
        self._check_init()
        return []

    def nvmlErrorString(self, result: int) -> str:
        return _ERROR_STRINGS.get(result, "Unknown Error")

    # ---- devices: identity -------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self._handles)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimDeviceHandle:
        self._check_init()
        if not isinstance(index, int) or not 0 <= index < len(self._handles):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if self.is_lost(index):
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return self._handles[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> SimDeviceHandle:
        self._check_init()
        for i, g in enumerate(self.scenario.gpus):
            if g["uuid"] == uuid:
                return self.nvmlDeviceGetHandleByIndex(i)
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> SimDeviceHandle:
        self._check_init()
        for i, g in enumerate(self.scenario.gpus):
            if g["bus_id"].lower() == bus_id.lower():
                return self.nvmlDeviceGetHandleByIndex(i)
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        self._gpu(handle)
        return int(handle.index)

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        self._gpu(handle, "MinorNumber")
        return int(handle.index)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return str(self._gpu(handle, "Name")["name"])

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return str(self._gpu(handle, "UUID")["uuid"])

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        return str(self._gpu(handle, "Serial")["serial"])

    def nvmlDeviceGetPciInfo_v3(self, handle: Any) -> nvmlPciInfo_t:
        g = self._gpu(handle, "PciInfo")
        return _pci_info(g["bus_id"], g["pci_device_id"], g["pci_subsystem_id"])

    def nvmlDeviceGetPciInfo(self, handle: Any) -> nvmlPciInfo_t:
        return self.nvmlDeviceGetPciInfo_v3(handle)

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        g = self._gpu(handle, "PersistenceMode")
        return NVML_FEATURE_ENABLED if g["persistence"] else NVML_FEATURE_DISABLED

    def nvmlDeviceGetComputeMode(self, handle: Any) -> int:
        return _COMPUTE_MODES[self._gpu(handle, "ComputeMode")["compute_mode"]]

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        g = self._gpu(device, "MigMode")
        mode = NVML_DEVICE_MIG_ENABLE if g["mig"] else NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        name = self._gpu(handle, "CudaComputeCapability")["name"]
        for pattern, cc in (("H100", (9, 0)), ("A100", (8, 0)), ("RTX 30", (8, 6)),
                            ("RTX 40", (8, 9)), ("L40", (8, 9))):
            if pattern in name:
                return cc
        return (8, 0)

    # ---- utilization and memory ----------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> c_nvmlUtilization_t:
        self._gpu(handle, "UtilizationRates")
        s = self._state(handle.index)
        return c_nvmlUtilization_t(gpu=s.util, memory=s.util_mem)

    def nvmlDeviceGetEncoderUtilization(self, handle: Any) -> list[int]:
        self._gpu(handle, "EncoderUtilization")
        return [self._state(handle.index).enc, 167000]

    def nvmlDeviceGetDecoderUtilization(self, handle: Any) -> list[int]:
        self._gpu(handle, "DecoderUtilization")
        return [self._state(handle.index).dec, 167000]

    def nvmlDeviceGetMemoryInfo(
        self, handle: Any, version: int | None = None
    ) -> c_nvmlMemory_t | c_nvmlMemory_v2_t:
        g = self._gpu(handle, "MemoryInfo")
        s = self._state(handle.index)
        total = g["mem_total_mib"] * MIB
        reserved = g["mem_reserved_mib"] * MIB
        free = max(total - reserved - s.mem_used, 0)
        if version:
            return c_nvmlMemory_v2_t(
                version=version, total=total, reserved=reserved, free=free, used=s.mem_used
            )
        # v1 counts the driver-reserved part as used, like the real call.
        return c_nvmlMemory_t(total=total, free=free, used=total - free)

    def nvmlDeviceGetBAR1MemoryInfo(self, handle: Any) -> c_nvmlBAR1Memory_t:
        g = self._gpu(handle, "BAR1MemoryInfo")
        s = self._state(handle.index)
        total = g["bar1_total_mib"] * MIB
        if g["bar1_total_mib"] >= g["mem_total_mib"]:
            used = min(s.mem_used + MIB, total)  # large BAR maps all of the framebuffer
        else:
            used = min((3 + 2 * len(s.proc_mem)) * MIB, total)
        return c_nvmlBAR1Memory_t(bar1Total=total, bar1Free=total - used, bar1Used=used)

    # ---- thermal, power, fans ------------------------------------------------------------

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        self._gpu(handle, "Temperature")
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._state(handle.index).temp

    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int:
        g = self._gpu(handle, "TemperatureThreshold")
        value = {
            NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: g["temp_shutdown"],
            NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: g["temp_slowdown"],
            NVML_TEMPERATURE_THRESHOLD_GPU_MAX: g["temp_max_operating"],
            NVML_TEMPERATURE_THRESHOLD_MEM_MAX: g["temp_mem_max"],
        }.get(threshold)
        if value is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return int(value)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        self._gpu(handle, "PowerUsage")
        return self._state(handle.index).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return round(self._gpu(handle, "EnforcedPowerLimit")["power_limit_w"] * 1000)

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        return round(self._gpu(handle, "PowerManagementLimit")["power_limit_w"] * 1000)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any) -> int:
        g = self._gpu(handle, "PowerManagementDefaultLimit")
        return round(g["power_default_limit_w"] * 1000)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any) -> list[int]:
        g = self._gpu(handle, "PowerManagementLimitConstraints")
        return [round(g["power_min_limit_w"] * 1000), round(g["power_max_limit_w"] * 1000)]

    def nvmlDeviceGetNumFans(self, device: Any) -> int:
        return int(self._gpu(device, "NumFans")["fans"])

    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:
        return self.nvmlDeviceGetFanSpeed_v2(handle, 0)

    def nvmlDeviceGetFanSpeed_v2(self, handle: Any, fan: int) -> int:
        g = self._gpu(handle, "FanSpeed")
        if g["fans"] <= 0:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= fan < g["fans"]:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        speed = self._state(handle.index).fan or 0
        # A second fan on the same cooler runs a touch differently.
        return int(_clamp(speed - 2 * fan, 0, 100))

    # ---- clocks and performance ----------------------------------------------------------

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        self._gpu(handle, "ClockInfo")
        s = self._state(handle.index)
        if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            return s.clock_sm
        if type == NVML_CLOCK_MEM:
            return s.clock_mem
        if type == NVML_CLOCK_VIDEO:
            return s.clock_video
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, type: int) -> int:
        g = self._gpu(handle, "MaxClockInfo")
        if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            return int(g["clock_sm_max"])
        if type == NVML_CLOCK_MEM:
            return int(g["clock_mem_max"])
        if type == NVML_CLOCK_VIDEO:
            return int(g["clock_video_max"])
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetPerformanceState(self, handle: Any) -> int:
        self._gpu(handle, "PerformanceState")
        return self._state(handle.index).pstate

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        self._gpu(handle, "CurrentClocksEventReasons")
        return self._state(handle.index).reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        # The deprecated name reads the same mask; a NotSupported on either name applies.
        self._gpu(handle, "CurrentClocksThrottleReasons")
        return self.nvmlDeviceGetCurrentClocksEventReasons(handle)

    def nvmlDeviceGetSupportedClocksEventReasons(self, handle: Any) -> int:
        self._gpu(handle, "SupportedClocksEventReasons")
        return nvmlClocksEventReasonAll

    # ---- ECC and memory health -----------------------------------------------------------

    def _ecc(self, handle: Any, field_name: str) -> dict[str, Any]:
        g = self._gpu(handle, field_name)
        if not g["ecc"]:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g

    def nvmlDeviceGetEccMode(self, handle: Any) -> list[int]:
        self._ecc(handle, "EccMode")
        return [NVML_FEATURE_ENABLED, NVML_FEATURE_ENABLED]

    def nvmlDeviceGetTotalEccErrors(
        self, handle: Any, errorType: int, counterType: int
    ) -> int:
        g = self._ecc(handle, "TotalEccErrors")
        kind = {NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected",
                NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected"}.get(errorType)
        counter = {NVML_VOLATILE_ECC: "volatile", NVML_AGGREGATE_ECC: "aggregate"}.get(counterType)
        if kind is None or counter is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return int(g[f"ecc_{counter}_{kind}"])

    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> list[int]:
        g = self._ecc(device, "RetiredPages")
        if sourceFilter == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS:
            count = g["retired_pages_sbe"]
        elif sourceFilter == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
            count = g["retired_pages_dbe"]
        else:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        base = 0x1_0000_0000 + (sourceFilter << 28) + device.index * 0x100_0000
        return [base + 0x1000 * i for i in range(int(count))]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int:
        g = self._ecc(device, "RetiredPagesPendingStatus")
        return NVML_FEATURE_ENABLED if g["retired_pages_pending"] else NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        g = self._ecc(device, "RemappedRows")
        return (
            int(g["remapped_correctable"]),
            int(g["remapped_uncorrectable"]),
            int(bool(g["remap_pending"])),
            int(bool(g["remap_failure"])),
        )

    # ---- PCIe, NVLink, topology, affinity ------------------------------------------------

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._gpu(handle, "CurrPcieLinkGeneration")["pcie_gen"])

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._gpu(handle, "MaxPcieLinkGeneration")["pcie_gen_max"])

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._gpu(handle, "GpuMaxPcieLinkGeneration")["pcie_gpu_gen_max"])

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return int(self._gpu(handle, "CurrPcieLinkWidth")["pcie_width"])

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return int(self._gpu(handle, "MaxPcieLinkWidth")["pcie_width_max"])

    def nvmlDeviceGetPcieThroughput(self, device: Any, counter: int) -> int:
        self._gpu(device, "PcieThroughput")
        s = self._state(device.index)
        if counter == NVML_PCIE_UTIL_TX_BYTES:
            return s.pcie_tx
        if counter == NVML_PCIE_UTIL_RX_BYTES:
            return s.pcie_rx
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def _link(self, device: Any, link: int, field_name: str) -> dict[str, Any]:
        g = self._gpu(device, field_name)
        if not isinstance(link, int) or link < 0 or link >= NVML_NVLINK_MAX_LINKS:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if link >= g["nvlinks"]:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        self._link(device, link, "NvLinkState")
        if (device.index, link) in self._links_down:
            return NVML_FEATURE_DISABLED
        return NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkVersion(self, device: Any, link: int) -> int:
        g = self._link(device, link, "NvLinkVersion")
        return 4 if "H100" in g["name"] else 3

    def _remote(self, index: int, link: int) -> tuple[str, int]:
        """(bus id, device type) at the far end of a link."""
        g = self.scenario.gpus[index]
        if g["nvlink_remote"] == "peers" and g["nvlink_peers"]:
            # Bridged cards: links are handed out to peers in index order.
            n = 0
            for peer, count in sorted(g["nvlink_peers"].items()):
                n += int(count)
                if link < n:
                    return self.scenario.gpus[int(peer)]["bus_id"], NVML_NVLINK_DEVICE_TYPE_GPU
        switches = self.scenario.nvswitches or ["00000000:05:00.0"]
        # Spread a GPU's links over the switches like a baseboard does (5-4-4-5 on H100).
        return switches[link % len(switches)], NVML_NVLINK_DEVICE_TYPE_SWITCH

    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, device: Any, link: int) -> nvmlPciInfo_t:
        self._link(device, link, "NvLinkRemotePciInfo")
        bus_id, _ = self._remote(device.index, link)
        return _pci_info(bus_id, 0x22A310DE, 0)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> nvmlPciInfo_t:
        return self.nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        self._link(handle, link, "NvLinkRemoteDeviceType")
        return self._remote(handle.index, link)[1]

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        self._gpu(device1, "TopologyCommonAncestor")
        self._gpu(device2, "TopologyCommonAncestor")
        a, b = sorted((device1.index, device2.index))
        if a == b:
            return NVML_TOPOLOGY_INTERNAL
        return _TOPOLOGY_KINDS[self.scenario.topology[(a, b)]]

    def nvmlDeviceGetCpuAffinity(self, handle: Any, cpuSetSize: int) -> list[int]:
        g = self._gpu(handle, "CpuAffinity")
        if g["cpu_affinity"] is None:
            cpus = list(range(int(self.scenario.host["cpu_count"])))
        else:
            cpus = parse_cpulist(g["cpu_affinity"])
        words = [0] * cpuSetSize
        for cpu in cpus:
            if cpu // 64 < cpuSetSize:
                words[cpu // 64] |= 1 << (cpu % 64)
        return words

    def nvmlDeviceGetCpuAffinityWithinScope(
        self, handle: Any, cpuSetSize: int, scope: int
    ) -> list[int]:
        return self.nvmlDeviceGetCpuAffinity(handle, cpuSetSize)

    def nvmlDeviceGetMemoryAffinity(
        self, handle: Any, nodeSetSize: int, scope: int
    ) -> list[int]:
        """The NUMA node(s) near the GPU as a bitmask (what `topo -m` calls NUMA Affinity)."""
        g = self._gpu(handle, "MemoryAffinity")
        words = [0] * nodeSetSize
        if g["numa"] // 64 < nodeSetSize:
            words[g["numa"] // 64] |= 1 << (g["numa"] % 64)
        return words

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        # The GPU's own memory NUMA node exists only on coherent (C2C) systems; on x86
        # boxes like these the real call is unsupported (`topo -m`: GPU NUMA ID N/A).
        self._gpu(handle, "NumaNodeId")
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    # ---- processes -------------------------------------------------------------------

    def _running(self, handle: Any, field_name: str, kinds: tuple[str, ...]) -> list[Any]:
        self._gpu(handle, field_name)
        s = self._state(handle.index)
        out = []
        vanishing = []
        with self._lock:
            for proc in self._procs_by_gpu()[handle.index]:
                if proc.type not in kinds:
                    continue
                out.append(
                    c_nvmlProcessInfo_t(
                        pid=proc.pid,
                        usedGpuMemory=s.proc_mem.get(proc.pid, int(proc.gpus[handle.index] * MIB)),
                        gpuInstanceId=NVML_VALUE_NOT_AVAILABLE_UINT,
                        computeInstanceId=NVML_VALUE_NOT_AVAILABLE_UINT,
                    )
                )
                if proc.vanish_after_list:
                    vanishing.append(proc.pid)
            # The race real collectors meet: listed here, gone before the next call.
            for pid in vanishing:
                self.remove_process(pid)
        return out

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any) -> list[Any]:
        return self._running(handle, "ComputeRunningProcesses", ("C", "C+G"))

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[Any]:
        return self.nvmlDeviceGetComputeRunningProcesses_v3(handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return self.nvmlDeviceGetComputeRunningProcesses_v3(handle)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: Any) -> list[Any]:
        return self._running(handle, "GraphicsRunningProcesses", ("G", "C+G"))

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: Any) -> list[Any]:
        return self.nvmlDeviceGetGraphicsRunningProcesses_v3(handle)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        return self.nvmlDeviceGetGraphicsRunningProcesses_v3(handle)

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        """Samples newer than ``timeStamp`` (microseconds); NotFound when there are none."""
        self._gpu(handle, "ProcessUtilization")
        s = self._state(handle.index)
        now_us = int(self.clock() * 1_000_000)
        if not s.proc_util or now_us <= timeStamp:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return [
            c_nvmlProcessUtilizationSample_t(
                pid=pid, timeStamp=now_us, smUtil=sm, memUtil=mem, encUtil=0, decUtil=0
            )
            for pid, (sm, mem) in s.proc_util.items()
            if pid in self._procs
        ]

    # ---- events ----------------------------------------------------------------------

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        g = self._gpu(handle, "SupportedEventTypes")
        if g["event_types"] is not None:
            return int(g["event_types"])
        mask = nvmlEventTypePState | nvmlEventTypeXidCriticalError | nvmlEventTypeClock
        if g["ecc"]:
            mask |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError
        return mask

    def nvmlEventSetCreate(self) -> SimEventSet:
        self._check_init()
        return SimEventSet()

    def nvmlDeviceRegisterEvents(
        self, handle: Any, eventTypes: int, eventSet: SimEventSet
    ) -> None:
        supported = self.nvmlDeviceGetSupportedEventTypes(handle)
        if eventTypes & ~supported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        eventSet.registered[handle.index] = eventSet.registered.get(handle.index, 0) | eventTypes

    def nvmlEventSetWait_v2(self, eventSet: SimEventSet, timeoutms: int) -> c_nvmlEventData_t:
        """The next due XID event on a registered GPU, or NVMLError_Timeout."""
        self._check_init()
        if eventSet.freed:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        deadline = time.monotonic() + max(timeoutms, 0) / 1000.0
        while True:
            event = self._next_event(eventSet)
            if event is not None:
                return event
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NVMLError(NVML_ERROR_TIMEOUT)
            time.sleep(min(remaining, 0.05))

    def nvmlEventSetWait(self, eventSet: SimEventSet, timeoutms: int) -> c_nvmlEventData_t:
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def _next_event(self, eventSet: SimEventSet) -> c_nvmlEventData_t | None:
        now = self.clock()
        with self._lock:
            for event in self._xids:
                if event["at"] > now:
                    break
                mask = eventSet.registered.get(event["gpu"], 0)
                if event["id"] in eventSet.delivered or not mask & nvmlEventTypeXidCriticalError:
                    continue
                eventSet.delivered.add(event["id"])
                return c_nvmlEventData_t(
                    device=self._handles[event["gpu"]],
                    eventType=nvmlEventTypeXidCriticalError,
                    eventData=event["xid"],
                    gpuInstanceId=NVML_VALUE_NOT_AVAILABLE_UINT,
                    computeInstanceId=NVML_VALUE_NOT_AVAILABLE_UINT,
                )
        return None

    def nvmlEventSetFree(self, eventSet: SimEventSet) -> None:
        self._check_init()
        eventSet.freed = True

    def __getattr__(self, name: str) -> Any:
        # Class-level constants and error classes are found normally; anything else
        # pynvml has and we do not is a missing function on this driver, like a real
        # older libnvidia-ml without a symbol.
        if name.startswith("nvml") and not name.startswith(_CONSTANT_PREFIXES):

            def missing(*args: Any, **kwargs: Any) -> Any:
                raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)

            return missing
        raise AttributeError(name)


# pynvml names that are values, not functions: a typo in one must stay an AttributeError.
_CONSTANT_PREFIXES = ("nvmlClocks", "nvmlEventType", "nvmlMemory_", "nvmlFlag")


def _pci_info(bus_id: str, device_id: int, subsystem_id: int) -> nvmlPciInfo_t:
    domain, bus, rest = bus_id.split(":")
    device = rest.split(".")[0]
    return nvmlPciInfo_t(
        busIdLegacy=bus_id[4:],
        domain=int(domain, 16),
        bus=int(bus, 16),
        device=int(device, 16),
        pciDeviceId=device_id,
        pciSubSystemId=subsystem_id,
        busId=bus_id,
    )


# Constants and error classes readable on the instance, as on the pynvml module.
for _name, _value in list(globals().items()):
    if _name.startswith(("NVML_", "nvmlClocks", "nvmlEventType", "NVMLError")) or _name in (
        "nvmlMemory_v2",
        "NVMLLibraryMismatchError",
    ):
        setattr(SimNvml, _name, _value)
SimNvml.nvmlExceptionClass = staticmethod(nvmlExceptionClass)  # type: ignore[attr-defined]
del _name, _value


# --------------------------------------------------------------------------------------
# The fake /proc for simulated processes

_SIGNAL_NUMBERS = {"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12,
                   "TERM": 15, "CONT": 18, "STOP": 19}
_INIT_PID = 1


def _signal_number(sig: int | str) -> int:
    if isinstance(sig, bool):
        raise ValueError(f"not a signal: {sig!r}")
    if isinstance(sig, int):
        return int(sig)
    name = str(sig).upper().removeprefix("SIG")
    if name.isdigit():
        return int(name)
    if name not in _SIGNAL_NUMBERS:
        raise ValueError(f"unknown signal {sig!r}")
    return _SIGNAL_NUMBERS[name]


def _kernel_file(cmdline: list[str]) -> str | None:
    """A Jupyter kernel's connection file: ``-f /path/kernel-<id>.json``."""
    for i, arg in enumerate(cmdline):
        if arg == "-f" and i + 1 < len(cmdline):
            return cmdline[i + 1]
        if arg.startswith(("--f=", "-f=")):
            return arg.split("=", 1)[1]
    return None


class SimProcs:
    """What ``procfs.ProcFs`` answers, for the processes of a ``SimNvml``.

    It never touches a real process: ``signal`` only changes the simulation.
    """

    def __init__(self, sim: SimNvml) -> None:
        self.sim = sim
        host = sim.scenario.host
        self.boot_time = sim.t0 - float(host["uptime_days"]) * 86400.0

    def _entry(self, pid: int, table: dict[int, _Proc]) -> dict[str, Any] | None:
        proc = table.get(pid)
        if proc is None:
            if pid != _INIT_PID:
                return None
            return self._init_entry()
        if proc.hidden or proc.state == "X":
            return None
        parent = table.get(proc.ppid)
        if parent is not None:
            parent_command, parent_user = " ".join(parent.cmdline), parent.user
        elif proc.ppid == _INIT_PID:
            parent_command, parent_user = "/sbin/init", "root"
        else:
            parent_command = parent_user = None
        start_time = max(proc.start_time, self.boot_time + 1.0)
        cmdline = tuple(proc.cmdline)
        command = " ".join(cmdline)
        if proc.state == "Z":
            # A zombie's /proc/PID/cmdline is empty; ps and ProcFs show [comm] instead.
            command = f"[{os.path.basename(cmdline[0])[:15]}]" if cmdline else "[?]"
            cmdline = ()
        kernel_file = _kernel_file(list(cmdline))
        exists = proc.kernel_file_exists
        if kernel_file is not None and exists is None:
            exists = True
        return {
            "pid": proc.pid,
            "user": proc.user,
            "uid": proc.uid,
            "name": os.path.basename(proc.cmdline[0]) if proc.cmdline else "",
            "command": command,
            "cmdline": cmdline,
            "ppid": proc.ppid,
            "state": proc.state,
            "start_time": start_time,
            "start_ticks": self.start_ticks(start_time),
            "cpu_percent": self._cpu_percent(proc),
            "rss": int(proc.rss_mib) * MIB,
            "parent_command": parent_command,
            "parent_user": parent_user,
            "kernel_file": kernel_file,
            "kernel_file_exists": exists if kernel_file is not None else None,
            "simulated": True,
        }

    def _init_entry(self) -> dict[str, Any]:
        return {
            "pid": _INIT_PID, "user": "root", "uid": 0, "name": "systemd",
            "command": "/sbin/init", "cmdline": ("/sbin/init",), "ppid": 0, "state": "S",
            "start_time": self.boot_time, "start_ticks": 1, "cpu_percent": 0.0,
            "rss": 12 * MIB, "parent_command": None, "parent_user": None,
            "kernel_file": None, "kernel_file_exists": None, "simulated": True,
        }

    def start_ticks(self, start_time: float) -> int:
        """/proc/PID/stat field 22: clock ticks after boot."""
        return max(int((start_time - self.boot_time) * CLOCK_TICKS), 1)

    def _cpu_percent(self, proc: _Proc) -> float:
        t = self.sim.clock()
        if proc.state in ("Z", "T", "X"):
            return 0.0
        if proc.cpu_percent is not None:
            lo, hi = proc.cpu_percent
        elif proc.gpus and proc.util[1] > 0:
            lo, hi = 60.0, 100.0  # a busy CUDA process keeps a core feeding the GPU
        else:
            lo, hi = 0.0, 1.0
        return round(lo + (hi - lo) * wander(self.sim.seed, proc.pid * 64 + 63, t), 1)

    # ---- ProcFs interface ----------------------------------------------------------------

    def host_info(self) -> dict[str, Any]:
        host = self.sim.scenario.host
        t = self.sim.clock()
        seed = self.sim.seed
        lo, hi = host["cpu_percent"]
        cpu = lo + (hi - lo) * wander(seed, 0xC0FFEE, t)
        cpus = int(host["cpu_count"])
        total = int(float(host["mem_total_gib"]) * GIB)
        if host["mem_available_gib"] is not None:
            alo, ahi = host["mem_available_gib"]
            avail = int((alo + (ahi - alo) * wander(seed, 0xA7A1, t)) * GIB)
        else:
            avail = int(total * (0.55 + 0.1 * wander(seed, 0xA7A1, t)))
        load1 = cpus * cpu / 100.0
        return {
            "hostname": host["hostname"],
            "cpu_count": cpus,
            "cpu_percent": round(cpu, 1),
            "load": (round(load1, 2), round(load1 * 0.97, 2), round(load1 * 0.95, 2)),
            "mem_total": total,
            "mem_available": min(avail, total),
        }

    def process_info(self, pids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """Pids not visible (exited, or 'hidden' in another PID namespace) are absent."""
        table = self.sim.processes()
        out = {}
        for pid in pids:
            entry = self._entry(int(pid), table)
            if entry is not None:
                out[int(pid)] = entry
        return out

    def process(self, pid: int) -> dict[str, Any] | None:
        """One process with everything process_info gives, plus ``cwd``."""
        entry = self._entry(int(pid), self.sim.processes())
        if entry is not None:
            user = entry["user"]
            entry["cwd"] = "/root" if user == "root" else f"/home/{user}"
        return entry

    def user_name(self, uid: int | None) -> str | None:
        if uid is None:
            return None
        for proc in self.sim.processes().values():
            if proc.uid == uid:
                return proc.user
        return "root" if uid == 0 else str(uid)

    def parent_chain(self, pid: int) -> list[dict[str, Any]]:
        """The ancestors of ``pid``, nearest first, up to and including pid 1."""
        table = self.sim.processes()
        chain: list[dict[str, Any]] = []
        entry = self._entry(int(pid), table)
        seen = {int(pid)}
        while entry is not None and entry["ppid"] and entry["ppid"] not in seen:
            seen.add(entry["ppid"])
            entry = self._entry(entry["ppid"], table)
            if entry is not None:
                chain.append(entry)
        return chain

    def signal(self, pid: int, start_ticks: int | None, sig: int | str) -> dict[str, Any]:
        """Signal a simulated process; same answer shape as actions.kill.

        outcome: exited | killed | still alive | permission denied | already gone |
        pid reused.  Never calls os.kill.
        """
        number = _signal_number(sig)
        sim = self.sim
        with sim._lock:
            table = sim.processes()
            entry = self._entry(int(pid), table)
            if entry is None:
                return _answer("already gone", f"pid {pid} is not running", None)
            owner = entry["user"]
            if start_ticks is not None and entry["start_ticks"] != start_ticks:
                return _answer(
                    "pid reused", f"pid {pid} is now a different process ({entry['command']})",
                    owner,
                )
            if sim.scenario.me != "root" and owner != sim.scenario.me:
                return _answer(
                    "permission denied", f"pid {pid} belongs to {owner}, not {sim.scenario.me}",
                    owner,
                )
            proc = table.get(int(pid))
            if proc is None:  # pid 1, owned by root: only reachable when me is root
                return _answer("still alive", "init does not take signals from here", owner)
            if number == 0:
                return _answer("still alive", f"pid {pid} is running", owner)
            if proc.state == "Z":
                return _answer(
                    "still alive",
                    f"pid {pid} is a zombie: it has exited and waits for its parent "
                    f"(pid {proc.ppid}) to reap it",
                    owner,
                )
            if number == 9:
                sim.remove_process(proc.pid)
                return _answer("killed", f"pid {pid} killed", owner)
            if number in (1, 2, 3, 15) and not proc.ignores_term:
                sim.remove_process(proc.pid)
                return _answer("exited", f"pid {pid} exited", owner)
            if number == 19:
                sim.set_process_state(proc.pid, "T")
            elif number == 18 and proc.state == "T":
                sim.set_process_state(proc.pid, "S")
            return _answer("still alive", f"pid {pid} is still running after the signal", owner)


def _answer(outcome: str, message: str, owner: str | None) -> dict[str, Any]:
    return {
        "ok": outcome in ("exited", "killed", "already gone"),
        "outcome": outcome,
        "message": message,
        "owner": owner,
        "simulated": True,
    }


# --------------------------------------------------------------------------------------
# Large synthetic scenarios, for benchmarks

_USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")
_COMMANDS = (
    "python train.py --config configs/run{n}.yaml",
    "python -m ipykernel_launcher -f /home/{user}/.local/share/jupyter/runtime/kernel-{n:08x}.json",
    "python eval.py --ckpt /scratch/{user}/ckpt-{n}",
    "/usr/bin/python3 -u infer_server.py --port {port}",
    "torchrun --nproc_per_node=1 finetune.py --seed {n}",
)


def synthetic_scenario(
    gpus: int = 8, processes: int = 200, seed: int = 0, name: str | None = None
) -> Scenario:
    """An H100-like node with ``processes`` GPU processes spread over ``gpus`` cards."""
    gpu_list = []
    for i in range(gpus):
        node = 0 if i < max(gpus // 2, 1) else 1
        gpu_list.append({"numa": node, "bus_id": f"00000000:{(0x18 + 0x11 * i) % 256:02X}:00.0"})
    per_gpu_mib = 80000 / max(processes / max(gpus, 1), 1)
    procs = []
    for n in range(processes):
        h = _mix(seed * 1_000_003 + n)
        user = _USERS[h % len(_USERS)]
        gpu = n % gpus
        cmd = _COMMANDS[(h >> 8) % len(_COMMANDS)].format(n=n, user=user, port=8000 + n)
        lo = float((h >> 16) % 40)
        procs.append({
            "pid": SIM_PID_BASE + 100_000 + n,
            "user": user,
            "cmdline": cmd,
            "age": float(60 + (h >> 24) % 400_000),
            "gpus": {gpu: round(per_gpu_mib * (0.5 + (h >> 32) % 50 / 100.0), 1)},
            "util": [lo / 4, lo / 4 + 10.0],
            "state": "S",
        })
    data = {
        "name": name or f"synthetic-{gpus}x{processes}",
        "description": f"{gpus} H100-like GPUs, {processes} processes (benchmarks)",
        "hostname": "synthetic",
        "seed": seed,
        "cpu_count": 224,
        "model": {"name": "NVIDIA H100 80GB HBM3", "nvlinks": 18},
        "gpus": gpu_list,
        "processes": procs,
    }
    return scenario_from_dict(data, source="<synthetic>")
