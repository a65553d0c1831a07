"""The ledger's GPU-hours this period against the policy's quotas (docs/ledger.md).

One reading for every place a quota holds (issue 38.2): `gputop quota`, `gputop run` at
submission, `gputop reserve`, and every waiting `gputop run`, which plans every few
seconds: it reads the ledger again only when the ledger changed (once per recorder
interval at most), so a job whose user went over while it waited is held at its next
plan. What counts is the host's ledger (the policy's
``quotas.ledger``, else the system's): a user's own ledger file is theirs to edit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from gputop.analysis import quota
from gputop.ledger import paths, query, store
from gputop.policy import memberships  # the one home of "a group's members"

Stamp = tuple[tuple[int, int] | None, ...]
_cache: dict[tuple[str, str, float], tuple[Stamp, list[quota.Standing], dict[str, set[str]]]] = {}


def _stamp(path: str) -> Stamp:
    """What changes when the recorder commits: the file's and its WAL's size and time."""
    out: list[tuple[int, int] | None] = []
    for name in (path, path + "-wal"):
        try:
            info = os.stat(name)
        except OSError:
            out.append(None)
        else:
            out.append((info.st_mtime_ns, info.st_size))
    return tuple(out)


def ledger_path(quotas: quota.Quotas, given: str | None = None) -> str:
    return given or quotas.ledger or paths.SYSTEM_PATH


def groups_of(user: str, members: dict[str, set[str]]) -> set[str]:
    return {group for group, names in members.items() if user in names}


def standings(quotas: quota.Quotas, path: str, now: float,
              members: dict[str, set[str]]) -> list[quota.Standing]:
    """Every quota's standing this period from the ledger at ``path``; LedgerError when
    it cannot be read."""
    start, reset = quota.period_bounds(now, quotas.period)
    conn = store.open_reader(path)
    try:
        used = query.quota_hours(conn, start, reset)
    finally:
        conn.close()
    return quota.standings(quotas, used, members)


def holds(quotas: quota.Quotas, users: Iterable[str], now: float | None = None
          ) -> tuple[dict[str, quota.Hold], str | None]:
    """The hold each of ``users`` is under now (only those held), and a warning when the
    ledger cannot be read (then nothing holds: quotas need the recorder). Read again
    only when the ledger changed."""
    if not quotas.any:
        return {}, None
    now = time.time() if now is None else now
    path = ledger_path(quotas)
    key = (path, repr(quotas), quota.period_bounds(now, quotas.period)[0])  # a new period
    cached = _cache.get(key)
    stamp = _stamp(path)
    if cached is None or cached[0] != stamp:
        members = memberships()
        try:
            found = standings(quotas, path, now, members)
        except store.LedgerError as err:
            if cached is None:
                return {}, f"quotas not checked: {err}"
            found, members = cached[1], cached[2]  # a moment's failure: the last reading
        else:
            _cache[key] = (stamp, found, members)
    else:
        found, members = cached[1], cached[2]
    out = {}
    for user in set(users):
        held = quota.hold(found, quotas, user, groups_of(user, members), now)
        if held is not None:
            out[user] = held
    return out, None
