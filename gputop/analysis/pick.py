"""Choosing free cards; the reservation warnings are in health/reservations.py. Pure: no I/O.

One rule for `gputop pick`, `reserve --count` and `run` (``choose``; docs/reservations.md):

- "Free" means, without filters: no compute process listed on the card (a display server
  alone does not count). With --min-free-mem or --max-util I may share a card with my
  own processes within those limits.
- Filters only narrow: a card where another user's process runs is never chosen unless
  the request says ``share`` (--share), with or without filters.
- A card is never picked when it is lost or in error, has a critical warning, or is
  reserved by someone else (my own reservations are fine: that is what I reserved for);
  who holds a card or a MIG device is analysis/holders.py's answer.
- Unknown is never free: a card whose process list or memory could not be read may be
  running a 20 GiB job, so it is skipped with the reason. Nor is memory nobody listed:
  a card using more than the driver's own reserve beyond what its listed processes hold
  is "in use by something unseen" (a container's own pid namespace, a vGPU guest:
  ``orphans.unseen_use``), someone else's as far as ``share`` goes.
- MIG: a CUDA process sees one MIG device and nothing beside it, so an answer is whole
  cards or one MIG device, never a mix; a count above one is whole cards.  Fit first: a
  request one MIG device meets takes a MIG device, not a whole card a bigger job could
  use (``whole`` asks for a card).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from gputop import model
from gputop.analysis.holders import active_reservations, mig_reservations
from gputop.analysis.orphans import UNSEEN, unseen_use
from gputop.model import Gpu, HostSnapshot, MigDevice, Reservation
from gputop.records import MutableRecord, Record, field, record
from gputop.vendors import VISIBLE_DEVICES_NAME

MIG_UNIT = "MIG mode: its MIG devices are the unit (gputop pick / reserve)"


@record(frozen=True, slots=True)
class Want(Record):
    """One request for cards, the one record every rule below reads (pick, reserve
    --count, a `gputop run` job: ``reserve.wanted`` and ``queue_plan.want_of`` make it)."""

    count: int = 1
    min_free_mem: int | None = None  # bytes each unit needs free
    max_util: float | None = None  # % busy at most
    share: bool = False  # cards another user's process runs on may be chosen
    whole: bool = False  # whole cards only, never a MIG device
    me: str | None = None  # whose reservations and processes are mine
    # Whose processes are mine where that is not ``me``: in --demo the scenario's user,
    # whose reservations are the real user's (sources/identity.py, Identity.reserves_as).
    user: str | None = None
    # Cards (indexes) and MIG devices (UUIDs) not to choose: taken by someone else.
    exclude: frozenset[int | str] = frozenset()
    # False: a card I reserved by hand is not free either (a `gputop run` job must not
    # take it).
    own_reservations: bool = True


@record(frozen=True, slots=True)
class Ranking(Record):
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


def rank(snapshot: HostSnapshot, want: Want, now: float, *,
         warnings: Iterable[model.HealthWarning] = ()) -> Ranking:
    """All cards of one host that meet ``want`` (its ``count`` and ``whole`` aside), best
    first: most free memory, then lowest utilization, then lowest index (stable, so
    scripts get the same answer twice)."""
    reserved = active_reservations(snapshot, now)
    critical = {
        w.gpu: w.message for w in warnings if w.severity == model.CRITICAL and w.gpu is not None
    }
    excluded = {e for e in want.exclude if isinstance(e, int)}
    busy = _busy(snapshot, want.user or want.me, lambda proc: proc.gpu)
    unseen = unseen_use(snapshot)
    chosen: list[Gpu] = []
    rejected: dict[int, str] = {}
    for gpu in snapshot.gpus:
        why = _rejection(gpu, reserved, critical, busy.get(gpu.index), excluded, want,
                         unseen.get(gpu.index))
        if why:
            rejected[gpu.index] = why
        else:
            chosen.append(gpu)
    chosen.sort(key=lambda g: (-(g.mem_free or 0), g.util_gpu or 0, g.index))
    return Ranking(tuple(chosen), rejected)


def pick(snapshot: HostSnapshot, want: Want, now: float, *,
         warnings: Iterable[model.HealthWarning] = ()) -> list[Gpu]:
    """The best ``want.count`` cards, or fewer when fewer qualify (callers check the length)."""
    return list(rank(snapshot, want, now, warnings=warnings).chosen[: want.count])


OTHERS = "in use by another user"  # the start of that rejection, for callers that explain it


@record(frozen=False, slots=True)
class _Load(MutableRecord):
    """Compute processes on one card or MIG device: mine, and the other users'."""

    mine: int = 0
    others: set[str] = field(default_factory=set)
    hidden: int = 0  # processes whose user gputop cannot see (another namespace, no /proc)

    def whose(self) -> str:
        """The other users, in words: "bob, carol", "bob and a process of a user gputop
        cannot see" (an unknown user may be anyone: not mine, and no name to give)."""
        named = ", ".join(sorted(self.others))
        if not self.hidden:
            return named
        unseen = ("a process of a user" if self.hidden == 1
                  else f"{self.hidden} processes of users") + " gputop cannot see"
        return f"{named} and {unseen}" if named else unseen


def _busy(snapshot: HostSnapshot, me: str | None,
          where: Callable[[model.GpuProcess], Hashable | None]) -> dict[Hashable, _Load]:
    loads: dict[Hashable, _Load] = {}
    for proc in snapshot.processes:
        if proc.type == "G":  # a display server alone does not make a card busy
            continue
        key = where(proc)
        if key is None:
            continue
        load = loads.setdefault(key, _Load())
        if me is not None and proc.user == me:
            load.mine += 1
        else:
            # A process whose user is unknown may be anyone's: not mine.
            if proc.user:
                load.others.add(proc.user)
            else:
                load.hidden += 1
    return loads


def _held_by_other(reservation: Reservation | None, want: Want) -> str | None:
    if reservation is None:
        return None
    if reservation.user != want.me or not want.own_reservations:
        return f"reserved by {reservation.user}"
    return None


def _rejection(
    gpu: Gpu,
    reserved: dict[int, Reservation],
    critical: dict[int, str],
    load: _Load | None,
    excluded: set[int],
    want: Want,
    unseen: str | None = None,
) -> str | None:
    if gpu.index in excluded:
        return "excluded"
    if gpu.state != model.GPU_OK:
        return gpu.state if not gpu.error else f"{gpu.state}: {gpu.error}"
    held = _held_by_other(reserved.get(gpu.index), want)
    if held:
        return held
    if gpu.index in critical:
        return critical[gpu.index]
    blind = unknown(gpu)
    if blind:
        return blind
    if gpu.mig_devices:
        return MIG_UNIT  # after the reasons that hold for each of its MIG devices too
    if unseen and not want.share:
        return unseen  # someone's, though no process is listed: not free
    return _load_rejection(load, want, gpu.mem_free, gpu.util_gpu, "utilization unknown")


def _load_rejection(load: _Load | None, want: Want, free: int | None, util: float | None,
                    no_util: str) -> str | None:
    """The rule on processes and limits, the same for a card and a MIG device."""
    if load is not None and (load.others or load.hidden) and not want.share:
        return f"{OTHERS} ({load.whose()})"
    if want.min_free_mem is None and want.max_util is None:
        if load is not None and load.mine and not want.share:
            return f"{load.mine} process(es) running"
        return None
    return _limits(free, util, want, no_util)


def _limits(free: int | None, util: float | None, want: Want, no_util: str) -> str | None:
    """Why a card or MIG device misses --min-free-mem or --max-util, or None."""
    min_free_mem, max_util = want.min_free_mem, want.max_util
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


@record(frozen=True, slots=True)
class Choice(Record):
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


@record(frozen=True, slots=True)
class DeviceRanking(Record):
    chosen: tuple[Choice, ...]
    rejected: dict[str, str] = field(default_factory=dict)


def rank_devices(snapshot: HostSnapshot, want: Want, now: float, *,
                 warnings: Iterable[model.HealthWarning] = ()) -> DeviceRanking:
    """Like ``rank``, with each card in MIG mode replaced by its MIG devices: a MIG
    device is free of processes, has the free memory, or is idle enough (GPM activity;
    unknown without GPM) on its own; its card's reservation by someone else, a critical
    warning or a lost card rule it out too."""
    cards = rank(snapshot, want, now, warnings=warnings)
    excluded = {e for e in want.exclude if isinstance(e, str)}
    chosen = [Choice(gpu) for gpu in cards.chosen]
    rejected = {str(i): why for i, why in cards.rejected.items()}
    held = mig_reservations(snapshot, now)
    busy = _busy(snapshot, want.user or want.me, lambda proc: None if proc.mig_device is None
                 else (proc.gpu, proc.mig_device))
    for gpu in snapshot.gpus:
        if not gpu.mig_devices or gpu.state != model.GPU_OK:
            continue
        card_why = _card_rejection(rejected.pop(str(gpu.index), None))
        for dev in gpu.mig_devices:
            reservation = held.get(dev.uuid or "")
            why = card_why or _mig_rejection(dev, reservation, busy.get((gpu.index, dev.index)),
                                             excluded, want)
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
    load: _Load | None,
    excluded: set[str],
    want: Want,
) -> str | None:
    if dev.uuid is None:
        return f"no UUID (cannot be named in {VISIBLE_DEVICES_NAME})"
    if dev.uuid in excluded:
        return "excluded"
    held = _held_by_other(reservation, want)
    if held:
        return held
    return _load_rejection(load, want, dev.mem_free, dev.sm_active,
                           "utilization unknown (no GPM on this card)")


def others_on(snapshot: HostSnapshot, units: Iterable[int | str], now: float,
              me: str | None, user: str | None = None) -> dict[str, str]:
    """For each named unit (a card's index, a MIG device's label "0:1") that another
    user's process runs on, the rejection ``pick`` gives it without --share: what a
    reserve by hand should caution about.  A card in MIG mode counts its MIG devices'."""
    rejected = rank_devices(snapshot, Want(me=me, user=user), now).rejected
    mig_labels = {g.index: [d.label for d in g.mig_devices] for g in snapshot.gpus}
    out: dict[str, str] = {}
    for unit in units:
        labels = [str(unit)] + (mig_labels.get(unit, []) if isinstance(unit, int) else [])
        for label in labels:
            why = rejected.get(label, "")
            if why.startswith(OTHERS):
                out[label] = why
    return out


# -- the answer: what pick, reserve --count and run hand out ---------------------------


@record(frozen=True, slots=True)
class Answer(Record):
    """The units to hand out, all for one process: ``want.count`` whole cards, or one MIG
    device; empty when the request cannot be met now, with ``why`` (one line)."""

    units: tuple[Choice, ...]
    why: str = ""
    ranking: DeviceRanking | None = None

    @property
    def devices(self) -> list[str]:
        """The CUDA_VISIBLE_DEVICES entries."""
        return [unit.device for unit in self.units]


def choose(snapshot: HostSnapshot, want: Want, now: float, *,
           warnings: Iterable[model.HealthWarning] = ()) -> Answer:
    """The best units for ``want`` on one host (the module's rules): one MIG device when
    one is asked for and one qualifies (fit first, unless ``want.whole``), else the best
    ``want.count`` whole cards, else nothing and why."""
    ranking = rank_devices(snapshot, want, now, warnings=warnings)
    cards = [c for c in ranking.chosen if c.mig is None]
    migs = [c for c in ranking.chosen if c.mig is not None]
    if want.count == 1 and migs and not want.whole:
        return Answer((migs[0],), ranking=ranking)
    if len(cards) >= want.count:
        return Answer(tuple(cards[: want.count]), ranking=ranking)
    return Answer((), _shortfall(ranking, want, snapshot, len(cards), len(migs)), ranking)


def _shortfall(ranking: DeviceRanking, want: Want, snapshot: HostSnapshot, cards: int,
               migs: int) -> str:
    """One line: how many whole cards qualify, why the others do not, and what to ask."""
    rejected = dict(ranking.rejected)
    if want.count > 1 or want.whole:
        # The answer can only be whole cards: say why each card is not one.
        rejected = {k: why for k, why in rejected.items() if ":" not in k}
        rejected.update({str(g.index): "in MIG mode (its MIG devices are the units)"
                         for g in snapshot.gpus if g.mig_devices and str(g.index) not in rejected})
    reasons = "; ".join(f"GPU {k}: {why}" for k, why in sorted(rejected.items()))
    noun = "GPU" if want.count == 1 else "GPUs"
    head = f"only {cards} of {want.count} requested {noun} qualify"
    if want.count == 1 and want.whole:
        head = f"no whole GPU qualifies (--whole{_count(migs)})"
    line = f"{head} ({reasons})" if reasons else head
    if want.count > 1 and migs and not want.whole:
        line += (f"; {migs} MIG device(s) qualify, but one process sees only one MIG device:"
                 " ask for one (--count 1) per process")
    if not want.share and any(why.startswith((OTHERS, UNSEEN)) for why in rejected.values()):
        line += "; --share to use cards where other users' processes run"
    return line


def _count(migs: int) -> str:
    return f"; {migs} MIG device(s) would qualify" if migs else ""
