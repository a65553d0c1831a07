"""What pynvml has besides its functions: constants, error classes, structs, handles.

``library.SimNvml`` carries the constants and error classes as class attributes too, as
the pynvml module does.  The few sim-wide values the other modules share (the simulated
pid range, clock ticks, MiB) live here as well.
"""

from __future__ import annotations

from typing import Any

from gputop.sources.nvmlcodes import DeviceHandle

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
    device: DeviceHandle
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


# -- MIG device handles and GPM (values from nvidia-ml-py's pynvml.py) ----------

NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRIC_DRAM_BW_UTIL = 10
NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20
NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_SUPPORT_VERSION = 1
NVML_GPM_METRIC_MAX = 477


class SimMigHandle:
    """A MIG device handle: distinct from its parent's, the same object for the same slot."""

    __slots__ = ("index", "slot")

    def __init__(self, index: int, slot: int) -> None:
        self.index = index  # the parent GPU
        self.slot = slot

    def __repr__(self) -> str:
        return f"<SimMigHandle {self.index}:{self.slot}>"


class SimGpmSample:
    """nvmlGpmSampleAlloc's opaque sample; filled by nvmlGpmMigSampleGet (one GPU
    instance) or nvmlGpmSampleGet (the whole card)."""

    __slots__ = ("card", "freed", "gi", "index", "sm_active", "time")

    def __init__(self) -> None:
        self.index: int | None = None
        self.gi: int | None = None
        self.time = 0.0
        self.sm_active = 0.0
        self.freed = False
        # nvmlGpmSampleGet's whole-card values: metric id -> value at that moment
        self.card: dict[int, float] | None = None


class c_nvmlGpmSupport_t(_Struct):
    version: int
    isSupportedDevice: int


class c_nvmlGpmMetric_t(_Struct):
    metricId: int
    nvmlReturn: int
    value: float


class _Metrics:
    """The struct's fixed array of NVML_GPM_METRIC_MAX entries, made as they are used:
    building all of them on every call cost more than the collector's own work."""

    def __init__(self) -> None:
        self._made: dict[int, c_nvmlGpmMetric_t] = {}

    def __getitem__(self, i: int) -> c_nvmlGpmMetric_t:
        if not 0 <= i < NVML_GPM_METRIC_MAX:
            raise IndexError(i)
        if i not in self._made:
            self._made[i] = c_nvmlGpmMetric_t(metricId=0, nvmlReturn=0, value=0.0)
        return self._made[i]


class c_nvmlGpmMetricsGet_t:
    """Filled by the caller (version, numMetrics, sample1, sample2, metrics[i].metricId)."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = _Metrics()


class SimEventSet:
    __slots__ = ("delivered", "freed", "registered")

    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # gpu index -> event type mask
        self.delivered: set[int] = set()  # ids of XID events already returned
        self.freed = False
