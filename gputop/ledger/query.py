"""Reading a period of the ledger: per process, per GPU, per GPU-hour, and events.

Raw samples and hourly rollups are read alike (raw rows by their start, rollups by their
hour), and energy is attributed to processes within each GPU-hour by their share of the
memory held (byte-seconds): sums are done by SQLite, the report does the rest.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from gputop.ledger.store import LedgerError


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
    idle_mem: int
    procs: list[ProcUsage]
    gpus: list[GpuUsage]
    hourly: list[tuple[str, int, int, float, float]]  # host, gpu, hour, seconds, util x s
    events: list[Event]


_PROCS = """
WITH raw AS (
  SELECT proc_id, gpu_id, hour, SUM(dur) AS dur,
    SUM(CASE WHEN sm > 0 THEN dur ELSE 0 END) AS busy,
    SUM(CASE WHEN sm = 0 AND mem >= :idle THEN dur ELSE 0 END) AS idle,
    SUM(COALESCE(sm, 0) * dur) AS sm_s, SUM(COALESCE(mem, 0) * dur) AS mem_s,
    MAX(mem) AS mem_max, MIN(t0) AS first, MAX(t1) AS last
  FROM proc_samples WHERE t0 >= :a AND t0 < :b GROUP BY proc_id, gpu_id, hour
  UNION ALL
  SELECT proc_id, gpu_id, hour, dur, busy_s, idle_s, sm_s, mem_s, mem_max,
    hour * 3600, hour * 3600 + 3600
  FROM proc_hourly WHERE hour * 3600 >= :a AND hour * 3600 < :b),
energy AS (
  SELECT gpu_id, hour, SUM(e) AS e FROM (
    SELECT gpu_id, hour, SUM(COALESCE(power, 0) * dur) AS e FROM gpu_samples
    WHERE t0 >= :a AND t0 < :b GROUP BY gpu_id, hour
    UNION ALL
    SELECT gpu_id, hour, energy_j FROM gpu_hourly WHERE hour * 3600 >= :a AND hour * 3600 < :b)
  GROUP BY gpu_id, hour),
memtot AS (SELECT gpu_id, hour, SUM(mem_s) AS m FROM raw GROUP BY gpu_id, hour)
SELECT raw.proc_id, raw.gpu_id, SUM(raw.dur), SUM(busy), SUM(idle), SUM(sm_s), MAX(mem_max),
  SUM(CASE WHEN memtot.m > 0 THEN COALESCE(energy.e, 0) * raw.mem_s / memtot.m ELSE 0 END),
  MIN(first), MAX(last)
FROM raw JOIN memtot USING (gpu_id, hour) LEFT JOIN energy USING (gpu_id, hour)
GROUP BY raw.proc_id, raw.gpu_id
"""

_GPU_ROWS = """
  SELECT gpu_id, hour, dur, CASE WHEN util > 0 THEN dur ELSE 0 END AS busy,
    CASE WHEN util = 0 AND held THEN dur ELSE 0 END AS held_idle,
    COALESCE(util, 0) * dur AS util_s, COALESCE(power, 0) * dur AS energy, mem_used AS mem_max
  FROM gpu_samples WHERE t0 >= :a AND t0 < :b
  UNION ALL
  SELECT gpu_id, hour, dur, busy_s, held_idle_s, util_s, energy_j, mem_max FROM gpu_hourly
  WHERE hour * 3600 >= :a AND hour * 3600 < :b
"""

_GPUS = f"""SELECT gpu_id, SUM(dur), SUM(busy), SUM(held_idle), SUM(util_s), SUM(energy),
  MAX(mem_max) FROM ({_GPU_ROWS}) GROUP BY gpu_id"""

_HOURLY = f"SELECT gpu_id, hour, SUM(dur), SUM(util_s) FROM ({_GPU_ROWS}) GROUP BY gpu_id, hour"


def load(conn: sqlite3.Connection, t_from: float, t_to: float, idle_mem: int) -> Usage:
    """The usage in [t_from, t_to); LedgerError when the period holds no samples."""
    params = {"a": t_from, "b": t_to, "idle": idle_mem}
    try:
        hosts = dict(conn.execute("SELECT id, name FROM hosts"))
        gpus = {row[0]: (hosts.get(row[1], "?"), row[2], row[3])
                for row in conn.execute("SELECT id, host_id, idx, name FROM gpus")}
        gpu_rows = conn.execute(_GPUS, params).fetchall()
        if not gpu_rows:
            raise LedgerError("no samples in this period")
        proc_rows = conn.execute(_PROCS, params).fetchall()
        wanted = {row[0] for row in proc_rows}
        procs = {row[0]: row[1:] for row in conn.execute(
            "SELECT procs.id, hosts.name, pid, start, user, workload, command"
            " FROM procs JOIN hosts ON hosts.id = procs.host_id") if row[0] in wanted}
        hourly = conn.execute(_HOURLY, params).fetchall()
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
    )


def _proc(dim: tuple[Any, ...], gpu: int, sums: tuple[Any, ...]) -> ProcUsage:
    host, pid, start, user, workload, command = dim
    held, busy, idle, sm_s, mem_max, energy, first, last = sums
    return ProcUsage(host=host, gpu=gpu, pid=pid, start=start, user=user, workload=workload,
                     command=command, held_s=held, busy_s=busy, idle_s=idle, sm_s=sm_s,
                     mem_max=mem_max, energy_j=energy, first=first, last=last)
