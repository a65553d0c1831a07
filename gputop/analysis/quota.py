"""GPU-hour quotas (issue 28.5): the arithmetic, pure.

The policy gives GPU-hours per period to users and Unix groups; what a user used is the
card-hours the ledger counted for them in the period (each card once per moment, their
reservations included while held: ``ledger.writer.holder_rows``, kind 'quota').  A group's
use is the sum of its members'.  Periods start at local midnight: a day, a week from
Monday, a month from the 1st.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

PERIODS = ("day", "week", "month")
OVER_ACTIONS = ("wait", "refuse")  # beyond the quota: wait at low priority, or refuse
_THIS = {"day": "today", "week": "this week", "month": "this month"}


@dataclass(frozen=True)
class Quotas:
    users: Mapping[str, float] = field(default_factory=dict)  # GPU-hours per period
    groups: Mapping[str, float] = field(default_factory=dict)
    period: str = "week"
    over: str = "wait"
    ledger: str | None = None  # the ledger that counts (None: the system's)

    @property
    def any(self) -> bool:
        return bool(self.users or self.groups)


def period_bounds(now: float, period: str, tz: dt.tzinfo | None = None) -> tuple[float, float]:
    """[start, reset) of the period holding ``now``, at local midnight (``tz``: local)."""
    here = dt.datetime.fromtimestamp(now, tz)
    day = here.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        start, end = day, day + dt.timedelta(days=1)
    elif period == "week":
        start = day - dt.timedelta(days=day.weekday())
        end = start + dt.timedelta(days=7)
    elif period == "month":
        start = day.replace(day=1)
        end = (start + dt.timedelta(days=32)).replace(day=1)
    else:
        raise ValueError(f"unknown period {period!r}")
    # Midnight of each calendar day in that zone (a DST change moves the offset).
    return (_local(start, tz), _local(end, tz))


def _local(moment: dt.datetime, tz: dt.tzinfo | None) -> float:
    naive = moment.replace(tzinfo=None)
    if tz is None:
        return naive.timestamp()  # the local zone's own rule for that wall time
    return naive.replace(tzinfo=tz).timestamp()


def reset_words(reset: float, period: str, tz: dt.tzinfo | None = None) -> str:
    """'Monday 00:00' for a week, '1 Jan 00:00' for a month, 'Friday 00:00' for a day."""
    when = dt.datetime.fromtimestamp(reset, tz)
    if period == "month":
        return f"{when.day} {when:%b %H:%M}"
    return f"{when:%A %H:%M}"


def period_words(period: str) -> str:
    return _THIS[period]


def hours(value: float) -> str:
    """GPU-hours in a message, rounded down to a tenth (199.96 used of 200 is not 200)."""
    down = math.floor(value * 10 + 1e-9) / 10
    return f"{down:.0f}" if down == int(down) else f"{down:.1f}"


@dataclass(frozen=True)
class Standing:
    """One user's or group's use against its quota in the current period."""

    who: str
    kind: str  # "user" or "group"
    used_h: float
    limit_h: float

    @property
    def over(self) -> bool:
        return self.used_h >= self.limit_h

    @property
    def left_h(self) -> float:
        return max(self.limit_h - self.used_h, 0.0)

    def message(self, period: str, reset: str) -> str:
        """'alice used 212 of 200 GPU-hours this week (resets Monday 00:00)'."""
        group = "group " if self.kind == "group" else ""
        return (f"{group}{self.who} used {hours(self.used_h)} of {hours(self.limit_h)}"
                f" GPU-hours {_THIS[period]} (resets {reset})")


def standings(quotas: Quotas, used_by_user: Mapping[str, float],
              members: Mapping[str, Collection[str]]) -> list[Standing]:
    """Every quota's standing: users by name, then groups (a member's use counts for each
    of their groups)."""
    out = [Standing(user, "user", used_by_user.get(user, 0.0), limit)
           for user, limit in sorted(quotas.users.items())]
    for group, limit in sorted(quotas.groups.items()):
        used = sum(used_by_user.get(user, 0.0) for user in set(members.get(group, ())))
        out.append(Standing(group, "group", used, limit))
    return out


def mine(all_standings: list[Standing], user: str, groups: Collection[str]) -> list[Standing]:
    """The standings that bind ``user``: their own quota and their groups'."""
    return [s for s in all_standings
            if (s.kind == "user" and s.who == user) or (s.kind == "group" and s.who in groups)]


def blocking(all_standings: list[Standing], user: str, groups: Collection[str],
             asked_h: float = 0.0) -> Standing | None:
    """The quota that holds ``user`` back now: their own when spent, else a group's;
    with ``asked_h``, also one that those GPU-hours more would take beyond its limit."""
    for s in mine(all_standings, user, groups):
        if s.over or (asked_h > 0 and s.used_h + asked_h > s.limit_h):
            return s
    return None


@dataclass(frozen=True)
class Hold:
    """What a spent quota does to a user's `gputop run` jobs (at submission and while
    they wait): refuse them (``refuse``: a waiting one does not start), or let them wait
    at low priority; ``message`` says who used how much of what."""

    refuse: bool
    message: str


def hold(all_standings: list[Standing], quotas: Quotas, user: str, groups: Collection[str],
         now: float) -> Hold | None:
    """The hold on ``user``'s jobs now, or None."""
    over = blocking(all_standings, user, groups)
    if over is None:
        return None
    return Hold(quotas.over == "refuse", _message(over, quotas, now))


def reservation_refusal(all_standings: list[Standing], quotas: Quotas, user: str,
                        groups: Collection[str], asked_h: float, now: float) -> str | None:
    """Why `gputop reserve` may not take ``asked_h`` GPU-hours (cards x duration, charged
    ahead: a reservation counts while held), or None.  A reservation cannot wait at low
    priority, so the rule is one for both ``over`` modes: no reservation beyond a quota."""
    over = blocking(all_standings, user, groups, asked_h)
    if over is None:
        return None
    spent = "" if over.over else f"; this reservation is {hours_up(asked_h)} GPU-hours"
    then = "" if quotas.over == "refuse" else "; `gputop run` still waits at low priority"
    return f"{_message(over, quotas, now)}{spent}{then}"


def _message(over: Standing, quotas: Quotas, now: float) -> str:
    _start, reset = period_bounds(now, quotas.period)
    return over.message(quotas.period, reset_words(reset, quotas.period))


def hours_up(value: float) -> str:
    """GPU-hours asked for, rounded up to a tenth (0.01 asked is not 0)."""
    up = math.ceil(value * 10 - 1e-9) / 10
    return f"{up:.0f}" if up == int(up) else f"{up:.1f}"
