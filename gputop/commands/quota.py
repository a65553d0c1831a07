"""`gputop quota`: GPU-hours used against the policy's quotas (docs/ledger.md), and the
check `gputop run` makes before it queues a job (``check_for_run``); `--share`: the fair
share table, as Slurm's sshare shows it (``SHARE_COLUMNS``).

What counts is the host's ledger (the policy's ``quotas.ledger``, else the system's): a
user's own ledger file is theirs to edit, so it never decides their quota.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pwd
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from gputop.analysis import fair_share, quota
from gputop.analysis.durations import format_duration
from gputop.commands import common
from gputop.commands.arguments import add_json, add_ledger
from gputop.exitcodes import EXIT_OK
from gputop.options import SourceOptions
from gputop.text import visible


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "GPU-hours used this period against the policy's quotas."
    p.add_argument("--share", action="store_true", help="the fair share of each account"
                   " and user instead: shares, decayed usage, fair-share factor (as sshare)")
    add_ledger(p)
    add_json(p)


def run(options: SourceOptions, args: argparse.Namespace) -> int:
    if getattr(args, "share", False):
        return common.run("quota", lambda: _share(args))
    return common.run("quota", lambda: _quota(args))


# The share table's columns, declared once: id (a ``fair_share.Row`` field, the --json
# key), title, width, the cell's text.
ShareColumn = tuple[str, str, int, Callable[[object], str]]
SHARE_COLUMNS: tuple[ShareColumn, ...] = (
    ("account", "ACCOUNT", 12, lambda v: "-" if v is None else str(v)),
    ("user", "USER", 12, lambda v: "" if v is None else str(v)),
    ("raw_shares", "RAW SHARES", 10, str),
    ("norm_shares", "NORM SHARES", 11, lambda v: f"{v:.6f}"),
    ("raw_usage", "RAW USAGE", 10, lambda v: f"{v:.2f}"),  # decayed GPU-hours
    ("norm_usage", "NORM USAGE", 10, lambda v: f"{v:.6f}"),
    ("effective_usage", "EFFECTV USAGE", 13, lambda v: f"{v:.6f}"),
    ("factor", "FAIRSHARE", 9, lambda v: f"{v:.6f}"),
)


def _share(args: argparse.Namespace) -> int:
    from gputop.ledger import paths, share_usage, store
    from gputop.policy import PolicyError, load_policy

    try:
        policy, warning = load_policy()
    except PolicyError as err:
        raise common.usage_error(str(err)) from None
    if warning:
        common.say("quota", warning)
    half_life = policy.fair_share_half_life_s
    if not half_life:
        print(f"no fair_share in {policy.source or 'the policy'}")
        return EXIT_OK
    now = time.time()
    path = args.db or policy.fair_share_ledger or paths.SYSTEM_PATH
    try:
        uses = share_usage.uses(path, now - share_usage.HORIZON_HALF_LIVES * half_life)
    except store.LedgerError as err:
        raise common.usage_error(str(err)) from None
    table = fair_share.shares(fair_share.decayed_hours(uses, now, half_life),
                              policy.fair_share_accounts)
    if args.json:
        json.dump({"half_life_s": half_life, "at": now, "ledger": path,
                   "default_account": (policy.fair_share_accounts.default
                                       if policy.fair_share_accounts else None),
                   "rows": [{**{c[0]: _rounded(getattr(row, c[0])) for c in SHARE_COLUMNS},
                             "also_in": list(row.also_in)} for row in table.rows]},
                  sys.stdout, indent=2)
        print()
        return EXIT_OK
    print(f"fair share, usage in GPU-hours decayed with a half-life of"
          f" {format_duration(half_life)} (from {visible(path)})")
    cells = [[title for _id, title, _w, _cell in SHARE_COLUMNS]]
    cells += [[visible(cell(getattr(row, key))) for key, _t, _w, cell in SHARE_COLUMNS]
              for row in table.rows]
    for line in cells:
        print("  ".join(text.rjust(width) if i >= 2 else text.ljust(width)
                        for i, (text, (_k, _t, width, _c)) in
                        enumerate(zip(line, SHARE_COLUMNS, strict=True))).rstrip())
    for row in table.rows:
        if row.also_in:
            print(f"  {visible(str(row.user))} is also in {', '.join(row.also_in)}: charged to"
                  f" {row.account}, the first in the policy")
    return EXIT_OK


def _rounded(value: object) -> object:
    return round(value, 6) if isinstance(value, float) else value


def check_for_run(user: str, now: float | None = None) -> quota.Hold | None:
    """The quota check of `gputop run`: None when the user may queue as asked.  A ledger
    that cannot be read is said once and checks nothing (quotas need the recorder)."""
    from gputop.ledger import quota_usage

    quotas = common.accounting(None).quotas  # load_policy already said its warning
    found, warning = quota_usage.holds(quotas, [user], now)
    if warning:
        common.say("run", warning)
    return found.get(user)


def check_for_reserve(user: str, cards: int, seconds: float, now: float | None = None
                      ) -> None:
    """`gputop reserve`'s check (issue 38.2): a reservation that the user's or a group's
    quota does not cover is refused (CommandError, exit 4), an extension as well (it is
    a reservation of the same cards to a later time)."""
    from gputop.ledger import quota_usage, store

    quotas = common.accounting(None).quotas
    if not quotas.any:
        return
    now = time.time() if now is None else now
    members = quota_usage.memberships()
    try:
        found = quota_usage.standings(quotas, quota_usage.ledger_path(quotas), now, members)
    except store.LedgerError as err:
        common.say("reserve", f"quotas not checked: {err}")
        return
    why = quota.reservation_refusal(found, quotas, user, quota_usage.groups_of(user, members),
                                    cards * seconds / 3600.0, now)
    if why:
        raise common.action_failed(f"refused: {why}")


_R = TypeVar("_R")


def held_request(user: str, request: _R) -> _R:
    """`gputop run`'s hook: the request as the quota lets it queue (its ``priority``
    lowered to low beyond the quota), or a refusal (CommandError) when the policy says so."""
    hold = check_for_run(user)
    if hold is None:
        return request
    if hold.refuse:
        raise common.action_failed(f"refused: {hold.message}")
    common.say("run", f"{hold.message}: waiting at low priority")
    return dataclasses.replace(request, priority="low")  # type: ignore[type-var]


def _quota(args: argparse.Namespace) -> int:
    from gputop.ledger import quota_usage, store

    accounting = common.accounting("quota")
    quotas = accounting.quotas
    if not quotas.any:
        print(f"no quotas in {accounting.source or 'the policy'}")
        return EXIT_OK
    now = time.time()
    path = quota_usage.ledger_path(quotas, args.db)
    members = quota_usage.memberships()  # the whole group and user database: read once
    try:
        found = quota_usage.standings(quotas, path, now, members)
    except store.LedgerError as err:
        raise common.usage_error(str(err)) from None
    user = pwd.getpwuid(os.getuid()).pw_name if os.getuid() != 0 else "root"
    if os.getuid() != 0:  # root sees everyone's; a user their own and their groups'
        found = quota.mine(found, user, quota_usage.groups_of(user, members))
    start, reset = quota.period_bounds(now, quotas.period)
    reset_at = quota.reset_words(reset, quotas.period)
    if args.json:
        json.dump({"period": quotas.period, "from": start, "resets": reset, "over": quotas.over,
                   "ledger": path, "quotas": [
                       {"who": s.who, "kind": s.kind, "used_gpu_hours": round(s.used_h, 3),
                        "limit_gpu_hours": s.limit_h, "over": s.over} for s in found]},
                  sys.stdout, indent=2)
        print()
        return EXIT_OK
    then = "refused" if quotas.over == "refuse" else "waits at low priority"
    print(f"GPU-hour quotas {quota.period_words(quotas.period)}, resets {reset_at}"
          f" (from {visible(path)})")
    if not found:
        print("  (no quota applies to you)")
    for s in found:
        state = f"over: `gputop run` {then}" if s.over else f"{quota.hours(s.left_h)} left"
        print(f"  {s.kind:<5} {visible(s.who):<20} {quota.hours(s.used_h):>8} of "
              f"{quota.hours(s.limit_h):<8} {state}")
    return EXIT_OK
