"""Writing snapshots into the ledger: dimension rows once, samples run-length merged.

A process at the same memory and SM % for an hour is one ``proc_samples`` row whose
``t1``, ``n`` and ``dur`` grow; a row never crosses an hour boundary.  The hourly rollups
are updated in the same transaction as the raw rows, so reports read only them and
retention (``expire_raw``) is a plain delete.  Each snapshot is one transaction.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop.analysis import hostview
from gputop.ledger.engine import Connection, greatest_known
from gputop.ledger.store import LedgerError, _locked, transaction
from gputop.model import GpuProcess, HealthWarning, HostSnapshot

HOUR = 3600
# A gap longer than this many intervals is a pause in recording, not one long interval.
_GAP_INTERVALS = 3.0


class LedgerFull(LedgerError):
    """The disk is full: this interval was not written; the next one tries again."""


class LedgerLocked(LedgerError):
    """Another connection holds a lock the write needs (after the busy timeout): nothing
    of this snapshot was written; ``publish.Backlog`` keeps it for the next try."""


@dataclass
class _Run:
    t0: float  # with the GPU (and process), the run's row: one run per card at a time
    values: tuple[Any, ...]
    hour: int
    t1: float


@dataclass
class _HostState:
    host_id: int
    prev_t: float | None = None
    warnings: frozenset[tuple[Any, ...]] = frozenset()


@dataclass
class Recorder:
    """Appends snapshots of any number of hosts to an open ledger (the one writer)."""

    conn: Connection
    interval: float
    idle_mem: int  # bytes: a process holding this much counts as holding its GPU
    _hosts: dict[str, _HostState] = field(default_factory=dict)
    _gpu_ids: dict[tuple[int, int, str], int] = field(default_factory=dict)
    _proc_ids: dict[tuple[int, int, int], int] = field(default_factory=dict)
    _runs: dict[tuple[str, int, int], _Run] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The rollups fix the idle threshold; reports say which one.
        with transaction(self.conn):
            self.conn.execute("INSERT INTO meta VALUES ('idle_mem', ?) ON CONFLICT (key)"
                              " DO UPDATE SET value = excluded.value", (str(self.idle_mem),))

    def record(self, snap: HostSnapshot, warnings: Iterable[HealthWarning] = ()) -> bool:
        """Write one snapshot; False when it adds nothing (host down, same moment again).
        Raises LedgerFull when the disk is full (nothing of this interval is kept)."""
        if not snap.ok or not snap.gpus:
            return False
        try:
            with transaction(self.conn):
                host = self._host(snap.host)
                if host.prev_t is not None and snap.time <= host.prev_t:
                    return False
                self._write(host, snap, list(warnings))
        except sqlite3.OperationalError as err:
            # What this transaction did is rolled back: the in-memory runs may name rows
            # that no longer exist, so start fresh ones.
            self._forget()
            if "full" in str(err).lower():
                raise LedgerFull(f"disk full: {err}") from None
            if _locked(err):
                raise LedgerLocked(f"ledger busy: {err}") from None
            raise LedgerError(f"cannot write the ledger: {err}") from None
        return True

    def _forget(self) -> None:
        self._runs.clear()
        self._gpu_ids.clear()
        self._proc_ids.clear()
        for state in self._hosts.values():
            state.prev_t = None

    def _host(self, name: str) -> _HostState:
        state = self._hosts.get(name)
        if state is None:
            self.conn.execute(_NEW_HOST, (name,))
            (host_id,) = self.conn.execute(
                "SELECT id FROM hosts WHERE name = ?", (name,)).fetchone()
            state = self._hosts[name] = _HostState(host_id)
        return state

    def _write(self, host: _HostState, snap: HostSnapshot, warnings: list[HealthWarning]) -> None:
        t = snap.time
        step = None if host.prev_t is None else t - host.prev_t
        contiguous = step is not None and step <= _GAP_INTERVALS * self.interval
        dur = step if contiguous and step is not None else self.interval
        hour = int(t // HOUR)
        gpu_ids: dict[int, int] = {}
        held = {p.gpu for p in snap.processes if (p.gpu_mem or 0) >= self.idle_mem}
        gpu_hours = []
        for gpu in snap.gpus:
            gpu_id = self._gpu_id(host.host_id, gpu.index, gpu.uuid or "", gpu.name,
                                  gpu.mem_total)
            gpu_ids[gpu.index] = gpu_id
            values = (gpu.state, gpu.util_gpu, gpu.mem_used,
                      None if gpu.power_draw is None else round(gpu.power_draw, 1), gpu.temp,
                      int(gpu.index in held))
            self._sample("gpu", gpu_id, 0, values, t, hour, dur, contiguous, host)
            util = gpu.util_gpu or 0
            gpu_hours.append((
                gpu_id, hour, dur, dur if util > 0 else 0.0,
                dur if util == 0 and gpu.util_gpu is not None and gpu.index in held else 0.0,
                util * dur, (gpu.power_draw or 0.0) * dur, gpu.mem_used, gpu.temp))
        proc_hours = []
        for proc in snap.processes:
            proc_gpu = gpu_ids.get(proc.gpu)
            if proc_gpu is None:
                continue
            proc_id = self._proc_id(host.host_id, proc)
            self._sample("proc", proc_id, proc_gpu, (proc.gpu_mem, proc.sm_util), t, hour, dur,
                         contiguous, host)
            sm, mem = proc.sm_util, proc.gpu_mem or 0
            proc_hours.append((
                proc_id, proc_gpu, hour, dur, dur if sm is not None and sm > 0 else 0.0,
                dur if sm == 0 and mem >= self.idle_mem else 0.0, (sm or 0) * dur, mem * dur,
                proc.gpu_mem))
        # The hourly rollups grow with every interval, so that a report reads them alone.
        self.conn.executemany(_GPU_HOURLY, gpu_hours)
        self.conn.executemany(_PROC_HOURLY, proc_hours)
        self.conn.executemany(HOLDER_HOURLY, holder_rows(
            [(gpu_ids[p.gpu], p) for p in snap.processes if p.gpu in gpu_ids], hour, dur,
            self.idle_mem,
            [(gpu_ids[h.gpu], h.reservation.user, h.share) for h in hostview.view(snap, t).holds
             if h.gpu in gpu_ids and h.reservation.since <= t]))
        self.conn.executemany(_WORKLOADS, [
            (host.host_id, label, w.kind, w.id[:200], _cut(w.user, 256), _cut(w.name, 256),
             w.end_time, t, t)
            for label, w in {_workload(p): p.workload for p in snap.processes
                             if p.workload is not None}.items() if label is not None])
        self._events(host, snap, warnings, gpu_ids)
        host.prev_t = t

    def _sample(self, kind: str, key: int, gpu_id: int, values: tuple[Any, ...], t: float,
                hour: int, dur: float, contiguous: bool, host: _HostState) -> None:
        run_key = (kind, key, gpu_id)
        run = self._runs.get(run_key)
        table = "gpu_samples" if kind == "gpu" else "proc_samples"
        if (contiguous and run is not None and run.values == values and run.hour == hour
                and run.t1 == host.prev_t):
            key_sql = "gpu_id = ?" if kind == "gpu" else "proc_id = ? AND gpu_id = ?"
            self.conn.execute(
                f"UPDATE {table} SET t1 = ?, n = n + 1, dur = dur + ? WHERE {key_sql}"
                " AND t0 = ?", (t, dur, *((key,) if kind == "gpu" else (key, gpu_id)), run.t0))
            run.t1 = t
            return
        if kind == "gpu":
            self.conn.execute(
                "INSERT INTO gpu_samples (gpu_id, hour, t0, t1, n, dur, state, util, mem_used,"
                " power, temp, held) VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?)",
                (key, hour, t, t, dur, *values))
        else:
            self.conn.execute(
                "INSERT INTO proc_samples (proc_id, gpu_id, hour, t0, t1, n, dur, mem, sm)"
                " VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?)", (key, gpu_id, hour, t, t, dur, *values))
        self._runs[run_key] = _Run(t, values, hour, t)

    def _gpu_id(self, host_id: int, index: int, uuid: str, name: str | None,
                mem_total: int | None) -> int:
        key = (host_id, index, uuid)
        found = self._gpu_ids.get(key)
        if found is None:
            self.conn.execute(
                "INSERT INTO gpus (host_id, idx, uuid, name, mem_total)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (host_id, index, uuid, name, mem_total))
            (found,) = self.conn.execute(
                "SELECT id FROM gpus WHERE host_id = ? AND idx = ? AND uuid = ?",
                key).fetchone()
            self._gpu_ids[key] = found
        return found

    def _proc_id(self, host_id: int, proc: GpuProcess) -> int:
        # pid plus start time is the identity: a reused pid is a new process.
        start = round(proc.start_time) if proc.start_time is not None else 0
        key = (host_id, proc.pid, start)
        found = self._proc_ids.get(key)
        if found is None:
            self.conn.execute(
                'INSERT INTO procs (host_id, pid, start, "user", workload, command)'
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (host_id, proc.pid, start, None if proc.user is None else proc.user[:256],
                 _workload(proc),
                 None if proc.command is None else proc.command[:1000]))
            (found,) = self.conn.execute(
                "SELECT id FROM procs WHERE host_id = ? AND pid = ? AND start = ?",
                key).fetchone()
            self._proc_ids[key] = found
        return found

    def _events(self, host: _HostState, snap: HostSnapshot, warnings: list[HealthWarning],
                gpu_ids: dict[int, int]) -> None:
        """XID events as they come; a warning when it first appears (not every interval)."""
        for xid in snap.xid_events:
            self.conn.execute(
                "INSERT INTO events VALUES (?, ?, ?, 'xid', ?, 'critical', ?)",
                (None if xid.gpu is None else gpu_ids.get(xid.gpu), host.host_id, xid.time,
                 f"xid-{xid.xid}", xid.detail))
        now = frozenset(w.key for w in warnings)
        for w in warnings:
            if w.key not in host.warnings:
                self.conn.execute(
                    "INSERT INTO events VALUES (?, ?, ?, 'warning', ?, ?, ?)",
                    (None if w.gpu is None else gpu_ids.get(w.gpu), host.host_id, snap.time,
                     w.code, w.severity, w.message[:500]))
        host.warnings = now


def _cut(text: str | None, size: int) -> str | None:
    return None if text is None else str(text)[:size]


def holder_rows(procs: list[tuple[int, GpuProcess]], hour: int, dur: float,
                idle_mem: int, reserved: Sequence[tuple[int, str, float]] = (),
                ) -> list[tuple[Any, ...]]:
    """One interval's ``holder_hourly`` rows: per card, what each user, each workload and
    anyone at all (kind 'card') did there, counted once however many processes it ran.
    Busy: one of its processes above 0 % SM; idle: none busy, every SM % known (0), and
    one holding the idle threshold; SM %: its processes' sum, at most 100.
    Kind 'quota': what counts against a user's GPU-hour quota, a card they ran on or held
    reserved (a reservation and a process on it count once). ``reserved``: (card, user,
    share) of each reservation: a whole card's share is 1; a MIG device's is the part of
    its card it is (analysis/hostview.py), so holding one 1g.10gb of an 80 GB card costs
    an eighth of the card's time, the devices a user holds on one card at most all of it.
    A process on the card charges the whole card, as it always did."""
    found: dict[tuple[int, str, str], list[GpuProcess]] = defaultdict(list)
    for gpu_id, proc in procs:
        found[(gpu_id, "user", proc.user or "")].append(proc)
        found[(gpu_id, "workload", _workload(proc) or "")].append(proc)
        found[(gpu_id, "card", "")].append(proc)
        if proc.user:
            found[(gpu_id, "quota", proc.user)].append(proc)
    shares: dict[tuple[int, str, str], float] = defaultdict(float)
    for gpu_id, user, share in reserved:
        found.setdefault((gpu_id, "quota", user), [])  # held, with or without processes
        shares[(gpu_id, "quota", user)] += share
    rows = []
    for key, held in found.items():
        gpu_id, kind, name = key
        busy = any((p.sm_util or 0) > 0 for p in held)
        idle = (not busy and all(p.sm_util is not None for p in held)
                and any((p.gpu_mem or 0) >= idle_mem for p in held))
        sm = min(sum(p.sm_util or 0 for p in held), 100)
        charged = dur if held else dur * min(shares[key], 1.0)
        rows.append((gpu_id, hour, kind, name[:256], charged, dur if busy else 0.0,
                     dur if idle else 0.0, sm * dur))
    return rows


def _workload(proc: GpuProcess) -> str | None:
    """The process's workload label (Slurm job, container, pod) where the model has one."""
    workload = getattr(proc, "workload", None)
    if workload is None:
        return None
    return str(getattr(workload, "label", workload))[:200]


# A host named once however many recorders start at the same time (ON CONFLICT: both
# engines; the id is then looked up).
_NEW_HOST = "INSERT INTO hosts (name) VALUES (?) ON CONFLICT DO NOTHING"
# In an upsert, PostgreSQL reads a bare column name as the new row's: the table's own is
# spelled out.
_GPU_HOURLY = (
    "INSERT INTO gpu_hourly AS o VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (gpu_id, hour) DO UPDATE SET dur = o.dur + excluded.dur,"
    " busy_s = o.busy_s + excluded.busy_s, held_idle_s = o.held_idle_s + excluded.held_idle_s,"
    " util_s = o.util_s + excluded.util_s, energy_j = o.energy_j + excluded.energy_j,"
    f" mem_max = {greatest_known('o.mem_max', 'excluded.mem_max')},"
    f" temp_max = {greatest_known('o.temp_max', 'excluded.temp_max')}")
HOLDER_HOURLY = (
    "INSERT INTO holder_hourly AS o VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (gpu_id, kind, name, hour) DO UPDATE SET dur = o.dur + excluded.dur,"
    " busy_s = o.busy_s + excluded.busy_s, idle_s = o.idle_s + excluded.idle_s,"
    " sm_s = o.sm_s + excluded.sm_s")
_WORKLOADS = (
    "INSERT INTO workloads AS o VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (host_id, label) DO UPDATE SET last = excluded.last,"
    ' "user" = COALESCE(excluded."user", o."user"), name = COALESCE(excluded.name, o.name),'
    " end_time = COALESCE(excluded.end_time, o.end_time)")
_PROC_HOURLY = (
    "INSERT INTO proc_hourly AS o VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (proc_id, gpu_id, hour) DO UPDATE SET dur = o.dur + excluded.dur,"
    " busy_s = o.busy_s + excluded.busy_s, idle_s = o.idle_s + excluded.idle_s,"
    " sm_s = o.sm_s + excluded.sm_s, mem_s = o.mem_s + excluded.mem_s,"
    f" mem_max = {greatest_known('o.mem_max', 'excluded.mem_max')}")


def log_action(conn: Connection, host: str, t: float, pid: int, start: int,
               gpu: int | None, user: str | None, step: str, outcome: str,
               evidence: dict[str, Any]) -> None:
    """One step of the idle policy (issue 28.7) with the evidence it acted on."""
    import json

    with transaction(conn):
        conn.execute(_NEW_HOST, (host,))
        conn.execute(
            "INSERT INTO actions VALUES ((SELECT id FROM hosts WHERE name = ?), ?, ?, ?, ?, ?,"
            " ?, ?, ?)", (host, t, pid, start, gpu, _cut(user, 256), step, outcome[:500],
                          json.dumps(evidence, sort_keys=True)[:4000]))


def expire_raw(conn: Connection, before: float) -> int:
    """Delete the raw samples of whole hours before ``before`` (their hourly rollups
    stay); returns how many rows went."""
    last_hour = int(before // HOUR)
    with transaction(conn):
        gone = conn.execute("DELETE FROM gpu_samples WHERE hour < ?", (last_hour,)).rowcount
        gone += conn.execute("DELETE FROM proc_samples WHERE hour < ?", (last_hour,)).rowcount
    return gone
