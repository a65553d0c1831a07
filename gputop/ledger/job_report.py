"""Jobs for `gputop report --jobs` (issue 28.10): `gputop run` jobs from the ledger's
``job_history`` (the rows `gputop queue --history` shows, read by gputop/ledger/jobs.py),
and Slurm jobs as the recorder saw them (the ``workloads`` table), read back per GPU
(analysis/jobstats.py decides the advice).

A `gputop run` job is one entry however many attempts (--retries) it made: its status is
the last attempt's, its runtime the sum of its attempts' (time on the cards, not the
back-off between them), its queue wait the first attempt's (submission to first start),
its time limit its --for.  Its GPUs were its own while an attempt ran: per card, the card's
samples over each attempt's time, added up.  A job that never ran is listed too (no GPUs,
no runtime).  Only the ledger's history is read: a job recorded in a user's own file ran
when no recorder did, so the ledger has no samples of it either.

A Slurm job's runtime is from the recorder's first sight of it to its last; its time limit
is Slurm's end time less that first sight; its queue wait is not known here.  Per GPU:
mean SM % and memory over the time the job held the card (holder rows, each card once),
peak memory the highest of its processes', peak SM % from the raw samples (kept
--raw-days).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from gputop.analysis.jobstats import GpuUse, Job
from gputop.ledger import jobs
from gputop.ledger.engine import Connection, dialect_of, greatest_known, least
from gputop.ledger.query import RECENT_S
from gputop.ledger.store import LedgerError, has_table

MAX_JOBS = 1000  # a report lists at most this many of each kind (the newest)


_SLURM = """
SELECT w.host_id, h.name, w.wid, MAX(w."user"), MAX(w.name), MAX(w.end_time), MIN(w.first),
  MAX(w.last), {labels}
FROM workloads AS w JOIN hosts AS h ON h.id = w.host_id
WHERE w.kind = 'slurm' AND w.last >= :a AND w.first < :b
GROUP BY w.host_id, h.name, w.wid ORDER BY MIN(w.first) DESC LIMIT :cap
"""
_SLURM_GPUS = """
SELECT g.idx, g.name, g.mem_total, SUM(x.dur), SUM(x.sm_s)
FROM holder_hourly AS x JOIN gpus AS g ON g.id = x.gpu_id
WHERE x.kind = 'workload' AND g.host_id = :host AND x.name IN ({labels})
GROUP BY g.id ORDER BY g.idx
"""
_SLURM_MEM = """
SELECT g.idx, SUM(p.mem_s), MAX(p.mem_max)
FROM proc_hourly AS p JOIN procs AS r ON r.id = p.proc_id JOIN gpus AS g ON g.id = p.gpu_id
WHERE r.host_id = :host AND r.workload IN ({labels}) GROUP BY g.id
"""
_SLURM_PEAK_SM = """
SELECT g.idx, MAX(s.sm)
FROM proc_samples AS s JOIN procs AS r ON r.id = s.proc_id JOIN gpus AS g ON g.id = s.gpu_id
WHERE r.host_id = :host AND r.workload IN ({labels}) GROUP BY g.id
"""
# A sample row is a run of equal looks covering (t1 - dur, t1]: each counts for the part
# of it inside the attempt (a run can reach far into the back-off before a retry).
_IN = f"({least('s.t1', ':end')} - {greatest_known('s.t1 - s.dur', ':start')})"
_RUN_GPU = f"""
SELECT g.name, g.mem_total, SUM(s.util * {_IN}), SUM({_IN}), MAX(s.util),
  SUM(s.mem_used * {_IN}), MAX(s.mem_used)
FROM gpu_samples AS s JOIN gpus AS g ON g.id = s.gpu_id
WHERE g.host_id = :host AND g.idx = :idx AND s.t0 <= :end AND s.t1 > :start
  AND s.t1 - s.dur < :end
"""


def load_jobs(conn: Connection, path: str, t_from: float, t_to: float,
              now: float) -> list[Job]:
    """The jobs of [t_from, t_to): `gputop run`'s, then Slurm's, newest first.  ``conn``
    is the ledger at ``path`` opened for reading."""
    try:
        attempts = jobs.read([path], since=t_from, strict=True)
    except jobs.HistoryError as err:
        raise LedgerError(str(err)) from None
    params: dict[str, Any] = {"a": t_from, "b": t_to, "cap": MAX_JOBS}
    try:
        out = [_run_job(conn, group, now) for group in _per_job(attempts, t_to)]
        if has_table(conn, "workloads"):  # a schema-1 ledger read as it is has none
            out += [_slurm_job(conn, row, now)
                    for row in conn.execute(_SLURM.format(labels=dialect_of(conn).concat.format(
                        expr="w.label")), params).fetchall()]
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot read the ledger: {err}") from None
    return out


def _per_job(attempts: list[dict[str, Any]], t_to: float) -> list[list[dict[str, Any]]]:
    """The attempts of the period grouped per job (host and id), first attempt first; the
    newest jobs first, MAX_JOBS of them.  ``jobs.read`` has kept those that ended (or were
    last seen) at the period's start or later; here those that began before its end."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in attempts:
        began = row["started"] if row["started"] is not None else row["submitted"]
        if began < t_to:
            groups.setdefault((str(row["host"]), row["id"]), []).append(row)
    out = [sorted(group, key=lambda r: r["attempt"]) for group in groups.values()]
    out.sort(key=lambda g: (-g[0]["submitted"], g[0]["id"]))
    return out[:MAX_JOBS]


def _run_job(conn: Connection, attempts: list[dict[str, Any]], now: float) -> Job:
    first, last = attempts[0], attempts[-1]
    ran = [a for a in attempts if a["started"] is not None]
    host = str(first["host"])
    found = conn.execute("SELECT id FROM hosts WHERE name = ?", (host,)).fetchone()
    cards = sorted({idx for a in ran for idx in a["gpus"]})
    uses = [_run_gpu(conn, None if found is None else found[0], idx, ran, now)
            for idx in cards]
    request = first["request"] if isinstance(first["request"], dict) else {}
    limit = request.get("for_s")
    finished = last["ended"] is not None
    return Job(kind="run", id=first["id"], host=host, user=first["user"],
               name=first["command"], start=ran[0]["started"] if ran else None,
               end=last["ended"], runtime_s=sum(a["ran_s"] or 0.0 for a in ran),
               requested_s=float(limit) if isinstance(limit, (int, float)) else None,
               wait_s=ran[0]["waited_s"] if ran else None, status=last["status"],
               gpus=uses, finished=finished, attempts=len(attempts),
               cancelled_by=last.get("cancelled_by"))


def _run_gpu(conn: Connection, host_id: int | None, idx: int,
             ran: list[dict[str, Any]], now: float) -> GpuUse:
    """One card of a `gputop run` job: its samples over each attempt's time, added up."""
    name = total = peak = mem_max = None
    util_s = dur = mem_s = 0.0
    for attempt in ran if host_id is not None else ():
        stop = attempt["ended"] if attempt["ended"] is not None else now
        row = conn.execute(_RUN_GPU, {"host": host_id, "idx": idx,
                                      "start": attempt["started"], "end": stop}).fetchone()
        a_name, a_total, a_util_s, a_dur, a_peak, a_mem_s, a_mem_max = row
        name, total = name or a_name, total or a_total
        util_s += a_util_s or 0.0
        dur += a_dur or 0.0
        mem_s += a_mem_s or 0.0
        peak, mem_max = _higher(peak, a_peak), _higher(mem_max, a_mem_max)
    return GpuUse(idx, name, total, util_s / dur if dur else None, peak,
                  mem_s / dur if dur else None, mem_max)


def _higher(a: Any, b: Any) -> Any:
    """The higher of two peaks, either of which may be unknown (None)."""
    return b if a is None else a if b is None else max(a, b)


def _slurm_job(conn: Connection, row: tuple[Any, ...], now: float) -> Job:
    host_id, host, wid, user, name, end_time, first, last, labels = row
    names = str(labels).split("\x1f")
    marks = ", ".join("?" for _ in names)
    args = [host_id, *names]

    def rows(sql: str) -> list[Any]:
        return conn.execute(sql.format(labels=marks).replace(":host", "?"), args).fetchall()

    mem = {idx: (mem_s, mem_max) for idx, mem_s, mem_max in rows(_SLURM_MEM)}
    peak = dict(rows(_SLURM_PEAK_SM))
    uses = []
    for idx, gname, total, dur, sm_s in rows(_SLURM_GPUS):
        mem_s, mem_max = mem.get(idx, (None, None))
        uses.append(GpuUse(idx, gname, total, sm_s / dur if dur else None, peak.get(idx),
                           mem_s / dur if dur and mem_s is not None else None, mem_max))
    finished = last < now - RECENT_S
    return Job(kind="slurm", id=str(wid), host=host, user=user, name=name, start=first,
               end=last if finished else None, runtime_s=max(last - first, 0.0),
               requested_s=None if end_time is None else max(end_time - first, 0.0),
               wait_s=None, status="ended" if finished else "running", gpus=uses,
               finished=finished)
