"""Fair share for `gputop run`'s line: recent GPU-hours, decayed, and weighed against
shares, as Slurm's classic (not fair-tree) fair share counts them. Pure arithmetic: the
ledger's rows come in, numbers go out (docs/queue.md, docs/ledger.md "Fair share").

A GPU-hour used ``age`` ago counts ``2 ** (-age / half_life)``: one used a half-life ago
counts half, two half-lives ago a quarter (a user's *raw usage*). With accounts (the
policy's ``fair_share: {accounts: ...}``) each account has shares and each user a share
within their account; without, every user is an account of one with one share. Then, as
Slurm's sshare shows them:

- normalised shares: an account's shares over all accounts' (``S_a``); a user's
  ``S_u = S_a * s_u / (sum of the shares of the users of that account)``;
- normalised usage ``U``: raw usage over everyone's;
- effective usage: an account's is its ``U`` (its parent is the root); a user's is
  ``UE_u = U_u + (UE_a - U_u) * s_u / (sum of the shares of the users of that account)``;
- fair-share factor ``F = 2 ** (-UE / S)`` (1: nothing used; 0.5: used just its share).

Among jobs of equal priority, the user with the higher factor goes first, then arrival
decides (as without fair share). Without accounts that is the user with fewer decayed
GPU-hours (``F = 2 ** (-U * N)`` falls as ``U`` grows).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

HOUR = 3600.0


@dataclass(frozen=True)
class Use:
    """GPU time one user spent: ``gpu_seconds`` of card time centred at ``t``."""

    user: str
    t: float  # epoch seconds
    gpu_seconds: float


def weight(age_s: float, half_life_s: float) -> float:
    """What a GPU-hour ``age_s`` old counts now (1 now, 1/2 a half-life ago); a use in
    the future (a clock step) counts as now."""
    return 2.0 ** (-max(0.0, age_s) / half_life_s)


def decayed_hours(uses: Iterable[Use], now: float, half_life_s: float) -> dict[str, float]:
    """Each user's decayed GPU-hours at ``now``."""
    if not half_life_s > 0 or not math.isfinite(half_life_s):
        raise ValueError(f"half-life must be a positive number of seconds, got {half_life_s}")
    out: dict[str, float] = {}
    for use in uses:
        if use.gpu_seconds <= 0 or not math.isfinite(use.gpu_seconds):
            continue
        out[use.user] = out.get(use.user, 0.0) + (
            use.gpu_seconds / HOUR * weight(now - use.t, half_life_s))
    return out


def fractions(hours: Mapping[str, float]) -> dict[str, float]:
    """Each user's part of everyone's decayed GPU-hours (0..1); all 0 when none."""
    total = sum(hours.values())
    return {user: (h / total if total > 0 else 0.0) for user, h in hours.items()}


@dataclass(frozen=True)
class Account:
    """One account of the policy: its shares, its members (a Unix group's, named users
    with their share within it; a group's member not named has share 1)."""

    name: str
    shares: int
    group: str | None = None
    members: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Accounts:
    """The policy's accounts, in its order, and the account of users in none.  A user a
    policy names in two accounts is refused there; one in two accounts' Unix groups (or a
    group and a list) is charged to the first in the policy's order (Slurm's default
    account), the others named in ``also_in``.  ``groups``: each account's group's
    members, read by whoever loaded the policy (``gputop.policy.load_policy``)."""

    accounts: tuple[Account, ...]
    default: str
    groups: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def holding(self, user: str) -> list[str]:
        """The accounts ``user`` is a member of, in the policy's order."""
        return [a.name for a in self.accounts if user in a.members
                or (a.group is not None and user in self.groups.get(a.group, ()))]


@dataclass(frozen=True)
class Row:
    """One line of the share table: an account's (``user`` None) or a user's in it."""

    account: str | None  # None: no accounts in the policy
    user: str | None
    raw_shares: int
    norm_shares: float
    raw_usage: float  # decayed GPU-hours
    norm_usage: float
    effective_usage: float
    factor: float
    also_in: tuple[str, ...] = ()  # other accounts that list the user (not charged)


@dataclass(frozen=True)
class Shares:
    """The share table: each account followed by its users (sshare's order)."""

    rows: tuple[Row, ...]

    def by_user(self) -> dict[str, Row]:
        return {row.user: row for row in self.rows if row.user is not None}


def factor(effective_usage: float, norm_shares: float) -> float:
    """Slurm's classic fair-share factor ``2 ** (-UE / S)``; no shares: 0."""
    return 2.0 ** (-effective_usage / norm_shares) if norm_shares > 0 else 0.0


def shares(hours: Mapping[str, float], accounts: Accounts | None,
           users: Collection[str] = ()) -> Shares:
    """The share table of everyone in ``hours`` (decayed GPU-hours), in ``users`` (the
    line's) and in the accounts."""
    everyone = {*hours, *users}
    if accounts is not None:
        for account in accounts.accounts:
            everyone.update(account.members)
            if account.group is not None:
                everyone.update(accounts.groups.get(account.group, ()))
    total = sum(max(0.0, hours.get(u, 0.0)) for u in everyone)

    def used(user: str) -> float:
        return max(0.0, hours.get(user, 0.0))

    def norm(value: float) -> float:
        return value / total if total > 0 else 0.0

    if accounts is None:  # a flat tree: each user an account of one under the root
        return Shares(tuple(
            Row(None, user, 1, 1 / len(everyone), used(user), norm(used(user)),
                norm(used(user)), factor(norm(used(user)), 1 / len(everyone)))
            for user in sorted(everyone)))
    by_account: dict[str, list[tuple[str, tuple[str, ...]]]] = {
        a.name: [] for a in accounts.accounts}
    for user in sorted(everyone):
        holding = accounts.holding(user) or [accounts.default]
        by_account[holding[0]].append((user, tuple(holding[1:])))
    all_shares = sum(a.shares for a in accounts.accounts)
    rows: list[Row] = []
    for account in accounts.accounts:
        members = by_account[account.name]
        s_a = account.shares / all_shares
        raw_a = sum(used(user) for user, _ in members)
        ue_a = u_a = norm(raw_a)  # an account's parent is the root: UE is its own U
        rows.append(Row(account.name, None, account.shares, s_a, raw_a, u_a, ue_a,
                        factor(ue_a, s_a)))
        level = sum(account.members.get(user, 1) for user, _ in members)
        for user, also in members:
            s_u = account.members.get(user, 1)
            u_u = norm(used(user))
            ue_u = u_u + (ue_a - u_u) * s_u / level
            rows.append(Row(account.name, user, s_u, s_a * s_u / level, used(user), u_u,
                            ue_u, factor(ue_u, s_a * s_u / level), also))
    return Shares(tuple(rows))


def rank_key(user: str, users: Mapping[str, Row]) -> float:
    """The fair-share part of a job's place in line: minus its user's factor (higher
    first; a user the table lacks: 1, nothing used)."""
    row = users.get(user)
    return -(row.factor if row is not None else 1.0)
