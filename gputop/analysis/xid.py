"""The XID catalog and a parser for the kernel's `NVRM: Xid` log lines.

An XID is the driver's error report for one GPU.  Most mean the hardware or the driver
is in trouble; a few (13, 31, 43, 45) nearly always mean that one application did
something illegal and was killed, while the card is fine.  The health rules use this
table to say which is which, so an admin does not drain a node because of a user's
out-of-bounds access.

Entries follow NVIDIA's published XID catalog (docs.nvidia.com, "XID Errors"); codes we
are not sure of get the generic entry, which still shows the number.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

from gputop.model import CRITICAL, WARNING, Gpu, XidEvent
from gputop.records import Record, record


@record(frozen=True, slots=True)
class XidInfo(Record):
    """What one XID code means, how bad it is and what to do."""

    code: int
    name: str
    severity: str
    app_fault: bool  # usually the application's fault, not the card's
    hint: str
    lost: bool = False  # the card is gone (fell off the bus): a source that sees only
    # the XID (dcgm-exporter's last one) calls the card lost, as NVML's GPU_IS_LOST


# Hints shared by several codes: the action an admin takes is what groups them.
_APP = "usually a bug in the application (illegal address, out-of-bounds); check its logs"
_RESET = "reset the GPU when it is idle (nvidia-smi -r) or reboot; if it repeats, update the driver"
_ECC_RESET = (
    "an uncorrectable memory error: drain the card, reset it (nvidia-smi -r) to remap; "
    "if it repeats, ask for an RMA"
)
_BUS = "check PCIe seating, power cables and cooling; reboot the node; if it repeats, RMA"
_NVLINK = (
    "check `nvidia-smi nvlink -s` / `-e` and fabric manager; reset the GPUs; "
    "reseat or RMA if it repeats"
)
_GSP = (
    "GSP firmware stopped answering: reset the GPU or reboot; update the driver, "
    "or try NVreg_EnableGpuFirmware=0"
)
_VIDEO = "a video engine fault: restart the application; update the driver if it repeats"
_FW = "driver or firmware error: restart the application, then reset the GPU; update the driver"


def _x(code: int, name: str, severity: str, hint: str, app: bool = False,
       lost: bool = False) -> XidInfo:
    return XidInfo(code, name, severity, app, hint, lost)


CATALOG: dict[int, XidInfo] = {
    x.code: x
    for x in (
        _x(1, "invalid or corrupted push buffer stream", WARNING, _FW),
        _x(2, "invalid or corrupted push buffer stream", WARNING, _FW),
        _x(3, "invalid or corrupted push buffer stream", WARNING, _FW),
        _x(4, "invalid or corrupted push buffer stream", WARNING, _FW),
        _x(6, "invalid or corrupted push buffer stream", WARNING, _FW),
        _x(7, "invalid or corrupted push buffer address", WARNING, _FW),
        _x(
            8,
            "GPU stopped processing",
            CRITICAL,
            "driver, application, thermal or bus trouble: check temperatures and dmesg; "
            + _RESET,
        ),
        _x(9, "driver error programming GPU", WARNING, _FW),
        _x(11, "invalid or corrupted push buffer stream", WARNING, _FW),
        _x(12, "driver error handling GPU exception", WARNING, _FW),
        _x(13, "graphics engine exception", WARNING, _APP, app=True),
        _x(16, "display engine hung", WARNING, _FW),
        _x(18, "bus mastering disabled in PCI config space", CRITICAL, _BUS),
        _x(19, "display engine error", WARNING, _FW),
        _x(24, "GPU semaphore timeout", WARNING, _FW),
        _x(25, "invalid or illegal push buffer stream", WARNING, _FW),
        _x(26, "framebuffer timeout", WARNING, _FW),
        _x(27, "video processor exception", WARNING, _VIDEO),
        _x(28, "video processor exception", WARNING, _VIDEO),
        _x(29, "video processor exception", WARNING, _VIDEO),
        _x(30, "GPU semaphore access error", WARNING, _FW),
        _x(31, "GPU memory page fault (MMU fault)", WARNING, _APP, app=True),
        _x(
            32,
            "invalid or corrupted push buffer stream (PBDMA)",
            CRITICAL,
            "often PCIe trouble: " + _BUS,
        ),
        _x(33, "internal micro-controller error", WARNING, _FW),
        _x(37, "driver firmware error", WARNING, _FW),
        _x(38, "driver firmware error", CRITICAL, _FW),
        _x(42, "video processor exception", WARNING, _VIDEO),
        _x(
            43,
            "GPU stopped processing (channel reset)",
            WARNING,
            "the application hit a fault and its context was torn down; check its logs",
            app=True,
        ),
        _x(44, "graphics engine fault during context switch", CRITICAL, _RESET),
        _x(
            45,
            "preemptive cleanup after earlier errors",
            WARNING,
            "the driver cleaned up a killed application; look for an earlier XID",
            app=True,
        ),
        _x(46, "GPU stopped processing", CRITICAL, _RESET),
        _x(48, "double-bit ECC error", CRITICAL, _ECC_RESET),
        _x(54, "auxiliary power is not connected to the GPU board", CRITICAL, _BUS),
        _x(56, "display engine error", WARNING, _FW),
        _x(57, "error programming video memory interface", CRITICAL, _RESET),
        _x(58, "unstable video memory interface detected", CRITICAL, _ECC_RESET),
        _x(59, "internal micro-controller error", CRITICAL, _RESET),
        _x(61, "internal micro-controller breakpoint/warning", CRITICAL, _RESET),
        _x(62, "internal micro-controller halt", CRITICAL, _RESET),
        _x(
            63,
            "ECC page retirement or row remapping recorded",
            CRITICAL,
            "a memory row was retired/remapped: reset the GPU when idle to apply it",
        ),
        _x(
            64,
            "ECC page retirement or row remapping failure",
            CRITICAL,
            "remapping failed: drain the card and ask for an RMA",
        ),
        _x(68, "video decoder (NVDEC) exception", WARNING, _VIDEO),
        _x(69, "graphics engine class error", WARNING, _FW),
        _x(74, "NVLink error", CRITICAL, _NVLINK),
        _x(79, "GPU has fallen off the bus", CRITICAL, _BUS, lost=True),
        _x(80, "corrupted data sent to GPU", CRITICAL, _BUS),
        _x(81, "VGA subsystem error", WARNING, _FW),
        _x(
            92,
            "high single-bit ECC error rate",
            WARNING,
            "memory is degrading: watch the ECC counters and plan a replacement",
        ),
        _x(
            93,
            "InfoROM wear limit exceeded (non-fatal)",
            WARNING,
            "the InfoROM is wearing out; plan a replacement",
        ),
        _x(
            94,
            "contained ECC error",
            CRITICAL,
            "the affected application was stopped, others run on; reset the GPU when idle",
        ),
        _x(95, "uncontained ECC error", CRITICAL, _ECC_RESET),
        _x(109, "context switch timeout", CRITICAL, _RESET),
        _x(110, "security fault", CRITICAL, _RESET),
        _x(119, "GSP RPC timeout", CRITICAL, _GSP),
        _x(120, "GSP error", CRITICAL, _GSP),
        _x(121, "C2C link error", CRITICAL, "chip-to-chip link error: reset the GPU or reboot"),
        _x(140, "unrecovered ECC error", CRITICAL, _ECC_RESET),
        _x(143, "GPU initialization failure", CRITICAL, _RESET),
        _x(144, "NVLink SAW error", CRITICAL, _NVLINK),
        _x(145, "NVLink RLW error", CRITICAL, _NVLINK),
        _x(146, "NVLink TLW error", CRITICAL, _NVLINK),
        _x(147, "NVLink TREX error", CRITICAL, _NVLINK),
        _x(148, "NVLink NVLPW control error", CRITICAL, _NVLINK),
        _x(149, "NVLink NETIR error", CRITICAL, _NVLINK),
        _x(150, "NVLink MSE error", CRITICAL, _NVLINK),
    )
}


def lookup(code: int) -> XidInfo:
    """The catalog entry for `code`; unknown codes get a generic one that keeps the number."""
    info = CATALOG.get(code)
    if info is not None:
        return info
    # An unknown XID is still the driver reporting a fault: warn, do not page anyone.
    return XidInfo(
        code,
        "unknown XID",
        WARNING,
        False,
        "look the code up in NVIDIA's XID catalog and check dmesg",
    )


def describe(code: int) -> str:
    info = lookup(code)
    text = f"XID {code}: {info.name}"
    if info.app_fault:
        text += " (usually the application's fault)"
    return text


# ---------------------------------------------------------------- kernel log lines


@record(frozen=True, slots=True)
class KernelXid(Record):
    """One `NVRM: Xid (PCI:...): N, ...` line from dmesg or the journal."""

    pci_bus_id: str  # as the kernel writes it, e.g. "0000:9b:00"
    xid: int
    pid: int | None
    process: str | None
    detail: str
    stamp: str | None  # the log's own timestamp text, e.g. "Sun Feb 23 16:24:18 2025"
    time: float | None  # epoch seconds when the stamp is a calendar date (read as UTC)


# Patterns compiled when first used (re's own cache), not at import: a one-shot that
# parses none of them does not pay for them.
_XID_LINE = r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<xid>\d+)(?:, (?P<rest>.*))?$"
_STAMP = r"^\s*\[(?P<stamp>[^\]]+)\]"
_PID = r"^pid=(?P<pid>'?(?:\d+|<unknown>)'?)$"
_NAME = r"^name=(?P<name>.*)$"


def parse_kernel_line(line: str) -> KernelXid | None:
    """Parse one kernel log line; None when it is not an XID report."""
    match = re.search(_XID_LINE, line.rstrip("\n"))
    if match is None:
        return None
    rest = match.group("rest") or ""
    pid: int | None = None
    process: str | None = None
    # Newer drivers write "pid=N, name=cmd, detail"; older ones only the detail.
    parts = rest.split(", ", 2)
    used = 0
    if parts and (m := re.match(_PID, parts[0])):
        raw = m.group("pid").strip("'")
        pid = int(raw) if raw.isdigit() else None
        used = 1
        if len(parts) > 1 and (n := re.match(_NAME, parts[1])):
            process = n.group("name") or None
            used = 2
    detail = ", ".join(parts[used:]) if used else rest
    stamp_text, when = _stamp(line)
    return KernelXid(
        pci_bus_id=match.group("pci"),
        xid=int(match.group("xid")),
        pid=pid,
        process=process,
        detail=detail,
        stamp=stamp_text,
        time=when,
    )


def _stamp(line: str) -> tuple[str | None, float | None]:
    match = re.match(_STAMP, line)
    if match is None:
        return None, None
    text = match.group("stamp").strip()
    import calendar  # kernel log lines only: no other XID path needs it

    try:
        # `dmesg -T` prints ctime-style dates; seconds since boot ("12.345") are not dates.
        return text, float(calendar.timegm(time.strptime(text, "%a %b %d %H:%M:%S %Y")))
    except ValueError:
        return text, None


def parse_kernel_log(text: str) -> list[KernelXid]:
    return [x for line in text.splitlines() if (x := parse_kernel_line(line)) is not None]


def same_pci_device(kernel_id: str, nvml_id: str | None) -> bool:
    """Match the kernel's "0000:9b:00" with NVML's "00000000:9B:00.0"."""
    if not nvml_id:
        return False
    return _pci_key(kernel_id) == _pci_key(nvml_id)


def _pci_key(text: str) -> tuple[int, int, int] | None:
    parts = text.strip().lower().split(".")[0].split(":")
    try:
        if len(parts) == 3:
            return int(parts[0], 16), int(parts[1], 16), int(parts[2], 16)
        if len(parts) == 2:
            return 0, int(parts[0], 16), int(parts[1], 16)
    except ValueError:
        return None
    return None



def to_events(found: list[KernelXid], gpus: Iterable[Gpu], default_time: float) -> list[XidEvent]:
    """Turn parsed kernel lines into snapshot events, matching GPUs by PCI bus id.

    A line whose device is not among `gpus` belongs to a card this host no longer lists:
    its event has no GPU (shown as "GPU unknown", never pinned on an index) and names the
    PCI address instead.
    """
    gpus = list(gpus)
    events = []
    for item in found:
        gpu = next((g for g in gpus if same_pci_device(item.pci_bus_id, g.pci_bus_id)), None)
        detail = item.detail
        if item.process:
            detail = f"pid {item.pid} ({item.process}): {detail}"
        if gpu is None:
            detail = f"PCI {item.pci_bus_id}" + (f": {detail}" if detail else "")
        when = item.time if item.time is not None else default_time
        events.append(XidEvent(gpu=None if gpu is None else gpu.index, xid=item.xid, time=when,
                               detail=detail or None))
    return events
