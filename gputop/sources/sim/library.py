"""``SimNvml``: pynvml's functions, answered from a scenario and the clock.

The collector is handed either the ``pynvml`` module or a ``SimNvml`` and cannot tell
them apart: the same function names and argument orders, the same return shapes
(``api``'s structs), the same ``NVMLError`` subclasses raised in the same cases.
"""

from __future__ import annotations

import math
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

from gputop.records import MutableRecord, field, record
from gputop.sources.nvmlcodes import DeviceHandle
from gputop.sources.sim import api
from gputop.sources.sim.api import (
    _COMPUTE_MODES,
    _ERROR_STRINGS,
    _THROTTLE_BITS,
    _TOPOLOGY_KINDS,
    MIB,
    NVML_AGGREGATE_ECC,
    NVML_CLOCK_GRAPHICS,
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_CLOCK_VIDEO,
    NVML_DEVICE_MIG_DISABLE,
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_UNINITIALIZED,
    NVML_FEATURE_DISABLED,
    NVML_FEATURE_ENABLED,
    NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    NVML_GPM_METRIC_DRAM_BW_UTIL,
    NVML_GPM_METRIC_MAX,
    NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    NVML_GPM_METRIC_SM_UTIL,
    NVML_GPM_METRICS_GET_VERSION,
    NVML_GPM_SUPPORT_VERSION,
    NVML_MEMORY_ERROR_TYPE_CORRECTED,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_NVLINK_DEVICE_TYPE_GPU,
    NVML_NVLINK_DEVICE_TYPE_SWITCH,
    NVML_NVLINK_MAX_LINKS,
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    NVML_PCIE_UTIL_RX_BYTES,
    NVML_PCIE_UTIL_TX_BYTES,
    NVML_PSTATE_0,
    NVML_SUCCESS,
    NVML_TEMPERATURE_GPU,
    NVML_TEMPERATURE_THRESHOLD_GPU_MAX,
    NVML_TEMPERATURE_THRESHOLD_MEM_MAX,
    NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
    NVML_TOPOLOGY_INTERNAL,
    NVML_VALUE_NOT_AVAILABLE_UINT,
    NVML_VOLATILE_ECC,
    NVMLError,
    SimDeviceHandle,
    SimEventSet,
    SimGpmSample,
    SimMigHandle,
    c_nvmlBAR1Memory_t,
    c_nvmlEventData_t,
    c_nvmlGpmSupport_t,
    c_nvmlMemory_t,
    c_nvmlMemory_v2_t,
    c_nvmlProcessInfo_t,
    c_nvmlProcessUtilizationSample_t,
    c_nvmlUtilization_t,
    nvmlClocksEventReasonAll,
    nvmlClocksEventReasonGpuIdle,
    nvmlEventTypeClock,
    nvmlEventTypeDoubleBitEccError,
    nvmlEventTypePState,
    nvmlEventTypeSingleBitEccError,
    nvmlEventTypeXidCriticalError,
    nvmlExceptionClass,
    nvmlPciInfo_t,
)
from gputop.sources.sim.dynamics import _clamp, wander
from gputop.sources.sim.scenario import Scenario, load_scenario, normalize_field, parse_cpulist


@record(frozen=False, slots=True)
class _Proc(MutableRecord):
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
    mig: int | None = None  # the MIG device (slot) of its GPU it runs on


@record(frozen=False, slots=True)
class _GpuState(MutableRecord):
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
                mig=spec["mig"],
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
        self._failing: dict[int, dict[str, int]] = {i: {} for i in range(len(scenario.gpus))}
        self._links_down: set[tuple[int, int]] = {
            (item["gpu"], item["link"]) for item in faults["nvlink_down"]
        }
        self._version = 0  # bumped when processes change: invalidates the state cache
        self._cache: dict[tuple[int, int, int], _GpuState] = {}
        self._grid_cache: dict[tuple[int, int, float], float] = {}
        self._gpu_procs: dict[int, list[_Proc]] | None = None
        self._mig_handles: dict[tuple[int, int], SimMigHandle] = {}

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

    def set_error(self, gpu: int, field_name: str, code: int | None) -> None:
        """Make one field (e.g. 'ComputeRunningProcesses') fail on a GPU with NVML error
        ``code`` (NVML_ERROR_UNKNOWN, _TIMEOUT...), as a driver under stress does; None
        heals it.  Unlike NotSupported, the value exists but could not be read."""
        key = normalize_field(field_name)
        if code is None:
            self._failing[gpu].pop(key, None)
        else:
            self._failing[gpu][key] = code

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

    def _gpu(self, handle: DeviceHandle, field_name: str | None = None) -> dict[str, Any]:
        """Resolve a handle, raising what real NVML would for this GPU and field."""
        self._check_init()
        if isinstance(handle, SimMigHandle):
            self._mig(handle)
            # What the parent reports (temperature, power, clocks, utilization, PCIe, ...)
            # is not answered on a MIG device handle; the few calls that are check first.
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not isinstance(handle, SimDeviceHandle) or handle.index >= len(self._handles):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if self.is_lost(handle.index):
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if field_name is not None and normalize_field(field_name) in self._unsupported[
            handle.index
        ]:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        failing = self._failing[handle.index]
        if field_name is not None and failing and normalize_field(field_name) in failing:
            raise NVMLError(failing[normalize_field(field_name)])
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

    def nvmlDeviceGetIndex(self, handle: DeviceHandle) -> int:
        self._gpu(handle)
        return int(handle.index)

    def nvmlDeviceGetMinorNumber(self, handle: DeviceHandle) -> int:
        self._gpu(handle, "MinorNumber")
        return int(handle.index)

    def nvmlDeviceGetName(self, handle: DeviceHandle) -> str:
        if isinstance(handle, SimMigHandle):
            profile = self._mig(handle)["profile"]
            return f"{self.scenario.gpus[handle.index]['name']} MIG {profile}"
        return str(self._gpu(handle, "Name")["name"])

    def nvmlDeviceGetUUID(self, handle: DeviceHandle) -> str:
        if isinstance(handle, SimMigHandle):
            return str(self._mig(handle)["uuid"])
        return str(self._gpu(handle, "UUID")["uuid"])

    def nvmlDeviceGetSerial(self, handle: DeviceHandle) -> str:
        return str(self._gpu(handle, "Serial")["serial"])

    def nvmlDeviceGetPciInfo_v3(self, handle: DeviceHandle) -> nvmlPciInfo_t:
        g = self._gpu(handle, "PciInfo")
        return _pci_info(g["bus_id"], g["pci_device_id"], g["pci_subsystem_id"])

    def nvmlDeviceGetPciInfo(self, handle: DeviceHandle) -> nvmlPciInfo_t:
        return self.nvmlDeviceGetPciInfo_v3(handle)

    def nvmlDeviceGetPersistenceMode(self, handle: DeviceHandle) -> int:
        g = self._gpu(handle, "PersistenceMode")
        return NVML_FEATURE_ENABLED if g["persistence"] else NVML_FEATURE_DISABLED

    def nvmlDeviceGetVirtualizationMode(self, handle: DeviceHandle) -> int:
        self._gpu(handle, "VirtualizationMode")
        return 0  # NVML_GPU_VIRTUALIZATION_MODE_NONE: the simulated cards are bare metal

    def nvmlDeviceGetComputeMode(self, handle: DeviceHandle) -> int:
        return _COMPUTE_MODES[self._gpu(handle, "ComputeMode")["compute_mode"]]

    def nvmlDeviceGetMigMode(self, device: DeviceHandle) -> list[int]:
        g = self._gpu(device, "MigMode")
        return [NVML_DEVICE_MIG_ENABLE if g[key] else NVML_DEVICE_MIG_DISABLE
                for key in ("mig", "mig_pending")]

    def nvmlDeviceGetCudaComputeCapability(self, handle: DeviceHandle) -> tuple[int, int]:
        name = self._gpu(handle, "CudaComputeCapability")["name"]
        for pattern, cc in (("H100", (9, 0)), ("A100", (8, 0)), ("RTX 30", (8, 6)),
                            ("RTX 40", (8, 9)), ("L40", (8, 9))):
            if pattern in name:
                return cc
        return (8, 0)

    # ---- utilization and memory ----------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: DeviceHandle) -> c_nvmlUtilization_t:
        self._gpu(handle, "UtilizationRates")
        self._not_in_mig_mode(handle)
        s = self._state(handle.index)
        return c_nvmlUtilization_t(gpu=s.util, memory=s.util_mem)

    def nvmlDeviceGetEncoderUtilization(self, handle: DeviceHandle) -> list[int]:
        self._gpu(handle, "EncoderUtilization")
        return [self._state(handle.index).enc, 167000]

    def nvmlDeviceGetDecoderUtilization(self, handle: DeviceHandle) -> list[int]:
        self._gpu(handle, "DecoderUtilization")
        return [self._state(handle.index).dec, 167000]

    def nvmlDeviceGetMemoryInfo(
        self, handle: DeviceHandle, version: int | None = None
    ) -> c_nvmlMemory_t | c_nvmlMemory_v2_t:
        if isinstance(handle, SimMigHandle):
            return self._mig_memory(handle, version)
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

    def nvmlDeviceGetBAR1MemoryInfo(self, handle: DeviceHandle) -> c_nvmlBAR1Memory_t:
        if isinstance(handle, SimMigHandle):
            return self._mig_bar1(handle)
        g = self._gpu(handle, "BAR1MemoryInfo")
        s = self._state(handle.index)
        total = g["bar1_total_mib"] * MIB
        if g["bar1_total_mib"] >= g["mem_total_mib"]:
            used = min(s.mem_used + MIB, total)  # large BAR maps all of the framebuffer
        else:
            used = min((3 + 2 * len(s.proc_mem)) * MIB, total)
        return c_nvmlBAR1Memory_t(bar1Total=total, bar1Free=total - used, bar1Used=used)

    # ---- thermal, power, fans ------------------------------------------------------------

    def nvmlDeviceGetTemperature(self, handle: DeviceHandle, sensor: int) -> int:
        self._gpu(handle, "Temperature")
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._state(handle.index).temp

    def nvmlDeviceGetTemperatureThreshold(self, handle: DeviceHandle, threshold: int) -> int:
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

    def nvmlDeviceGetPowerUsage(self, handle: DeviceHandle) -> int:
        self._gpu(handle, "PowerUsage")
        return self._state(handle.index).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: DeviceHandle) -> int:
        """mJ since the driver loaded: a day before the simulation started, then at the
        card's halfway power between idle and load (a pure function of the clock, so
        monotonic; its rate is that mean, not the wandering draw)."""
        g = self._gpu(handle, "TotalEnergyConsumption")
        watts = (g["power_idle_w"] + g["power_load_w"]) / 2
        return round((max(self.clock() - self.t0, 0.0) + 86400.0) * watts * 1000)

    def nvmlDeviceGetPcieReplayCounter(self, handle: DeviceHandle) -> int:
        return int(self._gpu(handle, "PcieReplayCounter")["pcie_replays"])

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: DeviceHandle) -> int:
        return round(self._gpu(handle, "EnforcedPowerLimit")["power_limit_w"] * 1000)

    def nvmlDeviceGetPowerManagementLimit(self, handle: DeviceHandle) -> int:
        return round(self._gpu(handle, "PowerManagementLimit")["power_limit_w"] * 1000)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: DeviceHandle) -> int:
        g = self._gpu(handle, "PowerManagementDefaultLimit")
        return round(g["power_default_limit_w"] * 1000)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: DeviceHandle) -> list[int]:
        g = self._gpu(handle, "PowerManagementLimitConstraints")
        return [round(g["power_min_limit_w"] * 1000), round(g["power_max_limit_w"] * 1000)]

    def nvmlDeviceGetNumFans(self, device: DeviceHandle) -> int:
        return int(self._gpu(device, "NumFans")["fans"])

    def nvmlDeviceGetFanSpeed(self, handle: DeviceHandle) -> int:
        return self.nvmlDeviceGetFanSpeed_v2(handle, 0)

    def nvmlDeviceGetFanSpeed_v2(self, handle: DeviceHandle, fan: int) -> int:
        g = self._gpu(handle, "FanSpeed")
        if g["fans"] <= 0:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= fan < g["fans"]:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        speed = self._state(handle.index).fan or 0
        # A second fan on the same cooler runs a touch differently.
        return int(_clamp(speed - 2 * fan, 0, 100))

    # ---- clocks and performance ----------------------------------------------------------

    def nvmlDeviceGetClockInfo(self, handle: DeviceHandle, type: int) -> int:
        self._gpu(handle, "ClockInfo")
        s = self._state(handle.index)
        if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            return s.clock_sm
        if type == NVML_CLOCK_MEM:
            return s.clock_mem
        if type == NVML_CLOCK_VIDEO:
            return s.clock_video
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetMaxClockInfo(self, handle: DeviceHandle, type: int) -> int:
        g = self._gpu(handle, "MaxClockInfo")
        if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            return int(g["clock_sm_max"])
        if type == NVML_CLOCK_MEM:
            return int(g["clock_mem_max"])
        if type == NVML_CLOCK_VIDEO:
            return int(g["clock_video_max"])
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetPerformanceState(self, handle: DeviceHandle) -> int:
        self._gpu(handle, "PerformanceState")
        return self._state(handle.index).pstate

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: DeviceHandle) -> int:
        self._gpu(handle, "CurrentClocksEventReasons")
        return self._state(handle.index).reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: DeviceHandle) -> int:
        # The deprecated name reads the same mask; a NotSupported on either name applies.
        self._gpu(handle, "CurrentClocksThrottleReasons")
        return self.nvmlDeviceGetCurrentClocksEventReasons(handle)

    def nvmlDeviceGetSupportedClocksEventReasons(self, handle: DeviceHandle) -> int:
        self._gpu(handle, "SupportedClocksEventReasons")
        return nvmlClocksEventReasonAll

    # ---- ECC and memory health -----------------------------------------------------------

    def _ecc(self, handle: DeviceHandle, field_name: str) -> dict[str, Any]:
        g = self._gpu(handle, field_name)
        if not g["ecc"]:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g

    def nvmlDeviceGetEccMode(self, handle: DeviceHandle) -> list[int]:
        self._ecc(handle, "EccMode")
        return [NVML_FEATURE_ENABLED, NVML_FEATURE_ENABLED]

    def nvmlDeviceGetTotalEccErrors(
        self, handle: DeviceHandle, errorType: int, counterType: int
    ) -> int:
        g = self._ecc(handle, "TotalEccErrors")
        kind = {NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected",
                NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected"}.get(errorType)
        counter = {NVML_VOLATILE_ECC: "volatile", NVML_AGGREGATE_ECC: "aggregate"}.get(counterType)
        if kind is None or counter is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return int(g[f"ecc_{counter}_{kind}"])

    def nvmlDeviceGetRetiredPages(self, device: DeviceHandle, sourceFilter: int) -> list[int]:
        g = self._ecc(device, "RetiredPages")
        if sourceFilter == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS:
            count = g["retired_pages_sbe"]
        elif sourceFilter == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
            count = g["retired_pages_dbe"]
        else:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        base = 0x1_0000_0000 + (sourceFilter << 28) + device.index * 0x100_0000
        return [base + 0x1000 * i for i in range(int(count))]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: DeviceHandle) -> int:
        g = self._ecc(device, "RetiredPagesPendingStatus")
        return NVML_FEATURE_ENABLED if g["retired_pages_pending"] else NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, device: DeviceHandle) -> tuple[int, int, int, int]:
        g = self._ecc(device, "RemappedRows")
        return (
            int(g["remapped_correctable"]),
            int(g["remapped_uncorrectable"]),
            int(bool(g["remap_pending"])),
            int(bool(g["remap_failure"])),
        )

    # ---- PCIe, NVLink, topology, affinity ------------------------------------------------

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: DeviceHandle) -> int:
        return int(self._gpu(handle, "CurrPcieLinkGeneration")["pcie_gen"])

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: DeviceHandle) -> int:
        return int(self._gpu(handle, "MaxPcieLinkGeneration")["pcie_gen_max"])

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: DeviceHandle) -> int:
        return int(self._gpu(handle, "GpuMaxPcieLinkGeneration")["pcie_gpu_gen_max"])

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: DeviceHandle) -> int:
        return int(self._gpu(handle, "CurrPcieLinkWidth")["pcie_width"])

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: DeviceHandle) -> int:
        return int(self._gpu(handle, "MaxPcieLinkWidth")["pcie_width_max"])

    def nvmlDeviceGetPcieThroughput(self, device: DeviceHandle, counter: int) -> int:
        self._gpu(device, "PcieThroughput")
        s = self._state(device.index)
        if counter == NVML_PCIE_UTIL_TX_BYTES:
            return s.pcie_tx
        if counter == NVML_PCIE_UTIL_RX_BYTES:
            return s.pcie_rx
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def _link(self, device: DeviceHandle, link: int, field_name: str) -> dict[str, Any]:
        g = self._gpu(device, field_name)
        if not isinstance(link, int) or link < 0 or link >= NVML_NVLINK_MAX_LINKS:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if link >= g["nvlinks"]:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return g

    def nvmlDeviceGetNvLinkState(self, device: DeviceHandle, link: int) -> int:
        self._link(device, link, "NvLinkState")
        if (device.index, link) in self._links_down:
            return NVML_FEATURE_DISABLED
        return NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkVersion(self, device: DeviceHandle, link: int) -> int:
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

    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, device: DeviceHandle, link: int) -> nvmlPciInfo_t:
        self._link(device, link, "NvLinkRemotePciInfo")
        bus_id, _ = self._remote(device.index, link)
        return _pci_info(bus_id, 0x22A310DE, 0)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: DeviceHandle, link: int) -> nvmlPciInfo_t:
        return self.nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: DeviceHandle, link: int) -> int:
        self._link(handle, link, "NvLinkRemoteDeviceType")
        return self._remote(handle.index, link)[1]

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        self._gpu(device1, "TopologyCommonAncestor")
        self._gpu(device2, "TopologyCommonAncestor")
        a, b = sorted((device1.index, device2.index))
        if a == b:
            return NVML_TOPOLOGY_INTERNAL
        return _TOPOLOGY_KINDS[self.scenario.topology[(a, b)]]

    def nvmlDeviceGetCpuAffinity(self, handle: DeviceHandle, cpuSetSize: int) -> list[int]:
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
        self, handle: DeviceHandle, cpuSetSize: int, scope: int
    ) -> list[int]:
        return self.nvmlDeviceGetCpuAffinity(handle, cpuSetSize)

    def nvmlDeviceGetMemoryAffinity(
        self, handle: DeviceHandle, nodeSetSize: int, scope: int
    ) -> list[int]:
        """The NUMA node(s) near the GPU as a bitmask (what `topo -m` calls NUMA Affinity)."""
        g = self._gpu(handle, "MemoryAffinity")
        words = [0] * nodeSetSize
        if g["numa"] // 64 < nodeSetSize:
            words[g["numa"] // 64] |= 1 << (g["numa"] % 64)
        return words

    def nvmlDeviceGetNumaNodeId(self, handle: DeviceHandle) -> int:
        # The GPU's own memory NUMA node exists only on coherent (C2C) systems; on x86
        # boxes like these the real call is unsupported (`topo -m`: GPU NUMA ID N/A).
        self._gpu(handle, "NumaNodeId")
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    # ---- processes -------------------------------------------------------------------

    def _running(self, handle: DeviceHandle, field_name: str, kinds: tuple[str, ...]) -> list[Any]:
        if isinstance(handle, SimMigHandle):
            return self._mig_running(handle, kinds)
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
                        **self._instance_ids(handle.index, proc),
                    )
                )
                if proc.vanish_after_list:
                    vanishing.append(proc.pid)
            # The race real collectors meet: listed here, gone before the next call.
            for pid in vanishing:
                self.remove_process(pid)
        return out

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: DeviceHandle) -> list[Any]:
        return self._running(handle, "ComputeRunningProcesses", ("C", "C+G"))

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: DeviceHandle) -> list[Any]:
        return self.nvmlDeviceGetComputeRunningProcesses_v3(handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: DeviceHandle) -> list[Any]:
        return self.nvmlDeviceGetComputeRunningProcesses_v3(handle)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: DeviceHandle) -> list[Any]:
        return self._running(handle, "GraphicsRunningProcesses", ("G", "C+G"))

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: DeviceHandle) -> list[Any]:
        return self.nvmlDeviceGetGraphicsRunningProcesses_v3(handle)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: DeviceHandle) -> list[Any]:
        return self.nvmlDeviceGetGraphicsRunningProcesses_v3(handle)

    def nvmlDeviceGetProcessUtilization(self, handle: DeviceHandle, timeStamp: int) -> list[Any]:
        """Samples newer than ``timeStamp`` (microseconds); NotFound when there are none."""
        self._gpu(handle, "ProcessUtilization")
        self._not_in_mig_mode(handle)
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

    # ---- MIG ------------------------------------------------------------------
    # Errors as NVML's reference documents them (docs.nvidia.com/deploy/nvml-api):
    # nvmlDeviceGetMigDeviceHandleByIndex gives NOT_FOUND for an empty slot and
    # INVALID_ARGUMENT for an index out of range (and, as drivers do, for every index while
    # MIG mode is off); nvmlDeviceGetUtilizationRates and nvmlDeviceGetProcessUtilization
    # are "not currently supported" on MIG-enabled GPUs; a MIG device handle answers
    # only identity, memory, BAR1, processes and its instance ids.

    def _mig(self, handle: SimMigHandle) -> dict[str, Any]:
        if handle.index >= len(self._handles) or self._mig_handles.get(
            (handle.index, handle.slot)
        ) is not handle:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if self.is_lost(handle.index):
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        g = self.scenario.gpus[handle.index]
        spec = g["mig_devices"][handle.slot] if g["mig"] else None
        if spec is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return dict(spec)

    def _not_in_mig_mode(self, handle: DeviceHandle) -> None:
        if self.scenario.gpus[handle.index]["mig"]:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def _instance_ids(self, index: int, proc: _Proc) -> dict[str, int]:
        spec = None
        if proc.mig is not None and self.scenario.gpus[index]["mig"]:
            spec = self.scenario.gpus[index]["mig_devices"][proc.mig]
        if spec is None:
            return {"gpuInstanceId": NVML_VALUE_NOT_AVAILABLE_UINT,
                    "computeInstanceId": NVML_VALUE_NOT_AVAILABLE_UINT}
        return {"gpuInstanceId": spec["gi"], "computeInstanceId": spec["ci"]}

    def _mig_procs(self, handle: SimMigHandle) -> list[_Proc]:
        """Processes of the GPU instance (all its compute instances share the memory)."""
        gi = self._mig(handle)["gi"]
        devices = self.scenario.gpus[handle.index]["mig_devices"]
        return [p for p in self._procs_by_gpu()[handle.index]
                if p.mig is not None and devices[p.mig] is not None
                and devices[p.mig]["gi"] == gi]

    def _mig_memory(
        self, handle: SimMigHandle, version: int | None
    ) -> c_nvmlMemory_t | c_nvmlMemory_v2_t:
        total = self._mig(handle)["mem_mib"] * MIB
        s = self._state(handle.index)
        used = min(sum(s.proc_mem.get(p.pid, 0) for p in self._mig_procs(handle)), total)
        if version:
            return c_nvmlMemory_v2_t(version=version, total=total, reserved=0,
                                     free=total - used, used=used)
        return c_nvmlMemory_t(total=total, free=total - used, used=used)

    def _mig_bar1(self, handle: SimMigHandle) -> c_nvmlBAR1Memory_t:
        g = self.scenario.gpus[handle.index]
        total = g["bar1_total_mib"] * self._mig(handle)["mem_mib"] // g["mem_total_mib"] * MIB
        used = min(2 * len(self._mig_procs(handle)) * MIB, total)
        return c_nvmlBAR1Memory_t(bar1Total=total, bar1Free=total - used, bar1Used=used)

    def _mig_running(self, handle: SimMigHandle, kinds: tuple[str, ...]) -> list[Any]:
        spec = self._mig(handle)
        s = self._state(handle.index)
        return [
            c_nvmlProcessInfo_t(pid=p.pid, usedGpuMemory=s.proc_mem.get(p.pid, 0),
                                gpuInstanceId=spec["gi"], computeInstanceId=spec["ci"])
            for p in self._procs_by_gpu()[handle.index]
            if p.mig == handle.slot and p.type in kinds
        ]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: DeviceHandle) -> int:
        g = self._gpu(device, "MaxMigDeviceCount")
        return int(g["mig_max_devices"])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: DeviceHandle, index: int) -> SimMigHandle:
        g = self._gpu(device, "MigDeviceHandleByIndex")
        if not g["mig"] or not 0 <= index < g["mig_max_devices"]:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if g["mig_no_permission"]:
            raise NVMLError(NVML_ERROR_NO_PERMISSION)
        if index >= len(g["mig_devices"]) or g["mig_devices"][index] is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        key = (device.index, index)
        with self._lock:
            return self._mig_handles.setdefault(key, SimMigHandle(*key))

    def nvmlDeviceIsMigDeviceHandle(self, device: DeviceHandle) -> int:
        self._check_init()
        if isinstance(device, SimMigHandle):
            self._mig(device)
            return 1
        self._gpu(device)
        return 0

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> SimDeviceHandle:
        self._check_init()
        if not isinstance(migDevice, SimMigHandle):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        self._mig(migDevice)
        return self._handles[migDevice.index]

    def _instance_id(self, device: DeviceHandle, key: str) -> int:
        self._check_init()
        if isinstance(device, SimMigHandle):
            return int(self._mig(device)[key])
        g = self._gpu(device)
        # A parent handle has no instance: INVALID_ARGUMENT in MIG mode, else unsupported.
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT if g["mig"] else NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstanceId(self, device: DeviceHandle) -> int:
        return self._instance_id(device, "gi")

    def nvmlDeviceGetComputeInstanceId(self, device: DeviceHandle) -> int:
        return self._instance_id(device, "ci")

    # GPM: a sample records each GPU instance's SM activity at one moment; the metric
    # between two samples is their mean (the real one integrates counters in between).

    def nvmlGpmQueryDeviceSupport(self, device: DeviceHandle) -> c_nvmlGpmSupport_t:
        g = self._gpu(device, "GpmQueryDeviceSupport")
        return c_nvmlGpmSupport_t(version=NVML_GPM_SUPPORT_VERSION,
                                  isSupportedDevice=int(g["gpm"]))

    def nvmlGpmSampleAlloc(self) -> SimGpmSample:
        self._check_init()
        return SimGpmSample()

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self._check_init()
        if not isinstance(gpmSample, SimGpmSample) or gpmSample.freed:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpmSample.freed = True

    def nvmlGpmMigSampleGet(self, device: DeviceHandle, gpuInstanceId: int, gpmSample: Any) -> Any:
        g = self._gpu(device, "GpmMigSampleGet")
        if not isinstance(gpmSample, SimGpmSample) or gpmSample.freed:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if not g["gpm"] or not g["mig"]:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        slots = [i for i, d in enumerate(g["mig_devices"]) if d and d["gi"] == gpuInstanceId]
        if not slots:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        s = self._state(device.index)
        busy = sum(s.proc_util.get(p.pid, (0, 0))[0]
                   for p in self._procs_by_gpu()[device.index] if p.mig in slots)
        gpmSample.index, gpmSample.gi = device.index, gpuInstanceId
        gpmSample.time, gpmSample.sm_active = self.clock(), float(min(busy, 100))
        return gpmSample

    def nvmlGpmSampleGet(self, device: DeviceHandle, gpmSample: Any) -> Any:
        """A whole-card sample (not in MIG mode): SM activity is the card's utilization,
        tensor activity a share of it, DRAM activity the memory utilization, PCIe the
        card's throughput (MiB/s, as NVML's *_PER_SEC metrics)."""
        g = self._gpu(device, "GpmSampleGet")
        if not isinstance(gpmSample, SimGpmSample) or gpmSample.freed:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if not g["gpm"] or g["mig"]:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        s = self._state(device.index)
        gpmSample.index, gpmSample.gi = device.index, None
        gpmSample.time, gpmSample.sm_active = self.clock(), float(s.util)
        gpmSample.card = {
            NVML_GPM_METRIC_ANY_TENSOR_UTIL: s.util * 0.6,
            NVML_GPM_METRIC_DRAM_BW_UTIL: float(s.util_mem),
            NVML_GPM_METRIC_PCIE_TX_PER_SEC: s.pcie_tx / 1024,
            NVML_GPM_METRIC_PCIE_RX_PER_SEC: s.pcie_rx / 1024,
        }
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        self._check_init()
        first, second = metricsGet.sample1, metricsGet.sample2
        if metricsGet.version != NVML_GPM_METRICS_GET_VERSION:
            raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        for sample in (first, second):
            if not isinstance(sample, SimGpmSample) or sample.freed or (
                    sample.gi is None and sample.card is None):
                raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        for i in range(min(metricsGet.numMetrics, NVML_GPM_METRIC_MAX)):
            metric = metricsGet.metrics[i]
            if metric.metricId == NVML_GPM_METRIC_SM_UTIL:
                metric.nvmlReturn = NVML_SUCCESS
                metric.value = (first.sm_active + second.sm_active) / 2
            elif first.card and second.card and metric.metricId in second.card:
                metric.nvmlReturn = NVML_SUCCESS
                metric.value = (first.card[metric.metricId] + second.card[metric.metricId]) / 2
            else:
                metric.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
        return metricsGet

    # ---- events ----------------------------------------------------------------------

    def nvmlDeviceGetSupportedEventTypes(self, handle: DeviceHandle) -> int:
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
        self, handle: DeviceHandle, eventTypes: int, eventSet: SimEventSet
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
for _name, _value in list(vars(api).items()):
    if _name.startswith(("NVML_", "nvmlClocks", "nvmlEventType", "NVMLError")) or _name in (
        "nvmlMemory_v2",
        "NVMLLibraryMismatchError",
        "c_nvmlGpmMetricsGet_t",
    ):
        setattr(SimNvml, _name, _value)
SimNvml.nvmlExceptionClass = staticmethod(nvmlExceptionClass)  # type: ignore[attr-defined]
del _name, _value
