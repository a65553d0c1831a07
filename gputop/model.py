"""The snapshot model: immutable facts about one host at one moment.

Everything a source collects ends up here, and everything a view shows starts here.
Missing values are None (never 0, never "N/A"): a card that does not report its fan
speed has ``fans == ()`` and ``fan is None``, not 0 %.

Sources produce plain dicts whose keys are exactly these field names (the remote
probe has only the standard library and speaks JSON); ``from_dict`` turns them into
dataclasses and ignores keys it does not know, so an older client can read a newer
probe.  ``to_dict`` is the inverse and is what ``gputop --json`` prints.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

SCHEMA_VERSION = 1

# Host states, shown in the UI and in --json.
HOST_CONNECTING = "connecting"
HOST_OK = "ok"
HOST_STALE = "stale"
HOST_AUTH_FAILED = "auth failed"
HOST_KEY_UNKNOWN = "host key unknown"
HOST_KEY_CHANGED = "host key changed"
HOST_UNREACHABLE = "unreachable"
HOST_TIMEOUT = "timed out"
HOST_NO_GPU = "no GPU/driver"
HOST_FALLBACK = "fallback"  # nvidia-smi parsing, fewer fields
HOST_ERROR = "error"

# GPU states.
GPU_OK = "ok"
GPU_LOST = "lost"  # fallen off the bus: NVML_ERROR_GPU_IS_LOST
GPU_ERROR = "error"  # handle could not be read at all

# Severities, most severe first.
CRITICAL = "critical"
WARNING = "warning"
INFO = "info"
SEVERITY_ORDER = {CRITICAL: 0, WARNING: 1, INFO: 2}

T = TypeVar("T")


def _flat(cls: type[T], data: dict[str, Any]) -> T:
    """Build a dataclass from a dict, ignoring unknown keys, lists become tuples."""
    names = _field_names(cls)
    kwargs = {}
    for key, value in data.items():
        if key in names:
            kwargs[key] = tuple(value) if isinstance(value, list) else value
    return cls(**kwargs)


_FIELD_CACHE: dict[type, frozenset[str]] = {}


def _field_names(cls: type) -> frozenset[str]:
    names = _FIELD_CACHE.get(cls)
    if names is None:
        names = frozenset(f.name for f in dataclasses.fields(cls))
        _FIELD_CACHE[cls] = names
    return names


class _Record:
    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class NvLink(_Record):
    link: int
    active: bool | None = None
    remote_pci_bus_id: str | None = None


@dataclass(frozen=True, slots=True)
class Gpu(_Record):
    index: int
    state: str = GPU_OK
    error: str | None = None  # why state is not ok
    # identity, read once
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    serial: str | None = None
    # utilization, percent
    util_gpu: int | None = None
    util_mem: int | None = None
    util_enc: int | None = None
    util_dec: int | None = None
    # memory, bytes
    mem_used: int | None = None
    mem_total: int | None = None
    mem_reserved: int | None = None
    bar1_used: int | None = None
    bar1_total: int | None = None
    # thermal, degrees C
    temp: int | None = None
    temp_slowdown: int | None = None
    temp_shutdown: int | None = None
    temp_max_operating: int | None = None
    # power, watts
    power_draw: float | None = None
    power_limit: float | None = None  # enforced
    power_default_limit: float | None = None
    power_min_limit: float | None = None
    power_max_limit: float | None = None
    # fans, percent; fan is the first fan (what nvidia-smi shows)
    fans: tuple[int | None, ...] = ()
    fan: int | None = None
    # clocks, MHz
    clock_sm: int | None = None
    clock_mem: int | None = None
    clock_gr: int | None = None
    clock_sm_max: int | None = None
    clock_mem_max: int | None = None
    pstate: int | None = None  # 0..15, P0 is the fastest
    persistence_mode: bool | None = None
    compute_mode: str | None = None  # "Default", "Exclusive_Process", "Prohibited"
    # ECC
    ecc_mode: bool | None = None
    ecc_mode_pending: bool | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    # clock-event (throttle) reasons: the raw mask and its named flags
    clock_event_mask: int | None = None
    clock_event_reasons: tuple[str, ...] | None = None
    # PCIe
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None  # max of the GPU and the slot together
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_tx_kbs: int | None = None
    pcie_rx_kbs: int | None = None
    nvlinks: tuple[NvLink, ...] = ()
    numa_node: int | None = None
    cpu_affinity: str | None = None  # cpulist, e.g. "0-23,48-71"
    mig_mode: bool | None = None

    @property
    def mem_free(self) -> int | None:
        if self.mem_used is None or self.mem_total is None:
            return None
        return max(self.mem_total - self.mem_used, 0)

    @property
    def mem_percent(self) -> float | None:
        if self.mem_used is None or not self.mem_total:
            return None
        return 100.0 * self.mem_used / self.mem_total

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Gpu:
        gpu = _flat(cls, data)
        links = data.get("nvlinks") or ()
        if links and not isinstance(links[0], NvLink):
            gpu = dataclasses.replace(gpu, nvlinks=tuple(_flat(NvLink, link) for link in links))
        return gpu


@dataclass(frozen=True, slots=True)
class GpuProcess(_Record):
    pid: int
    gpu: int  # GPU index on its host
    type: str = "C"  # "C" compute, "G" graphics, "C+G" both
    gpu_mem: int | None = None  # bytes
    sm_util: int | None = None  # percent, from nvmlDeviceGetProcessUtilization
    mem_util: int | None = None
    # from /proc (None when the pid is not visible or not readable)
    visible: bool = True  # False: NVML lists it but it is not in our PID namespace
    user: str | None = None
    uid: int | None = None
    command: str | None = None  # the command line joined by spaces, untrusted text
    cmdline: tuple[str, ...] = ()
    ppid: int | None = None
    state: str | None = None  # one letter from /proc/PID/stat: R S D Z T ...
    start_time: float | None = None  # epoch seconds
    start_ticks: int | None = None  # /proc/PID/stat field 22: the identity for actions
    cpu_percent: float | None = None
    rss: int | None = None  # bytes
    # facts the orphan rules need, read by the collector (pure analysis does no I/O)
    parent_command: str | None = None
    parent_user: str | None = None
    kernel_file: str | None = None  # a Jupyter kernel's -f connection file, if any
    kernel_file_exists: bool | None = None
    simulated: bool = False  # a --demo process: actions only touch the simulation

    @property
    def key(self) -> tuple[int, int]:
        return (self.gpu, self.pid)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuProcess:
        return _flat(cls, data)


@dataclass(frozen=True, slots=True)
class DeviceHolder(_Record):
    """A process holding /dev/nvidia* open (found by scanning /proc/*/fd)."""

    pid: int
    user: str | None = None
    command: str | None = None
    devices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class XidEvent(_Record):
    gpu: int
    xid: int
    time: float  # epoch seconds
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Link(_Record):
    """Topology between two GPUs, in `nvidia-smi topo -m` vocabulary."""

    gpu_a: int
    gpu_b: int
    kind: str  # "NV#" (e.g. "NV12"), "PIX", "PXB", "PHB", "NODE", "SYS"
    nvlinks: int = 0


@dataclass(frozen=True, slots=True)
class Reservation(_Record):
    gpu: int
    user: str
    until: float  # epoch seconds
    since: float
    note: str = ""
    uid: int | None = None
    gpu_uuid: str | None = None
    host: str | None = None

    def active(self, now: float) -> bool:
        return self.until > now

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reservation:
        return _flat(cls, data)


@dataclass(frozen=True, slots=True)
class HealthWarning(_Record):
    severity: str  # CRITICAL / WARNING / INFO
    code: str  # stable id, e.g. "gpu-lost", "xid-79", "pcie-width"
    message: str  # one line
    host: str | None = None
    gpu: int | None = None
    pid: int | None = None
    hint: str | None = None
    since: float | None = None

    @property
    def key(self) -> tuple[str | None, int | None, int | None, str]:
        return (self.host, self.gpu, self.pid, self.code)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HealthWarning:
        return _flat(cls, data)


@dataclass(frozen=True, slots=True)
class HostSnapshot(_Record):
    host: str  # the name the user knows it by ("localhost" or the hosts-file name)
    time: float  # epoch seconds when collected
    state: str = HOST_OK
    error: str | None = None  # one sentence for a state that is not ok
    source: str = "nvml"  # "nvml", "sim", "probe", "smi"
    demo: bool = False
    hostname: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None  # "12.4"
    nvml_version: str | None = None
    cpu_count: int | None = None
    cpu_percent: float | None = None
    load: tuple[float, float, float] | None = None
    mem_total: int | None = None
    mem_available: int | None = None
    gpus: tuple[Gpu, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    topology: tuple[Link, ...] = ()  # static: read once per connection
    reservations: tuple[Reservation, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()  # new since the previous snapshot
    xid_watched: bool | None = None  # False: this host's driver gives no XID events
    device_holders: tuple[DeviceHolder, ...] = ()
    device_scan_note: str | None = None  # e.g. "12 processes not readable (not root)"
    missing: tuple[str, ...] = ()  # fields this source cannot provide (fallback mode)
    labels: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.state in (HOST_OK, HOST_FALLBACK)

    def gpu(self, index: int) -> Gpu | None:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        return None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["schema"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostSnapshot:
        snap = _flat(cls, data)
        return dataclasses.replace(
            snap,
            load=tuple(snap.load) if snap.load is not None else None,  # type: ignore[arg-type]
            gpus=tuple(Gpu.from_dict(g) for g in data.get("gpus") or ()),
            processes=tuple(GpuProcess.from_dict(p) for p in data.get("processes") or ()),
            topology=tuple(_flat(Link, t) for t in data.get("topology") or ()),
            reservations=tuple(Reservation.from_dict(r) for r in data.get("reservations") or ()),
            xid_events=tuple(_flat(XidEvent, x) for x in data.get("xid_events") or ()),
            device_holders=tuple(_flat(DeviceHolder, d) for d in data.get("device_holders") or ()),
        )


def error_snapshot(host: str, time: float, state: str, error: str, **extra: Any) -> HostSnapshot:
    """A snapshot that carries only a host state: unreachable, no driver, ..."""
    return HostSnapshot(host=host, time=time, state=state, error=error, **extra)

