"""Parsers for nvidia-smi output, for hosts where the probe cannot run (no python3).

The client runs one fixed command per poll (``FALLBACK_COMMAND``: two CSV queries and a
``ps`` listing, separated by marker lines) and turns its output into a HostSnapshot dict
with state "fallback" and a ``missing`` list naming what this mode cannot know.

CSV is parsed by its header, not by position: the header names the fields (units in
brackets are dropped), so output with more or fewer columns than asked for, or with or
without units, reads the same.  ``parse_xml`` reads ``nvidia-smi -q -x`` for tools that
have only that.  Missing values (``[N/A]``, ``[Not Supported]``, ...) become None.

Standard library only.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from typing import Any

from gputop import model

MIB = 1024 * 1024

# Fields known to every driver since ~450; asking for a field the driver does not know
# fails the whole query, so newer ones (clocks_event_reasons...) are left out.
GPU_FIELDS = (
    "index,uuid,name,pci.bus_id,serial,driver_version,utilization.gpu,utilization.memory,"
    "memory.total,memory.used,temperature.gpu,power.draw,power.limit,fan.speed,"
    "clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pstate,persistence_mode,compute_mode,"
    "ecc.mode.current,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,"
    "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,"
    # Memory health, so that a pending row remap is as critical here as on an NVML host.
    # Drivers older than these fields (R450) fail the query and get `-q -x` instead.
    "ecc.errors.corrected.aggregate.total,ecc.errors.uncorrected.aggregate.total,"
    "retired_pages.single_bit_ecc.count,retired_pages.double_bit.count,retired_pages.pending,"
    "remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,"
    "remapped_rows.failure"
)
APP_FIELDS = "pid,gpu_uuid,process_name,used_memory"
PS_FORMAT = "pid=,ppid=,uid=,user:32=,stat=,etimes=,pcpu=,rss=,args="
MARK = "@@gputop-smi"

# One fixed string: nothing from any host name, user or label ever goes into it.  Run by
# sh whatever the login shell is (csh and fish spell `2>&1` and `$?` differently).
_FALLBACK_SCRIPT = (
    f"nvidia-smi --query-gpu={GPU_FIELDS} --format=csv 2>&1; echo \"{MARK} $?\"; "
    f"nvidia-smi --query-compute-apps={APP_FIELDS} --format=csv 2>&1; echo \"{MARK} $?\"; "
    f"ps -eo {PS_FORMAT} 2>&1; echo \"{MARK} $?\""
)
assert "'" not in _FALLBACK_SCRIPT
FALLBACK_COMMAND = f"exec sh -c '{_FALLBACK_SCRIPT}'"
# For drivers too old for a field of GPU_FIELDS ("... is not a valid field to query").
XML_FALLBACK_COMMAND = (
    f"exec sh -c 'nvidia-smi -q -x 2>&1; echo \"{MARK} $?\"; "
    f"ps -eo {PS_FORMAT} 2>&1; echo \"{MARK} $?\"'"
)

# What a snapshot from nvidia-smi + ps cannot contain (shown in the UI and --json).
MISSING = (
    "processes.sm_util",
    "processes.start_ticks",
    "topology",
    "nvlinks",
    "xid_events",
    "reservations",
    "device_holders",
    "clock_event_reasons",
    "actions",
)

_NA = re.compile(r"^\[?(n/?a|not supported|unknown error|insufficient permissions|"
                 r"gpu requires reset|no data)\]?$", re.I)


class SmiError(Exception):
    """nvidia-smi output that says there is no usable driver or GPU."""


def value(text: str | None) -> str | None:
    """A cleaned field: None for the many spellings of 'not available'."""
    if text is None:
        return None
    text = text.strip()
    if not text or _NA.match(text) or (text.startswith("[") and text.endswith("]")):
        return None
    return text


def number(text: str | None) -> float | None:
    """The leading number of a field like '26.78 W', '16x', '0 %' ('0x1F' is hex)."""
    text = value(text)
    if text is None:
        return None
    if text.lower().startswith("0x"):
        try:
            return float(int(text.split()[0], 16))
        except ValueError:
            return None
    match = re.match(r"^[-+]?\d+(?:\.\d+)?", text)
    return float(match.group(0)) if match else None


def integer(text: str | None) -> int | None:
    n = number(text)
    return None if n is None else int(n)


def mib(text: str | None) -> int | None:
    n = number(text)
    return None if n is None else int(n * MIB)


def flag(text: str | None) -> bool | None:
    text = value(text)
    if text is None:
        return None
    low = text.lower()
    if low in ("enabled", "yes", "active", "on", "true"):
        return True
    if low in ("disabled", "no", "not active", "off", "false"):
        return False
    return None


def pstate(text: str | None) -> int | None:
    text = value(text)
    if text and text[:1] in "Pp" and text[1:].isdigit():
        return int(text[1:])
    return None


def parse_csv(text: str) -> list[dict[str, str | None]]:
    """CSV with a header row -> rows keyed by field name (units dropped)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    reader = csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True)
    rows = list(reader)
    header = [re.sub(r"\s*\[[^\]]*\]\s*$", "", h).strip() for h in rows[0]]
    out = []
    for row in rows[1:]:
        if len(row) != len(header):
            continue  # a warning line or a truncated row: not data
        out.append({h: value(v) for h, v in zip(header, row, strict=True)})
    return out


def _first(row: dict[str, str | None], *names: str) -> str | None:
    for name in names:
        if row.get(name) is not None:
            return row[name]
    return None


def gpus_from_csv(text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``--query-gpu`` CSV -> (Gpu dicts, host facts such as driver_version)."""
    _check_driver(text)
    gpus: list[dict[str, Any]] = []
    host: dict[str, Any] = {}
    for position, row in enumerate(parse_csv(text)):
        if host.get("driver_version") is None and row.get("driver_version"):
            host["driver_version"] = row["driver_version"]
        index = integer(row.get("index"))
        fan = integer(row.get("fan.speed"))
        mask = integer(_first(row, "clocks_event_reasons.active", "clocks_throttle_reasons.active"))
        gpus.append(
            {
                "index": position if index is None else index,
                "uuid": row.get("uuid"),
                "name": row.get("name"),
                "pci_bus_id": row.get("pci.bus_id"),
                "serial": row.get("serial"),
                "util_gpu": integer(row.get("utilization.gpu")),
                "util_mem": integer(row.get("utilization.memory")),
                "util_enc": integer(row.get("utilization.encoder")),
                "util_dec": integer(row.get("utilization.decoder")),
                "mem_total": mib(row.get("memory.total")),
                "mem_used": mib(row.get("memory.used")),
                "mem_reserved": mib(row.get("memory.reserved")),
                "temp": integer(row.get("temperature.gpu")),
                "power_draw": number(_first(row, "power.draw", "power.draw.instant")),
                "power_limit": number(_first(row, "enforced.power.limit", "power.limit")),
                "power_default_limit": number(row.get("power.default_limit")),
                "power_min_limit": number(row.get("power.min_limit")),
                "power_max_limit": number(row.get("power.max_limit")),
                "fan": fan,
                "fans": [] if fan is None else [fan],
                "clock_sm": integer(_first(row, "clocks.current.sm", "clocks.sm")),
                "clock_mem": integer(_first(row, "clocks.current.memory", "clocks.mem")),
                "clock_gr": integer(_first(row, "clocks.current.graphics", "clocks.gr")),
                "clock_sm_max": integer(row.get("clocks.max.sm")),
                "clock_mem_max": integer(_first(row, "clocks.max.memory", "clocks.max.mem")),
                "pstate": pstate(row.get("pstate")),
                "persistence_mode": flag(row.get("persistence_mode")),
                "compute_mode": row.get("compute_mode"),
                "ecc_mode": flag(row.get("ecc.mode.current")),
                "ecc_mode_pending": flag(row.get("ecc.mode.pending")),
                "ecc_volatile_corrected": integer(row.get("ecc.errors.corrected.volatile.total")),
                "ecc_volatile_uncorrected": integer(
                    row.get("ecc.errors.uncorrected.volatile.total")
                ),
                "ecc_aggregate_corrected": integer(row.get("ecc.errors.corrected.aggregate.total")),
                "ecc_aggregate_uncorrected": integer(
                    row.get("ecc.errors.uncorrected.aggregate.total")
                ),
                "retired_pages_sbe": integer(row.get("retired_pages.single_bit_ecc.count")),
                "retired_pages_dbe": integer(row.get("retired_pages.double_bit.count")),
                "retired_pages_pending": flag(row.get("retired_pages.pending")),
                "remapped_correctable": integer(row.get("remapped_rows.correctable")),
                "remapped_uncorrectable": integer(row.get("remapped_rows.uncorrectable")),
                "remap_pending": flag(row.get("remapped_rows.pending")),
                "remap_failure": flag(row.get("remapped_rows.failure")),
                "clock_event_mask": mask,
                "pcie_gen": integer(row.get("pcie.link.gen.current")),
                "pcie_gen_max": integer(row.get("pcie.link.gen.max")),
                "pcie_width": integer(row.get("pcie.link.width.current")),
                "pcie_width_max": integer(row.get("pcie.link.width.max")),
                "mig_mode": flag(row.get("mig.mode.current")),
            }
        )
    return gpus, host


def apps_from_csv(text: str, uuid_to_index: dict[str, int]) -> list[dict[str, Any]]:
    """``--query-compute-apps`` CSV -> GpuProcess dicts (pid, gpu, memory, name)."""
    _check_driver(text)
    procs = []
    for row in parse_csv(text):
        pid = integer(row.get("pid"))
        gpu = uuid_to_index.get(row.get("gpu_uuid") or "")
        if pid is None or gpu is None:
            continue
        name = row.get("process_name") or row.get("name")
        procs.append(
            {
                "pid": pid,
                "gpu": gpu,
                "type": "C",
                "gpu_mem": mib(_first(row, "used_gpu_memory", "used_memory")),
                "command": name,
            }
        )
    return procs


def parse_ps(text: str, now: float) -> dict[int, dict[str, Any]]:
    """``ps -eo PS_FORMAT`` -> {pid: GpuProcess fields known from ps}."""
    out: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        parts = line.split(None, 8)
        if len(parts) < 8 or not parts[0].isdigit():
            continue
        pid, ppid, uid, user, stat, etimes, pcpu, rss = parts[:8]
        args = parts[8] if len(parts) > 8 else ""
        info: dict[str, Any] = {
            "ppid": integer(ppid),
            "uid": integer(uid),
            "user": user,
            "state": stat[:1] or None,
            "cpu_percent": number(pcpu),
            "rss": _kib(integer(rss)),
            "command": args or None,
            "cmdline": args.split() if args else [],
        }
        seconds = integer(etimes)
        info["start_time"] = None if seconds is None else now - seconds
        out[int(pid)] = info
    return out


def _check_driver(text: str) -> None:
    low = text.lower()
    if "couldn't communicate with the nvidia driver" in low or "no devices were found" in low:
        raise SmiError(text.strip().splitlines()[0])
    lines = low.strip().splitlines()
    first = lines[0] if lines else ""
    if "command not found" in first or first.endswith(": not found"):
        raise SmiError("nvidia-smi not found")


def split_fallback_output(text: str) -> list[tuple[str, int | None]]:
    """FALLBACK_COMMAND output -> [(section text, exit status)] in command order."""
    sections: list[tuple[str, int | None]] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith(MARK):
            status = line[len(MARK):].strip()
            sections.append(("\n".join(current), int(status) if status.isdigit() else None))
            current = []
        else:
            current.append(line)
    return sections


NO_PYTHON = "no python3 on this host"


class SmiBackend:
    """A ``GpuBackend`` (sources/backend.py) over one poll's nvidia-smi output: the CSV
    queries of FALLBACK_COMMAND, or ``-q -x`` (``xml``) of XML_FALLBACK_COMMAND."""

    source = "smi"

    def __init__(self, sections: list[tuple[str, int | None]], reason: str, xml: bool) -> None:
        self._sections = sections
        self._reason = reason
        self._xml = xml

    def read(self, now: float, cpu_count: int | None = None) -> dict[str, Any]:
        if self._xml:
            return self._read_xml()
        (gpu_text, gpu_rc), (apps_text, _apps_rc) = self._sections[:2]
        if gpu_rc == 127 or (gpu_rc is None and not gpu_text):
            return _no_gpu(f"nvidia-smi not found and {self._reason}")
        try:
            gpus, facts = gpus_from_csv(gpu_text)
        except SmiError as exc:
            return _no_gpu(f"nvidia-smi: {exc}")
        if gpu_rc not in (0, None) and not gpus:
            first = gpu_text.strip().splitlines()[0] if gpu_text.strip() else f"exit {gpu_rc}"
            return _no_gpu(f"nvidia-smi failed: {first}")
        uuids = {g["uuid"]: g["index"] for g in gpus if g.get("uuid")}
        try:
            procs = apps_from_csv(apps_text, uuids)
        except SmiError:
            procs = []
        return self._reading(gpus, facts, procs)

    def _read_xml(self) -> dict[str, Any]:
        xml_text, xml_rc = self._sections[0]
        if xml_rc == 127:
            return _no_gpu(f"nvidia-smi not found and {self._reason}")
        try:
            gpus, facts, procs = parse_xml(xml_text)
        except ET.ParseError:
            lines = xml_text.strip().splitlines()
            return _no_gpu(f"nvidia-smi -q -x: {lines[0] if lines else 'no output'}")
        return self._reading(gpus, facts, procs)

    def _reading(
        self, gpus: list[dict[str, Any]], facts: dict[str, Any], procs: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return {
            "state": model.HOST_FALLBACK,
            "error": f"{self._reason}: nvidia-smi and ps only (fewer fields, no actions)",
            "driver_version": facts.get("driver_version"),
            "cuda_version": facts.get("cuda_version"),
            "gpus": gpus,
            "processes": procs,
            "missing": list(MISSING),
        }


class PsListing:
    """A ``ProcessReader`` (sources/backend.py) over one ``ps -eo PS_FORMAT`` listing."""

    workloads = None  # ps shows no cgroups

    def __init__(self, text: str, now: float) -> None:
        self._table = parse_ps(text, now)

    def host_info(self) -> dict[str, Any]:
        return {}

    def process_info(self, pids: list[int]) -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        for pid in pids:
            info = self.process(pid)
            if info is None:
                continue
            parent = self._table.get(info.get("ppid") or -1)
            if parent:
                info["parent_command"] = parent.get("command")
                info["parent_user"] = parent.get("user")
            out[pid] = info
        return out

    def process(self, pid: int) -> dict[str, Any] | None:
        info = self._table.get(pid)
        if info is None:
            return None
        # No args (a kernel thread, a zombie): nvidia-smi's process name stays.
        return {k: v for k, v in info.items() if k != "command" or v}

    def parent_chain(self, pid: int) -> list[dict[str, Any]]:
        return []

    def device_holders(self) -> tuple[list[dict[str, Any]], str | None]:
        return [], None


def read_fallback(
    output: str, now: float, reason: str = NO_PYTHON, xml: bool = False
) -> tuple[SmiBackend, PsListing]:
    """FALLBACK_COMMAND's output (XML_FALLBACK_COMMAND's with ``xml``) -> the GPU backend
    and the process reader of that poll; the host assembler joins them."""
    sections = split_fallback_output(output)
    wanted = 2 if xml else 3
    while len(sections) < wanted:
        sections.append(("", None))
    ps_text = sections[wanted - 1][0]
    return SmiBackend(sections, reason, xml), PsListing(ps_text, now)


def wants_xml(data: dict[str, Any]) -> bool:
    """The CSV query failed because this driver lacks a field: `nvidia-smi -q -x` instead."""
    return data.get("state") == model.HOST_NO_GPU and "valid field" in (data.get("error") or "")


def _no_gpu(error: str) -> dict[str, Any]:
    return {"state": model.HOST_NO_GPU, "error": error, "missing": list(MISSING)}


# -- nvidia-smi -q -x ---------------------------------------------------------------


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    return None if found is None or found.text is None else value(found.text)


def parse_xml(text: str) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """``nvidia-smi -q -x`` -> (Gpu dicts, host facts, GpuProcess dicts)."""
    root = ET.fromstring(text)
    host = {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
    }
    gpus: list[dict[str, Any]] = []
    procs: list[dict[str, Any]] = []
    for index, gpu in enumerate(root.findall("gpu")):
        # The index is the order in the document, as nvidia-smi numbers the cards; the
        # minor number (/dev/nvidiaN) is not it: a dual-A5000 capture lists minor 1 first.
        power = gpu.find("gpu_power_readings")
        if power is None:
            power = gpu.find("power_readings")
        fan = integer(_text(gpu, "fan_speed"))
        reasons = gpu.find("clocks_event_reasons")
        if reasons is None:
            reasons = gpu.find("clocks_throttle_reasons")
        active = None
        if reasons is not None:
            active = tuple(
                re.sub(r"^clocks_(event|throttle)_reason_", "", child.tag)
                for child in reasons
                if flag(child.text) is True
            )
        gpus.append(
            {
                "index": index,
                "uuid": _text(gpu, "uuid"),
                "name": _text(gpu, "product_name"),
                "pci_bus_id": gpu.get("id") or _text(gpu, "pci/pci_bus_id"),
                "serial": _text(gpu, "serial"),
                "util_gpu": integer(_text(gpu, "utilization/gpu_util")),
                "util_mem": integer(_text(gpu, "utilization/memory_util")),
                "util_enc": integer(_text(gpu, "utilization/encoder_util")),
                "util_dec": integer(_text(gpu, "utilization/decoder_util")),
                "mem_total": mib(_text(gpu, "fb_memory_usage/total")),
                "mem_used": mib(_text(gpu, "fb_memory_usage/used")),
                "mem_reserved": mib(_text(gpu, "fb_memory_usage/reserved")),
                "bar1_total": mib(_text(gpu, "bar1_memory_usage/total")),
                "bar1_used": mib(_text(gpu, "bar1_memory_usage/used")),
                "temp": integer(_text(gpu, "temperature/gpu_temp")),
                **_thresholds(gpu),
                **_memory_health(gpu),
                "power_draw": number(
                    _text(power, "power_draw") or _text(power, "instant_power_draw")
                ),
                "power_limit": number(
                    _text(power, "enforced_power_limit") or _text(power, "current_power_limit")
                ),
                "power_default_limit": number(_text(power, "default_power_limit")),
                "power_min_limit": number(_text(power, "min_power_limit")),
                "power_max_limit": number(_text(power, "max_power_limit")),
                "fan": fan,
                "fans": [] if fan is None else [fan],
                "clock_sm": integer(_text(gpu, "clocks/sm_clock")),
                "clock_mem": integer(_text(gpu, "clocks/mem_clock")),
                "clock_gr": integer(_text(gpu, "clocks/graphics_clock")),
                "clock_sm_max": integer(_text(gpu, "max_clocks/sm_clock")),
                "clock_mem_max": integer(_text(gpu, "max_clocks/mem_clock")),
                "pstate": pstate(_text(gpu, "performance_state")),
                "persistence_mode": flag(_text(gpu, "persistence_mode")),
                "compute_mode": _text(gpu, "compute_mode"),
                "ecc_mode": flag(_text(gpu, "ecc_mode/current_ecc")),
                "ecc_mode_pending": flag(_text(gpu, "ecc_mode/pending_ecc")),
                "clock_event_reasons": active,
                "pcie_gen": integer(_text(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
                "pcie_gen_max": integer(_text(gpu, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
                "pcie_width": integer(
                    _text(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width")
                ),
                "pcie_width_max": integer(
                    _text(gpu, "pci/pci_gpu_link_info/link_widths/max_link_width")
                ),
                "pcie_tx_kbs": integer(_text(gpu, "pci/tx_util")),
                "pcie_rx_kbs": integer(_text(gpu, "pci/rx_util")),
                "mig_mode": flag(_text(gpu, "mig_mode/current_mig")),
                **_xml_mig(gpu, index),
            }
        )
        by_instance = {(d["gi"], d["ci"]): d for d in gpus[-1]["mig_devices"]}
        for proc in gpu.findall("processes/process_info"):
            pid = integer(_text(proc, "pid"))
            if pid is None:
                continue
            row = {
                "pid": pid,
                "gpu": index,
                "type": _text(proc, "type") or "C",
                "gpu_mem": mib(_text(proc, "used_memory")),
                "command": _text(proc, "process_name"),
            }
            where = by_instance.get((integer(_text(proc, "gpu_instance_id")),
                                     integer(_text(proc, "compute_instance_id"))))
            if where is not None:
                row.update(mig_device=where["index"], gpu_instance_id=where["gi"],
                           compute_instance_id=where["ci"])
            procs.append(row)
    return gpus, host, procs


def _thresholds(gpu: ET.Element) -> dict[str, int | None]:
    """Slowdown, shutdown and max operating temperatures in degrees C.

    Newer drivers (Ada and Blackwell cards, R570+) give them relative to the T.Limit
    instead: ``gpu_temp_tlimit`` is how far below its limit the card runs now, and the
    ``*_tlimit_threshold`` fields where each threshold sits from that limit (shutdown at
    -7 means 7 C past it).  Converted with the current temperature, they are absolute.
    """
    temps = gpu.find("temperature")
    out = {
        "temp_slowdown": integer(_text(temps, "gpu_temp_slow_threshold")),
        "temp_shutdown": integer(_text(temps, "gpu_temp_max_threshold")),
        "temp_max_operating": integer(_text(temps, "gpu_temp_max_gpu_threshold")),
    }
    temp = integer(_text(temps, "gpu_temp"))
    headroom = integer(_text(temps, "gpu_temp_tlimit"))
    if temp is None or headroom is None:
        return out
    limit = temp + headroom
    for key, tag in (
        ("temp_slowdown", "gpu_temp_slow_tlimit_threshold"),
        ("temp_shutdown", "gpu_temp_max_tlimit_threshold"),
        ("temp_max_operating", "gpu_temp_max_gpu_tlimit_threshold"),
    ):
        offset = integer(_text(temps, tag))
        if out[key] is None and offset is not None:
            out[key] = limit - offset
    return out


def _ecc_total(node: ET.Element | None, kind: str) -> int | None:
    """Corrected ("correctable") or uncorrected errors of one ``ecc_errors`` counter,
    summed over SRAM and DRAM (R5xx) or read from the older single/double bit totals."""
    if node is None:
        return None
    old = integer(_text(node, "single_bit/total" if kind == "correctable" else "double_bit/total"))
    if old is not None:
        return old
    counts = [integer(value(child.text)) for child in node
              if child.tag.endswith("_" + kind)]
    known = [n for n in counts if n is not None]
    return sum(known) if known else None


def _memory_health(gpu: ET.Element) -> dict[str, Any]:
    ecc = gpu.find("ecc_errors")
    volatile = None if ecc is None else ecc.find("volatile")
    aggregate = None if ecc is None else ecc.find("aggregate")
    return {
        "ecc_volatile_corrected": _ecc_total(volatile, "correctable"),
        "ecc_volatile_uncorrected": _ecc_total(volatile, "uncorrectable"),
        "ecc_aggregate_corrected": _ecc_total(aggregate, "correctable"),
        "ecc_aggregate_uncorrected": _ecc_total(aggregate, "uncorrectable"),
        "retired_pages_sbe": integer(
            _text(gpu, "retired_pages/multiple_single_bit_retirement/retired_count")),
        "retired_pages_dbe": integer(
            _text(gpu, "retired_pages/double_bit_retirement/retired_count")),
        "retired_pages_pending": flag(_text(gpu, "retired_pages/pending_retirement")),
        "remapped_correctable": integer(_text(gpu, "remapped_rows/remapped_row_corr")),
        "remapped_uncorrectable": integer(_text(gpu, "remapped_rows/remapped_row_unc")),
        "remap_pending": flag(_text(gpu, "remapped_rows/remapped_row_pending")),
        "remap_failure": flag(_text(gpu, "remapped_rows/remapped_row_failure")),
    }


def _xml_mig(gpu: ET.Element, index: int) -> dict[str, Any]:
    """The MIG section of one ``<gpu>``. nvidia-smi -q -x gives neither the MIG
    devices' UUIDs nor their profiles (only ``-L`` does), so those stay None here."""
    devices = []
    for node in gpu.findall("mig_devices/mig_device")[:8]:
        slot = integer(_text(node, "index"))
        if slot is None:
            continue
        devices.append({
            "gpu": index,
            "index": slot,
            "gi": integer(_text(node, "gpu_instance_id")),
            "ci": integer(_text(node, "compute_instance_id")),
            "mem_total": mib(_text(node, "fb_memory_usage/total")),
            "mem_used": mib(_text(node, "fb_memory_usage/used")),
            "bar1_total": mib(_text(node, "bar1_memory_usage/total")),
            "bar1_used": mib(_text(node, "bar1_memory_usage/used")),
        })
    return {"mig_mode_pending": flag(_text(gpu, "mig_mode/pending_mig")),
            "mig_devices": devices}


def _kib(value: int | None) -> int | None:
    """ps reports sizes in KiB."""
    return None if value is None else value * 1024
