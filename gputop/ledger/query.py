"""Reading a period of the ledger: per process, per GPU, per GPU-hour, and events.

Reports read the hourly rollups only (the recorder keeps them current), so a period is
made of whole hours: every hour that overlaps it.  Energy is attributed to processes
within each GPU-hour by their share of the memory held (byte-seconds).  Sums are done by
SQLite; the report does the rest.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gputop.ledger.engine import Connection, least
from gputop.ledger.store import HOLDERS_FROM_PROCS, LedgerError, has_table, open_reader


@dataclass(frozen=True)
class ProcUsage:
    host: str
    gpu: int
    pid: int
    start: int
    user: str | None
    workload: str | None
    command: str | None
    held_s: float
    busy_s: float
    idle_s: float  # held at least the idle threshold at 0 % SM
    sm_s: float  # SM % x seconds
    mem_max: int | None
    energy_j: float
    first: float
    last: float


@dataclass(frozen=True)
class GpuUsage:
    host: str
    gpu: int
    name: str | None
    recorded_s: float
    busy_s: float
    held_idle_s: float
    util_s: float
    energy_j: float
    mem_max: int | None


@dataclass(frozen=True)
class HolderUsage:
    """What one holder did on one card in the period, counted once however many processes
    it ran there: kind 'user' or 'workload' (name '' when unknown), or 'card' (anyone)."""

    host: str
    gpu: int
    gpu_name: str | None
    kind: str
    name: str
    held_s: float
    busy_s: float
    idle_s: float
    sm_s: float


@dataclass(frozen=True)
class Event:
    host: str
    gpu: int | None
    t: float
    kind: str  # "xid" or "warning"
    code: str
    severity: str | None
    message: str | None


@dataclass(frozen=True)
class Usage:
    t_from: float
    t_to: float
    idle_mem: int  # the recorder's idle threshold, bytes
    procs: list[ProcUsage]
    gpus: list[GpuUsage]
    hourly: list[tuple[str, int, int, float, float]]  # host, gpu, hour, seconds, util x s
    events: list[Event]
    holders: list[HolderUsage] = field(default_factory=list)


# An hour belongs to the period when it overlaps it.  Results are ORDERed: SQLite's GROUP
# BY happens to sort, PostgreSQL's does not, and reports list rows in this order.
_IN = "hour * 3600 < :b AND hour * 3600 + 3600 > :a"

# Energy by time held (issue 38.5): of a card's energy in an hour, the part of the hour
# some process held it (the hour's mean power x that time: the idle baseline of the rest
# of the hour is nobody's), shared among its processes by memory held over time.
_PROCS = """
WITH memtot AS (
  SELECT gpu_id, hour, SUM(mem_s) AS m FROM proc_hourly
  WHERE hour * 3600 < :b AND hour * 3600 + 3600 > :a GROUP BY gpu_id, hour),
held AS (
  SELECT gpu_id, hour, SUM(dur) AS s FROM {source}
  WHERE kind = 'card' AND hour * 3600 < :b AND hour * 3600 + 3600 > :a GROUP BY gpu_id, hour)
SELECT p.proc_id, p.gpu_id, SUM(p.dur), SUM(p.busy_s), SUM(p.idle_s), SUM(p.sm_s),
  MAX(p.mem_max),
  SUM(CASE WHEN memtot.m > 0 AND g.dur > 0
      THEN COALESCE(g.energy_j, 0) * {held_part} * p.mem_s / memtot.m
      ELSE 0 END),
  MIN(p.hour) * 3600, MAX(p.hour) * 3600 + 3600
FROM proc_hourly AS p JOIN memtot USING (gpu_id, hour)
  LEFT JOIN gpu_hourly AS g USING (gpu_id, hour)
  LEFT JOIN held USING (gpu_id, hour)
WHERE p.hour * 3600 < :b AND p.hour * 3600 + 3600 > :a
GROUP BY p.proc_id, p.gpu_id ORDER BY p.proc_id, p.gpu_id
""".replace("{held_part}", least("1.0", "COALESCE(held.s, 0) / g.dur"))

_GPUS = f"""SELECT gpu_id, SUM(dur), SUM(busy_s), SUM(held_idle_s), SUM(util_s), SUM(energy_j),
  MAX(mem_max) FROM gpu_hourly WHERE {_IN} GROUP BY gpu_id ORDER BY gpu_id"""

_HOLDERS = """SELECT gpu_id, kind, name, SUM(dur), SUM(busy_s), SUM(idle_s), SUM(sm_s)
FROM {source} WHERE hour * 3600 < :b AND hour * 3600 + 3600 > :a GROUP BY gpu_id, kind, name
ORDER BY gpu_id, kind, name"""


def holders_source(conn: Connection) -> str:
    """holder_hourly, or for a schema-1 ledger read as it is, its backfill (store.py)."""
    if has_table(conn, "holder_hourly"):
        return "holder_hourly"
    return f"({HOLDERS_FROM_PROCS})"


def charged_seconds(conn: Connection, t_from: float,
                    t_to: float) -> list[tuple[str, int, float]]:
    """(user, hour, GPU-seconds) for each hour starting in [t_from, t_to): what is charged
    to a user, the one rule that quotas (summed) and fair share (decayed by the hour) both
    count: the cards they ran on or held reserved, each card once per moment (kind
    'quota' of holder_hourly, written by the recorder; its backfill on a schema-1
    ledger).  Rows a ledger should not hold (no user name, a negative or non-finite
    figure) are left out: the ledger is a shared file."""
    try:
        rows = conn.execute(
            f"SELECT name, hour, SUM(dur) FROM {holders_source(conn)} WHERE kind = 'quota'"
            " AND hour * 3600 >= :a AND hour * 3600 < :b GROUP BY name, hour ORDER BY hour",
            {"a": t_from, "b": t_to}).fetchall()
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot read the ledger: {err}") from None
    return [(name, hour, float(seconds)) for name, hour, seconds in rows
            if isinstance(name, str) and name and isinstance(hour, int)
            and isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds >= 0]


def quota_hours(conn: Connection, t_from: float, t_to: float) -> dict[str, float]:
    """GPU-hours per user that count against quotas in the hours starting in
    [t_from, t_to): ``charged_seconds`` summed."""
    out: dict[str, float] = {}
    for user, _hour, seconds in charged_seconds(conn, t_from, t_to):
        out[user] = out.get(user, 0.0) + seconds / 3600.0
    return out


_HOURLY = f"SELECT gpu_id, hour, dur, util_s FROM gpu_hourly WHERE {_IN} ORDER BY gpu_id, hour"


def load(conn: Connection, t_from: float, t_to: float) -> Usage:
    """The usage in [t_from, t_to); LedgerError when the period holds no samples."""
    params = {"a": t_from, "b": t_to}
    try:
        found = conn.execute("SELECT value FROM meta WHERE key = 'idle_mem'").fetchone()
        idle_mem = int(found[0]) if found is not None and str(found[0]).isdigit() else 0
        hosts = dict(conn.execute("SELECT id, name FROM hosts"))
        gpus = {row[0]: (hosts.get(row[1], "?"), row[2], row[3])
                for row in conn.execute("SELECT id, host_id, idx, name FROM gpus")}
        gpu_rows = conn.execute(_GPUS, params).fetchall()
        if not gpu_rows:
            raise LedgerError("no samples in this period")
        proc_rows = conn.execute(_PROCS.format(source=holders_source(conn)),
                                 params).fetchall()
        wanted = {row[0] for row in proc_rows}
        procs = {row[0]: row[1:] for row in conn.execute(
            'SELECT procs.id, hosts.name, pid, start, "user", workload, command'
            " FROM procs JOIN hosts ON hosts.id = procs.host_id") if row[0] in wanted}
        hourly = conn.execute(_HOURLY, params).fetchall()
        holders = conn.execute(_HOLDERS.format(source=holders_source(conn)),
                               params).fetchall()
        events = conn.execute(
            "SELECT host_id, gpu_id, t, kind, code, severity, message FROM events"
            " WHERE t >= :a AND t < :b ORDER BY t", params).fetchall()
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot read the ledger: {err}") from None
    return Usage(
        t_from=t_from, t_to=t_to, idle_mem=idle_mem,
        procs=[_proc(procs[row[0]], gpus[row[1]][1], row[2:]) for row in proc_rows],
        gpus=[GpuUsage(gpus[g][0], gpus[g][1], gpus[g][2], *rest) for g, *rest in gpu_rows],
        hourly=[(gpus[g][0], gpus[g][1], hour, dur, util_s) for g, hour, dur, util_s in hourly],
        events=[Event(hosts.get(h, "?"), None if g is None else gpus[g][1], *rest)
                for h, g, *rest in events],
        holders=[HolderUsage(gpus[g][0], gpus[g][1], gpus[g][2], *rest)
                 for g, *rest in holders if g in gpus],
    )


def _proc(dim: tuple[Any, ...], gpu: int, sums: tuple[Any, ...]) -> ProcUsage:
    host, pid, start, user, workload, command = dim
    held, busy, idle, sm_s, mem_max, energy, first, last = sums
    return ProcUsage(host=host, gpu=gpu, pid=pid, start=start, user=user, workload=workload,
                     command=command, held_s=held, busy_s=busy, idle_s=idle, sm_s=sm_s,
                     mem_max=mem_max, energy_j=energy, first=first, last=last)


# Per process of a host that the ledger saw lately: the start of its last run of samples at
# 0 % SM (an unknown SM % ends a run).  Raw samples only: a run is seen back to --raw-days.
_IDLE_RUNS = """
SELECT p.pid, p.start, MIN(s.t0) FROM procs AS p JOIN proc_samples AS s ON s.proc_id = p.id
WHERE p.host_id = (SELECT id FROM hosts WHERE name = :host)
  AND p.id IN (SELECT proc_id FROM proc_samples WHERE t0 >= :recent - 3600 AND t1 >= :recent)
  AND s.t0 > COALESCE((SELECT MAX(b.t1) FROM proc_samples AS b
                       WHERE b.proc_id = p.id AND (b.sm IS NULL OR b.sm > 0)), 0)
GROUP BY p.id
"""
RECENT_S = 600.0  # a process the ledger has not seen this long is not "still" anything
DRY_RUN = "dry run"  # the outcome of a step `gputop record --dry-run` only showed


def actions_taken(conn: Connection, host: str) -> dict[tuple[int, int], dict[str, float]]:
    """(pid, start second) -> idle-policy step -> when it was last taken on ``host``
    (dry runs left out): what a restarted recorder has done already."""
    try:
        rows = conn.execute(
            "SELECT pid, start, step, MAX(t) FROM actions WHERE host_id ="
            " (SELECT id FROM hosts WHERE name = ?) AND outcome != ? GROUP BY pid, start, step",
            (host, DRY_RUN)).fetchall()
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot read the ledger: {err}") from None
    out: dict[tuple[int, int], dict[str, float]] = {}
    for pid, start, step, t in rows:
        out.setdefault((pid, start), {})[step] = t
    return out


def idle_runs(conn: Connection, host: str, now: float) -> dict[tuple[int, int], float]:
    """(pid, start second) -> when its current run at 0 % SM began, per the ledger."""
    try:
        rows = conn.execute(_IDLE_RUNS, {"host": host, "recent": now - RECENT_S}).fetchall()
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot read the ledger: {err}") from None
    return {(pid, start): since for pid, start, since in rows}


_T = TypeVar("_T")


def _with_reader(path: str, read: Callable[[Connection], _T]) -> _T:
    """One read on a connection of its own: opened afresh each time (once a minute at
    most), so a reader that had to open the file as it stands (store.open_reader) never
    keeps reading a stale copy once a recorder writes again."""
    conn = open_reader(path)
    try:
        return read(conn)
    finally:
        conn.close()


class RecordedIdle:
    """``History.recorded_idle`` from a ledger file, for the dashboard's idle verdicts.

    Read-only, one query per host at most every ``refresh`` seconds; a ledger that cannot
    be read is no record (the dashboard falls back to what it observed itself).  Called
    from one thread (the analysis thread); each refresh reads on a connection of its own.
    """

    def __init__(self, path: str, clock: Callable[[], float] = time.time,
                 refresh: float = 60.0) -> None:
        self.path, self.clock, self.refresh = path, clock, refresh
        self._cache: dict[str, tuple[float, dict[tuple[int, int], float]]] = {}

    def __call__(self, host: str, pid: int, start_time: float | None) -> float | None:
        if start_time is None:
            return None
        return self._runs(host).get((pid, round(start_time)))

    def _runs(self, host: str) -> dict[tuple[int, int], float]:
        now = self.clock()
        cached = self._cache.get(host)
        if cached is not None and now - cached[0] < self.refresh:
            return cached[1]
        try:
            runs = _with_reader(self.path, lambda conn: idle_runs(conn, host, now))
        except LedgerError:
            runs = {}
        self._cache[host] = (now, runs)
        return runs


Series = tuple[list[tuple[float, float]], list[tuple[float, float]]]  # util %, memory %

# A host's GPUs over a past window: raw runs (each spread over the buckets it covers, so a
# merged hour draws as an hour) or hourly rollups; what the dashboard's history line shows
# for "24h" and "7d".
_RAW_SERIES = """
SELECT g.idx, s.t0, s.t1 + s.dur / s.n, s.util, s.mem_used, g.mem_total
FROM gpu_samples AS s JOIN gpus AS g ON g.id = s.gpu_id JOIN hosts AS h ON h.id = g.host_id
WHERE h.name = :host AND s.t0 >= :a - 3600 AND s.t1 + s.dur / s.n > :a
"""
_HOURLY_SERIES = """
SELECT g.idx, s.hour * 3600 + 1800, s.util_s / s.dur, s.mem_max, g.mem_total
FROM gpu_hourly AS s JOIN gpus AS g ON g.id = s.gpu_id JOIN hosts AS h ON h.id = g.host_id
WHERE h.name = :host AND s.hour * 3600 + 3600 > :a AND s.dur > 0 ORDER BY s.hour
"""
RAW_SERIES_MAX_S = 2 * 86400.0  # longer windows are drawn from the hourly rollups
SERIES_POINTS = 300


def gpu_series(conn: Connection, host: str, seconds: float,
               now: float) -> dict[int, Series]:
    """Per GPU index of ``host``: (util %, memory %) over the last ``seconds``: about
    SERIES_POINTS points, each the highest of its slot (as the sparkline draws them)."""
    params = {"host": host, "a": now - seconds}
    try:
        if seconds > RAW_SERIES_MAX_S:
            points = conn.execute(_HOURLY_SERIES, params).fetchall()
        else:
            points = _spread(conn.execute(_RAW_SERIES, params).fetchall(), now - seconds,
                             max(seconds / SERIES_POINTS, 1.0))
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot read the ledger: {err}") from None
    out: dict[int, Series] = {}
    for idx, t, util, mem, total in points:
        util_series, mem_series = out.setdefault(idx, ([], []))
        util_series.append((float(t), float(util or 0.0)))
        if mem is not None and total:
            mem_series.append((float(t), 100.0 * mem / total))
    return out


def _spread(rows: list[Any], start: float, step: float) -> list[tuple[Any, ...]]:
    slots: dict[tuple[int, int], list[Any]] = {}
    for idx, t0, end, util, mem, total in rows:  # a run covers [t0, end)
        for slot in range(max(int((t0 - start) // step), 0), math.ceil((end - start) / step)):
            found = slots.get((idx, slot))
            if found is None:
                slots[(idx, slot)] = [util, mem, total]
            else:
                found[0] = max(found[0] or 0, util or 0)
                found[1] = max(found[1] or 0, mem or 0)
    return [(idx, start + (slot + 0.5) * step, *values)
            for (idx, slot), values in sorted(slots.items())]


class LedgerSeries:
    """The dashboard's long history lines from a ledger file; one query per host and
    window a minute at most; an unreadable ledger gives no lines (and says why once)."""

    def __init__(self, path: str, clock: Callable[[], float] = time.time,
                 refresh: float = 60.0) -> None:
        self.path, self.clock, self.refresh = path, clock, refresh
        self.problem: str | None = None
        self._cache: dict[tuple[str, float], tuple[float, dict[int, Series]]] = {}

    def __call__(self, host: str, seconds: float) -> dict[int, Series]:
        now = self.clock()
        cached = self._cache.get((host, seconds))
        if cached is not None and now - cached[0] < self.refresh:
            return cached[1]
        try:
            found = _with_reader(self.path, lambda conn: gpu_series(conn, host, seconds, now))
        except LedgerError as err:
            self.problem, found = str(err), {}
        self._cache[(host, seconds)] = (now, found)
        return found
