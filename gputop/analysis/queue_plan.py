"""Who runs next in a host's `gputop run` queue, and why the others wait. Pure: no I/O.

Every waiting `gputop run` computes the same plan from the same facts (the job files,
the reservations, the GPUs) and starts only when the plan gives it cards, so the line
needs no server. The rules:

- Order: priority (high, normal, low), then arrival (the job file's change time, which
  only the kernel sets), then the job id.
- A job that does not fit now does not block a later job that fits (backfill), unless
  it has waited longer than the policy's starvation limit: then nobody behind it starts
  until it has run.
- A card fits a job when pick's rules accept it (``picking.choose``: healthy, unreserved,
  free memory and utilisation as asked, no other user's compute process on it unless the
  job says --share; a one-GPU job takes a MIG device before a whole card, unless --whole).
- The host's policy (``gputop.policy``) caps GPUs per user, the duration, who may ask for
  high priority, and when big jobs may start.
- A job the plan has given cards but that does not take them within the policy's turn
  limit (its `gputop run` is stopped, or the file names some other process) loses its
  turn: ``Turns`` notes, per waiting `gputop run`, when each other job's turn came, and
  moves a job that let it pass to the back of that run's plan.
- A user whose GPU-hour quota is spent (``quota.Hold``, re-read while jobs wait): their
  jobs wait at low priority (``over: wait``) or do not start (``over: refuse``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop import model
from gputop.analysis import fair_share
from gputop.analysis import pick as picking
from gputop.analysis.durations import format_duration
from gputop.analysis.quota import Hold
from gputop.model import HostSnapshot, QueueJob

PRIORITY_RANK = {"high": 0, "normal": 1, "low": 2}
DEFAULT_STARVATION_S = 30 * 60.0
DEFAULT_TURN_S = 60.0  # a head job that takes its cards later than this loses its turn
MIN_TURN_S = 15.0  # a waiting run looks every 5 s at least: never pass a live one


@dataclass(frozen=True)
class Window:
    """Hours (local time of the host) and days when big jobs may start."""

    start_minute: int  # minutes after midnight; a window may cross midnight
    end_minute: int
    weekends: bool = True  # all of Saturday and Sunday too

    def open_at(self, when: dt.datetime) -> bool:
        if self.weekends and when.weekday() >= 5:
            return True
        minute = when.hour * 60 + when.minute
        if self.start_minute <= self.end_minute:
            return self.start_minute <= minute < self.end_minute
        return minute >= self.start_minute or minute < self.end_minute

    def describe(self) -> str:
        def hhmm(m: int) -> str:
            return f"{m // 60:02d}:{m % 60:02d}"

        days = " and on weekends" if self.weekends else ""
        return f"{hhmm(self.start_minute)}-{hhmm(self.end_minute)}{days}"


@dataclass(frozen=True)
class Policy:
    """A host's rules for `gputop run` (/etc/gputop/policy.yaml); the default has none."""

    max_gpus_per_user: int | None = None
    max_duration_s: float | None = None
    starvation_s: float = DEFAULT_STARVATION_S
    high_priority_users: frozenset[str] | None = None  # None: everyone may ask
    big_job_gpus: int | None = None  # jobs with more GPUs than this start only in...
    big_job_window: Window | None = None  # ...this window
    source: str | None = None  # the file it came from, for messages
    fair_share_half_life_s: float | None = None  # fair share among equal priorities
    fair_share_ledger: str | None = None  # the one ledger every user's plan reads
    fair_share_accounts: fair_share.Accounts | None = None  # shares (None: one each)
    turn_s: float = DEFAULT_TURN_S  # a job given cards must take them within this

    def may_use_high(self, user: str) -> bool:
        return self.high_priority_users is None or user in self.high_priority_users

    def is_big(self, gpus: int) -> bool:
        return self.big_job_gpus is not None and gpus > self.big_job_gpus


@dataclass(frozen=True)
class Plan:
    """Which waiting jobs start now and on which cards; why the others wait."""

    starts: dict[str, tuple[int | str, ...]] = field(default_factory=dict)  # str: a MIG UUID
    waiting: dict[str, str] = field(default_factory=dict)
    position: dict[str, int] = field(default_factory=dict)  # 1 = next in line
    running: dict[str, tuple[int, ...]] = field(default_factory=dict)
    kept: dict[str, Kept] = field(default_factory=dict)  # the first blocked job's cards


def refusal(
    user: str, gpus: int, priority: str, for_s: float | None, policy: Policy
) -> str | None:
    """Why the policy refuses a request outright (before it joins the line), or None."""
    where = f" ({policy.source})" if policy.source else ""
    if policy.max_gpus_per_user is not None and gpus > policy.max_gpus_per_user:
        return (f"{gpus} GPUs asked, but at most {policy.max_gpus_per_user} per user"
                f" may be used at once{where}")
    if policy.max_duration_s is not None and (for_s is None or for_s > policy.max_duration_s):
        asked = format_duration(for_s) if for_s is not None else "no --for"
        return (f"{asked}: jobs may run at most {format_duration(policy.max_duration_s)}"
                f"; give --for{where}")
    if priority == "high" and not policy.may_use_high(user):
        return f"{user} may not use --priority high{where}"
    return None


def impossible(snapshot: HostSnapshot, job: QueueJob) -> str | None:
    """Why this host can never give ``job`` its cards, whatever ends or frees up: cards it
    does not have, more cards than it has, more memory than its cards hold. None when it
    could. Such a request is refused at submission; a file asking for it counts for
    nothing in the line (it would otherwise hold everyone back once it starved)."""
    have = {gpu.index: gpu for gpu in snapshot.gpus}
    if not have:
        return None  # no cards seen (yet): nothing to judge by
    span = f"GPU {min(have)}-{max(have)}" if len(have) > 1 else f"GPU {min(have)}"
    if job.gpu_ids:
        missing = [i for i in job.gpu_ids if i not in have]
        if missing:
            listed = ",".join(str(i) for i in missing[:4])
            return f"{snapshot.host} has no GPU {listed} (it has {span})"
        candidates = [have[i] for i in job.gpu_ids]
    else:
        candidates = list(have.values())
    count = requested(job)
    if count > len(have):
        return f"{count} GPUs asked, but {snapshot.host} has {len(have)}"
    if job.min_free_mem:
        big = [g for g in candidates if g.mem_total is None or g.mem_total >= job.min_free_mem]
        if len(big) < count:
            return (f"{job.min_free_mem / 2**30:.0f} GiB free asked on {count} GPU(s), but"
                    f" {len(big)} of {snapshot.host}'s cards hold that much")
    return None


def requested(job: QueueJob) -> int:
    return len(job.gpu_ids) if job.gpu_ids else (job.gpus or 1)


def want_of(job: QueueJob, taken: Iterable[int | str] = ()) -> picking.Want:
    """What a job in line asks of the cards, as pick's rule reads it: a card reserved by
    anyone, the submitter included, is not free for a job; ``taken``: what the jobs
    ahead of it have."""
    return picking.Want(requested(job), job.min_free_mem, job.max_util, job.share, job.whole,
                        me=job.user, exclude=frozenset(taken), own_reservations=False)


def ordered(jobs: Iterable[QueueJob], policy: Policy,
            usage: Mapping[str, float] | None = None,
            quota: Mapping[str, Hold] | None = None,
            passed: Mapping[str, str] | None = None) -> list[QueueJob]:
    """Waiting order. A priority the policy does not allow counts as normal (the file
    is the submitter's word; the policy is the host's), and a user held by their quota
    counts as low. With fair share, among equal priorities the user with the higher
    fair-share factor (fewer recent, decayed GPU-hours for their shares) goes first. Jobs
    that lost their turn (``passed``) come after all others."""
    jobs = list(jobs)
    users = _shares(policy, usage, jobs)
    held = quota or {}
    late = passed or {}

    def key(job: QueueJob) -> tuple[bool, int, float, float, str]:
        return (job.id in late, PRIORITY_RANK.get(_priority(job, policy, held), 1),
                fair_share.rank_key(job.user, users), job.submitted, job.id)

    return sorted(jobs, key=key)


def _shares(policy: Policy, usage: Mapping[str, float] | None,
            jobs: Iterable[QueueJob]) -> dict[str, fair_share.Row]:
    """Each user's row of the share table, under the policy's fair share (else none)."""
    if usage is None or not policy.fair_share_half_life_s:
        return {}
    return fair_share.shares(usage, policy.fair_share_accounts,
                             {job.user for job in jobs}).by_user()


def _priority(job: QueueJob, policy: Policy, quota: Mapping[str, Hold] | None = None) -> str:
    if quota and job.user in quota:
        return "low"
    if job.priority == "high" and not policy.may_use_high(job.user):
        return "normal"
    return job.priority


def plan(
    snapshot: HostSnapshot,
    policy: Policy,
    now: float,
    warnings: Sequence[model.HealthWarning] = (),
    tz: dt.tzinfo | None = None,
    usage: Mapping[str, float] | None = None,
    passed: Mapping[str, str] | None = None,
    avoid: Mapping[int, str] | None = None,
    quota: Mapping[str, Hold] | None = None,
) -> Plan:
    """The plan for ``snapshot.queue`` given the cards and reservations of ``snapshot``;
    ``usage``: each user's decayed GPU-hours, for the policy's fair share; ``passed``:
    jobs that let their turn pass (``Turns``), and why, placed last; ``avoid``: cards
    this reader could not lock lately, and why (no job is planned on them); ``quota``: the
    users whose GPU-hour quota is spent, and what that does to their jobs."""
    running = running_jobs(snapshot, now)
    result = Plan(running=running)
    held: dict[str, int] = {}
    for reservation in picking.active_reservations(snapshot, now).values():
        held[reservation.user] = held.get(reservation.user, 0) + 1
    blocked = dict(avoid or {})
    taken: set[int | str] = set(blocked)
    ends = _running_ends(snapshot, now, running)  # card -> when it frees, where known
    kept: Kept | None = None  # the first blocked job's cards and when it gets them
    holding_back: QueueJob | None = None
    late = passed or {}
    waiting = ordered((job for job in snapshot.queue if job.id not in running), policy,
                      usage, quota, late)
    held_by = quota or {}
    local_now = dt.datetime.fromtimestamp(now, tz)
    never = {job.id: why for job in waiting if (why := impossible(snapshot, job))}
    for job in waiting:
        if job.id in never:
            result.waiting[job.id] = f"never runs here: {never[job.id]}; not in line"
    waiting = [job for job in waiting if job.id not in never]
    for position, job in enumerate(waiting, 1):
        result.position[job.id] = position
        head = f"{_ordinal(position)} in line for {_ask(job)}"
        if job.id in late:
            head += f" (lost its turn: {late[job.id]})"
        if holding_back is not None:
            result.waiting[job.id] = (
                f"{head}; held back: {holding_back.user}'s job {holding_back.id} has waited"
                f" {format_duration(now - holding_back.submitted)} and goes first")
            continue
        hold = held_by.get(job.user)
        if hold is not None and hold.refuse:
            result.waiting[job.id] = f"{head}; held by the quota: {hold.message}"
            continue
        count = requested(job)
        rule = _policy_wait(job, count, held, policy, local_now)
        if rule:
            result.waiting[job.id] = f"{head}; {rule}"
            continue
        cards, why = _backfill(snapshot, job, now, taken, warnings, kept, blocked)
        if cards:
            result.starts[job.id] = cards
            taken.update(cards)
            ends.update(dict.fromkeys((c for c in cards if isinstance(c, int)),
                                      now + job.for_s if job.for_s else INF))
            held[job.user] = held.get(job.user, 0) + len(cards)
            continue
        if kept is None and not why.startswith("would delay"):
            kept = keep_for(snapshot, job, now, ends, taken, warnings)
            if kept is not None:
                result.kept[job.id] = kept
                why += (f"; GPU {','.join(map(str, kept.cards))} kept for it from"
                        f" {_clock(kept.at, now)}")
        if hold is not None:
            why += f"; at low priority: {hold.message}"
        result.waiting[job.id] = f"{head}; {why}"
        if (now - job.submitted > policy.starvation_s and job.id not in result.kept
                and job.id not in late):
            # No known time when its cards free: the old rule, hold back everyone.
            holding_back = job
    return result


INF = float("inf")


class Turns:
    """One waiting `gputop run`'s memory of whose turn came when (pure: no I/O).

    The plan gives a job cards; only that job's own `gputop run` can take them. One that
    never does (stopped with Ctrl+Z or SIGSTOP, or a job file naming some other living
    process of its owner) would hold the line for good, so each waiting run notes when
    it first saw another job given cards, and once that job has let them sit for the
    policy's turn limit, plans with it moved to the back. The clock is each reader's
    own: no file a neighbour writes can make a job lose its turn sooner. A job is never
    passed over by its own run, so once it wakes it takes the first cards it is given."""

    def __init__(self, me: str | None = None,
                 why: Callable[[QueueJob], str] | None = None) -> None:
        self.me = me
        self.why = why or (lambda _job: "its gputop run did not take its cards")
        self.since: dict[str, float] = {}  # job id -> when it was first given cards
        self.passed: dict[str, str] = {}  # job id -> why it lost its turn
        self.news: list[str] = []  # a line per job passed over, for the caller to say

    def plan(self, snapshot: HostSnapshot, policy: Policy, now: float,
             warnings: Sequence[model.HealthWarning] = (), tz: dt.tzinfo | None = None,
             usage: Mapping[str, float] | None = None,
             avoid: Mapping[int, str] | None = None,
             quota: Mapping[str, Hold] | None = None) -> Plan:
        jobs = {job.id: job for job in snapshot.queue}
        for gone in [j for j in self.passed if j not in jobs]:
            del self.passed[gone]
        for _ in range(len(jobs) + 1):  # each round passes over one more job, or ends
            result = plan(snapshot, policy, now, warnings, tz, usage, self.passed, avoid, quota)
            given = {j for j in result.starts if j != self.me and j not in self.passed}
            self.since = {j: self.since.get(j, now) for j in given}
            late = [j for j in given if now - self.since[j] >= policy.turn_s]
            if not late:
                return result
            for job_id in late:
                job = jobs[job_id]
                why = (f"given GPU {','.join(map(str, result.starts[job_id]))}"
                       f" {format_duration(now - self.since.pop(job_id))} ago and did not"
                       f" take them ({self.why(job)})")
                self.passed[job_id] = why
                self.news.append(f"{job.user}'s job {job_id} lost its turn: {why}")
        return result


@dataclass(frozen=True)
class Kept:
    """The cards the first blocked job will get and when (EASY backfill's reservation):
    later jobs start on them only if they end before (their --for says so)."""

    job: str
    user: str
    cards: tuple[int, ...]
    at: float


def _running_ends(snapshot: HostSnapshot, now: float,
                  running: dict[str, tuple[int, ...]]) -> dict[int, float]:
    """When each reserved card frees, as far as anyone knows: a plain reservation at its
    end, a running job at its start plus its --for (a job without --for: never known)."""
    jobs = {job.id: job for job in snapshot.queue}
    ends: dict[int, float] = {}
    for gpu, reservation in picking.active_reservations(snapshot, now).items():
        if reservation.job is None:
            ends[gpu] = reservation.until
            continue
        job = jobs.get(reservation.job)
        if job is None or job.for_s is None:
            ends[gpu] = INF
        else:
            ends[gpu] = max(now, _started(snapshot, reservation.job) + job.for_s)
    return ends


def _started(snapshot: HostSnapshot, job_id: str) -> float:
    """When a running job started: its first reservation's start."""
    times = [r.since for r in snapshot.reservations if r.job == job_id]
    return min(times) if times else snapshot.time


def keep_for(snapshot: HostSnapshot, job: QueueJob, now: float, ends: dict[int, float],
             taken: Iterable[int | str] = (), warnings: Sequence[model.HealthWarning] = ()
             ) -> Kept | None:
    """The earliest time ``job`` could have its cards, from the known ends of what holds
    them, and which cards; None when that time is not known (a card it needs is held by
    a job without --for, another user's process, or is unhealthy)."""
    # pick's rule, as in fit: another user's card only with --share; a reserved card
    # (the submitter's too) is not free now.
    ranking = picking.rank(snapshot, want_of(job, taken), now, warnings=warnings)
    reserved = picking.active_reservations(snapshot, now)
    users: dict[int, set[str]] = {}
    for proc in snapshot.processes:
        if proc.type != "G":
            users.setdefault(proc.gpu, set()).add(proc.user or "")
    free_at: dict[int, float] = {}
    for gpu in snapshot.gpus:
        i = gpu.index
        if i in ranking.indexes:
            free_at[i] = now
        elif i in ends and (i in reserved or i in set(taken)):
            holder = reserved[i].user if i in reserved else job.user
            # Only the holder's (and the job's user's) processes go when it ends.
            strangers = users.get(i, set()) - {holder, job.user}
            free_at[i] = INF if strangers else ends[i]
        else:
            free_at[i] = INF
    if job.gpu_ids:
        at = max(free_at.get(i, INF) for i in job.gpu_ids)
        cards = tuple(job.gpu_ids)
    else:
        count = requested(job)
        soonest = sorted(free_at.values())
        if len(soonest) < count:
            return None
        at = soonest[count - 1]
        # Of the cards free by then, keep those that free last: cards free now that
        # the job does not need stay free for others.
        ready = sorted((i for i in free_at if free_at[i] <= at), key=lambda i: (-free_at[i], i))
        cards = tuple(sorted(ready[:count]))
    if at == INF:
        return None
    return Kept(job.id, job.user, cards, at)


def _backfill(snapshot: HostSnapshot, job: QueueJob, now: float, taken: set[int | str],
              warnings: Sequence[model.HealthWarning], kept: Kept | None,
              blocked: Mapping[int, str]) -> tuple[tuple[int | str, ...], str]:
    """``fit``, keeping the first blocked job's cards for it: a later job gets them only
    when its --for ends before that job's time comes."""
    if kept is None:
        return fit(snapshot, job, now, taken, warnings, blocked)
    cards, why = fit(snapshot, job, now, taken | set(kept.cards), warnings, blocked)
    if cards:
        return cards, why
    if job.for_s is not None and now + job.for_s <= kept.at:
        return fit(snapshot, job, now, taken, warnings, blocked)
    whole, _ = fit(snapshot, job, now, taken, warnings, blocked)
    if not whole:
        return (), why
    given = "its --for ends after that" if job.for_s else "it has no --for to end before"
    return (), (f"would delay {kept.user}'s job {kept.job} (GPU"
                f" {','.join(map(str, kept.cards))} kept for it from {_clock(kept.at, now)};"
                f" {given})")


def _clock(when: float, now: float) -> str:
    at = dt.datetime.fromtimestamp(when).strftime("%H:%M")
    return f"{at} (in {format_duration(max(0.0, when - now))})"


def listing(snapshot: HostSnapshot, policy: Policy, now: float,
            usage: Mapping[str, float] | None = None,
            quota: Mapping[str, Hold] | None = None) -> list[dict[str, Any]]:
    """One dict per job of ``snapshot`` (docs/queue.md, `gputop queue --json`): running
    ones first, then the line in order."""
    result = plan(snapshot, policy, now, usage=usage, quota=quota)
    shares = share_notes(snapshot, policy, result, usage)
    order = [j for j in snapshot.queue if j.id in result.running]
    order += sorted((j for j in snapshot.queue if j.id in result.position),
                    key=lambda j: result.position[j.id])
    # Files asking for what the host does not have: shown last, out of line.
    order += [j for j in snapshot.queue
              if j.id not in result.running and j.id not in result.position]
    rows = []
    for job in order:
        running = result.running.get(job.id)
        rows.append({
            "host": snapshot.host, "id": job.id, "user": job.user, "priority": job.priority,
            "state": "running" if running else (
                "waiting" if job.id in result.position else "never"),
            "position": result.position.get(job.id), "gpus_held": list(running or ()),
            # A running job waited from arrival to its start; a waiting one, until now.
            "waited_s": round((_started(snapshot, job.id) if running else now)
                              - job.submitted, 1),
            "request": {"gpus": job.gpus, "gpu_ids": list(job.gpu_ids or ()) or None,
                        "min_free_mem": job.min_free_mem, "max_util": job.max_util,
                        "for_s": job.for_s},
            "command": job.command, "note": job.note,
            "why": None if running else result.waiting.get(job.id) or "starting",
            "share": shares.get(job.id),
            "quota": None if running or not quota or job.user not in quota
            else quota[job.user].message,
        })
    return rows


def share_notes(snapshot: HostSnapshot, policy: Policy, result: Plan,
                usage: Mapping[str, float] | None) -> dict[str, dict[str, Any]]:
    """For each waiting job under fair share: its user's decayed GPU-hours, their part of
    everyone's, and why it stands where it does against jobs of the same priority."""
    half_life = policy.fair_share_half_life_s
    if not half_life or usage is None:
        return {}
    hours = {user: usage.get(user, 0.0) for user in {*usage, *(j.user for j in snapshot.queue)}}
    parts = fair_share.fractions(hours)
    table = _shares(policy, usage, snapshot.queue)
    waiting = sorted((j for j in snapshot.queue if j.id in result.position),
                     key=lambda j: result.position[j.id])
    notes: dict[str, dict[str, Any]] = {}
    for job in waiting:
        mine = hours.get(job.user, 0.0)
        same = [o for o in waiting if o.user != job.user
                and _priority(o, policy) == _priority(job, policy)]
        ahead_of = sorted({o.user for o in same if o.submitted < job.submitted
                           and result.position[o.id] > result.position[job.id]})
        behind = sorted({o.user for o in same if o.submitted > job.submitted
                         and result.position[o.id] < result.position[job.id]})
        why = (f"{job.user} used {mine:.1f} GPU-h recently (half-life"
               f" {format_duration(half_life)}), {100 * parts.get(job.user, 0.0):.0f} % of"
               " the host's")
        row = table.get(job.user) if policy.fair_share_accounts is not None else None
        if row is not None:
            why += f"; account {row.account}, fair-share factor {row.factor:.3f}"
        if ahead_of:
            why += "; ahead of earlier jobs of " + ", ".join(
                f"{u} ({hours.get(u, 0.0):.1f})" for u in ahead_of)
        if behind:
            why += "; behind later jobs of " + ", ".join(
                f"{u} ({hours.get(u, 0.0):.1f})" for u in behind)
        notes[job.id] = {"gpu_hours": round(mine, 3),
                         "fraction": round(parts.get(job.user, 0.0), 4), "why": why}
        if row is not None:
            notes[job.id].update(account=row.account, factor=round(row.factor, 4))
    return notes


def running_jobs(snapshot: HostSnapshot, now: float) -> dict[str, tuple[int, ...]]:
    """Job id -> the cards its active reservations hold."""
    found: dict[str, list[int]] = {}
    for reservation in snapshot.reservations:
        if reservation.job and reservation.active(now):
            found.setdefault(reservation.job, []).append(reservation.gpu)
    return {job: tuple(sorted(cards)) for job, cards in found.items()}


def fit(
    snapshot: HostSnapshot,
    job: QueueJob,
    now: float,
    taken: Iterable[int | str] = (),
    warnings: Sequence[model.HealthWarning] = (),
    blocked: Mapping[int, str] | None = None,
) -> tuple[tuple[int | str, ...], str]:
    """The cards (or the one MIG device, by UUID) ``job`` would get now, empty when it
    does not fit, and why not: pick's rule (``picking.choose``), with a card reserved by
    anyone, the submitter included, not free for a job; ``blocked``: cards whose lock
    this reader could not have, and why."""
    want = want_of(job, taken)
    reserved = picking.active_reservations(snapshot, now)
    locks = blocked or {}

    def why_not(key: int | str, why: str) -> str:
        if isinstance(key, int) or key.isdigit():
            card = int(key)
            if why == "excluded" and card in locks:
                return locks[card]
            return _why_not(why, reserved.get(card))
        return _why_not(why, None)

    if job.gpu_ids:
        ranking = picking.rank(snapshot, want, now, warnings=warnings)
        rejected = {i: why_not(i, why) for i, why in ranking.rejected.items()}
        missing = [i for i in job.gpu_ids if i not in ranking.indexes]
        if not missing:
            return tuple(job.gpu_ids), ""
        return (), _reasons({i: rejected.get(i, "no such GPU") for i in missing})
    answer = picking.choose(snapshot, want, now, warnings=warnings)
    if answer.units:
        return tuple(u.target for u in sorted(answer.units, key=lambda u: u.gpu.index)), ""
    units = answer.ranking or picking.DeviceRanking(())
    found = {k: why_not(k, why) for k, why in units.rejected.items()}
    cards = sum(1 for c in units.chosen if c.mig is None)
    return (), f"{cards} of {want.count} free; " + _reasons(found)


def _why_not(why: str, holder: model.Reservation | None) -> str:
    if why == "excluded":
        return "goes to a job ahead"
    if holder is not None and why.startswith("reserved by"):
        whose = f"{holder.user}'s job {holder.job}" if holder.job else holder.user
        until = dt.datetime.fromtimestamp(holder.until).strftime("%H:%M")
        return f"held by {whose} until {until}" if not holder.job else f"held by {whose}"
    return why


def _policy_wait(
    job: QueueJob, count: int, held: dict[str, int], policy: Policy, when: dt.datetime
) -> str | None:
    if policy.max_gpus_per_user is not None:
        have = held.get(job.user, 0)
        if have + count > policy.max_gpus_per_user:
            return (f"{job.user} holds {have} GPU(s); at most {policy.max_gpus_per_user}"
                    " per user at once")
    if policy.is_big(count) and policy.big_job_window and not policy.big_job_window.open_at(when):
        return (f"jobs of more than {policy.big_job_gpus} GPUs start only"
                f" {policy.big_job_window.describe()}")
    return None


def _reasons(rejected: dict[int, str] | dict[str, str], most: int = 4) -> str:
    parts = [f"GPU {i} {why}" for i, why in sorted(rejected.items())[:most]]
    if len(rejected) > most:
        parts.append(f"{len(rejected) - most} more")
    return ", ".join(parts) or "no GPU qualifies"


def _ask(job: QueueJob) -> str:
    if job.gpu_ids:
        what = "GPU " + ",".join(str(i) for i in job.gpu_ids)
    else:
        n = job.gpus or 1
        what = f"{n} GPU" + ("s" if n != 1 else "")
    if job.min_free_mem:
        what += f" with {job.min_free_mem / 2**30:.0f} GiB free"
    return what


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
