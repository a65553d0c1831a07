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
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop import model
from gputop.analysis import pick as picking
from gputop.analysis.durations import format_duration
from gputop.model import HostSnapshot, QueueJob

PRIORITY_RANK = {"high": 0, "normal": 1, "low": 2}
DEFAULT_STARVATION_S = 30 * 60.0


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


def requested(job: QueueJob) -> int:
    return len(job.gpu_ids) if job.gpu_ids else (job.gpus or 1)


def ordered(jobs: Iterable[QueueJob], policy: Policy) -> list[QueueJob]:
    """Waiting order. A priority the policy does not allow counts as normal (the file
    is the submitter's word; the policy is the host's)."""
    def key(job: QueueJob) -> tuple[int, float, str]:
        priority = job.priority
        if priority == "high" and not policy.may_use_high(job.user):
            priority = "normal"
        return PRIORITY_RANK.get(priority, 1), job.submitted, job.id

    return sorted(jobs, key=key)


def plan(
    snapshot: HostSnapshot,
    policy: Policy,
    now: float,
    warnings: Sequence[model.HealthWarning] = (),
    tz: dt.tzinfo | None = None,
) -> Plan:
    """The plan for ``snapshot.queue`` given the cards and reservations of ``snapshot``."""
    running = running_jobs(snapshot, now)
    result = Plan(running=running)
    held: dict[str, int] = {}
    for reservation in picking.active_reservations(snapshot, now).values():
        held[reservation.user] = held.get(reservation.user, 0) + 1
    taken: set[int | str] = set()
    holding_back: QueueJob | None = None
    waiting = ordered((job for job in snapshot.queue if job.id not in running), policy)
    local_now = dt.datetime.fromtimestamp(now, tz)
    for position, job in enumerate(waiting, 1):
        result.position[job.id] = position
        head = f"{_ordinal(position)} in line for {_ask(job)}"
        if holding_back is not None:
            result.waiting[job.id] = (
                f"{head}; held back: {holding_back.user}'s job {holding_back.id} has waited"
                f" {format_duration(now - holding_back.submitted)} and goes first")
            continue
        count = requested(job)
        rule = _policy_wait(job, count, held, policy, local_now)
        if rule:
            result.waiting[job.id] = f"{head}; {rule}"
            continue
        cards, why = fit(snapshot, job, now, taken, warnings)
        if cards:
            result.starts[job.id] = cards
            taken.update(cards)
            held[job.user] = held.get(job.user, 0) + len(cards)
            continue
        result.waiting[job.id] = f"{head}; {why}"
        if now - job.submitted > policy.starvation_s:
            holding_back = job
    return result


def listing(snapshot: HostSnapshot, policy: Policy, now: float) -> list[dict[str, Any]]:
    """One dict per job of ``snapshot`` (docs/queue.md, `gputop queue --json`): running
    ones first, then the line in order."""
    result = plan(snapshot, policy, now)
    order = [j for j in snapshot.queue if j.id in result.running]
    order += sorted((j for j in snapshot.queue if j.id in result.position),
                    key=lambda j: result.position[j.id])
    rows = []
    for job in order:
        running = result.running.get(job.id)
        rows.append({
            "host": snapshot.host, "id": job.id, "user": job.user, "priority": job.priority,
            "state": "running" if running else "waiting",
            "position": result.position.get(job.id), "gpus_held": list(running or ()),
            "waited_s": round(now - job.submitted, 1),
            "request": {"gpus": job.gpus, "gpu_ids": list(job.gpu_ids or ()) or None,
                        "min_free_mem": job.min_free_mem, "max_util": job.max_util,
                        "for_s": job.for_s},
            "command": job.command, "note": job.note,
            "why": None if running else result.waiting.get(job.id) or "starting",
        })
    return rows


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
) -> tuple[tuple[int | str, ...], str]:
    """The cards (or the one MIG device, by UUID) ``job`` would get now, empty when it
    does not fit, and why not: pick's rule (``picking.choose``), with a card reserved by
    anyone, the submitter included, not free for a job."""
    excluded = set(taken)
    reserved = picking.active_reservations(snapshot, now)
    if job.gpu_ids:
        ranking = picking.rank(snapshot, now, job.user, job.min_free_mem, job.max_util,
                               warnings, {i for i in excluded if isinstance(i, int)},
                               job.share, own_reservations=False)
        rejected = {i: _why_not(why, reserved.get(i)) for i, why in ranking.rejected.items()}
        missing = [i for i in job.gpu_ids if i not in ranking.indexes]
        if not missing:
            return tuple(job.gpu_ids), ""
        return (), _reasons({i: rejected.get(i, "no such GPU") for i in missing})
    want = picking.Want(requested(job), job.min_free_mem, job.max_util, job.share, job.whole)
    answer = picking.choose(snapshot, want, now, job.user, warnings, excluded,
                            own_reservations=False)
    if answer.units:
        return tuple(u.target for u in sorted(answer.units, key=lambda u: u.gpu.index)), ""
    units = answer.ranking or picking.DeviceRanking(())
    found = {k: _why_not(why, reserved.get(int(k)) if k.isdigit() else None)
             for k, why in units.rejected.items()}
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
