"""The NVML backend: a host's GPUs and the processes NVML lists on them.

``NvmlBackend(nvml).read(now)`` is a ``GpuBackend`` (sources/backend.py); the host
assembler adds process facts, workloads and the store.  ``nvml`` is the ``pynvml`` module,
or a ``sim.SimNvml`` with the same function names, error classes and constants (--demo and
tests), so this code runs unchanged against both.

Stdlib-only: this module is shipped to remote hosts inside the SSH probe, where ``nvml`` is
that host's pynvml.

Rules this code keeps (see docs/design.md):
- every field is read on its own: an unsupported or forbidden field is None, nothing more;
- a GPU that falls off the bus becomes a GPU state, the other GPUs are still read;
- fields that never change (identity, limits, maxima, topology) are read once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from gputop.sources.backend import NoDriverError, Reading
from gputop.sources.gpm import CardGpm
from gputop.sources.mig import MigReader
from gputop.sources.nvmlcalls import FastPynvml, handle_key
from gputop.sources.nvmlcodes import (
    FABRIC_STATES,
    DeviceHandle,
    decode_clock_events,
    handle_error,
    init_failure,
)

__all__ = ["NoDriverError", "NvmlBackend", "decode_clock_events", "open_nvml"]

# Error codes (same numbers in pynvml and the simulator) that mean "this field is not
# available here": the field becomes None and collection goes on.
_ERR_UNINITIALIZED = 1
_ERR_INVALID_ARGUMENT = 2
_ERR_NOT_SUPPORTED = 3
_ERR_NO_PERMISSION = 4
_ERR_NOT_FOUND = 6
_ERR_DRIVER_NOT_LOADED = 9
_ERR_TIMEOUT = 10
_ERR_LIBRARY_NOT_FOUND = 12
_ERR_FUNCTION_NOT_FOUND = 13
_ERR_CORRUPTED_INFOROM = 14
_ERR_GPU_IS_LOST = 15
_ERR_RESET_REQUIRED = 16
_ERR_LIB_RM_VERSION_MISMATCH = 18

# Fallback constants for a pynvml too old to define them (values from nvml.h).
_TEMPERATURE_GPU = 0
_THRESHOLD_SHUTDOWN = 0
_THRESHOLD_SLOWDOWN = 1
_THRESHOLD_GPU_MAX = 3
_CLOCK_GRAPHICS = 0
_CLOCK_SM = 1
_CLOCK_MEM = 2
_ECC_CORRECTED = 0
_ECC_UNCORRECTED = 1
_ECC_VOLATILE = 0
_ECC_AGGREGATE = 1
_RETIRE_SBE = 0
_RETIRE_DBE = 1
_PCIE_TX = 0
_PCIE_RX = 1
_NVLINK_MAX_LINKS = 18
_NVLINK_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
_AFFINITY_SCOPE_NODE = 0
_EVENT_XID = 0x8
_VALUE_NOT_AVAILABLE = (1 << 64) - 1
_PID_MAX_LIMIT = 1 << 22  # PID_MAX_LIMIT on 64-bit Linux

# nvmlDeviceGetTopologyCommonAncestor levels -> `nvidia-smi topo -m` words.
_TOPOLOGY_WORDS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

_COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}

# nvmlDeviceGetFieldValues ids (nvml.h): NVLink link count, and one link's state (scopeId).
_FI_NVLINK_LINK_COUNT = 91
_FI_NVLINK_GET_STATE = 165
_FI_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP, C
_FI_TOTAL_ENERGY = 83  # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ
_FI_PCIE_REPLAYS = 94  # NVML_FI_DEV_PCIE_REPLAY_COUNTER
_FI_NVLINK_DATA = (138, 139)  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, _RX: KiB, per link
# At most this many XID events are drained per collect, so a storm cannot stall a refresh.
_MAX_EVENTS_PER_COLLECT = 64
# A sick driver can fail every query: this many failed fields per GPU are named.
_MAX_FIELD_ERRORS = 16

NO_DRIVER_MESSAGE = (
    "gputop: no NVIDIA driver found on this machine (libnvidia-ml.so could not be loaded). "
    "Try `gputop --demo` for a simulated node or `gputop --hosts FILE` to watch GPU servers "
    "over SSH."
)

# The library is there but the kernel module is not: the normal state of a login node.
DRIVER_NOT_LOADED_MESSAGE = (
    "gputop: the NVIDIA driver is not loaded on this machine (libnvidia-ml.so is "
    "installed, but NVML says Driver Not Loaded: a login node, or the kernel module failed "
    "to load; see `dmesg | grep -i nvidia`). Try `gputop --hosts FILE` to watch GPU servers "
    "over SSH, or `gputop --demo`."
)
NO_GPUS_MESSAGE = "gputop: no GPUs: the NVIDIA driver is loaded but sees no GPU on this machine."


# What a lost card's ``error`` says, once and in words: the state already says "lost",
# and NVML's own text ("GPU is lost") and the function that met it say nothing more.
LOST_TEXT = "fallen off the bus; needs a reset or reboot"
RESET_TEXT = "needs a reset (nvidia-smi -r) or a reboot"


class _GpuLost(Exception):
    def __init__(self, state: str, message: str) -> None:
        super().__init__(message)
        self.state = state
        self.message = message


def cuda_version_string(version: int | None) -> str | None:
    """NVML's 13010 -> "13.1"."""
    if version is None or version <= 0:
        return None
    return f"{version // 1000}.{(version % 1000) // 10}"


def cpulist(words: Any) -> str | None:
    """An NVML affinity bitmask (64-bit words, lowest CPUs first) as "0-23,48-71"."""
    if words is None:
        return None
    cpus = [
        w * 64 + bit for w, word in enumerate(words) for bit in range(64) if int(word) >> bit & 1
    ]
    if not cpus:
        return None
    ranges: list[str] = []
    start = prev = cpus[0]
    for cpu in [*cpus[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        ranges.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(ranges)


def normalize_bus_id(bus_id: Any) -> str | None:
    """PCI bus ids compare equal whatever the domain width: "00000000:07:00.0" ~ "0000:07:00.0"."""
    if bus_id is None:
        return None
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode("ascii", "replace")
    bus_id = str(bus_id).strip().lower()
    if not bus_id:
        return None
    domain, _, rest = bus_id.rpartition(":")[0].partition(":")
    tail = bus_id.rpartition(":")[2]
    if not rest:  # no domain part at all: "07:00.0"
        return f"0000:{domain}:{tail}"
    try:
        return f"{int(domain, 16):04x}:{rest}:{tail}"
    except ValueError:
        return bus_id


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class NvmlBackend:
    """A ``GpuBackend`` over NVML: ``read(now)`` returns the GPUs and their processes.

    ``nvml`` is pynvml or a ``sim.SimNvml`` (then ``simulated``: source "sim", no sysfs
    look-ups, simulated pids above any real one).  ``lean`` (a one-shot table): only the
    fields the table and the one-shot health rules read (``_LEAN_SKIPS`` names what is
    left out), ECC, link count and NVLink states in one field-value call, and no topology
    or NVLink remotes; XID events are read all the same (--once shows the criticals
    `check` shows).  ``dashboard``: the dashboard's stream, which leaves out what it
    shows nowhere (``_UNSHOWN``).  ``topology`` False (``--json`` without ``--topology``): no NVLink
    remote ends and no topology, the rest as usual.  Raises NoDriverError when nvmlInit
    fails.
    """

    def __init__(self, nvml: Any, simulated: bool = False, lean: bool = False,
                 topology: bool = True, dashboard: bool = False) -> None:
        self.nvml = nvml
        self.lean = lean
        self.dashboard = dashboard
        self.topology = topology and not lean
        self.simulated = simulated
        self._error_class: type[BaseException] = getattr(nvml, "NVMLError", Exception)
        self._mismatch_class: type[BaseException] = getattr(
            nvml, "NVMLLibraryMismatchError", self._error_class
        )
        try:
            nvml.nvmlInit()
        except self._error_class as err:
            raise NoDriverError(_init_failure_message(err)) from None
        self._funcs: dict[str, Callable[..., Any] | None] = {}
        # Simulated pids sit above any real pid on purpose, so only real NVML gets the upper
        # bound in the garbage check.  The kernel's hard limit, not today's pid_max, which an
        # admin may raise while we run.
        self._pid_max: int | None = None if simulated else _PID_MAX_LIMIT
        self._count: int | None = None
        self._handles: dict[int, DeviceHandle] = {}
        self._static: dict[int, dict[str, Any]] = {}
        self._nvlink_remote: dict[int, list[tuple[str | None, int | None]]] = {}
        self._proc_util_ts: dict[int, int] = {}
        self._proc_variant: dict[str, str] = {}
        self._versions: Reading | None = None
        self._topology: list[dict] | None = None
        self._event_set: Any = None
        self._xid_watched: bool | None = None
        self._host_cpu_count: int | None = None
        self._field_errors: list[str] | None = None  # of the GPU being read, see _call
        self._now = 0.0  # the time of the read under way
        # (function, handle, arguments) -> when it answered NotSupported, see _call
        self._unsupported: dict[Any, float] = {}
        # (index, group) -> (when, the group's fields read then, their field errors):
        # the fields read less often than every refresh, see READ_EVERY and _kept
        self._kept_reads: dict[tuple[int, str], tuple[float, dict[str, Any],
                                                      tuple[str, ...]]] = {}
        # MIG devices list processes as cards do (the first value of _running).
        self._card_gpm = CardGpm(nvml, self._get)
        self._mig = MigReader(nvml, self._get, lambda *args: self._running(*args)[0],
                              lambda m: _GpuLost("lost", LOST_TEXT))

    # -- NVML access -----------------------------------------------------------------------

    def _fn(self, name: str) -> Callable[..., Any] | None:
        if name not in self._funcs:
            self._funcs[name] = getattr(self.nvml, name, None)
        return self._funcs[name]

    def _const(self, name: str, default: int) -> int:
        value = getattr(self.nvml, name, None)
        return value if isinstance(value, int) else default

    def _get(self, name: str, *args: Any) -> Any:
        """Call an NVML function; None when this field cannot be read here.

        Raises _GpuLost when the device is gone, so the caller can mark that GPU.
        """
        return self._call(name, *args)[0]

    def _call(self, name: str, *args: Any) -> tuple[Any, str | None]:
        """(value, None); (None, None) when this driver or card lacks the field; (None,
        why) when the call failed (Unknown, Timeout, NoPermission...): then the value is
        not absent but unknown, which callers that decide "free" must not ignore.

        Raises _GpuLost when the device is gone, so the caller can mark that GPU.
        """
        fn = self._fn(name)
        if fn is None:
            return None, None
        key = self._unsupported_key(name, args)
        if key is not None and key in self._unsupported:
            return None, None
        try:
            return fn(*args), None
        except self._error_class as err:
            code = getattr(err, "value", None)
            if code == _ERR_GPU_IS_LOST:
                raise _GpuLost("lost", LOST_TEXT) from None
            if code == _ERR_RESET_REQUIRED:
                raise _GpuLost("lost", RESET_TEXT) from None
            if code in (_ERR_NOT_SUPPORTED, _ERR_FUNCTION_NOT_FOUND):
                if key is not None:
                    self._unsupported[key] = self._now
                return None, None
            why = f"{name}: {err}"
            if self._field_errors is not None and why not in self._field_errors:
                self._field_errors.append(why)
            return None, why
        except self._mismatch_class:
            # pynvml raises this (not an NVMLError) when an unversioned function is missing
            # from the installed driver: just another unreadable field.
            return None, None

    @staticmethod
    def _unsupported_key(name: str, args: tuple[Any, ...]) -> Any:
        key = (name, handle_key(args[0]) if args else None, *args[1:])
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def _forget_unsupported(self, now: float) -> None:
        """What a card said it does not support is not asked again for SETTINGS_SECONDS
        (a fanless card's fan, every refresh): a MIG mode change or a driver update can
        change the answer, so it is asked again after that."""
        if self._unsupported:
            self._unsupported = {key: when for key, when in self._unsupported.items()
                                 if 0 <= now - when < SETTINGS_SECONDS}

    # -- once per backend -------------------------------------------------------------------

    def _versions_once(self) -> Reading:
        if self._versions is None:
            cuda = self._get("nvmlSystemGetCudaDriverVersion_v2")
            if cuda is None:
                cuda = self._get("nvmlSystemGetCudaDriverVersion")
            self._versions = {
                "driver_version": _text(self._get("nvmlSystemGetDriverVersion")),
                # A one-shot table shows the driver and CUDA versions only.
                "nvml_version": None if self.lean else _text(
                    self._get("nvmlSystemGetNVMLVersion")),
                "cuda_version": cuda_version_string(cuda),
            }
        return self._versions

    def _handle(self, index: int) -> Any:
        handle = self._handles.get(index)
        if handle is not None:
            return handle
        fn = self._fn("nvmlDeviceGetHandleByIndex")
        try:
            handle = fn(index) if fn is not None else None
        except self._error_class as err:
            if getattr(err, "value", None) == _ERR_GPU_IS_LOST:
                raise _GpuLost("lost", LOST_TEXT) from None
            raise _GpuLost("error", handle_error(index, str(err))) from None
        if handle is None:
            raise _GpuLost("error", f"cannot open GPU {index}")
        self._handles[index] = handle
        return handle

    def _static_fields(self, index: int, handle: DeviceHandle) -> dict[str, Any]:
        cached = self._static.get(index)
        if cached is not None:
            return cached
        if self.lean:
            self._static[index] = self._lean_static(handle)
            return self._static[index]
        pci = self._get("nvmlDeviceGetPciInfo", handle)
        bus_id = _text(getattr(pci, "busId", None)) if pci is not None else None
        constraints = self._get("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        static: dict[str, Any] = {
            "uuid": _text(self._get("nvmlDeviceGetUUID", handle)),
            "name": _text(self._get("nvmlDeviceGetName", handle)),
            "pci_bus_id": bus_id,
            "serial": _text(self._get("nvmlDeviceGetSerial", handle)),
            "temp_slowdown": self._threshold(handle, "SLOWDOWN", _THRESHOLD_SLOWDOWN),
            "temp_shutdown": self._threshold(handle, "SHUTDOWN", _THRESHOLD_SHUTDOWN),
            "temp_max_operating": self._threshold(handle, "GPU_MAX", _THRESHOLD_GPU_MAX),
            "power_default_limit": _watts(
                self._get("nvmlDeviceGetPowerManagementDefaultLimit", handle)
            ),
            "power_min_limit": _watts(constraints[0]) if constraints else None,
            "power_max_limit": _watts(constraints[1]) if constraints else None,
            "clock_sm_max": self._get(
                "nvmlDeviceGetMaxClockInfo", handle, self._const("NVML_CLOCK_SM", _CLOCK_SM)
            ),
            "clock_mem_max": self._get(
                "nvmlDeviceGetMaxClockInfo", handle, self._const("NVML_CLOCK_MEM", _CLOCK_MEM)
            ),
            "pcie_gen_max": self._get("nvmlDeviceGetMaxPcieLinkGeneration", handle),
            "pcie_width_max": self._get("nvmlDeviceGetMaxPcieLinkWidth", handle),
            "cpu_affinity": self._cpu_affinity(handle),
            "numa_node": self._numa_node(handle, bus_id),
            "inforom_corrupted": self._inforom_corrupted(handle),
        }
        static["_fans"] = self._get("nvmlDeviceGetNumFans", handle)
        static["_vgpu_mode"] = self._get("nvmlDeviceGetVirtualizationMode", handle)
        self._nvlink_remote[index] = self._nvlink_remotes(handle, remotes=self.topology)
        self._static[index] = static
        return static

    def _lean_static(self, handle: DeviceHandle) -> dict[str, Any]:
        """What a one-shot table and its health rules read of the fields that never
        change: the name and UUID (reservations match on it), the thermal limits and the
        PCIe maxima; the rest None.  The link count comes with the first field values.
        Not the infoROM's checksum: a call a card that would take `--once` past nvitop's
        calls (tests/test_oneshot_cost.py); `check`, `--json`, serve and the dashboard
        ask it."""
        static: dict[str, Any] = dict.fromkeys(_STATIC_KEYS)
        static.update(
            uuid=_text(self._get("nvmlDeviceGetUUID", handle)),
            name=_text(self._get("nvmlDeviceGetName", handle)),
            temp_slowdown=self._threshold(handle, "SLOWDOWN", _THRESHOLD_SLOWDOWN),
            temp_shutdown=self._threshold(handle, "SHUTDOWN", _THRESHOLD_SHUTDOWN),
            pcie_gen_max=self._get("nvmlDeviceGetMaxPcieLinkGeneration", handle),
            pcie_width_max=self._get("nvmlDeviceGetMaxPcieLinkWidth", handle),
        )
        static["_fans"] = None  # one fan speed call, as for a card that cannot count them
        return static

    def _vgpu_license(self, handle: DeviceHandle) -> int | None:
        """DCGM's vGPU license status of a vGPU guest: 1 when a licensable feature is
        enabled (licensed), else 0; None where the driver cannot say."""
        found = self._get("nvmlDeviceGetGridLicensableFeatures", handle)
        if found is None:
            return None
        count = min(int(getattr(found, "licensableFeaturesCount", 0) or 0), 3)
        features = getattr(found, "gridLicensableFeatures", ())
        return int(any(getattr(features[i], "featureState", 0) for i in range(count)))

    def _inforom_corrupted(self, handle: DeviceHandle) -> bool | None:
        """Whether the card's infoROM fails its checksum (nvmlDeviceValidateInforom), the
        check behind nvidia-smi's "infoROM is corrupted" warning; asked once a card, as a
        corrupted infoROM stays so until it is reflashed.  None where it cannot say."""
        fn = self._fn("nvmlDeviceValidateInforom")
        if fn is None:
            return None
        try:
            fn(handle)  # success returns nothing: the infoROM is sound
        except self._error_class as err:
            code = getattr(err, "value", None)
            if code == _ERR_GPU_IS_LOST:
                raise _GpuLost("lost", LOST_TEXT) from None
            return True if code == _ERR_CORRUPTED_INFOROM else None
        return False

    def _threshold(self, handle: DeviceHandle, which: str, default: int) -> int | None:
        kind = self._const(f"NVML_TEMPERATURE_THRESHOLD_{which}", default)
        return self._get("nvmlDeviceGetTemperatureThreshold", handle, kind)

    def _cpu_affinity(self, handle: DeviceHandle) -> str | None:
        # The mask is as wide as the host's CPU count (the simulated host's in --demo).
        cpus = max(os.cpu_count() or 64, self._host_cpu_count or 0)
        words = (cpus + 63) // 64
        return cpulist(self._get("nvmlDeviceGetCpuAffinity", handle, words))

    def _numa_node(self, handle: DeviceHandle, bus_id: str | None) -> int | None:
        """The NUMA node near the GPU, as `nvidia-smi topo -m` calls NUMA Affinity."""
        words = self._get("nvmlDeviceGetMemoryAffinity", handle, 1, _AFFINITY_SCOPE_NODE)
        if words:
            nodes = [bit for bit in range(64) if int(words[0]) >> bit & 1]
            if nodes:
                return nodes[0]
        if not self.simulated and bus_id:
            # Older drivers lack the affinity call; the kernel knows the device's node too.
            try:
                with open(f"/sys/bus/pci/devices/{normalize_bus_id(bus_id)}/numa_node") as f:
                    node = int(f.read())
                if node >= 0:
                    return node
            except (OSError, ValueError):
                pass
        # On coherent (C2C) systems this is the GPU memory's own node; elsewhere unsupported.
        node = self._get("nvmlDeviceGetNumaNodeId", handle)
        return int(node) if node is not None and node >= 0 else None

    def _nvlink_remotes(
        self, handle: DeviceHandle, remotes: bool = True
    ) -> list[tuple[str | None, int | None]]:
        """(remote PCI bus id, remote device type) per NVLink; the length is the link count.

        ``remotes`` False: only the count (one field-value call where the driver has it),
        the remote ends unknown.
        """
        if not remotes:
            count = self._field_values(handle, [(_FI_NVLINK_LINK_COUNT, 0)])
            if count is not None and count[0] is not None:
                return [(None, None)] * max(0, min(int(count[0]), _NVLINK_MAX_LINKS))
        found: list[tuple[str | None, int | None]] = []
        fn = self._fn("nvmlDeviceGetNvLinkState")
        if fn is None:
            return found
        for link in range(self._const("NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS)):
            try:
                fn(handle, link)
            except self._error_class as err:
                code = getattr(err, "value", None)
                if code == _ERR_GPU_IS_LOST:
                    raise _GpuLost("lost", LOST_TEXT) from None
                # NotSupported / InvalidArgument: no such link, and none beyond it.
                break
            if not remotes:
                found.append((None, None))
                continue
            pci = self._get("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            bus = _text(getattr(pci, "busId", None)) if pci is not None else None
            kind = self._get("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            found.append((bus, kind))
        return found

    def _field_values(
        self, handle: DeviceHandle, fields: list[tuple[int, int]]
    ) -> list[Any] | None:
        """Several (field id, scope id) in one NVML call: a value per field, None where that
        field failed; None when the call itself is unavailable."""
        fn = self._fn("nvmlDeviceGetFieldValues")
        if fn is None or not fields:
            return None
        try:
            values = fn(handle, fields)
        except self._error_class as err:
            if getattr(err, "value", None) == _ERR_GPU_IS_LOST:
                raise _GpuLost("lost", LOST_TEXT) from None
            return None
        except self._mismatch_class:
            return None
        out: list[Any] = []
        for value in values:
            if getattr(value, "nvmlReturn", 1) != 0:
                out.append(None)
                continue
            kind = _FIELD_VALUE_TYPES.get(getattr(value, "valueType", -1))
            out.append(getattr(value.value, kind) if kind else None)
        return out

    def _nvlink_count(self, a: int, b: int, gpu_buses: dict[int, str | None]) -> int:
        """NVLinks between two GPUs: direct links, or links into NVSwitches both reach."""
        links_a = self._nvlink_remote.get(a, [])
        links_b = self._nvlink_remote.get(b, [])
        links_a = [(normalize_bus_id(bus), kind) for bus, kind in links_a]
        links_b = [(normalize_bus_id(bus), kind) for bus, kind in links_b]
        direct = sum(1 for bus, _ in links_a if bus is not None and bus == gpu_buses.get(b))
        if direct:
            return direct
        gpus = {bus for bus in gpu_buses.values() if bus is not None}

        def switches(links: list[tuple[str | None, int | None]]) -> list[str]:
            return [
                bus
                for bus, kind in links
                if bus is not None
                and (kind == _NVLINK_SWITCH or (kind is None and bus not in gpus))
            ]

        sw_a, sw_b = switches(links_a), switches(links_b)
        shared = set(sw_a) & set(sw_b)
        if not shared:
            return 0
        # Through a switch fabric every pair gets the bandwidth of the narrower side, which
        # is what `nvidia-smi topo -m` prints (NV18 between all pairs on a DGX H100).
        return min(sum(1 for s in sw_a if s in shared), sum(1 for s in sw_b if s in shared))

    def _topology_once(self, indexes: list[int]) -> list[dict]:
        if self._topology is not None:
            return self._topology
        links: list[dict] = []
        fn = self._fn("nvmlDeviceGetTopologyCommonAncestor")
        buses = {i: normalize_bus_id(self._static.get(i, {}).get("pci_bus_id")) for i in indexes}
        for pos, a in enumerate(indexes):
            for b in indexes[pos + 1 :]:
                kind = None
                nvlinks = self._nvlink_count(a, b, buses)
                if nvlinks:
                    kind = f"NV{nvlinks}"
                elif fn is not None:
                    try:
                        level = fn(self._handles[a], self._handles[b])
                    except self._error_class:
                        level = None
                    kind = _TOPOLOGY_WORDS.get(int(level)) if level is not None else None
                if kind is not None:
                    links.append({"gpu_a": a, "gpu_b": b, "kind": kind, "nvlinks": nvlinks})
        self._topology = links
        return links

    def _xid_setup_once(self) -> None:
        if self._xid_watched is not None:
            return
        self._xid_watched = False
        create = self._fn("nvmlEventSetCreate")
        if create is None:
            return
        try:
            event_set = create()
        except self._error_class:
            return
        xid = self._const("nvmlEventTypeXidCriticalError", _EVENT_XID)
        register = self._fn("nvmlDeviceRegisterEvents")
        # No nvmlDeviceGetSupportedEventTypes first: a card without XID events refuses the
        # registration (NOT_SUPPORTED), which costs the same one call as asking.
        for handle in self._handles.values():
            if register is None:
                break
            try:
                register(handle, xid, event_set)
            except self._error_class:
                continue
            self._xid_watched = True
        if self._xid_watched:
            self._event_set = event_set
        else:
            free = self._fn("nvmlEventSetFree")
            if free is not None:
                with contextlib.suppress(self._error_class):
                    free(event_set)

    def _poll_xid(self, now: float) -> list[dict]:
        if self._event_set is None:
            return []
        events: list[dict] = []
        wait = self._fn("nvmlEventSetWait")
        if wait is None:
            return events
        for _ in range(_MAX_EVENTS_PER_COLLECT):
            try:
                data = wait(self._event_set, 0)
            except self._error_class:
                break  # Timeout: nothing more pending (any other error: try next time)
            events.append(
                {
                    "gpu": self._index_of(getattr(data, "device", None)),
                    "xid": int(getattr(data, "eventData", 0)),
                    "time": now,
                    "detail": None,
                }
            )
        return events

    def _index_of(self, device: DeviceHandle) -> int | None:
        """The index of the GPU an event came from; None when it cannot be placed.

        pynvml builds a new ctypes object for every event, so ``is`` never matches: compare
        the handle's pointer value.  nvmlDeviceGetIndex is not asked, because the card an
        XID 79 comes from is lost and answers nothing (or, via pynvml, garbage).
        """
        key = handle_key(device)
        if key is None:
            return None
        for index, handle in self._handles.items():
            if handle_key(handle) == key:
                return index
        return None

    # -- every collect -----------------------------------------------------------------------

    @property
    def source(self) -> str:
        return "sim" if self.simulated else "nvml"

    def count(self) -> int:
        """How many GPUs NVML sees (0 when it cannot count them); kept for ``read``, so
        that opening and the first read ask once."""
        if self._count is None:
            counted = self._get("nvmlDeviceGetCount")
            if counted is None:
                return 0
            self._count = int(counted)
        return self._count

    def read(self, now: float, cpu_count: int | None = None) -> Reading:
        snap = self._versions_once().copy()
        self._now = now
        self._forget_unsupported(now)
        self._host_cpu_count = cpu_count
        if self._count is None:
            fn = self._fn("nvmlDeviceGetCount")
            try:
                self._count = int(fn()) if fn is not None else 0
            except self._error_class as err:
                return {**snap, "state": "error", "error": f"cannot count GPUs: {err}"}
        gpus: list[dict] = []
        processes: list[dict] = []
        for index in range(self._count):
            gpu, procs = self._collect_gpu(index, now)
            gpus.append(gpu)
            processes.extend(procs)
        snap["gpus"] = gpus
        snap["processes"] = processes
        if self.topology:
            readable = {g["index"] for g in gpus if g["index"] in self._static}
            snap["topology"] = self._topology_once(sorted(self._handles.keys() & readable))
        # XIDs also in a lean one-shot (--once): it shows the criticals `check` shows.
        self._xid_setup_once()
        snap["xid_watched"] = self._xid_watched
        snap["xid_events"] = self._poll_xid(now)
        return snap

    def _collect_gpu(self, index: int, now: float) -> tuple[dict, list[dict]]:
        gpu: dict[str, Any] = {"index": index, "state": "ok", "error": None}
        self._field_errors = []
        try:
            handle = self._handle(index)
            static = self._static_fields(index, handle)
            gpu.update((k, v) for k, v in static.items() if not k.startswith("_"))
            self._dynamic_fields(gpu, handle, static)
            procs, gpu["processes_error"] = self._processes(index, handle, gpu.get("mem_total"))
            gpu["field_errors"] = self._field_errors[:_MAX_FIELD_ERRORS]
            procs += self._mig.read(index, handle, gpu, procs)
            if not self.lean:  # a rate between two refreshes: a one-shot has one
                gpu.update(self._card_gpm.read(index, handle, gpu.get("mig_mode")))
        except _GpuLost as lost:
            return self._broken_gpu(index, lost.state, lost.message), []
        except Exception as err:
            # An odd card or driver must not cost the user the other cards: this GPU shows
            # the error and the rest of the host is read as usual.
            message = f"cannot read GPU {index}: {type(err).__name__}: {err}"
            return self._broken_gpu(index, "error", message), []
        finally:
            self._field_errors = None
        return gpu, procs

    def _broken_gpu(self, index: int, state: str, message: str) -> dict[str, Any]:
        # Keep whatever identity we already know, so the user sees which card is gone.
        known = self._static.get(index, {})
        for group in READ_EVERY:  # a card back from an error is asked afresh
            self._kept_reads.pop((index, group), None)
        gpu: dict[str, Any] = {key: known.get(key) for key in _IDENTITY_KEYS}
        gpu.update(index=index, state=state, error=message)
        return gpu

    def _dynamic_fields(
        self, gpu: dict[str, Any], handle: DeviceHandle, static: dict[str, Any]
    ) -> None:
        if self.lean:
            self._lean_dynamic(gpu, handle, static)
            return
        get = self._get
        mode = static.get("_vgpu_mode")
        # A vGPU guest's license can lapse: asked each refresh there, and only there.
        gpu["vgpu_license_status"] = (self._vgpu_license(handle) if mode == _VGPU_GUEST
                                      else None if mode is None else 0)
        util = get("nvmlDeviceGetUtilizationRates", handle)
        gpu["util_gpu"] = getattr(util, "gpu", None)
        gpu["util_mem"] = getattr(util, "memory", None)
        shown = not self.dashboard
        if shown:
            enc = get("nvmlDeviceGetEncoderUtilization", handle)
            gpu["util_enc"] = enc[0] if enc else None
            dec = get("nvmlDeviceGetDecoderUtilization", handle)
            gpu["util_dec"] = dec[0] if dec else None
        else:
            gpu.update(dict.fromkeys(_UNSHOWN))
        self._memory(gpu, handle)
        if shown:  # the dashboard shows a MIG device's BAR1 (sources/mig.py), not a card's
            bar1 = get("nvmlDeviceGetBAR1MemoryInfo", handle)
            gpu["bar1_used"] = getattr(bar1, "bar1Used", None)
            gpu["bar1_total"] = getattr(bar1, "bar1Total", None)
        gpu["temp"] = get(
            "nvmlDeviceGetTemperature", handle, self._const("NVML_TEMPERATURE_GPU", 0)
        )
        gpu["power_draw"] = _watts(get("nvmlDeviceGetPowerUsage", handle))
        fans = self._fans(handle, static.get("_fans"))
        gpu["fans"] = fans
        gpu["fan"] = fans[0] if fans else None
        self._settings(gpu, handle)
        for key, const, default in (
            ("clock_sm", "NVML_CLOCK_SM", _CLOCK_SM),
            ("clock_mem", "NVML_CLOCK_MEM", _CLOCK_MEM),
            ("clock_gr", "NVML_CLOCK_GRAPHICS", _CLOCK_GRAPHICS),
        )[:3 if shown else 2]:
            gpu[key] = get("nvmlDeviceGetClockInfo", handle, self._const(const, default))
        gpu["pstate"] = get("nvmlDeviceGetPerformanceState", handle)
        if shown:  # serve, --json, check: every read, as they export or judge it once
            self._health(gpu, handle, counters=True)
            self._pcie_link(gpu, handle)
            for key, const, default in (("pcie_tx_kbs", "NVML_PCIE_UTIL_TX_BYTES", _PCIE_TX),
                                        ("pcie_rx_kbs", "NVML_PCIE_UTIL_RX_BYTES", _PCIE_RX)):
                gpu[key] = get("nvmlDeviceGetPcieThroughput", handle,
                               self._const(const, default))
        else:
            self._kept(gpu, "health", lambda: self._health(gpu, handle, counters=False))
            self._kept(gpu, "pcie_link", lambda: self._pcie_link(gpu, handle),
                       urgent=lambda last: _pcie_link_urgent(last, gpu, static))

    def _health(self, gpu: dict[str, Any], handle: DeviceHandle, counters: bool) -> None:
        """ECC, retired pages, row remapping, every link's state (and with ``counters``
        dcgm-exporter's counters) in one field-value call, and the clock-event reasons."""
        index = gpu["index"]
        links = len(self._nvlink_remote.get(index, ()))
        extra = self._counter_fields(links) if counters else []
        ecc = len(_ECC_FIELDS)
        batch = self._field_values(handle, [
            *((field_id, 0) for _, field_id in _ECC_FIELDS),
            *((_FI_NVLINK_GET_STATE, n) for n in range(links)), *extra])
        self._ecc(gpu, handle, batch[:ecc] if batch is not None else None)
        self._clock_events(gpu, handle)
        gpu["nvlinks"] = self._nvlinks(
            index, handle, batch[ecc:ecc + links] if batch is not None else None)
        gpu["fabric_state"] = self._fabric_state(handle) if links else None
        if counters:
            self._counters(gpu, handle, batch[ecc + links:] if batch is not None else None)

    def _fabric_state(self, handle: DeviceHandle) -> str | None:
        """The card's NVSwitch fabric registration (nvmlDeviceGetGpuFabricInfo), asked
        only of cards with NVLinks: None where it takes no part or cannot say."""
        fn = self._fn("nvmlDeviceGetGpuFabricInfo")
        struct = getattr(self.nvml, "c_nvmlGpuFabricInfo_t", None)
        if fn is None or struct is None:
            return None
        import ctypes  # pynvml's own dependency: the struct goes by pointer

        info = struct()  # filled in place: not through _call, whose cache keys on args
        try:
            fn(handle, ctypes.byref(info))
        except self._error_class as err:
            if getattr(err, "value", None) == _ERR_GPU_IS_LOST:
                raise _GpuLost("lost", LOST_TEXT) from None
            return None
        return FABRIC_STATES.get(int(info.state))

    def _kept(self, gpu: dict[str, Any], group: str, read: Callable[[], Any],
              urgent: Callable[[dict[str, Any]], bool] | None = None) -> None:
        """Fill ``gpu`` with ``group``'s fields (READ_EVERY): ``read()`` them when they are
        due (first read, READ_EVERY[group] seconds since the last, or ``urgent(last
        values)``), else the values of the last read, with that read's field errors
        reported again as if they had been asked again."""
        index, now = gpu["index"], self._now
        fields = _READ_GROUPS[group]
        cached = self._kept_reads.get((index, group))
        if cached is not None and 0 <= now - cached[0] < READ_EVERY[group] and not (
                urgent is not None and urgent(cached[1])):
            gpu.update(cached[1])
            if self._field_errors is not None:
                self._field_errors.extend(e for e in cached[2] if e not in self._field_errors)
            return
        errors = self._field_errors if self._field_errors is not None else []
        before = len(errors)
        read()
        self._kept_reads[(index, group)] = (now, {k: gpu.get(k) for k in fields},
                                            tuple(errors[before:]))

    def _settings(self, gpu: dict[str, Any], handle: DeviceHandle) -> None:
        """What an admin sets (power limit, persistence, compute, ECC and MIG modes): five
        of a card's thirty calls a tick, for values that change by hand, if ever; read
        every READ_EVERY["settings"] seconds (_kept)."""
        self._kept(gpu, "settings", lambda: self._read_settings(gpu, handle))

    def _read_settings(self, gpu: dict[str, Any], handle: DeviceHandle) -> None:
        get = self._get
        gpu["power_limit"] = _watts(get("nvmlDeviceGetEnforcedPowerLimit", handle))
        persistence = get("nvmlDeviceGetPersistenceMode", handle)
        gpu["persistence_mode"] = bool(persistence) if persistence is not None else None
        mode = get("nvmlDeviceGetComputeMode", handle)
        gpu["compute_mode"] = _COMPUTE_MODES.get(mode, str(mode)) if mode is not None else None
        ecc = get("nvmlDeviceGetEccMode", handle)
        gpu["ecc_mode"] = bool(ecc[0]) if ecc else None
        gpu["ecc_mode_pending"] = bool(ecc[1]) if ecc else None
        # Changed only by an admin, and in effect only after a reset (sources/mig.py).
        mig = get("nvmlDeviceGetMigMode", handle)
        gpu["mig_mode"] = bool(mig[0]) if mig else None
        gpu["mig_mode_pending"] = bool(mig[1]) if mig else None

    def _pcie_link(self, gpu: dict[str, Any], handle: DeviceHandle) -> None:
        gpu["pcie_gen"] = self._get("nvmlDeviceGetCurrPcieLinkGeneration", handle)
        gpu["pcie_width"] = self._get("nvmlDeviceGetCurrPcieLinkWidth", handle)

    @staticmethod
    def _counter_fields(links: int) -> list[tuple[int, int]]:
        fields = [(_FI_MEMORY_TEMP, 0), (_FI_TOTAL_ENERGY, 0), (_FI_PCIE_REPLAYS, 0)]
        return fields + [(f, link) for link in range(links) for f in _FI_NVLINK_DATA]

    def _counters(self, gpu: dict[str, Any], handle: DeviceHandle, batch: list[Any] | None) -> None:
        """Memory temperature, total energy, PCIe replays and NVLink data (dcgm-exporter's
        default counters), with each link's data both ways: ``batch``, their field values
        (read with others); the single calls where the driver has no field values."""
        if batch is None:
            gpu["temp_memory"] = gpu["nvlink_data_kib"] = None
            gpu["energy_mj"] = self._get("nvmlDeviceGetTotalEnergyConsumption", handle)
            gpu["pcie_replays"] = self._get("nvmlDeviceGetPcieReplayCounter", handle)
            return
        temp, energy, replays, *data = batch
        gpu["temp_memory"] = int(temp) if temp is not None else None
        gpu["energy_mj"] = int(energy) if energy is not None else None
        gpu["pcie_replays"] = int(replays) if replays is not None else None
        # One link that cannot say makes the total unknown, not smaller.
        known = bool(data) and all(v is not None for v in data)
        gpu["nvlink_data_kib"] = sum(int(v) for v in data) if known else None

    def _lean_dynamic(
        self, gpu: dict[str, Any], handle: DeviceHandle, static: dict[str, Any]
    ) -> None:
        """The changing fields of a one-shot table and its rules; the ones left out
        (``_LEAN_SKIPS``) are None.  NVLink count and states and the ECC counters are one
        field-value call: states of links beyond the count come back failed and unused."""
        get = self._get
        gpu.update(dict.fromkeys(_LEAN_SKIPS))
        util = get("nvmlDeviceGetUtilizationRates", handle)
        gpu["util_gpu"] = getattr(util, "gpu", None)
        gpu["util_mem"] = getattr(util, "memory", None)
        self._memory(gpu, handle)
        gpu["temp"] = get(
            "nvmlDeviceGetTemperature", handle, self._const("NVML_TEMPERATURE_GPU", 0)
        )
        gpu["power_draw"] = _watts(get("nvmlDeviceGetPowerUsage", handle))
        gpu["power_limit"] = _watts(get("nvmlDeviceGetEnforcedPowerLimit", handle))
        fans = self._fans(handle, static.get("_fans"))
        gpu["fans"] = fans
        gpu["fan"] = fans[0] if fans else None
        persistence = get("nvmlDeviceGetPersistenceMode", handle)
        gpu["persistence_mode"] = bool(persistence) if persistence is not None else None
        links = _NVLINK_MAX_LINKS
        batch = self._field_values(handle, [
            (_FI_NVLINK_LINK_COUNT, 0), *((field_id, 0) for _, field_id in _ECC_FIELDS),
            *((_FI_NVLINK_GET_STATE, n) for n in range(links))])
        index = gpu["index"]
        if batch is not None and batch[0] is not None:
            count = max(0, min(int(batch[0]), links))
            self._nvlink_remote[index] = [(None, None)] * count
            states: list[Any] | None = batch[1 + len(_ECC_FIELDS):][:count]
        else:
            self._nvlink_remote[index] = self._nvlink_remotes(handle, remotes=False)
            states = None
        self._ecc(gpu, handle, batch[1:1 + len(_ECC_FIELDS)] if batch is not None else None)
        self._clock_events(gpu, handle)
        gpu["pcie_gen"] = get("nvmlDeviceGetCurrPcieLinkGeneration", handle)
        gpu["pcie_width"] = get("nvmlDeviceGetCurrPcieLinkWidth", handle)
        gpu["nvlinks"] = self._nvlinks(index, handle, states)
        # The fabric state matters to one rule only (nvlinks-all-down: an NVSwitch system's
        # links all down, the fabric manager not running), so a one-shot asks it only of a
        # card whose every link is down: no call on a healthy host.
        links_down = bool(gpu["nvlinks"]) and not any(link["active"] for link in gpu["nvlinks"])
        gpu["fabric_state"] = self._fabric_state(handle) if links_down else None

    def _memory(self, gpu: dict[str, Any], handle: DeviceHandle) -> None:
        info = None
        version = getattr(self.nvml, "nvmlMemory_v2", None)
        if version is not None:
            try:
                # v2 separates driver-reserved memory from "used", as nvidia-smi shows it.
                info = self._get("nvmlDeviceGetMemoryInfo", handle, version)
            except TypeError:
                info = None
        if info is None:
            info = self._get("nvmlDeviceGetMemoryInfo", handle)
        gpu["mem_used"] = getattr(info, "used", None)
        gpu["mem_total"] = getattr(info, "total", None)
        gpu["mem_reserved"] = getattr(info, "reserved", None)

    def _fans(self, handle: DeviceHandle, count: int | None) -> tuple[int | None, ...]:
        if count:
            return tuple(self._get("nvmlDeviceGetFanSpeed_v2", handle, i) for i in range(count))
        speed = self._get("nvmlDeviceGetFanSpeed", handle)
        return (speed,) if speed is not None else ()

    def _ecc(
        self, gpu: dict[str, Any], handle: DeviceHandle, batch: list[Any] | None = None
    ) -> None:
        """ECC, retired pages and row remapping; ``batch``: their field values, read with
        others (the ECC mode is one of the settings, ``_settings``)."""
        get = self._get
        corrected = self._const("NVML_MEMORY_ERROR_TYPE_CORRECTED", _ECC_CORRECTED)
        # One field-value call stands in for the eight below (ECC, retired pages, row
        # remapping); per-field failures are None, as the single calls would give.
        if batch is None:
            batch = self._field_values(handle, [(field_id, 0) for _, field_id in _ECC_FIELDS])
        if batch is not None and any(v is not None for v in batch):
            for (key, _), value in zip(_ECC_FIELDS, batch, strict=True):
                gpu[key] = (bool(value) if key in _BOOL_FIELD_KEYS else int(value)) if (
                    value is not None) else None
            return
        uncorrected = self._const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", _ECC_UNCORRECTED)
        volatile = self._const("NVML_VOLATILE_ECC", _ECC_VOLATILE)
        aggregate = self._const("NVML_AGGREGATE_ECC", _ECC_AGGREGATE)
        for key, kind, counter in (
            ("ecc_volatile_corrected", corrected, volatile),
            ("ecc_volatile_uncorrected", uncorrected, volatile),
            ("ecc_aggregate_corrected", corrected, aggregate),
            ("ecc_aggregate_uncorrected", uncorrected, aggregate),
        ):
            gpu[key] = get("nvmlDeviceGetTotalEccErrors", handle, kind, counter)
        for key, cause, default in (
            ("retired_pages_sbe", "MULTIPLE_SINGLE_BIT_ECC_ERRORS", _RETIRE_SBE),
            ("retired_pages_dbe", "DOUBLE_BIT_ECC_ERROR", _RETIRE_DBE),
        ):
            pages = get(
                "nvmlDeviceGetRetiredPages",
                handle,
                self._const(f"NVML_PAGE_RETIREMENT_CAUSE_{cause}", default),
            )
            gpu[key] = len(pages) if pages is not None else None
        pending = get("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        gpu["retired_pages_pending"] = bool(pending) if pending is not None else None
        rows = get("nvmlDeviceGetRemappedRows", handle)
        if rows:
            gpu["remapped_correctable"] = int(rows[0])
            gpu["remapped_uncorrectable"] = int(rows[1])
            gpu["remap_pending"] = bool(rows[2])
            gpu["remap_failure"] = bool(rows[3])
        else:
            gpu["remapped_correctable"] = gpu["remapped_uncorrectable"] = None
            gpu["remap_pending"] = gpu["remap_failure"] = None

    def _clock_events(self, gpu: dict[str, Any], handle: DeviceHandle) -> None:
        # The "throttle" name is deprecated (removed in CUDA 14); older drivers have only it.
        mask = self._get("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if mask is None:
            mask = self._get("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        gpu["clock_event_mask"] = int(mask) if mask is not None else None
        gpu["clock_event_reasons"] = decode_clock_events(gpu["clock_event_mask"])

    def _nvlinks(
        self, index: int, handle: DeviceHandle, states: list[Any] | None = None
    ) -> list[dict]:
        """Each link's state (``states``: already read with other field values)."""
        links = []
        known = self._nvlink_remote.get(index, ())
        # One call for every link's state instead of one per link (18 on an H100).
        if states is None or len(states) != len(known):
            states = self._field_values(
                handle, [(_FI_NVLINK_GET_STATE, n) for n in range(len(known))])
        for link, (remote, _) in enumerate(known):
            if states is not None:
                state = states[link]
            else:
                state = self._get("nvmlDeviceGetNvLinkState", handle, link)
            links.append(
                {
                    "link": link,
                    "active": bool(state) if state is not None else None,
                    "remote_pci_bus_id": remote,
                }
            )
        return links

    # -- processes -----------------------------------------------------------------------------

    def _processes(
        self, index: int, handle: DeviceHandle, mem_total: int | None
    ) -> tuple[list[dict], str | None]:
        """The card's processes, and why the list is incomplete (None: it is complete).

        MPS clients ("M") are listed by their own call: without it a card shared through
        MPS looks empty.
        """
        merged: dict[int, dict] = {}
        failures: list[str] = []
        for kind, letter in (("Compute", "C"), ("Graphics", "G"), ("MPSCompute", "M")):
            entries, failure = self._running(kind, handle, mem_total)
            if failure:
                failures.append(failure)
            for entry in entries:
                pid = int(entry.pid)
                mem = getattr(entry, "usedGpuMemory", None)
                if mem == _VALUE_NOT_AVAILABLE:
                    mem = None
                row = merged.get(pid)
                if row is None:
                    merged[pid] = {"pid": pid, "gpu": index, "type": letter, "gpu_mem": mem}
                else:
                    if {row["type"], letter} == {"C", "G"}:
                        row["type"] = "C+G"
                    if mem is not None and (row["gpu_mem"] is None or mem > row["gpu_mem"]):
                        row["gpu_mem"] = mem
        self._process_utilization(index, handle, merged)
        return list(merged.values()), "; ".join(failures) or None

    def _running(
        self, kind: str, handle: DeviceHandle, mem_total: int | None
    ) -> tuple[list[Any], str | None]:
        """Running processes of one kind, surviving the 535.43-535.86 struct mismatch.

        Those drivers export a _v3 function whose struct does not match what pynvml
        expects, so the entries come back as garbage (pid 0, absurd memory sizes).  Try the
        newest call first and fall back to older ones; remember which one worked.  The
        second value says why no variant could be read (None when one could, or when this
        driver has none).
        """
        base = f"nvmlDeviceGet{kind}RunningProcesses"
        variants = [base + "_v3", base + "_v2", base]
        known = self._proc_variant.get(kind)
        if known is not None:
            variants.remove(known)
            variants.insert(0, known)
        last: list[Any] | None = None
        failure: str | None = None
        for name in variants:
            result, why = self._call(name, handle)
            if result is None:
                failure = failure or why
                continue
            result = list(result)
            if self._plausible(result, mem_total):
                self._proc_variant[kind] = name
                return result, None
            last = result
        if last is None:
            return [], failure
        # Every variant looked wrong: keep the entries that still make sense.
        return [e for e in last if self._plausible([e], mem_total)], None

    def _plausible(self, entries: list[Any], mem_total: int | None) -> bool:
        for entry in entries:
            pid = getattr(entry, "pid", 0)
            if not isinstance(pid, int) or pid <= 0:
                return False
            if self._pid_max is not None and pid > self._pid_max:
                return False
            mem = getattr(entry, "usedGpuMemory", None)
            if (
                mem is not None
                and mem != _VALUE_NOT_AVAILABLE
                and mem_total is not None
                and mem > mem_total
            ):
                return False
        return True

    def _process_utilization(self, index: int, handle: DeviceHandle, rows: dict[int, dict]) -> None:
        fn = self._fn("nvmlDeviceGetProcessUtilization")
        if fn is None:
            return
        last_ts = self._proc_util_ts.get(index, 0)
        try:
            samples = list(fn(handle, last_ts))
        except self._error_class as err:
            code = getattr(err, "value", None)
            if code == _ERR_GPU_IS_LOST:
                raise _GpuLost("lost", LOST_TEXT) from None
            if code != _ERR_NOT_FOUND:
                return  # not supported here: SM % stays None
            samples = []  # NotFound: no samples since last_ts, so nobody ran
        sums: dict[int, list[int]] = {}
        newest = last_ts
        for sample in samples:
            ts = int(getattr(sample, "timeStamp", 0))
            if ts <= last_ts:
                continue
            newest = max(newest, ts)
            acc = sums.setdefault(int(sample.pid), [0, 0, 0])
            acc[0] += int(sample.smUtil)
            acc[1] += int(sample.memUtil)
            acc[2] += 1
        self._proc_util_ts[index] = newest
        for pid, row in rows.items():
            got = sums.get(pid)
            # A process without a sample in the window did not run on the GPU: 0 %, not None.
            row["sm_util"] = round(got[0] / got[2]) if got else 0
            row["mem_util"] = round(got[1] / got[2]) if got else 0


_VGPU_GUEST = 2  # NVML_GPU_VIRTUALIZATION_MODE_VGPU: this card is a vGPU in a VM
_IDENTITY_KEYS = ("uuid", "name", "pci_bus_id", "serial")
# Every key _static_fields fills (a lean read fills a few and leaves the rest None).
_STATIC_KEYS = ("uuid", "name", "pci_bus_id", "serial", "temp_slowdown", "temp_shutdown",
                "temp_max_operating", "power_default_limit", "power_min_limit",
                "power_max_limit", "clock_sm_max", "clock_mem_max", "pcie_gen_max",
                "pcie_width_max", "cpu_affinity", "numa_node", "inforom_corrupted")
# What a lean collect (`gputop --once`) does not read: neither its table nor the health
# rules it runs look at them (tests/test_nvml_calls.py compares the output with a full
# read's).
_LEAN_SKIPS = ("util_enc", "util_dec", "bar1_used", "bar1_total", "clock_sm", "clock_mem",
               "clock_gr", "pstate", "compute_mode", "ecc_mode", "ecc_mode_pending",
               "pcie_tx_kbs", "pcie_rx_kbs")


# What the dashboard's stream leaves out (None): no view, rule or record of the dashboard
# reads them (tests/test_oneshot_cost.py looks); `serve`, --json and --once's full read
# (--json) still do.  Six of a card's calls a refresh.  A card's BAR1 is one of them: the
# dashboard shows the BAR1 of MIG devices only (their own fields, sources/mig.py).
_UNSHOWN = ("util_enc", "util_dec", "clock_gr", "pcie_tx_kbs", "pcie_rx_kbs", "bar1_used",
            "bar1_total",
            # dcgm-exporter's counters, for serve and --json: 39 of the 68 values of a card's
            # field-value call on an H100 (NVLink data both ways, per link), each a struct
            # pynvml fills in Python, four times a second at a 0.25 s refresh
            "temp_memory", "energy_mj", "pcie_replays", "nvlink_data_kib")


# Field ids (nvml.h) of what _ecc reads one call at a time, and the keys they fill.
_ECC_FIELDS = (
    ("ecc_volatile_corrected", 3),  # NVML_FI_DEV_ECC_SBE_VOL_TOTAL
    ("ecc_volatile_uncorrected", 4),
    ("ecc_aggregate_corrected", 5),
    ("ecc_aggregate_uncorrected", 6),
    ("retired_pages_sbe", 29),  # NVML_FI_DEV_RETIRED_SBE
    ("retired_pages_dbe", 30),
    ("retired_pages_pending", 31),
    ("remapped_correctable", 142),  # NVML_FI_DEV_REMAPPED_COR
    ("remapped_uncorrectable", 143),
    ("remap_pending", 144),
    ("remap_failure", 145),
)
_BOOL_FIELD_KEYS = frozenset({"retired_pages_pending", "remap_pending", "remap_failure"})

# nvmlValueType_t -> the c_nvmlValue_t member that holds it.
_FIELD_VALUE_TYPES = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                      6: "usVal"}


# How long a card's settings (power limit, persistence, compute, ECC and MIG modes) are kept
# before they are read again: a change made by hand shows within this.
SETTINGS_SECONDS = 10.0

# The one home for "how often is field X read" where it is not every refresh: each group's
# fields are read together, at most every READ_EVERY[group] seconds (NvmlBackend._kept),
# sooner where the group's rule below says so.  Fields that never change are read once
# (_static_fields); what the dashboard shows nowhere, never by it (_UNSHOWN).
_READ_GROUPS = {
    # Every read but a lean one (it reads power limit and persistence once, directly).
    "settings": ("power_limit", "persistence_mode", "compute_mode", "ecc_mode",
                 "ecc_mode_pending", "mig_mode", "mig_mode_pending"),
    # The dashboard's stream only (serve, --json and check read them every time): see
    # _pcie_link_urgent for when they are read every refresh all the same.
    "pcie_link": ("pcie_gen", "pcie_width"),
    # The dashboard's stream only: what the health rules judge (ECC, retired pages, row
    # remapping, link states, clock-event reasons) at most about once a second, however
    # fast it refreshes: counts and states that last, which no one reads at 4 Hz.
    "health": (*(key for key, _ in _ECC_FIELDS), "nvlinks", "fabric_state",
               "clock_event_mask", "clock_event_reasons"),
}
# 0.9, not 1: a 1 s refresh whose poll comes a little early still reads them every time.
HEALTH_SECONDS = 0.9
READ_EVERY = {"settings": SETTINGS_SECONDS, "pcie_link": SETTINGS_SECONDS,
              "health": HEALTH_SECONDS}


def _pcie_link_urgent(last: dict[str, Any], gpu: dict[str, Any], static: dict[str, Any]) -> bool:
    """Whether the dashboard reads a card's PCIe generation and width this refresh rather
    than keeping ``last`` (read at most READ_EVERY["pcie_link"] seconds ago); ``gpu``: this
    refresh's fields read so far (its util).

    The health rules (analysis/health/gpu.py) warn when the width is below the maximum
    (any load) and when the generation is below it while the card is busy (util at or
    above ``busy_util``, 20 % by default).  A card trains its link down (a lower
    generation) when idle and back up under load; a link that loses width or generation
    under load has retrained after errors and stays so until a reset.  So the link is read
    every refresh while either is below its maximum and the card has some load (util above
    0, the lowest any busy threshold can be): a busy card whose link is still training up,
    or a live warning that must clear as soon as the link recovers; and while the width
    is below its maximum at any load.  A link at its maximum, or an idle card's trained-
    down generation, is read every READ_EVERY seconds: a fault shows within that, not
    lost.  util unknown (None) reads every refresh, as the rules cannot tell either.
    """
    width, width_max = last.get("pcie_width"), static.get("pcie_width_max")
    gen, gen_max = last.get("pcie_gen"), static.get("pcie_gen_max")
    util = gpu.get("util_gpu")
    if util is None:
        return True
    # A field the card does not give (None) is asked again with the group.
    if width is not None and width_max is not None and width < width_max:
        return True
    return util > 0 and gen is not None and gen_max is not None and gen < gen_max


def _watts(milliwatts: Any) -> float | None:
    # Not rounded here: each output rounds once (1 W on screen, 0.1 W in --json), since
    # rounding twice shows 23.46 W as 24 W.
    if milliwatts is None:
        return None
    return milliwatts / 1000.0


def _init_failure_message(err: BaseException) -> str:
    code = getattr(err, "value", None)
    if code == _ERR_DRIVER_NOT_LOADED:
        return DRIVER_NOT_LOADED_MESSAGE
    if code in (_ERR_LIBRARY_NOT_FOUND, None):
        return NO_DRIVER_MESSAGE
    # The meaning and the remedy are the ones the nvidia-smi fallback shows for the same
    # failure (sources/nvmlcodes.py).
    known = init_failure(code if isinstance(code, int) else None)
    if known is not None:
        return f"gputop: NVML could not start ({known.text}): {known.describe()}."
    return f"gputop: NVML could not start: {err}."


def open_nvml(lean: bool = False, topology: bool = True, dashboard: bool = False) -> NvmlBackend:
    """The NVML backend of this machine; NoDriverError when there is no GPU to read."""
    try:
        import pynvml
    except ImportError:
        raise NoDriverError(NO_DRIVER_MESSAGE) from None
    backend = NvmlBackend(FastPynvml(pynvml), lean=lean, topology=topology,
                          dashboard=dashboard)
    # A driver with zero GPUs leaves nothing to show, as no driver does (exit 3).
    if backend.count() == 0:
        raise NoDriverError(NO_GPUS_MESSAGE)
    return backend
