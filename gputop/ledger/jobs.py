"""Jobs in the ledger (issue 28): `gputop run` jobs as they end (``write_job``, called by
`gputop run`), and Slurm jobs as the recorder saw them (the ``workloads`` table), read back
per GPU for `gputop report --jobs` (analysis/jobstats.py decides the advice).

A Slurm job's runtime is from the recorder's first sight of it to its last; its time limit
is Slurm's end time less that first sight; its queue wait is not known here.  Per GPU:
mean SM % and memory over the time the job held the card (holder rows, each card once),
peak memory the highest of its processes', peak SM % from the raw samples (kept
--raw-days).  A `gputop run` job's GPUs were its own: their card samples in its time.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from gputop.analysis.jobstats import GpuUse, Job
from gputop.ledger.query import RECENT_S
from gputop.ledger.store import LedgerError, has_table, transaction

MAX_JOBS = 1000  # a report lists at most this many (the newest)


@dataclass(frozen=True)
class JobRecord:
    """One finished `gputop run` job (issue 28.1's history record)."""

    job_id: str
    user: str
    command: str
    gpus_requested: int | None
    gpus: tuple[int, ...]
    submit: float
    start: float | None
    end: float | None
    status: str  # done, failed, cancelled, time cap, killed, ...
    requested_s: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    peak_mem: int | None = None
    mean_sm: float | None = None
    log_path: str | None = None


def write_job(conn: sqlite3.Connection, host: str, job: JobRecord) -> None:
    """Store a finished job (once per id: a second write replaces the first)."""
    try:
        with transaction(conn):
            conn.execute("INSERT OR IGNORE INTO hosts (name) VALUES (?)", (host,))
            conn.execute(
                "INSERT OR REPLACE INTO jobs VALUES ((SELECT id FROM hosts WHERE name = ?),"
                " ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (host, job.job_id[:64], job.user[:256], job.command[:1000], job.gpus_requested,
                 ",".join(str(g) for g in job.gpus), job.requested_s, job.submit, job.start,
                 job.end, job.status[:32], job.exit_code, job.signal, job.peak_mem,
                 job.mean_sm, None if job.log_path is None else job.log_path[:1000]))
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot write the ledger: {err}") from None


_SLURM = """
SELECT w.host_id, h.name, w.wid, MAX(w.user), MAX(w.name), MAX(w.end_time), MIN(w.first),
  MAX(w.last), GROUP_CONCAT(w.label, char(31))
FROM workloads AS w JOIN hosts AS h ON h.id = w.host_id
WHERE w.kind = 'slurm' AND w.last >= :a AND w.first < :b
GROUP BY w.host_id, w.wid ORDER BY MIN(w.first) DESC LIMIT :cap
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
_RUN = """
SELECT j.host_id, h.name, j.job_id, j.user, j.command, j.gpus, j.requested_s, j.submit,
  j.start, j.end_t, j.status
FROM jobs AS j JOIN hosts AS h ON h.id = j.host_id
WHERE COALESCE(j.end_t, :b) >= :a AND COALESCE(j.start, j.submit) < :b
ORDER BY j.submit DESC LIMIT :cap
"""
_RUN_GPU = """
SELECT g.name, g.mem_total, SUM(s.util * s.dur), SUM(s.dur), MAX(s.util),
  SUM(s.mem_used * s.dur), MAX(s.mem_used)
FROM gpu_samples AS s JOIN gpus AS g ON g.id = s.gpu_id
WHERE g.host_id = :host AND g.idx = :idx AND s.t1 >= :start AND s.t0 <= :end
"""


def load_jobs(conn: sqlite3.Connection, t_from: float, t_to: float, now: float) -> list[Job]:
    """The jobs of [t_from, t_to): `gputop run`'s, then Slurm's, newest first."""
    if not has_table(conn, "jobs"):
        return []  # a schema-1 ledger read as it is: no jobs were kept
    params: dict[str, Any] = {"a": t_from, "b": t_to, "cap": MAX_JOBS}
    try:
        out = [_run_job(conn, row, now) for row in conn.execute(_RUN, params).fetchall()]
        out += [_slurm_job(conn, row, now) for row in conn.execute(_SLURM, params).fetchall()]
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"cannot read the ledger: {err}") from None
    return out


def _run_job(conn: sqlite3.Connection, row: tuple[Any, ...], now: float) -> Job:
    host_id, host, job_id, user, command, gpus, requested, submit, start, end, status = row
    begin = start if start is not None else submit
    stop = end if end is not None else now
    uses = []
    for part in str(gpus or "").split(","):
        if not part.strip().isdigit():
            continue
        idx = int(part)
        name, total, util_s, dur, peak, mem_s, mem_max = conn.execute(
            _RUN_GPU, {"host": host_id, "idx": idx, "start": begin, "end": stop}).fetchone()
        uses.append(GpuUse(idx, name, total, util_s / dur if dur else None, peak,
                           mem_s / dur if dur else None, mem_max))
    return Job(kind="run", id=str(job_id), host=host, user=user, name=command, start=start,
               end=end, runtime_s=max(stop - begin, 0.0) if start is not None else 0.0,
               requested_s=requested, wait_s=None if start is None else start - submit,
               status=status, gpus=uses, finished=end is not None)


def _slurm_job(conn: sqlite3.Connection, row: tuple[Any, ...], now: float) -> Job:
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
