"""The ledger's GPU time per user, as fair share (``gputop.analysis.fair_share``) needs it.

Every waiting `gputop run` must order the line the same way, so all of them read one
ledger: the policy's ``fair_share: {ledger: PATH}``, else the system's. A user's card-hours
count once per card and hour, however many processes they ran on it (``MAX`` of the
processes' presence on that card in that hour).
"""

from __future__ import annotations

import sqlite3
import time

from gputop.analysis.fair_share import HOUR, Use, decayed_hours
from gputop.ledger import store

HORIZON_HALF_LIVES = 10  # older use counts under 0.1 %: not read
CACHE_S = 60.0  # a waiting run plans every few seconds; the ledger changes per interval

_cache: dict[tuple[str, float], tuple[float, dict[str, float]]] = {}


def uses(path: str, since: float) -> list[Use]:
    """Per user, card and hour: the GPU seconds used, centred in that hour."""
    conn = store.open_reader(path)
    try:
        rows = conn.execute(
            "SELECT p.user, h.gpu_id, h.hour, MAX(h.dur) FROM proc_hourly h"
            " JOIN procs p ON p.id = h.proc_id WHERE h.hour >= ?"
            " GROUP BY p.user, h.gpu_id, h.hour", (int(since // HOUR),)).fetchall()
    except sqlite3.Error as exc:
        raise store.LedgerError(f"{path}: cannot read usage ({exc})") from None
    finally:
        conn.close()
    return [Use(str(user), hour * HOUR + HOUR / 2, min(float(dur), HOUR))
            for user, _gpu, hour, dur in rows
            if isinstance(user, str) and isinstance(hour, int) and isinstance(dur, (int, float))]


def recent_hours(path: str | None, half_life_s: float, now: float | None = None
                 ) -> tuple[dict[str, float], str | None]:
    """Each user's decayed GPU-hours from the ledger, and a warning when it cannot be
    read (then nobody has any: the line is first come, first served)."""
    path = path or store.SYSTEM_PATH
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
