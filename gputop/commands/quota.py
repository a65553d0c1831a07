"""`gputop quota`: GPU-hours used against the policy's quotas (docs/ledger.md), and the
check `gputop run` makes before it queues a job (``check_for_run``).

What counts is the host's ledger (the policy's ``quotas.ledger``, else the system's): a
user's own ledger file is theirs to edit, so it never decides their quota.
"""

from __future__ import annotations

import argparse
import dataclasses
import grp
import json
import os
import pwd
import sys
import time
from dataclasses import dataclass
from typing import TypeVar

from gputop.analysis import quota
from gputop.commands import common
from gputop.commands.arguments import add_json, add_ledger
from gputop.exitcodes import EXIT_OK
from gputop.options import SourceOptions
from gputop.text import visible


@dataclass(frozen=True)
class Hold:
    """What the quota does to a `gputop run` now: refuse it, or let it wait at low
    priority; ``message`` says who used how much of what."""

    refuse: bool
    message: str


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "GPU-hours used this period against the policy's quotas."
    add_ledger(p)
    add_json(p)


def run(options: SourceOptions, args: argparse.Namespace) -> int:
    return common.run("quota", lambda: _quota(args))


def memberships() -> dict[str, set[str]]:
    """Unix group -> its members (listed members and those whose primary group it is)."""
    members: dict[str, set[str]] = {}
    by_gid: dict[int, str] = {}
    for group in grp.getgrall():
        members.setdefault(group.gr_name, set()).update(group.gr_mem)
        by_gid[group.gr_gid] = group.gr_name
    for entry in pwd.getpwall():
        name = by_gid.get(entry.pw_gid)
        if name is not None:
            members[name].add(entry.pw_name)
    return members


def groups_of(user: str, members: dict[str, set[str]]) -> set[str]:
    return {group for group, names in members.items() if user in names}


def _ledger_path(quotas: quota.Quotas, given: str | None) -> str:
    from gputop.ledger.paths import SYSTEM_PATH

    return given or quotas.ledger or SYSTEM_PATH


def standings(quotas: quota.Quotas, path: str, now: float,
              members: dict[str, set[str]]) -> list[quota.Standing]:
    """Every quota's standing this period from the ledger at ``path``; LedgerError when
    it cannot be read."""
    from gputop.ledger import query, store

    start, reset = quota.period_bounds(now, quotas.period)
    conn = store.open_reader(path)
    try:
        used = query.quota_hours(conn, start, reset)
    finally:
        conn.close()
    return quota.standings(quotas, used, members)


def check_for_run(user: str, now: float | None = None) -> Hold | None:
    """The quota check of `gputop run`: None when the user may queue as asked.  A ledger
    that cannot be read is said once and checks nothing (quotas need the recorder)."""
    from gputop.ledger import store

    accounting = common.accounting(None)  # load_policy already said its warning
    quotas = accounting.quotas
    if not quotas.any:
        return None
    now = time.time() if now is None else now
    path = _ledger_path(quotas, None)
    members = memberships()  # the whole group and user database: read once
    try:
        found = standings(quotas, path, now, members)
    except store.LedgerError as err:
        common.say("run", f"quotas not checked: {err}")
        return None
    over = quota.blocking(found, user, groups_of(user, members))
    if over is None:
        return None
    _start, reset = quota.period_bounds(now, quotas.period)
    message = over.message(quotas.period, quota.reset_words(reset, quotas.period))
    return Hold(quotas.over == "refuse", message)


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
    from gputop.ledger import store

    accounting = common.accounting("quota")
    quotas = accounting.quotas
    if not quotas.any:
        print(f"no quotas in {accounting.source or 'the policy'}")
        return EXIT_OK
    now = time.time()
    path = _ledger_path(quotas, args.db)
    members = memberships()  # the whole group and user database: read once
    try:
        found = standings(quotas, path, now, members)
    except store.LedgerError as err:
        raise common.usage_error(str(err)) from None
    user = pwd.getpwuid(os.getuid()).pw_name if os.getuid() != 0 else "root"
    if os.getuid() != 0:  # root sees everyone's; a user their own and their groups'
        found = quota.mine(found, user, groups_of(user, members))
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
