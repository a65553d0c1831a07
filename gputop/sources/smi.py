"""Parsers for nvidia-smi output, for hosts where the probe cannot run (no python3).

The client runs one fixed command per poll (``Mode.command()``: CSV queries and a ``ps``
listing, separated by marker lines; on Windows each ``nvidia-smi`` command on its own,
``Mode.commands()``) and turns its output into a HostSnapshot dict with state "fallback"
and a ``missing`` list naming what this mode cannot know.  What changes rarely (``-L``,
``topo -m``, ``nvlink -s``: ``EXTRA_COMMANDS``) is read once per connection and then
every ``EXTRA_EVERY_S``, and joined to each poll.

CSV is parsed by its header, not by position: the header names the fields (units in
brackets are dropped), so output with more columns than asked for, another column order,
or with or without units, reads the same; output without the columns asked for is an
error quoting its first line, never a GPU.  ``parse_xml`` reads ``nvidia-smi -q -x`` for
drivers too old for a CSV field.  Missing values (``[N/A]``, ``[Not Supported]``, ...)
become None.  NVML's initialisation errors, a GPU lost from the bus and the clock event
mask mean what they mean on an NVML host (sources/nvmlcodes.py has both tables).

Standard library only.
"""

from __future__ import annotations

import csv
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, replace
from typing import Any

from gputop import model
from gputop.analysis import topology as topo
from gputop.sources.backend import Reading
from gputop.sources.nvmlcodes import (
    ERR_DRIVER_NOT_LOADED,
    ERR_LIBRARY_NOT_FOUND,
    ERR_NOT_FOUND,
    clock_event_mask,
    decode_clock_events,
    fabric_state,
    handle_error,
    init_failure,
)

MIB = 1024 * 1024

# Fields known to every driver since R450.  Asking for a field the driver does not know
# fails the whole query ("... is not a valid field to query"): the clock event mask has
# two names (clocks_throttle_reasons.* before R535, both since), so a driver that refuses
# the new one is asked with the old one, and a driver that refuses anything else gets
# `-q -x` instead (Mode.after_refusal).
_GPU_FIELDS_BASE = (
    "index,uuid,name,pci.bus_id,serial,driver_version,utilization.gpu,utilization.memory,"
    "memory.total,memory.used,temperature.gpu,power.draw,power.limit,power.default_limit,"
    "fan.speed,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,pstate,persistence_mode,"
    "compute_mode,ecc.mode.current,ecc.errors.corrected.volatile.total,"
    "ecc.errors.uncorrected.volatile.total,"
    "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,"
    # Memory health, so that a pending row remap is as critical here as on an NVML host.
    "ecc.errors.corrected.aggregate.total,ecc.errors.uncorrected.aggregate.total,"
    "retired_pages.single_bit_ecc.count,retired_pages.double_bit.count,retired_pages.pending,"
    "remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,"
    "remapped_rows.failure,mig.mode.current"
)
# Asked where the driver knows it (R535+); a driver that refuses it is asked without.
FABRIC_FIELD = "fabric.state"
EVENT_FIELD = "clocks_event_reasons.active"
THROTTLE_FIELD = "clocks_throttle_reasons.active"
GPU_FIELDS = f"{_GPU_FIELDS_BASE},{EVENT_FIELD}"
APP_FIELDS = "pid,gpu_uuid,process_name,used_memory"
PS_FORMAT = "pid=,ppid=,uid=,user:32=,stat=,etimes=,pcpu=,rss=,args="
MARK = "@@gputop-smi"
# A column every reply to our query has, and no other text does (a `-q` banner, a help
# page, an error): without it the reply is not the one asked for.  Only one, because the
# CSV is read by name: replies with more, fewer or reordered columns still read.
_GPU_COLUMNS = ("index",)
_APP_COLUMNS = ("pid",)

# Read once per connection and again after this long: the GPU list with its MIG devices,
# the topology and the NVLink states (a link that went down shows within a minute).
EXTRA_EVERY_S = 60.0
# The temperature thresholds too: no CSV field gives them (`temperature.gpu.tlimit`,
# R590+, is only the headroom), `-q` does, for every driver.
EXTRA_SECTIONS = ("list", "topo", "nvlink", "temps")
EXTRA_COMMANDS = ("nvidia-smi -L", "nvidia-smi topo -m", "nvidia-smi nvlink -s",
                  "nvidia-smi -q -d TEMPERATURE")


def _sh(commands: tuple[str, ...]) -> str:
    """One fixed string for sh: each command, its output and stderr, then a marker line
    with its exit status.  Run by sh whatever the login shell is (csh and fish spell
    `2>&1` and `$?` differently).  Nothing from any host name, user or label goes in."""
    # The marker starts a line of its own even after output without a final newline
    # (`-q -x` ends with its closing tag): printf's newline first, and $? is still the
    # command's, as printf's arguments are expanded before it runs.
    script = "; ".join(f'{c} 2>&1; printf "\\n{MARK} %s\\n" "$?"' for c in commands)
    assert "'" not in script
    return f"exec sh -c '{script}'"


@dataclass(frozen=True)
class Mode:
    """Which commands one poll runs, and so which sections its output has."""

    xml: bool = False  # a driver too old for a CSV field: `nvidia-smi -q -x`
    throttle_name: bool = False  # the driver knows the mask only as clocks_throttle_reasons
    windows: bool = False  # cmd.exe or PowerShell: no sh, no ps; one command at a time
    fabric: bool = True  # the driver knows fabric.state

    def sections(self) -> tuple[str, ...]:
        # The default table on every CSV host: the only text that lists graphics processes
        # (Xorg, gnome-shell: no CSV query does) and says C+G, and MIG devices' memory
        # and each process's GI/CI.  Its cost: one more nvidia-smi run per poll and its
        # text, 1.8 KB for one card and 3 processes (the H100 capture), about 0.4 KB
        # more per card and 0.1 KB per process (docs/remote.md).
        names: tuple[str, ...] = ("xml",) if self.xml else ("gpus", "apps", "table")
        return names if self.windows else (*names, "ps")

    def commands(self) -> tuple[str, ...]:
        field = THROTTLE_FIELD if self.throttle_name else EVENT_FIELD
        if self.fabric:
            field += f",{FABRIC_FIELD}"
        by_section = {
            "xml": "nvidia-smi -q -x",
            # Quoted: PowerShell splits an unquoted `-x=a.b` at its first dot (PowerShell
            # issue 6291) and reads commas as an array; sh and cmd.exe drop the quotes.
            "gpus": f'nvidia-smi "--query-gpu={_GPU_FIELDS_BASE},{field}" --format=csv',
            "apps": f'nvidia-smi "--query-compute-apps={APP_FIELDS}" --format=csv',
            "table": "nvidia-smi",
            "ps": f"ps -eo {PS_FORMAT}",
        }
        return tuple(by_section[name] for name in self.sections())

    def command(self) -> str:
        """The one command line for sh (not for Windows: see ``commands``)."""
        return _sh(self.commands())

    def after(self, data: dict[str, Any]) -> Mode | None:
        """The mode to try next when this one's reply says the driver refused a field."""
        error = data.get("error") or ""
        if self.xml or data.get("state") != model.HOST_NO_GPU or "valid field" not in error:
            return None
        if self.fabric and FABRIC_FIELD in error:
            return replace(self, fabric=False)
        if not self.throttle_name and EVENT_FIELD in error:
            return replace(self, throttle_name=True)
        return replace(self, xml=True)


FALLBACK_COMMAND = Mode().command()
EXTRA_COMMAND = _sh(EXTRA_COMMANDS)

# What a snapshot from nvidia-smi + ps can never contain (shown in the UI and --json);
# topology and NVLinks join it when the extra commands could not read them.
MISSING = (
    "processes.sm_util",
    "processes.start_ticks",
    "xid_events",
    "reservations",
    "device_holders",
    "actions",
)

_NA = re.compile(r"^\[?(n/?a|not supported|unknown error|insufficient permissions|"
                 r"gpu requires reset|no data)\]?$", re.I)


class SmiError(Exception):
    """nvidia-smi output that is not what was asked for, or says the driver cannot work.

    ``state`` is the host state it means (no GPU/driver, or error for output of the wrong
    shape)."""

    def __init__(self, message: str, state: str = model.HOST_NO_GPU) -> None:
        super().__init__(message)
        self.state = state


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


def first_line(text: str, limit: int = 160) -> str:
    """The first non-blank line of some output, cut to ``limit`` characters, for an
    error message ("no output" when there is none)."""
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return "no output"


# -- what nvidia-smi says when it cannot work -----------------------------------------

_INIT = re.compile(r"Failed to initialize NVML:\s*([^\r\n]*)", re.I)
# The same failures in nvidia-smi's own words, before NVML could say anything.
_OWN_WORDS = (
    ("couldn't communicate with the nvidia driver", ERR_DRIVER_NOT_LOADED),
    ("couldn't find libnvidia-ml.so", ERR_LIBRARY_NOT_FOUND),
    ("no devices were found", ERR_NOT_FOUND),
)
_NOT_FOUND = (
    "command not found",  # bash
    ": not found",  # dash
    "is not recognized as an internal or external command",  # cmd.exe
    "is not recognized as the name of a cmdlet",  # PowerShell 5
    "is not recognized as a name of a cmdlet",  # PowerShell 7
)


def driver_problem(text: str, status: int | None) -> str | None:
    """Why nvidia-smi could not read any GPU, from its output and exit status: an NVML
    initialisation failure with its meaning and what to do, a missing nvidia-smi, or
    None when the output is something else."""
    found = _INIT.search(text)
    if found:
        words = found.group(1).strip()
        known = init_failure(status, words)
        detail = known.describe() if known else "check dmesg and the driver installation"
        return f"Failed to initialize NVML: {words}{_exit(status)}: {detail}"
    low = text.lower()
    for words, code in _OWN_WORDS:
        if words in low:
            known = init_failure(code)
            assert known is not None
            return f"{first_line(text)}{_exit(status)}: {known.describe()}"
    head = first_line(text).lower()
    if status == 127 or any(words in head for words in _NOT_FOUND):
        return "nvidia-smi not found"
    return None


def _exit(status: int | None) -> str:
    return "" if status is None else f" (exit {status})"


# -- a GPU that nvidia-smi could not open ---------------------------------------------

# "Unable to determine the device handle for GPU 0000:84:00.0: GPU is lost" (R4xx-R5xx
# also print it without the space: "for GPU0000:84:00.0: Unknown Error").
_HANDLE = re.compile(
    r"^\s*Unable to determine the device handle for GPU\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
    r"[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*:\s*(.*?)\s*$"
)
_LOST_WORDS = ("gpu is lost", "gpu requires reset", "fallen off the bus")


def split_handle_errors(text: str) -> tuple[str, list[dict[str, Any]]]:
    """Output without its "Unable to determine the device handle" lines, and one broken
    GPU dict per such line (its bus id, state lost or error, nvidia-smi's reason)."""
    kept: list[str] = []
    broken: list[dict[str, Any]] = []
    seen: set[str] = set()
    for line in text.splitlines():
        found = _HANDLE.match(line)
        if not found:
            kept.append(line)
            continue
        bus, why = found.group(1).upper(), found.group(2).rstrip(".")
        if bus in seen:
            continue
        seen.add(bus)
        lost = any(words in why.lower() for words in _LOST_WORDS)
        if lost:
            broken.append({"pci_bus_id": bus, "state": model.GPU_LOST,
                           "error": f"nvidia-smi: {why} ({bus})"})
        else:
            # "Unknown Error" (exit 255, usually a card off the bus) and any other reason
            # read as NVML's own failure to open that handle: the same state and words.
            broken.append({"pci_bus_id": bus, "state": model.GPU_ERROR,
                           "why": why or "no handle"})
    return "\n".join(kept), broken


def _place_broken(gpus: list[dict[str, Any]], broken: list[dict[str, Any]]) -> None:
    """Give each broken GPU the lowest index no readable GPU has: nvidia-smi numbers the
    cards it lists without the lost one, so the gaps are where lost cards sat."""
    readable = {g["index"] for g in gpus}
    # A cut row may still say its index; one that another row has is not believed.
    known = {g["index"] for g in broken if g.get("index") is not None} - readable
    used = readable | known
    free = (n for n in range(len(gpus) + 2 * len(broken) + len(used)) if n not in used)
    for gpu in broken:
        index = gpu.get("index")
        placed = {**gpu, "index": index if index in known else next(free)}
        known.discard(index)
        why = placed.pop("why", None)
        if why is not None:
            placed["error"] = f"{handle_error(placed['index'], why)} ({placed['pci_bus_id']})"
        gpus.append(placed)
    gpus.sort(key=lambda g: g["index"])


# -- CSV ------------------------------------------------------------------------------


@dataclass
class CsvReply:
    """One CSV reply of nvidia-smi, read by its header wherever that is.

    ``before``: the lines above the header (a login shell's or nvidia-smi's own warnings);
    ``cut``: rows with fewer fields than the header (output cut short), as field lists;
    ``odd``: other lines below it that are not rows."""

    rows: list[dict[str, str | None]]
    before: list[str]
    cut: list[list[str]]
    odd: list[str]
    header: list[str]


def _columns(line: str) -> list[str]:
    fields = next(csv.reader([line], skipinitialspace=True), [])
    return [re.sub(r"\s*\[[^\]]*\]\s*$", "", h).strip() for h in fields]


def read_csv(text: str, required: tuple[str, ...] = (), what: str = "nvidia-smi") -> CsvReply:
    """CSV with a header row somewhere in ``text`` -> a ``CsvReply``.

    The header is the first line naming every ``required`` column (any line when none
    is required): what a login shell (a locale warning, an echo in .bashrc) or nvidia-smi
    (an infoROM warning) prints before it is kept in ``before``, not read as data.
    SmiError (state error) when no line is such a header: the reply is not the CSV that
    was asked for (``nvidia-smi -q`` text, a banner, a help page), and reading it anyway
    would turn each of its lines into a GPU."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return CsvReply([], [], [], [], [])
    at = next((n for n, line in enumerate(lines)
               if all(name in _columns(line) for name in required)), None)
    if at is None:
        raise SmiError(f"{what}: not the CSV asked for (no {', '.join(required)} column); "
                       f"first line: {first_line(text)!r}", model.HOST_ERROR)
    header = _columns(lines[at])
    reply = CsvReply([], [ln.strip() for ln in lines[:at]], [], [], header)
    for line, row in zip(lines[at + 1:], csv.reader(lines[at + 1:], skipinitialspace=True),
                         strict=True):
        if len(row) == len(header):
            reply.rows.append({h: value(v) for h, v in zip(header, row, strict=True)})
        elif 1 < len(row) < len(header):
            reply.cut.append(row)
        else:
            reply.odd.append(line.strip())
    return reply


def parse_csv(
    text: str, required: tuple[str, ...] = (), what: str = "nvidia-smi"
) -> list[dict[str, str | None]]:
    """CSV with a header row -> rows keyed by field name (units dropped); see read_csv."""
    return read_csv(text, required, what).rows


# nvidia-smi's own line about a card whose infoROM fails its checksum (exit status 14,
# NVML_ERROR_CORRUPTED_INFOROM); the values it prints after it are valid.
_INFOROM = re.compile(r"^WARNING: infoROM is corrupted at gpu\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
                      r"[0-9A-Fa-f]{2}\.[0-9A-Fa-f])", re.I)
MAX_NOTE = 200  # characters of other output kept for the host's line


def _notes(lines: list[str]) -> tuple[set[str], list[str]]:
    """Lines that are not CSV -> (bus ids whose infoROM nvidia-smi calls corrupted,
    the other lines)."""
    corrupted: set[str] = set()
    other: list[str] = []
    for line in lines:
        found = _INFOROM.match(line)
        if found:
            corrupted.add(_bus_key(found.group(1)))
        elif line not in other:
            other.append(line)
    return corrupted, other


def _bus_key(bus: str | None) -> str:
    """A PCI bus id as nvidia-smi prints it in either width (0000:0B:00.0 in messages,
    00000000:0B:00.0 in CSV) -> one spelling to compare."""
    if not bus:
        return ""
    domain, _, rest = bus.upper().partition(":")
    return f"{int(domain, 16):04X}:{rest}" if rest and domain.isalnum() else bus.upper()


def note_line(notes: list[str]) -> str | None:
    """What a host printed around nvidia-smi's output, as one clause of its state line."""
    if not notes:
        return None
    said = " | ".join(notes)
    if len(said) > MAX_NOTE:
        said = said[: MAX_NOTE - 3] + "..."
    return f"other output before nvidia-smi's: {said!r}"


def _first(row: dict[str, str | None], *names: str) -> str | None:
    for name in names:
        if row.get(name) is not None:
            return row[name]
    return None


def gpus_from_csv(text: str, status: int | None = 0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``--query-gpu`` CSV -> (Gpu dicts, host facts such as driver_version).

    A card nvidia-smi could not open is listed too, lost or unreadable (never dropped);
    SmiError when the driver cannot work at all or the reply is not this CSV."""
    problem = driver_problem(text, status)
    if problem:
        raise SmiError(problem)
    text, broken = split_handle_errors(text)
    gpus: list[dict[str, Any]] = []
    host: dict[str, Any] = {}
    reply = read_csv(text, _GPU_COLUMNS, "nvidia-smi --query-gpu")
    corrupted, host["notes"] = _notes(reply.before + reply.odd)
    for position, row in enumerate(reply.rows):
        if host.get("driver_version") is None and row.get("driver_version"):
            host["driver_version"] = row["driver_version"]
        index = integer(row.get("index"))
        fan = integer(row.get("fan.speed"))
        mask = integer(_first(row, EVENT_FIELD, THROTTLE_FIELD))
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
                # The NVML path's decoder, so the same mask gives the same warnings.
                "clock_event_mask": mask,
                "clock_event_reasons": decode_clock_events(mask),
                "pcie_gen": integer(row.get("pcie.link.gen.current")),
                "pcie_gen_max": integer(row.get("pcie.link.gen.max")),
                "pcie_width": integer(row.get("pcie.link.width.current")),
                "pcie_width_max": integer(row.get("pcie.link.width.max")),
                "mig_mode": flag(row.get("mig.mode.current")),
                "mig_mode_pending": flag(row.get("mig.mode.pending")),
                "fabric_state": fabric_state(row.get(FABRIC_FIELD)),
            }
        )
        if _bus_key(row.get("pci.bus_id")) in corrupted:
            gpus[-1]["inforom_corrupted"] = True
    for cut in reply.cut:
        # A row cut short (the output ended, or a line was broken): this card is not
        # known, but it is there; never a silently shorter list.
        cells = dict(zip(reply.header, cut, strict=False))
        index = integer(cells.get("index"))
        broken.append({"index": index, "state": model.GPU_ERROR,
                       "pci_bus_id": value(cells.get("pci.bus_id")),
                       "error": f"nvidia-smi: its row was cut short ({len(cut)} of "
                                f"{len(reply.header)} fields)"})
    if not gpus and not broken:
        if status not in (0, None):
            raise SmiError(f"nvidia-smi failed{_exit(status)}: {first_line(text)}")
        what = "a header and no GPU rows" if reply.header else "no output"
        raise SmiError(f"nvidia-smi --query-gpu gave {what} (exit {status}): not an answer "
                       "about this host's GPUs", model.HOST_ERROR)
    _place_broken(gpus, broken)
    return gpus, host


def apps_from_csv(
    text: str, uuid_to_index: dict[str, int], status: int | None = 0
) -> list[dict[str, Any]]:
    """``--query-compute-apps`` CSV -> GpuProcess dicts (pid, gpu, memory, name)."""
    problem = driver_problem(text, status)
    if problem:
        raise SmiError(problem)
    text, _broken = split_handle_errors(text)  # the GPU query has named them already
    procs = []
    for row in read_csv(text, _APP_COLUMNS, "nvidia-smi --query-compute-apps").rows:
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


def split_fallback_output(text: str) -> list[tuple[str, int | None]]:
    """A fallback command's output -> [(section text, exit status)] in command order."""
    sections: list[tuple[str, int | None]] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith(MARK):
            status = line[len(MARK):].strip()
            if current and not current[-1]:
                current.pop()  # the newline printed before the marker
            sections.append(("\n".join(current), int(status) if status.isdigit() else None))
            current = []
        else:
            current.append(line)
    return sections


def join_outputs(results: list[tuple[str, int | None]]) -> str:
    """Commands run one at a time (Windows) -> the text one sh command would print."""
    return "".join(f"{text}\n{MARK} {'' if rc is None else rc}\n" for text, rc in results)



# -- nvidia-smi -L, the default table, topo -m, nvlink -s -----------------------------

_LIST_GPU = re.compile(r"^GPU (\d+): (.*?) \(UUID: (GPU-[^)\s]+)\)\s*$")
_LIST_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)\s]+)\)\s*$")


def parse_list(text: str) -> dict[int, dict[str, Any]]:
    """``nvidia-smi -L`` -> {GPU index: {"name", "uuid", "mig": {device index: {"profile",
    "uuid"}}}}; a MIG device line belongs to the GPU line above it."""
    out: dict[int, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        gpu = _LIST_GPU.match(line)
        if gpu:
            current = {"name": gpu.group(2), "uuid": gpu.group(3), "mig": {}}
            out[int(gpu.group(1))] = current
            continue
        mig = _LIST_MIG.match(line)
        if mig and current is not None and len(current["mig"]) < 8:
            current["mig"][int(mig.group(2))] = {"profile": mig.group(1), "uuid": mig.group(3)}
    return out


# "|  0    2   0   0  |           11091MiB / 40448MiB    | 60      0 |  3   0    3 ..."
# and under it "|                  |               0MiB / 24739MiB    |" (BAR1).
_TABLE_MIG = re.compile(
    r"^\|\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|")
_TABLE_BAR1 = re.compile(r"^\|\s*\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|")
# "|    0    2    0            21180      C   /root/tools/memhog              2296MiB |"
# (GI and CI are N/A without MIG; drivers before R450 have neither column).
_TABLE_PROC = re.compile(
    r"^\|\s*(\d+)\s+(?:(\d+|N/A)\s+(\d+|N/A)\s+)?(\d+)\s+(C\+G|C|G)\s+(.*?)\s+(\d+MiB|N/A)\s*\|$")


def parse_table(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``nvidia-smi``'s default table -> (MIG device rows, process rows).

    MIG rows: gpu, gi, ci, index (the "MIG Dev" column), memory and BAR1 in bytes.
    Process rows: gpu, gi, ci (None without MIG), pid, type (C, G or C+G, which no CSV
    query gives), the (shortened) name and memory."""
    devices: list[dict[str, Any]] = []
    procs: list[dict[str, Any]] = []
    section = None
    for line in text.splitlines():
        if "MIG devices:" in line:
            section = "mig"
            continue
        if "Processes:" in line:
            section = "procs"
            continue
        if section == "mig":
            row = _TABLE_MIG.match(line)
            if row:
                n = [int(x) for x in row.groups()]
                devices.append({"gpu": n[0], "gi": n[1], "ci": n[2], "index": n[3],
                                "mem_used": n[4] * MIB, "mem_total": n[5] * MIB})
                continue
            bar1 = _TABLE_BAR1.match(line)
            if bar1 and devices and "bar1_total" not in devices[-1]:
                devices[-1]["bar1_used"] = int(bar1.group(1)) * MIB
                devices[-1]["bar1_total"] = int(bar1.group(2)) * MIB
        elif section == "procs":
            proc = _TABLE_PROC.match(line)
            if proc:
                card, gi, ci, pid, kind, name, memory = proc.groups()
                procs.append({"gpu": int(card), "gi": integer(gi), "ci": integer(ci),
                              "pid": int(pid), "type": kind, "command": value(name),
                              "gpu_mem": mib(memory)})
    return devices, procs


def parse_nvlink_status(text: str) -> dict[int, list[dict[str, Any]]]:
    """``nvidia-smi nvlink -s`` -> {GPU index: [{"link", "active"}]}.

    "Link 3: 25 GB/s" is up, "Link 3: <inactive>" is down; a GPU whose links cannot be
    queried (MIG mode, or "all links are inActive" on a card without NVLink) has none."""
    out: dict[int, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] | None = None
    for line in text.splitlines():
        gpu = re.match(r"^GPU (\d+):", line)
        if gpu:
            current = out.setdefault(int(gpu.group(1)), [])
            continue
        link = re.match(r"^\s+Link (\d+):\s*(.*?)\s*$", line)
        if link and current is not None and len(current) < 32:
            state = link.group(2).lower()
            current.append({"link": int(link.group(1)),
                            "active": not ("inactive" in state or "down" in state)})
    return out


def topology_from_topo_m(text: str) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """``nvidia-smi topo -m`` (read by analysis/topology.py's parser) -> (the snapshot's
    topology links, {GPU index: cpu_affinity and numa_node}); nothing when unreadable."""
    try:
        matrix = topo.parse_topo_m(text)
    except ValueError:
        return [], {}
    gpus = matrix["gpus"]
    links = []
    for a, row in enumerate(matrix["matrix"]):
        for b, kind in enumerate(row):
            if b <= a or b >= len(gpus) or not kind or kind in (topo.SELF, topo.UNKNOWN):
                continue
            links.append({"gpu_a": gpus[a], "gpu_b": gpus[b], "kind": kind,
                          "nvlinks": matrix["nvlinks"][a][b]})
    places = {}
    for n, index in enumerate(gpus):
        cpus = matrix["cpu_affinity"][n]
        places[index] = {"cpu_affinity": None if cpus == topo.UNKNOWN else cpus,
                         "numa_node": integer(matrix["numa_affinity"][n])}
    return links, places



# -- which shell answered -------------------------------------------------------------

# What the remote shell prints when the probe's `exec python3 ...` reaches a Windows
# shell instead of sh (OpenSSH for Windows starts cmd.exe, or PowerShell when an admin
# made it the DefaultShell).  Both exit with status 1.
_WINDOWS_SHELLS = (
    ("'exec' is not recognized as an internal or external command", "cmd.exe"),
    ("the term 'exec' is not recognized as the name of a cmdlet", "PowerShell"),
    ("the term 'exec' is not recognized as a name of a cmdlet", "PowerShell"),
)


def windows_shell(status: int | None, output: str) -> str | None:
    """The Windows shell that refused the bootstrap ("cmd.exe", "PowerShell"), from its
    exit status and what it printed (stdout and stderr), or None for any other shell."""
    if status == 127:
        return None  # sh's "not found": a Unix host without python3
    low = " ".join(output.lower().split())
    for words, shell in _WINDOWS_SHELLS:
        if words in low:
            return shell
    return None


NO_PYTHON = "no python3 on this host"


@dataclass
class Extras:
    """What EXTRA_COMMANDS read: the MIG devices' UUIDs and profiles, the topology, the
    NVLink states and the temperature thresholds (each empty when its command failed)."""

    listing: dict[int, dict[str, Any]]
    links: list[dict[str, Any]]
    places: dict[int, dict[str, Any]]
    nvlinks: dict[int, list[dict[str, Any]]]
    topology_read: bool
    nvlinks_read: bool  # `nvlink -s` answered (a card without links answers too)
    thresholds: dict[str, dict[str, int | None]]  # by bus id (_bus_key)

    @classmethod
    def parse(cls, output: str | None) -> Extras | None:
        if output is None:
            return None
        sections = dict(zip(EXTRA_SECTIONS, split_fallback_output(output), strict=False))
        text = {name: sections.get(name, ("", None))[0] for name in EXTRA_SECTIONS}
        links, places = topology_from_topo_m(text["topo"])
        nvlink_text, nvlink_rc = sections.get("nvlink", ("", None))
        return cls(parse_list(text["list"]), links, places,
                   parse_nvlink_status(nvlink_text), bool(places),
                   nvlink_rc == 0 and bool(re.search(r"^GPU \d+:", nvlink_text, re.M)),
                   parse_q_thresholds(text["temps"]))


class SmiBackend:
    """A ``GpuBackend`` (sources/backend.py) over one poll's nvidia-smi output, in the
    sections of ``mode``, with the last ``Extras`` read from the host."""

    source = "smi"

    def __init__(self, sections: dict[str, tuple[str, int | None]], reason: str, mode: Mode,
                 extras: Extras | None = None) -> None:
        self._sections = sections
        self._reason = reason
        self._mode = mode
        self._extras = extras

    def read(self, now: float, cpu_count: int | None = None) -> Reading:
        try:
            if self._mode.xml:
                gpus, facts, procs = self._read_xml()
            else:
                gpus, facts, procs = self._read_csv()
        except SmiError as exc:
            if str(exc) == "nvidia-smi not found":
                return _failed(model.HOST_NO_GPU, f"nvidia-smi not found and {self._reason}")
            return _failed(exc.state, f"nvidia-smi: {exc}" if exc.state == model.HOST_NO_GPU
                           else str(exc))
        table = self._sections.get("table")
        if table is not None:
            _join_table(gpus, procs, *parse_table(table[0]))
        missing = list(MISSING)
        if self._mode.windows:
            missing.append("processes.user")
        extras = self._extras
        topology: list[dict[str, Any]] = []
        if extras is not None:
            _join_extras(gpus, procs, extras)
            topology = extras.links
        if extras is None or not extras.topology_read:
            missing.append("topology")
        if extras is None or not extras.nvlinks_read:
            missing.append("nvlinks")
        said = f"{self._reason}: nvidia-smi{'' if self._mode.windows else ' and ps'} " \
               "only (fewer fields, no actions)"
        note = note_line(facts.get("notes") or [])
        return {
            "state": model.HOST_FALLBACK,
            "error": f"{said}; {note}" if note else said,
            "driver_version": facts.get("driver_version"),
            "cuda_version": facts.get("cuda_version"),
            "gpus": gpus,
            "processes": procs,
            "topology": topology,
            "missing": missing,
        }

    def _section(self, name: str) -> tuple[str, int | None]:
        return self._sections.get(name, ("", None))

    def _read_csv(self) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
        gpu_text, gpu_rc = self._section("gpus")
        if gpu_rc is None and not gpu_text.strip():
            raise SmiError("nvidia-smi not found")
        if "is not a valid field to query" in gpu_text:
            raise SmiError(first_line(gpu_text))  # Mode.after picks the next command
        gpus, facts = gpus_from_csv(gpu_text, gpu_rc)
        uuids = {g["uuid"]: g["index"] for g in gpus if g.get("uuid")}
        apps_text, apps_rc = self._section("apps")
        try:
            procs = apps_from_csv(apps_text, uuids, apps_rc)
        except SmiError as exc:
            if exc.state == model.HOST_ERROR:
                raise  # not the process list asked for: say so rather than show none
            procs = []
        return gpus, facts, procs

    def _read_xml(self) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
        xml_text, xml_rc = self._section("xml")
        problem = driver_problem(xml_text, xml_rc)
        if problem or (xml_rc is None and not xml_text.strip()):
            raise SmiError(problem or "nvidia-smi not found")
        xml_text, broken = split_handle_errors(xml_text)
        # What a login shell or nvidia-smi printed before the document, as for CSV.
        starts = [at for at in (xml_text.find("<?xml"), xml_text.find("<nvidia_smi_log"))
                  if at >= 0]
        start = min(starts, default=0)
        corrupted, notes = _notes([ln.strip() for ln in xml_text[:start].splitlines()
                                   if ln.strip()])
        xml_text = xml_text[start:]
        try:
            gpus, facts, procs = parse_xml(xml_text)
        except ET.ParseError:
            if "<nvidia_smi_log" in xml_text and "</nvidia_smi_log>" not in xml_text:
                raise SmiError(f"nvidia-smi -q -x: the XML output is truncated "
                               f"({len(xml_text)} characters, no closing tag)",
                               model.HOST_ERROR) from None
            raise SmiError(f"nvidia-smi -q -x: not XML; first line: {first_line(xml_text)!r}",
                           model.HOST_ERROR) from None
        for gpu in gpus:
            if _bus_key(gpu.get("pci_bus_id")) in corrupted:
                gpu["inforom_corrupted"] = True
        facts["notes"] = notes
        _place_broken(gpus, broken)
        return gpus, facts, procs


def _join_table(gpus: list[dict[str, Any]], procs: list[dict[str, Any]],
                devices: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """The default table's MIG devices and process types into a poll's GPUs and
    processes; graphics-only processes (no CSV query lists them) are added."""
    by_index = {g["index"]: g for g in gpus}
    for device in devices:
        gpu = by_index.get(device["gpu"])
        if gpu is None or not gpu.get("mig_mode"):
            continue
        slots = gpu.setdefault("mig_devices", [])
        if len(slots) < 8:
            slots.append(dict(device))
    where = {(d["gpu"], d["gi"], d["ci"]): d for g in gpus for d in g.get("mig_devices") or ()}
    by_key = {(p["gpu"], p["pid"]): p for p in procs}
    for row in rows:
        if row["gpu"] not in by_index:
            continue
        proc: dict[str, Any] | None = by_key.get((row["gpu"], row["pid"]))
        if proc is None:
            proc = {"pid": row["pid"], "gpu": row["gpu"], "gpu_mem": row["gpu_mem"],
                    "command": row["command"]}
            procs.append(proc)
            by_key[(row["gpu"], row["pid"])] = proc
        proc["type"] = row["type"]
        runs_on = where.get((row["gpu"], row["gi"], row["ci"]))
        if runs_on is not None:
            proc.update(mig_device=runs_on["index"], gpu_instance_id=runs_on["gi"],
                        compute_instance_id=runs_on["ci"])


def _join_extras(gpus: list[dict[str, Any]], procs: list[dict[str, Any]],
                 extras: Extras) -> None:
    for gpu in gpus:
        index = gpu["index"]
        listed = extras.listing.get(index)
        if listed and listed["mig"] and gpu.get("state", model.GPU_OK) == model.GPU_OK:
            devices = {d["index"]: d for d in gpu.setdefault("mig_devices", [])}
            for slot, mig in sorted(listed["mig"].items()):
                device = devices.get(slot)
                if device is None:
                    if len(gpu["mig_devices"]) >= 8:
                        continue
                    device = devices[slot] = {"gpu": index, "index": slot}
                    gpu["mig_devices"].append(device)
                device.update(uuid=mig["uuid"], profile=mig["profile"],
                              name=f"{gpu.get('name') or listed['name']} MIG {mig['profile']}")
            gpu["mig_devices"].sort(key=lambda d: d["index"])
            if gpu.get("mig_mode") is None:
                gpu["mig_mode"] = True
        place = extras.places.get(index)
        if place:
            gpu.update((k, v) for k, v in place.items() if v is not None)
        if index in extras.nvlinks:
            gpu["nvlinks"] = extras.nvlinks[index]
        limits = extras.thresholds.get(_bus_key(gpu.get("pci_bus_id")), {})
        for key, limit in limits.items():
            if gpu.get(key) is None:
                gpu[key] = limit
    uuids = {(d["gpu"], d["index"]): d.get("uuid")
             for g in gpus for d in g.get("mig_devices") or ()}
    for proc in procs:
        if proc.get("mig_device") is not None:
            proc["mig_uuid"] = uuids.get((proc["gpu"], proc["mig_device"]))


class PsListing:
    """A ``ProcessReader`` (sources/backend.py) over one ``ps -eo PS_FORMAT`` listing;
    ``None`` (a Windows host): every process is visible, nothing more is known."""

    workloads = None  # ps shows no cgroups

    def __init__(self, text: str | None, now: float) -> None:
        self._table = parse_ps(text, now) if text is not None else None

    def host_info(self) -> dict[str, Any]:
        return {}

    def process_info(self, pids: list[int]) -> dict[int, dict[str, Any]]:
        if self._table is None:
            return {pid: {} for pid in pids}
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
        info = None if self._table is None else self._table.get(pid)
        if info is None:
            return None
        # No args (a kernel thread, a zombie): nvidia-smi's process name stays.
        return {k: v for k, v in info.items() if k != "command" or v}

    def parent_chain(self, pid: int) -> list[dict[str, Any]]:
        return []

    def device_holders(self) -> tuple[list[dict[str, Any]], str | None]:
        return [], None


def read_fallback(
    output: str, now: float, reason: str = NO_PYTHON, mode: Mode | None = None,
    extras: Extras | None = None,
) -> tuple[SmiBackend, PsListing]:
    """One poll's output (of ``mode``'s commands) -> the GPU backend and the process
    reader of that poll; the host assembler joins them."""
    mode = mode or Mode()
    names = mode.sections()
    parts = split_fallback_output(output)
    sections = {name: parts[n] if n < len(parts) else ("", None)
                for n, name in enumerate(names)}
    ps_text = None if mode.windows else sections["ps"][0]
    return SmiBackend(sections, reason, mode, extras), PsListing(ps_text, now)


def _failed(state: str, error: str) -> Reading:
    return {"state": state, "error": error, "missing": list(MISSING)}


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
        mask = None
        if reasons is not None:
            # Tags -> NVML's mask -> the NVML path's decoder: one vocabulary of flags.
            mask = clock_event_mask([
                re.sub(r"^clocks_(event|throttle)_reason_", "", child.tag)
                for child in reasons
                if flag(child.text) is True
            ])
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
                "clock_event_mask": mask,
                "clock_event_reasons": decode_clock_events(mask),
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
                "fabric_state": fabric_state(_text(gpu, "fabric/state")),
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


_THRESHOLD_KEYS = ("temp_slowdown", "temp_shutdown", "temp_max_operating")


def absolute_thresholds(temp: int | None, headroom: int | None,
                        absolute: dict[str, int | None],
                        offsets: dict[str, int | None]) -> dict[str, int | None]:
    """Slowdown, shutdown and max operating temperatures in degrees C.

    Newer drivers (Ada and Blackwell cards, R570+) give them relative to the T.Limit
    instead: ``headroom`` (T.Limit Temp) is how far below its limit the card runs now,
    and ``offsets`` where each threshold sits from that limit (shutdown at -7 means 7 C
    past it).  Converted with the current temperature, they are absolute."""
    out = {key: absolute.get(key) for key in _THRESHOLD_KEYS}
    if temp is None or headroom is None:
        return out
    for key in _THRESHOLD_KEYS:
        offset = offsets.get(key)
        if out[key] is None and offset is not None:
            out[key] = temp + headroom - offset
    return out


def _thresholds(gpu: ET.Element) -> dict[str, int | None]:
    temps = gpu.find("temperature")
    return absolute_thresholds(
        integer(_text(temps, "gpu_temp")), integer(_text(temps, "gpu_temp_tlimit")),
        {"temp_slowdown": integer(_text(temps, "gpu_temp_slow_threshold")),
         "temp_shutdown": integer(_text(temps, "gpu_temp_max_threshold")),
         "temp_max_operating": integer(_text(temps, "gpu_temp_max_gpu_threshold"))},
        {"temp_slowdown": integer(_text(temps, "gpu_temp_slow_tlimit_threshold")),
         "temp_shutdown": integer(_text(temps, "gpu_temp_max_tlimit_threshold")),
         "temp_max_operating": integer(_text(temps, "gpu_temp_max_gpu_tlimit_threshold"))})


# `nvidia-smi -q -d TEMPERATURE`: "GPU 00000000:00:09.0" heads each card's block, then
# "        GPU Slowdown Temp   : 96 C" (or "GPU Slowdown T.Limit Temp : -2 C").
_Q_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_Q_FIELD = re.compile(r"^\s+(GPU [A-Za-z. ]+?)\s*:\s*(.*?)\s*$")
_Q_ABSOLUTE = {"GPU Slowdown Temp": "temp_slowdown", "GPU Shutdown Temp": "temp_shutdown",
               "GPU Max Operating Temp": "temp_max_operating"}
_Q_OFFSET = {"GPU Slowdown T.Limit Temp": "temp_slowdown",
             "GPU Shutdown T.Limit Temp": "temp_shutdown",
             "GPU Max Operating T.Limit Temp": "temp_max_operating"}


def parse_q_thresholds(text: str) -> dict[str, dict[str, int | None]]:
    """``nvidia-smi -q -d TEMPERATURE`` -> {bus id: temp_slowdown, temp_shutdown,
    temp_max_operating}: read once per connection, as they do not change."""
    cards: dict[str, dict[str, int | None]] = {}
    fields: dict[str, int | None] | None = None
    for line in text.splitlines():
        card = _Q_GPU.match(line)
        if card:
            fields = cards.setdefault(_bus_key(card.group(1)), {})
            continue
        field = _Q_FIELD.match(line)
        if field and fields is not None and len(cards) <= 64:
            fields[field.group(1)] = integer(field.group(2))
    return {bus: absolute_thresholds(
                f.get("GPU Current Temp"), f.get("GPU T.Limit Temp"),
                {key: f.get(label) for label, key in _Q_ABSOLUTE.items()},
                {key: f.get(label) for label, key in _Q_OFFSET.items()})
            for bus, f in cards.items()}


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
