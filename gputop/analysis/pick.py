"""Choosing free cards; the reservation warnings are in health/reservations.py. Pure: no I/O.

"Free" means, without filters: no compute process listed on the card (a display server
alone does not count). With --min-free-mem or --max-util the user says what is acceptable
to share, and only those limits apply.
A card is never picked when it is lost or in error, has a critical warning, or is
reserved by someone else (my own reservations are fine: that is what I reserved for);
who holds a card or a MIG device is analysis/holders.py's answer.
Unknown is never free: a card whose process list or memory could not be read may be
running a 20 GiB job, so it is skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gputop import model
from gputop.analysis.holders import active_reservations, mig_reservations
from gputop.model import Gpu, HostSnapshot, MigDevice, Reservation

MIG_UNIT = "MIG mode: its MIG devices are the unit (gputop pick / reserve)"


@dataclass(frozen=True)
class Ranking:
    """The acceptable cards best first, and for every other card why it was left out."""

    chosen: tuple[Gpu, ...]
    rejected: dict[int, str] = field(default_factory=dict)

    @property
    def indexes(self) -> list[int]:
        return [gpu.index for gpu in self.chosen]

    def shortfall(self, count: int) -> str:
        """One line saying why fewer than `count` cards qualify."""
        have = len(self.chosen)
        reasons = "; ".join(f"GPU {i}: {why}" for i, why in sorted(self.rejected.items()))
        head = f"only {have} of {count} requested GPUs qualify"
        return f"{head} ({reasons})" if reasons else head


def unknown(gpu: Gpu) -> str | None:
    """Why a working card's load cannot be known (None: it can)."""
    if gpu.processes_error:
        return f"processes unknown ({gpu.processes_error})"
    if gpu.mem_used is None or gpu.mem_total is None:
        return "memory unknown"
    return None


def rank(
    snapshot: HostSnapshot,
    now: float,
    me: str | None = None,
    min_free_mem: int | None = None,
    max_util: float | None = None,
    warnings: Iterable[model.HealthWarning] = (),
    exclude: Iterable[int] = (),
) -> Ranking:
    """All acceptable cards of one host, best first: most free memory, then lowest
    utilization, then lowest index (stable, so scripts get the same answer twice)."""
    reserved = active_reservations(snapshot, now)
    critical = {
        w.gpu: w.message for w in warnings if w.severity == model.CRITICAL and w.gpu is not None
    }
    excluded = set(exclude)
    busy: dict[int, int] = {}
    for proc in snapshot.processes:
        if proc.type != "G":  # a display server alone does not make a card busy
            busy[proc.gpu] = busy.get(proc.gpu, 0) + 1
    chosen: list[Gpu] = []
    rejected: dict[int, str] = {}
    for gpu in snapshot.gpus:
        why = _rejection(gpu, reserved, critical, busy, excluded, me, min_free_mem, max_util)
        if why:
            rejected[gpu.index] = why
        else:
            chosen.append(gpu)
    chosen.sort(key=lambda g: (-(g.mem_free or 0), g.util_gpu or 0, g.index))
    return Ranking(tuple(chosen), rejected)


def pick(
    snapshot: HostSnapshot,
    count: int,
    now: float,
    me: str | None = None,
    min_free_mem: int | None = None,
    max_util: float | None = None,
    warnings: Iterable[model.HealthWarning] = (),
    exclude: Iterable[int] = (),
) -> list[Gpu]:
    """The best `count` cards, or fewer when fewer qualify (callers check the length)."""
    ranking = rank(snapshot, now, me, min_free_mem, max_util, warnings, exclude)
    return list(ranking.chosen[:count])


def _rejection(
    gpu: Gpu,
    reserved: dict[int, Reservation],
    critical: dict[int, str],
    busy: dict[int, int],
    excluded: set[int],
    me: str | None,
    min_free_mem: int | None,
    max_util: float | None,
) -> str | None:
    if gpu.index in excluded:
        return "excluded"
    if gpu.state != model.GPU_OK:
        return gpu.state if not gpu.error else f"{gpu.state}: {gpu.error}"
    reservation = reserved.get(gpu.index)
    if reservation is not None and reservation.user != me:
        return f"reserved by {reservation.user}"
    if gpu.index in critical:
        return critical[gpu.index]
    blind = unknown(gpu)
    if blind:
        return blind
    if gpu.mig_devices:
        return MIG_UNIT  # after the reasons that hold for each of its MIG devices too
    if min_free_mem is None and max_util is None:
        if busy.get(gpu.index):
            return f"{busy[gpu.index]} process(es) running"
        return None
    return _limits(gpu.mem_free, gpu.util_gpu, min_free_mem, max_util, "utilization unknown")


def _limits(free: int | None, util: float | None, min_free_mem: int | None,
            max_util: float | None, no_util: str) -> str | None:
    """Why a card or MIG device misses --min-free-mem or --max-util, or None."""
    if min_free_mem is not None:
        if free is None:
            return "free memory unknown"
        if free < min_free_mem:
            return f"{free / 2**30:.1f} GiB free"
    if max_util is not None:
        if util is None:
            return no_util
        if util > max_util:
            return f"{util} % busy"
    return None


# -- MIG devices as pickable units --------------------------------------------


@dataclass(frozen=True)
class Choice:
    """A unit pick and reserve hand out: a whole card, or one MIG device of a card."""

    gpu: Gpu
    mig: MigDevice | None = None

    @property
    def label(self) -> str:
        return self.mig.label if self.mig is not None else str(self.gpu.index)

    @property
    def target(self) -> int | str:
        """What a reserve request names: the card's index or the MIG device's UUID."""
        return self.mig.uuid if self.mig is not None and self.mig.uuid else self.gpu.index

    @property
    def device(self) -> str:
        """Its CUDA_VISIBLE_DEVICES entry."""
        return str(self.target)

    @property
    def mem_free(self) -> int | None:
        return self.mig.mem_free if self.mig is not None else self.gpu.mem_free

    @property
    def util(self) -> int | None:
        return self.mig.sm_active if self.mig is not None else self.gpu.util_gpu


@dataclass(frozen=True)
class DeviceRanking:
    chosen: tuple[Choice, ...]
    rejected: dict[str, str] = field(default_factory=dict)

    def shortfall(self, count: int) -> str:
        have = len(self.chosen)
        reasons = "; ".join(f"GPU {k}: {why}" for k, why in sorted(self.rejected.items()))
        head = f"only {have} of {count} requested GPUs qualify"
        return f"{head} ({reasons})" if reasons else head


def rank_devices(
    snapshot: HostSnapshot,
    now: float,
    me: str | None = None,
    min_free_mem: int | None = None,
    max_util: float | None = None,
    warnings: Iterable[model.HealthWarning] = (),
    exclude: Iterable[int | str] = (),
) -> DeviceRanking:
    """Like ``rank``, with each card in MIG mode replaced by its MIG devices: a MIG
    device is free of processes, has the free memory, or is idle enough (GPM activity;
    unknown without GPM) on its own; its card's reservation by someone else, a critical
    warning or a lost card rule it out too."""
    cards = rank(snapshot, now, me, min_free_mem, max_util, warnings,
                 [e for e in exclude if isinstance(e, int)])
    excluded = {e for e in exclude if isinstance(e, str)}
    chosen = [Choice(gpu) for gpu in cards.chosen]
    rejected = {str(i): why for i, why in cards.rejected.items()}
    held = mig_reservations(snapshot, now)
    busy: dict[tuple[int, int], int] = {}
    for proc in snapshot.processes:
        if proc.mig_device is not None and proc.type != "G":
            key = (proc.gpu, proc.mig_device)
            busy[key] = busy.get(key, 0) + 1
    for gpu in snapshot.gpus:
        if not gpu.mig_devices or gpu.state != model.GPU_OK:
            continue
        card_why = _card_rejection(rejected.pop(str(gpu.index), None))
        for dev in gpu.mig_devices:
            reservation = held.get(dev.uuid or "")
            why = card_why or _mig_rejection(dev, reservation, busy.get((gpu.index, dev.index)),
                                             excluded, me, min_free_mem, max_util)
            if why:
                rejected[dev.label] = why
            else:
                chosen.append(Choice(gpu, dev))
    chosen.sort(key=lambda c: (-(c.mem_free or 0), c.util or 0, c.gpu.index,
                               c.mig.index if c.mig is not None else -1))
    return DeviceRanking(tuple(chosen), rejected)


def _card_rejection(why: str | None) -> str | None:
    """A MIG card's own rejection, when it rules out all its MIG devices (excluded, lost,
    reserved by someone else, critical): anything but MIG_UNIT."""
    return None if why is None or why == MIG_UNIT else why


def _mig_rejection(
    dev: MigDevice,
    reservation: Reservation | None,
    busy: int | None,
    excluded: set[str],
    me: str | None,
    min_free_mem: int | None,
    max_util: float | None,
) -> str | None:
    if dev.uuid is None:
        return "no UUID (cannot be named in CUDA_VISIBLE_DEVICES)"
    if dev.uuid in excluded:
        return "excluded"
    if reservation is not None and reservation.user != me:
        return f"reserved by {reservation.user}"
    if min_free_mem is None and max_util is None:
        return f"{busy} process(es) running" if busy else None
    return _limits(dev.mem_free, dev.sm_active, min_free_mem, max_util,
                   "utilization unknown (no GPM on this card)")
