"""The ledger's GPU time per user, as fair share (``gputop.analysis.fair_share``) needs it.

Every waiting `gputop run` must order the line the same way, so all of them read one
ledger: the policy's ``fair_share: {ledger: PATH}``, else the system's. What counts is what
quotas count (``query.charged_seconds``, one rule): the cards a user ran on or held
reserved, each card once per moment, however many processes they ran on it.
"""

from __future__ import annotations

import math
import time

from gputop.analysis.fair_share import HOUR, Use, decayed_hours
from gputop.ledger import paths, query, store

HORIZON_HALF_LIVES = 10  # older use counts under 0.1 %: not read
CACHE_S = 60.0  # a waiting run plans every few seconds; the ledger changes per interval

_cache: dict[tuple[str, float], tuple[float, dict[str, float]]] = {}


def uses(path: str, since: float) -> list[Use]:
    """Per user and hour from the one starting ``since`` on: the GPU-seconds charged to
    them (``query.charged_seconds``, the same figure as quotas), centred in that hour."""
    conn = store.open_reader(path)
    try:
        rows = query.charged_seconds(conn, since // HOUR * HOUR, math.inf)
    except store.LedgerError as exc:
        raise store.LedgerError(f"{path}: {exc}") from None
    finally:
        conn.close()
    return [Use(user, hour * HOUR + HOUR / 2, seconds) for user, hour, seconds in rows]


def recent_hours(path: str | None, half_life_s: float, now: float | None = None
                 ) -> tuple[dict[str, float], str | None]:
    """Each user's decayed GPU-hours from the ledger, and a warning when it cannot be
    read (then nobody has any: the line is first come, first served)."""
    path = path or paths.SYSTEM_PATH
    now = time.time() if now is None else now
    key = (path, half_life_s)
    cached = _cache.get(key)
    if cached is not None and time.monotonic() - cached[0] < CACHE_S:
        return cached[1], None
    try:
        found = uses(path, now - HORIZON_HALF_LIVES * half_life_s)
    except store.LedgerError as exc:
        if cached is not None:
            return cached[1], None  # a moment's failure: the last reading, not a new order
        return {}, f"fair share: {exc}; the line is first come, first served"
    hours = decayed_hours(found, now, half_life_s)
    _cache[key] = (time.monotonic(), hours)
    return hours, None
