"""One host's snapshot as Prometheus exposition text (`gputop serve`'s GET /metrics).

Hand-rendered on purpose: the DCGM exporter's names must come out exactly as they are
(a client library's Counter appends ``_total``, which would break
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``-style names and every dashboard built on them).
Names, units and labels follow dcgm-exporter's default counters, so Grafana dashboard
12239 works unchanged; gputop's own series are under ``gputop_``.  A value the snapshot
does not have is absent, never 0.  Design and the list of series: docs/prometheus.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gputop.analysis import hostview, queue_plan
from gputop.analysis.orphans import ProcessFlags
from gputop.model import GPU_OK, Gpu, HealthWarning, HostSnapshot

MIB = 1024**2
COMMAND_LABEL_MAX = 64  # untrusted and long: enough to tell jobs apart, bounded
DEFAULT_MAX_PROCESS_SERIES = 1000

CONTENT_TYPE_TEXT = "text/plain; version=0.0.4; charset=utf-8"
CONTENT_TYPE_OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

Labels = Mapping[str, str]


@dataclass
class Family:
    name: str
    kind: str  # gauge, counter
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def add(self, labels: Labels, value: float | int | bool | None) -> None:
        if value is None:
            return
        number = float(value)
        if math.isfinite(number):
            self.samples.append((labels, number))


@dataclass(frozen=True)
class ExportSettings:
    lowercase_hostname: bool = False  # also `hostname`, as newer dcgm-exporter releases do
    max_process_series: int = DEFAULT_MAX_PROCESS_SERIES


# dcgm-exporter's names (etc/default-counters.csv) and what each is read from.  Units are
# DCGM's: MiB for the framebuffer, MHz, W, C, percent.
_DCGM: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
     "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
     "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
     "Total number of NVLink bandwidth counters for all lanes (KiB of data, NVML)."),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge",
     "Ratio of time the graphics engine is active (NVML utilization / 100 here)."),
    # DCGM's profiling fields, from NVML's GPM where the card has it (Hopper and newer)
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
     "Ratio of cycles the tensor (HMMA) pipe is active (GPM, any tensor pipe)."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
     "The rate of data transmitted over the PCIe bus, in bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
     "The rate of data received over the PCIe bus, in bytes per second."),
)
DCGM_NAMES = tuple(name for name, _kind, _help in _DCGM)


def _dcgm_values(gpu: Gpu, last_xid: int | None) -> dict[str, float | int | bool | None]:
    def mib(value: int | None) -> int | None:
        return None if value is None else value // MIB

    def ratio(percent: float | None) -> float | None:  # DCGM's PROF fields are 0..1
        return None if percent is None else percent / 100

    free = None
    if gpu.mem_total is not None and gpu.mem_used is not None:
        # NVML's used excludes the reserved part, so free = total - used - reserved, as
        # dcgm-exporter reports it; the reader adds the three back up to the total.
        free = max(gpu.mem_total - gpu.mem_used - (gpu.mem_reserved or 0), 0)
    return {
        "DCGM_FI_DEV_GPU_UTIL": gpu.util_gpu,
        "DCGM_FI_DEV_MEM_COPY_UTIL": gpu.util_mem,
        "DCGM_FI_DEV_ENC_UTIL": gpu.util_enc,
        "DCGM_FI_DEV_DEC_UTIL": gpu.util_dec,
        "DCGM_FI_DEV_FB_USED": mib(gpu.mem_used),
        "DCGM_FI_DEV_FB_FREE": mib(free),
        "DCGM_FI_DEV_FB_RESERVED": mib(gpu.mem_reserved),
        "DCGM_FI_DEV_GPU_TEMP": gpu.temp,
        "DCGM_FI_DEV_MEMORY_TEMP": gpu.temp_memory,
        "DCGM_FI_DEV_POWER_USAGE": gpu.power_draw,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": gpu.energy_mj,
        "DCGM_FI_DEV_SM_CLOCK": gpu.clock_sm,
        "DCGM_FI_DEV_MEM_CLOCK": gpu.clock_mem,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": gpu.pcie_replays,
        "DCGM_FI_DEV_XID_ERRORS": last_xid,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": gpu.remapped_uncorrectable,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": gpu.remapped_correctable,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": gpu.remap_failure,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": gpu.nvlink_data_kib,
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": gpu.vgpu_license_status,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": None if gpu.util_gpu is None else gpu.util_gpu / 100,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ratio(gpu.prof_tensor_active),
        "DCGM_FI_PROF_DRAM_ACTIVE": ratio(gpu.prof_dram_active),
        "DCGM_FI_PROF_PCIE_TX_BYTES": gpu.prof_pcie_tx_bytes,
        "DCGM_FI_PROF_PCIE_RX_BYTES": gpu.prof_pcie_rx_bytes,
    }


def _mig_values(
    gpu: Gpu, labels: dict[str, str]
) -> list[tuple[dict[str, str], dict[str, float | int | None]]]:
    """A MIG card's GPU instances as dcgm-exporter shows them: the card's labels plus
    GPU_I_ID and GPU_I_PROFILE, framebuffer per instance, and activity where GPM gives
    it. Compute instances of one GPU instance share its memory: one series each."""
    out = []
    seen: set[int] = set()
    for dev in gpu.mig_devices:
        if dev.gi is None or dev.gi in seen:
            continue
        seen.add(dev.gi)
        free = None
        if dev.mem_total is not None and dev.mem_used is not None:
            free = max(dev.mem_total - dev.mem_used, 0) // MIB
        out.append((
            {**labels, "GPU_I_ID": str(dev.gi), "GPU_I_PROFILE": dev.profile or ""},
            {
                "DCGM_FI_DEV_FB_USED": None if dev.mem_used is None else dev.mem_used // MIB,
                "DCGM_FI_DEV_FB_FREE": free,
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
                    None if dev.sm_active is None else dev.sm_active / 100,
            },
        ))
    return out


def gpu_labels(snap: HostSnapshot, gpu: Gpu, settings: ExportSettings) -> dict[str, str]:
    host = snap.hostname or snap.host
    labels = {
        "gpu": str(gpu.index),
        "UUID": gpu.uuid or "",
        "pci_bus_id": gpu.pci_bus_id or "",
        "device": f"nvidia{gpu.index}",
        "modelName": gpu.name or "",
        "Hostname": host,
    }
    if settings.lowercase_hostname:
        labels["hostname"] = host
    if snap.driver_version:  # dcgm-exporter's DCGM_FI_DRIVER_VERSION "label" field
        labels["DCGM_FI_DRIVER_VERSION"] = snap.driver_version
    return labels


def families(
    snap: HostSnapshot,
    warnings: Iterable[HealthWarning],
    flags: Mapping[tuple[int, int], ProcessFlags],
    last_xid: Mapping[int, int],
    collect_seconds: float | None,
    settings: ExportSettings = ExportSettings(),
) -> list[Family]:
    """Every family of one snapshot, except the snapshot's age (added per scrape)."""
    dcgm = {name: Family(name, kind, text) for name, kind, text in _DCGM}
    by_index: dict[int, dict[str, str]] = {}
    for gpu in snap.gpus:
        labels = gpu_labels(snap, gpu, settings)
        by_index[gpu.index] = labels
        if gpu.state != GPU_OK:
            continue
        xid = last_xid.get(gpu.index, 0 if snap.xid_watched else None)
        for name, value in _dcgm_values(gpu, xid).items():
            dcgm[name].add(labels, value)
        for mig_labels, values in _mig_values(gpu, labels):
            for name, value in values.items():
                dcgm[name].add(mig_labels, value)
    host = {"Hostname": snap.hostname or snap.host}
    if settings.lowercase_hostname:
        host["hostname"] = host["Hostname"]
    out = list(dcgm.values())
    out += _own_gpu_families(snap, by_index, flags, host)
    out += _process_families(snap, by_index, host, settings, flags)
    out += _queue_families(snap, host)
    out += _health_families(snap, warnings, by_index, host, collect_seconds)
    return out


def _queue_families(snap: HostSnapshot, host: dict[str, str]) -> list[Family]:
    """The host's `gputop run` line (docs/queue.md): jobs per user, priority and state,
    the cards they ask for, and how long the first in line has waited."""
    jobs = Family("gputop_queue_jobs", "gauge",
                  "`gputop run` jobs by user, priority and state (waiting, running).")
    gpus = Family("gputop_queue_gpus_requested", "gauge",
                  "GPUs the waiting `gputop run` jobs ask for, by user.")
    oldest = Family("gputop_queue_oldest_wait_seconds", "gauge",
                    "How long the longest-waiting `gputop run` job has waited.")
    running = queue_plan.running_jobs(snap, snap.time)
    counts: dict[tuple[str, str, str], int] = {}
    asked: dict[str, int] = {}
    first: float | None = None
    for job in snap.queue:
        state = "running" if job.id in running else "waiting"
        key = (job.user, job.priority, state)
        counts[key] = counts.get(key, 0) + 1
        if state == "waiting":
            asked[job.user] = asked.get(job.user, 0) + queue_plan.requested(job)
            first = job.submitted if first is None else min(first, job.submitted)
    for (user, priority, state), count in sorted(counts.items()):
        jobs.add({**host, "user": user, "priority": priority, "state": state}, count)
    for user, count in sorted(asked.items()):
        gpus.add({**host, "user": user}, count)
    # Only while somebody waits: an empty line has no "oldest", and 0 would read as one.
    oldest.add(host, None if first is None else max(snap.time - first, 0.0))
    return [jobs, gpus, oldest]


def _gpu_of(by_index: Mapping[int, dict[str, str]], index: int | None) -> dict[str, str]:
    found = by_index.get(index) if index is not None else None
    return {"gpu": found["gpu"], "UUID": found["UUID"]} if found else {}


def _own_gpu_families(
    snap: HostSnapshot, by_index: Mapping[int, dict[str, str]],
    flags: Mapping[tuple[int, int], ProcessFlags], host: dict[str, str],
) -> list[Family]:
    info = Family("gputop_host_info", "gauge", "This host as gputop saw it (value 1).")
    info.add({**host, "driver_version": snap.driver_version or "",
              "cuda_version": snap.cuda_version or "", "source": snap.source}, 1)
    total = Family("gputop_gpu_memory_total_bytes", "gauge", "GPU memory, total (bytes).")
    state = Family("gputop_gpu_ok", "gauge", "1 while the GPU answers, 0 when lost or failing.")
    idle = Family("gputop_gpu_idle_held_bytes", "gauge",
                  "GPU memory held by processes gputop flags idle (bytes).")
    reserved = Family("gputop_gpu_reserved", "gauge",
                      "1 while the GPU (with GPU_I_ID: that MIG instance) is reserved, by owner.")
    until = Family("gputop_gpu_reserved_until_timestamp_seconds", "gauge",
                   "When the GPU's reservation ends (epoch seconds).")
    held: dict[int, int] = {}
    for proc in snap.processes:
        flag = flags.get(proc.key)
        if flag is not None and flag.idle and proc.gpu_mem:
            held[proc.gpu] = held.get(proc.gpu, 0) + proc.gpu_mem
    for gpu in snap.gpus:
        labels = {**by_index[gpu.index]}
        state.add(labels, gpu.state == GPU_OK)
        total.add(labels, gpu.mem_total)
        if gpu.state == GPU_OK:
            idle.add(labels, held.get(gpu.index, 0))
    for shown in hostview.view(snap, snap.time).cards:
        card = {**host, **_gpu_of(by_index, shown.gpu.index)}
        # A MIG device's reservation is not its card's (analysis/holders.py): it carries
        # the instance's labels, as the MIG series above do.
        units = [(card, shown.holders)] + [
            ({**card, "GPU_I_ID": "" if line.device.gi is None else str(line.device.gi),
              "GPU_I_PROFILE": line.device.profile or ""}, line.holders)
            for line in shown.devices]
        for labels, reservations in units:
            for res in reservations:
                owned = {**labels, "owner": res.user}
                reserved.add(owned, 1)
                until.add(owned, res.until)
    return [info, total, state, idle, reserved, until]


def _process_families(
    snap: HostSnapshot, by_index: Mapping[int, dict[str, str]], host: dict[str, str],
    settings: ExportSettings, flags: Mapping[tuple[int, int], ProcessFlags],
) -> list[Family]:
    mem = Family("gputop_process_gpu_memory_bytes", "gauge", "GPU memory a process holds (bytes).")
    sm = Family("gputop_process_sm_util", "gauge", "A process's SM utilization (in %).")
    user_mem = Family("gputop_user_gpu_memory_bytes", "gauge", "GPU memory per user (bytes).")
    user_procs = Family("gputop_user_processes", "gauge", "GPU processes per user.")
    user_idle = Family("gputop_user_idle_held_bytes", "gauge",
                       "GPU memory a user's processes flagged idle hold (bytes).")
    dropped = Family("gputop_process_series_dropped", "gauge",
                     "Processes left out of the per-process series by the cap.")
    # Only holders of memory get series, biggest first, up to the cap: the cardinality a
    # scraper stores stays bounded however many short-lived processes come and go.
    holders = sorted((p for p in snap.processes if p.gpu_mem),
                     key=lambda p: (-(p.gpu_mem or 0), p.gpu, p.pid))
    cap = max(settings.max_process_series, 0)
    users: dict[str, list[int]] = {}
    for proc in snap.processes:
        user = proc.user or (f"uid {proc.uid}" if proc.uid is not None else "unknown")
        entry = users.setdefault(user, [0, 0, 0])
        entry[0] += proc.gpu_mem or 0
        entry[1] += 1
        flag = flags.get(proc.key)
        if flag is not None and flag.idle:  # the same rule as gputop_gpu_idle_held_bytes
            entry[2] += proc.gpu_mem or 0
    for proc in holders[:cap]:
        labels = {**host, **_gpu_of(by_index, proc.gpu), "pid": str(proc.pid),
                  "user": proc.user or "", "command": (proc.command or "")[:COMMAND_LABEL_MAX],
                  # the Slurm job, container or pod (docs/workloads.md), "" when none
                  "workload": proc.workload.label if proc.workload is not None else ""}
        mem.add(labels, proc.gpu_mem)
        sm.add(labels, proc.sm_util)
    for user, (total, count, idle) in sorted(users.items()):
        user_mem.add({**host, "user": user}, total)
        user_procs.add({**host, "user": user}, count)
        user_idle.add({**host, "user": user}, idle)
    dropped.add(host, max(len(holders) - cap, 0))
    return [mem, sm, user_mem, user_procs, user_idle, dropped]


def _health_families(
    snap: HostSnapshot, warnings: Iterable[HealthWarning],
    by_index: Mapping[int, dict[str, str]], host: dict[str, str],
    collect_seconds: float | None,
) -> list[Family]:
    warning = Family("gputop_warning", "gauge", "1 while a health warning is active.")
    seen: set[tuple[str, str, str]] = set()
    for w in warnings:
        gpu = "" if w.gpu is None else str(w.gpu)
        if (w.severity, w.code, gpu) in seen:  # one series per (severity, code, gpu)
            continue
        seen.add((w.severity, w.code, gpu))
        warning.add({**host, "severity": w.severity, "code": w.code, "gpu": gpu}, 1)
    up = Family("gputop_up", "gauge", "1 when the last collection succeeded.")
    up.add(host, snap.ok)
    seconds = Family("gputop_collect_seconds", "gauge", "How long the last collection took.")
    seconds.add(host, collect_seconds)
    return [warning, up, seconds]


def age_family(snap: HostSnapshot, now: float) -> Family:
    age = Family("gputop_snapshot_age_seconds", "gauge", "Age of the snapshot served.")
    age.add({"Hostname": snap.hostname or snap.host}, max(now - snap.time, 0.0))
    return age


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def render(fams: Iterable[Family], openmetrics: bool = False) -> str:
    """The text format 0.0.4, or OpenMetrics 1.0 without its final ``# EOF`` (the caller
    appends it after the per-scrape families)."""
    lines: list[str] = []
    for fam in fams:
        if not fam.samples:
            continue  # absent, never 0: a family without values is not declared either
        # OpenMetrics names a counter's samples <family>_total; the text format keeps
        # DCGM's names as they are (which is why Prometheus gets that format: negotiate).
        sample = fam.name
        if openmetrics and fam.kind == "counter" and not fam.name.endswith("_total"):
            sample = fam.name + "_total"
        lines.append(f"# HELP {fam.name} {fam.help}")
        lines.append(f"# TYPE {fam.name} {fam.kind}")
        for labels, value in fam.samples:
            if labels:
                inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
                lines.append(f"{sample}{{{inner}}} {_number(value)}")
            else:
                lines.append(f"{sample} {_number(value)}")
    return "\n".join(lines) + "\n" if lines else ""


def _accepted(accept: str) -> list[tuple[str, dict[str, str], float]]:
    """An Accept header's (media type, parameters, q), malformed parts left out."""
    out = []
    for part in accept.split(",")[:32]:  # a scraper sends a handful; the rest is noise
        kind, *params = (p.strip() for p in part.split(";"))
        values: dict[str, str] = {}
        for param in params:
            key, sep, value = param.partition("=")
            if sep:
                values[key.strip().lower()] = value.strip().strip('"')
        try:
            q = float(values.pop("q", "1"))
        except ValueError:
            continue
        if kind and math.isfinite(q):
            out.append((kind.lower(), values, q))
    return out


def wants_openmetrics(accept: str | None) -> bool:
    """Whether to answer OpenMetrics rather than the text format 0.0.4.

    The text format is preferred whenever the scraper takes it (Prometheus always does,
    at a lower q): only there do DCGM's counters keep both their names and their type,
    as dcgm-exporter serves them.  OpenMetrics would rename them ``..._total`` in the
    scraper's database and break every dashboard that queries them.  A client that takes
    OpenMetrics only gets it, counters typed and named as OpenMetrics requires."""
    if not accept:
        return False
    text = openmetrics = False
    for kind, params, q in _accepted(accept):
        if q <= 0:
            continue
        if kind in ("text/plain", "text/*", "*/*") and params.get("version", "0.0.4") == "0.0.4":
            text = True
        elif kind == "application/openmetrics-text":
            openmetrics = True
    return openmetrics and not text
