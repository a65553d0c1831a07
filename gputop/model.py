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

from typing import Any, TypeVar

from gputop.records import Record, record, replace

SCHEMA_VERSION = 1

# The refresh interval, seconds: the config's `interval:` and `gputop --interval` are
# checked against these bounds; the feeds and the screens refresh no faster than the
# lower one.
DEFAULT_INTERVAL_S = 1.0
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 3600.0

# Host states, shown in the UI and in --json.
HOST_CONNECTING = "connecting"
HOST_OK = "ok"
# The ``source`` of a snapshot the demo made up for the time before it started (its
# seeded history): shown in charts, never called observed, never a warning of the session.
SOURCE_SIMULATED_PAST = "simulated past"
HOST_STALE = "stale"
HOST_AUTH_FAILED = "auth failed"
HOST_KEY_UNKNOWN = "host key unknown"
HOST_KEY_CHANGED = "host key changed"
HOST_UNREACHABLE = "unreachable"
HOST_TIMEOUT = "timed out"
HOST_NO_GPU = "no GPU/driver"
HOST_FALLBACK = "fallback"  # nvidia-smi parsing, fewer fields
HOST_ERROR = "error"

# In a snapshot's ``missing``: its source exports no process list (dcgm-exporter, nvidia_gpu_
# exporter through Prometheus), which views say in these words rather than "no processes".
NO_PROCESS_LIST = "processes"
NO_PROCESS_LIST_TEXT = "processes: not exported by this source"

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


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELD_CACHE.get(cls)
    if names is None:
        names = frozenset(cls._names)
        _FIELD_CACHE[cls] = names
    return names


@record(frozen=True, slots=True)
class NvLink(Record):
    """One NVLink of a card: up or down, and the PCI bus id of its far end."""

    link: int
    active: bool | None = None
    remote_pci_bus_id: str | None = None


# NVLink tuples already built, by their values: a card's 18 links are the same tick after
# tick, and the history keeps ten minutes of Gpu records (86,000 NvLink objects, 5 MiB,
# at 1 s on 8 H100s, before they were shared).  Emptied when it grows past the cap.
_LINKS_SEEN: dict[tuple[tuple[Any, ...], ...], tuple[NvLink, ...]] = {}
_LINKS_SEEN_CAP = 4096


def _links(items: Any) -> tuple[NvLink, ...]:
    """NvLinks from dicts, the tuple shared with the last Gpu that had the same links."""
    try:
        key = tuple((d.get("link"), d.get("active"), d.get("remote_pci_bus_id"))
                    for d in items)
        found = _LINKS_SEEN.get(key)
    except (AttributeError, TypeError):  # not dicts, or unhashable values: no sharing
        return tuple(_flat(NvLink, link) for link in items)
    if found is None:
        if len(_LINKS_SEEN) >= _LINKS_SEEN_CAP:
            _LINKS_SEEN.clear()
        found = _LINKS_SEEN[key] = tuple(_flat(NvLink, link) for link in items)
    return found


@record(frozen=True, slots=True)
class Gpu(Record):
    """One card of a host at one moment: identity, use, limits and health counters."""

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
    pcie_replays: int | None = None  # PCIe replays (link-level retries) since driver load
    nvlinks: tuple[NvLink, ...] = ()
    # NVSwitch systems: the card's registration with the fabric manager ("completed",
    # "in progress", "not started"); None where the card takes no part in a fabric.
    fabric_state: str | None = None
    nvlink_data_kib: int | None = None  # NVLink data sent + received, all links, KiB
    # What dcgm-exporter exports by default beyond the above (docs/prometheus.md)
    temp_memory: int | None = None  # HBM temperature, C (cards with HBM only)
    energy_mj: int | None = None  # energy since the driver loaded, mJ (Volta and newer)
    # GPM (Hopper and newer), over the time since the previous refresh: percent of time
    # the tensor pipes / DRAM were busy, and PCIe bytes per second each way
    prof_tensor_active: float | None = None
    prof_dram_active: float | None = None
    prof_pcie_tx_bytes: float | None = None
    prof_pcie_rx_bytes: float | None = None
    numa_node: int | None = None
    cpu_affinity: str | None = None  # cpulist, e.g. "0-23,48-71"
    mig_mode: bool | None = None
    # Why this card's process list could not be read (None: it was read, maybe empty).
    # Such a card is "unknown", never "free": its processes may hold all of it.
    processes_error: str | None = None
    # Fields whose query failed with an error (Unknown, Timeout, NoPermission), as
    # "nvmlDeviceGetX: reason": they are None like unsupported ones, but not "not there".
    field_errors: tuple[str, ...] = ()
    # The card's infoROM failed its checksum (nvidia-smi's "infoROM is corrupted"
    # warning, exit status 14): its values still read, its configuration store does not.
    inforom_corrupted: bool | None = None
    # DCGM's DCGM_FI_DEV_VGPU_LICENSE_STATUS: 1 a licensed vGPU, 0 not licensed or no
    # vGPU at all (bare metal, passthrough: what dcgm-exporter exports there).
    vgpu_license_status: int | None = None
    # MIG (docs/mig.md); mig_devices is empty unless the current mode is on
    mig_mode_pending: bool | None = None
    mig_max_devices: int | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    mig_note: str | None = None  # why instances cannot be listed, e.g. no permission
    # The jobs a source names for the card itself when it has no process list
    # (dcgm-exporter's pod/namespace/container and hpc_job labels, read via Prometheus).
    workloads: tuple[Workload, ...] = ()

    @property
    def mig_free_slices(self) -> int | None:
        """Compute slices no instance holds (7 on an H100), counting each GPU instance once."""
        if not self.mig_mode or self.mig_max_devices is None:
            return None
        used: dict[int | None, int] = {}
        for dev in self.mig_devices:
            if dev.slices is None:
                return None
            used[dev.gi if dev.gi is not None else -1 - dev.index] = dev.slices
        return max(self.mig_max_devices - sum(used.values()), 0)

    @property
    def jobs_label(self) -> str:
        """The card's own jobs as views show them: "k8s:ml/train-7f9c, slurm:4242"."""
        return jobs_label(self.workloads)

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
        links = data.get("nvlinks") or ()
        migs = data.get("mig_devices") or ()
        jobs = data.get("workloads") or ()
        if (links and not isinstance(links[0], NvLink)) or (
                migs and not isinstance(migs[0], MigDevice)) or (
                jobs and not isinstance(jobs[0], Workload)):
            data = dict(data)
            if links and not isinstance(links[0], NvLink):
                data["nvlinks"] = _links(links)
            if migs and not isinstance(migs[0], MigDevice):
                data["mig_devices"] = MigDevice.all_from(migs)
            if jobs and not isinstance(jobs[0], Workload):
                found = (Workload.from_any(j) for j in list(jobs)[:16])
                data["workloads"] = tuple(j for j in found if j is not None)
        return _flat(cls, data)


def jobs_label(workloads: tuple[Workload, ...]) -> str:
    """The jobs a source names for a card or a MIG instance, as views show them."""
    return ", ".join(job.label for job in workloads)


# -- MIG: instances of a card in MIG mode, see docs/mig.md ----------------------


@record(frozen=True, slots=True)
class MigDevice(Record):
    """One MIG device (a compute instance inside a GPU instance) of card ``gpu``.

    Temperature, power and clocks belong to the parent card; ``sm_active`` comes from GPM
    (Hopper and newer) and is None where the driver gives no per-instance activity.
    """

    gpu: int  # the parent card's index
    index: int  # nvmlDeviceGetMigDeviceHandleByIndex slot: the "1" of "0:1"
    gi: int | None = None  # GPU instance id
    ci: int | None = None  # compute instance id
    uuid: str | None = None  # "MIG-..."
    name: str | None = None
    profile: str | None = None  # "1g.10gb", from the name
    mem_used: int | None = None  # bytes; shared by the compute instances of one GI
    mem_total: int | None = None
    bar1_used: int | None = None
    bar1_total: int | None = None
    sm_active: int | None = None  # percent, GPM SM activity
    # The jobs a source names for this instance (dcgm-exporter's pod and hpc_job labels
    # on its GPU_I_ID series, read via Prometheus), not for the whole card.
    workloads: tuple[Workload, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.gpu}:{self.index}"

    @property
    def jobs_label(self) -> str:
        return jobs_label(self.workloads)

    @classmethod
    def all_from(cls, items: Any) -> tuple[MigDevice, ...]:
        """From a probe's JSON (untrusted): entries without ints for gpu and index are
        dropped, a field of the wrong type becomes None, at most 8 per card."""
        out = []
        texts = ("uuid", "name", "profile")
        for item in list(items)[:8] if isinstance(items, (list, tuple)) else ():
            if not isinstance(item, dict):
                continue
            clean: dict[str, Any] = {}
            for name in _field_names(cls):
                value = item.get(name)
                if name == "workloads":
                    found = (Workload.from_any(j) for j in
                             (list(value)[:16] if isinstance(value, (list, tuple)) else ()))
                    clean[name] = tuple(j for j in found if j is not None)
                    continue
                ok = isinstance(value, str) if name in texts else (
                    isinstance(value, int) and not isinstance(value, bool))
                clean[name] = value if ok else None
            if clean["gpu"] is not None and clean["index"] is not None:
                out.append(cls(**clean))
        return tuple(out)

    @property
    def slices(self) -> int | None:
        head = (self.profile or "").split("g.", 1)[0]
        return int(head) if head.isdigit() else None

    @property
    def mem_free(self) -> int | None:
        if self.mem_used is None or self.mem_total is None:
            return None
        return max(self.mem_total - self.mem_used, 0)


def mig_map(gpus: tuple[Gpu, ...]) -> dict[str, tuple[int, int]]:
    """MIG UUID -> (card index, slot) of a host's MIG devices: what reservations check."""
    return {d.uuid: (d.gpu, d.index) for g in gpus for d in g.mig_devices if d.uuid}


def mig_memory(gpu: Gpu) -> tuple[int | None, int | None]:
    """(used, total) over a card's MIG devices, each GPU instance counted once."""
    seen: dict[Any, tuple[int | None, int | None]] = {}
    for dev in gpu.mig_devices:
        seen.setdefault(dev.gi if dev.gi is not None else ("slot", dev.index),
                        (dev.mem_used, dev.mem_total))
    if not seen or any(u is None or t is None for u, t in seen.values()):
        return None, None
    return (sum(u or 0 for u, _ in seen.values()), sum(t or 0 for _, t in seen.values()))


# -- workloads: who is behind a process ---------------------------------------
WORKLOAD_KINDS = ("slurm", "docker", "podman", "containerd", "crio", "k8s")


@record(frozen=True, slots=True)
class Workload(Record):
    """The Slurm job, container or pod a process runs in (from its cgroup); see
    docs/workloads.md.  Names are None until (and unless) a name source answers."""

    kind: str  # one of WORKLOAD_KINDS
    id: str  # Slurm job id, container id (64 hex) or pod uid
    step: str | None = None  # slurm: "0", "batch", "extern", "interactive"
    user: str | None = None  # slurm: the job's user
    name: str | None = None  # slurm: job name; docker/podman: container name
    account: str | None = None
    partition: str | None = None
    job_state: str | None = None
    end_time: float | None = None  # slurm: epoch seconds
    time_left: float | None = None  # slurm: seconds
    gpus: tuple[int, ...] | None = None  # slurm: GPU indexes the job was given here
    container_id: str | None = None  # k8s: the container inside the pod
    namespace: str | None = None  # k8s
    pod: str | None = None  # k8s
    container: str | None = None  # k8s: the container's name

    @property
    def label(self) -> str:
        """What tables show: slurm:4242.0, docker:web-api, k8s:ml/train-7f9c."""
        if self.kind == "slurm":
            return f"slurm:{self.id}.{self.step}" if self.step else f"slurm:{self.id}"
        if self.kind == "k8s":
            if self.namespace and self.pod:
                return f"k8s:{self.namespace}/{self.pod}"
            return f"k8s:{self.id[:8]}"
        return f"{self.kind}:{self.name or self.id[:12]}"

    @property
    def group_key(self) -> tuple[str, str]:
        """One line per job (all its steps), container or pod."""
        return (self.kind, self.id)

    @classmethod
    def from_any(cls, data: Any) -> Workload | None:
        """From a probe's JSON (untrusted): a field of the wrong type is dropped."""
        if data is None or isinstance(data, Workload):
            return data
        if not isinstance(data, dict):
            return None
        clean: dict[str, Any] = {}
        for name in _field_names(cls):
            value: Any = data.get(name)
            if name in ("end_time", "time_left"):
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            elif name == "gpus":
                ok = isinstance(value, (list, tuple)) and all(
                    isinstance(g, int) and not isinstance(g, bool) for g in value)
            else:
                ok = isinstance(value, str)
            if ok:
                clean[name] = tuple(value) if name == "gpus" else value
        if "kind" not in clean or "id" not in clean:
            return None
        return cls(**clean)


@record(frozen=True, slots=True)
class GpuProcess(Record):
    """A process NVML lists on a card, with what /proc says about it."""

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
    workload: Workload | None = None  # Slurm job, container or pod; None: none
    # the MIG device it runs on (None on a card without MIG)
    mig_device: int | None = None  # MigDevice.index on card ``gpu``
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mig_uuid: str | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.gpu, self.pid)

    @property
    def gpu_label(self) -> str:
        """The GPU column: "0", or "0:1" for MIG device 1 of card 0."""
        return f"{self.gpu}:{self.mig_device}" if self.mig_device is not None else str(self.gpu)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuProcess:
        proc = _flat(cls, data)
        if proc.workload is not None and not isinstance(proc.workload, Workload):
            proc = replace(proc, workload=Workload.from_any(proc.workload))
        return proc


@record(frozen=True, slots=True)
class DeviceHolder(Record):
    """A process holding /dev/nvidia* open (found by scanning /proc/*/fd)."""

    pid: int
    user: str | None = None
    command: str | None = None
    devices: tuple[str, ...] = ()


@record(frozen=True, slots=True)
class XidEvent(Record):
    """An XID error the driver reported for a card (NVML events)."""

    gpu: int | None  # None: the event could not be placed on a GPU ("GPU unknown")
    xid: int
    time: float  # epoch seconds
    detail: str | None = None


@record(frozen=True, slots=True)
class Link(Record):
    """Topology between two GPUs, in `nvidia-smi topo -m` vocabulary."""

    gpu_a: int
    gpu_b: int
    kind: str  # "NV#" (e.g. "NV12"), "PIX", "PXB", "PHB", "NODE", "SYS"
    nvlinks: int = 0


@record(frozen=True, slots=True)
class Reservation(Record):
    """A user's claim on a card or MIG device until a time (docs/reservations.md)."""

    gpu: int
    user: str
    until: float  # epoch seconds
    since: float
    note: str = ""
    uid: int | None = None
    gpu_uuid: str | None = None
    host: str | None = None
    job: str | None = None  # a `gputop run` job's id: its process holds the card
    # set when one MIG device of card ``gpu`` is reserved, not the whole card
    mig_uuid: str | None = None
    mig_device: int | None = None

    @property
    def label(self) -> str:
        return f"{self.gpu}:{self.mig_device}" if self.mig_device is not None else str(self.gpu)

    def active(self, now: float) -> bool:
        return self.until > now

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reservation:
        return _flat(cls, data)


@record(frozen=True, slots=True)
class QueueJob(Record):
    """A `gputop run` job in a host's line (docs/queue.md); running while a reservation
    carries its id."""

    id: str
    user: str
    submitted: float  # epoch seconds: when it joined the line
    priority: str = "normal"  # high / normal / low
    gpus: int | None = None  # how many cards, or...
    gpu_ids: tuple[int, ...] | None = None  # ...which ones
    min_free_mem: int | None = None  # bytes
    max_util: float | None = None
    for_s: float | None = None
    note: str = ""
    command: str = ""
    uid: int | None = None
    pid: int | None = None
    share: bool = False  # may run beside another user's process (--share)
    whole: bool = False  # whole cards only, never a MIG device (--whole)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueueJob:
        job = _flat(cls, data)
        if job.gpu_ids is not None:
            job = replace(job, gpu_ids=tuple(job.gpu_ids))
        return job


@record(frozen=True, slots=True)
class HealthWarning(Record):
    """One finding of the health rules (analysis/health/), shown and exported."""

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


@record(frozen=True, slots=True)
class HostSnapshot(Record):
    """Everything known about one host at one moment: the unit every view shows."""

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
    queue: tuple[QueueJob, ...] = ()  # `gputop run` jobs, in arrival order
    xid_events: tuple[XidEvent, ...] = ()  # new since the previous snapshot
    xid_watched: bool | None = None  # False: this host's driver gives no XID events
    device_holders: tuple[DeviceHolder, ...] = ()
    device_scan_note: str | None = None  # e.g. "12 processes not readable (not root)"
    missing: tuple[str, ...] = ()  # fields this source cannot provide (fallback mode)
    labels: tuple[str, ...] = ()
    # name sources that failed, once each; gputop's own container, if any
    workload_notes: tuple[str, ...] = ()
    own_workload: Workload | None = None
    # Warnings the host's own gputop raised, read back through its exporter
    # (gputop_warning via Prometheus); health.warnings() adds those its rules lack.
    reported_warnings: tuple[HealthWarning, ...] = ()

    @property
    def ok(self) -> bool:
        return self.state in (HOST_OK, HOST_FALLBACK)

    def gpu(self, index: int) -> Gpu | None:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        return None

    def to_dict(self) -> dict[str, Any]:
        data = Record.to_dict(self)  # (no zero-argument super: the class is built again)
        data["schema"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostSnapshot:
        snap = _flat(cls, data)
        return replace(
            snap,
            load=tuple(snap.load) if snap.load is not None else None,  # type: ignore[arg-type]
            gpus=tuple(Gpu.from_dict(g) for g in data.get("gpus") or ()),
            processes=tuple(GpuProcess.from_dict(p) for p in data.get("processes") or ()),
            topology=tuple(_flat(Link, t) for t in data.get("topology") or ()),
            reservations=tuple(Reservation.from_dict(r) for r in data.get("reservations") or ()),
            queue=tuple(QueueJob.from_dict(j) for j in data.get("queue") or ()),
            xid_events=tuple(_flat(XidEvent, x) for x in data.get("xid_events") or ()),
            device_holders=tuple(_flat(DeviceHolder, d) for d in data.get("device_holders") or ()),
            own_workload=Workload.from_any(data.get("own_workload")),
            reported_warnings=tuple(HealthWarning.from_dict(w) for w in
                                    data.get("reported_warnings") or ()),
        )


def error_snapshot(host: str, time: float, state: str, error: str, **extra: Any) -> HostSnapshot:
    """A snapshot that carries only a host state: unreachable, no driver, ..."""
    return HostSnapshot(host=host, time=time, state=state, error=error, **extra)

