"""Each host in one line's worth of facts: its cards free / busy / reserved / broken /
unknown, its worst warning and its rank among the hosts (down, then CRITICAL, then
WARNING, then the rest).  Pure: no I/O.

The one home of these answers: the cluster overview (ui/cluster_cells.py) colours its
cells and orders its rows with them, `--once` prints its first block (one line per host)
from them, so that the two never call one card or one host two things.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gputop import model
from gputop.analysis import pick as picking
from gputop.analysis.hostview import HostView, view
from gputop.model import Gpu, HealthWarning, HostSnapshot
from gputop.records import Record, record

FREE_UTIL = 5  # % SM at or below which a card counts as free...
FREE_MEM = 5.0  # ...when also at most this % of its memory is used

FREE, BUSY, BROKEN, RESERVED, UNKNOWN = "free", "busy", "broken", "reserved", "unknown"
KINDS = (FREE, BUSY, RESERVED, BROKEN, UNKNOWN)  # the order every count is said in

DOWN, CRITICAL, WARNED, FINE = range(4)  # a host's rank, worst first


def gpu_class(gpu: Gpu, snap: HostSnapshot, now: float, warned: bool = False,
              shown: HostView | None = None) -> str:
    """free / busy / reserved / broken / unknown for one card; ``warned``: some warning
    names the card; ``shown``: the host's view at ``now``, when the caller has it (one
    per host, not one per card)."""
    if gpu.state != model.GPU_OK:
        return BROKEN
    if warned and gpu.ecc_volatile_uncorrected:
        return BROKEN
    card = (shown or view(snap, now)).card(gpu.index)
    if card is not None and card.reserved:
        return RESERVED
    if picking.unknown(gpu):
        return UNKNOWN  # unknown is never free
    busy_util = gpu.util_gpu is not None and gpu.util_gpu > FREE_UTIL
    busy_mem = gpu.mem_percent is not None and gpu.mem_percent > FREE_MEM
    held = any(p.gpu == gpu.index for p in snap.processes)
    return BUSY if busy_util or busy_mem or held else FREE


def problem_rank(snap: HostSnapshot, worst: str | None) -> int:
    """Down (no data: refused, timed out, stale...), then a CRITICAL warning, then a
    WARNING, then the rest; ``worst``: the severity of the host's most severe warning.
    A host still connecting for the first time is not known to have a problem."""
    if not snap.ok and snap.state != model.HOST_CONNECTING:
        return DOWN
    if worst == model.CRITICAL:
        return CRITICAL
    return WARNED if worst == model.WARNING else FINE


def worst_by_host(warnings: Iterable[HealthWarning]) -> dict[str, HealthWarning]:
    """Each host's most severe warning (the first of its severity)."""
    out: dict[str, HealthWarning] = {}
    for w in warnings:
        if w.host is None:
            continue
        had = out.get(w.host)
        if had is None or _severity(w) < _severity(had):
            out[w.host] = w
    return out


def worst_warnings(warnings: Iterable[HealthWarning]) -> dict[str, str]:
    """Each host's most severe severity."""
    return {host: w.severity for host, w in worst_by_host(warnings).items()}


def _severity(w: HealthWarning) -> int:
    return model.SEVERITY_ORDER.get(w.severity, 9)


@record(frozen=True, slots=True)
class HostStatus(Record):
    """One host's line: its state is ``snapshot.state``, why ``snapshot.error``."""

    snapshot: HostSnapshot
    gpus: dict[str, int]  # KINDS -> how many cards (zeros left out)
    worst: HealthWarning | None  # its most severe warning; for a host down, why
    rank: int  # DOWN, CRITICAL, WARNED or FINE


def status(snap: HostSnapshot, warnings: Sequence[HealthWarning], now: float) -> HostStatus:
    """``warnings``: the host's own (the rules' findings of this snapshot)."""
    warned = {w.gpu for w in warnings if w.gpu is not None}
    shown = view(snap, now)
    gpus: dict[str, int] = {}
    for gpu in snap.gpus:
        kind = gpu_class(gpu, snap, now, gpu.index in warned, shown)
        gpus[kind] = gpus.get(kind, 0) + 1
    worst = min(warnings, key=_severity, default=None)  # the first of the most severe
    rank = problem_rank(snap, worst.severity if worst is not None else None)
    return HostStatus(snapshot=snap, gpus=gpus, worst=worst, rank=rank)


def problems_first(statuses: Iterable[HostStatus]) -> list[HostStatus]:
    """Down, CRITICAL, WARNING, the rest; each group in the given (the hosts file's)
    order."""
    return sorted(statuses, key=lambda s: s.rank)  # sorted() is stable
