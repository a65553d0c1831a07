"""The history of `gputop run` jobs: one row per attempt, in SQLite (docs/queue.md).

Where: the host's ledger when a recorder runs on it and this user may write it (the
recorder's file then holds the jobs beside the usage they made), else a file of the
user's own, ``$XDG_STATE_HOME/gputop/jobs.sqlite``. A row is written when the attempt
starts (state ``running``) and brought up to date while it runs, so a `gputop run` killed
with SIGKILL still leaves its row: readers show a running row whose process is gone as
ended by "gputop run killed", at its last update.

History is a record, never a reason to stop a job: a file that cannot be used is one
warning line, and the job runs on.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import stat
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gputop.actions.liveness import process_alive
from gputop.ledger import paths
from gputop.ledger.engine import Connection, dialect_of, is_url, shown
from gputop.ledger.store import LedgerError, open_reader, transaction

TABLE = "job_history"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id TEXT NOT NULL, attempt INTEGER NOT NULL, "user" TEXT NOT NULL, uid INTEGER NOT NULL,
    host TEXT NOT NULL, command TEXT NOT NULL, request TEXT NOT NULL, gpus TEXT NOT NULL,
    submitted REAL NOT NULL, started REAL, ended REAL, updated REAL NOT NULL,
    status TEXT NOT NULL, reason TEXT, exit_code INTEGER, signal INTEGER,
    peak_mem INTEGER, mean_sm REAL, samples INTEGER NOT NULL DEFAULT 0, log TEXT,
    pid INTEGER NOT NULL, pid_start INTEGER, cancelled_by TEXT,
    PRIMARY KEY (id, attempt));
CREATE INDEX IF NOT EXISTS {TABLE}_updated ON {TABLE} (updated)
"""
# What a finished attempt's status is, by why it ended (the task table).
STATUSES = ("pending", "running", "success", "failed", "cancelled")
REASONS = ("done", "failed", "cancelled", "time cap", "killed", "gputop run killed", "hang",
           "wait expired", "never ran")
FIELDS = ("id", "attempt", "user", "uid", "host", "command", "request", "gpus", "submitted",
          "started", "ended", "updated", "status", "reason", "exit_code", "signal",
          "peak_mem", "mean_sm", "samples", "log", "pid", "pid_start", "cancelled_by")
MAX_ROWS = 100_000  # what one query returns at most
_QUOTED = [f'"{n}"' for n in FIELDS]  # "user" is a word of PostgreSQL's
_COLUMNS = ", ".join(_QUOTED)
# One attempt's row, replaced by a newer state of it (begin: as it starts; store: the
# collector's copy, only when newer).
_UPSERT = (f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES ({', '.join('?' for _ in FIELDS)})"
           " ON CONFLICT (id, attempt) DO UPDATE SET "
           + ", ".join(f"{q} = excluded.{q}" for q in _QUOTED[2:]))


class HistoryError(Exception):
    """A history file that cannot be used; str() is one line naming it."""


def own_path() -> str:
    """This user's own history file."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "gputop", "jobs.sqlite")


def recorder_running(ledger: str) -> bool:
    """Does a `gputop record` hold this ledger's writer lock right now?"""
    try:
        fd = os.open(ledger + ".lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True  # held exclusively: the recorder
    finally:
        os.close(fd)
    return False


def write_path() -> str:
    """Where this user's jobs are recorded: the ledger when a recorder runs and we may
    write it, else our own file."""
    ledger = paths.existing_path()
    live = ledger and paths.live_path(ledger)  # the recorder's private database
    if live and recorder_running(live) and os.access(live, os.W_OK):
        return live
    return own_path()


def read_paths() -> list[str]:
    """Every history this user may read: their own file and the ledger's."""
    found = [own_path()]
    ledger = paths.existing_path()
    if ledger and ledger not in found:
        found.append(ledger)
        # The readers' copy lags the recorder's by up to its publishing interval; the
        # live database, when it is this user's own recorder's, has what write_path wrote.
        live = paths.live_path(ledger)
        if os.access(live, os.R_OK):
            found.append(live)
    return found


def _safe_file(path: str, create: bool) -> None:
    """A history file is this user's regular file (or root's), never a link, in a
    directory nobody else may write; the directory is made when ``create``."""
    parent = os.path.dirname(os.path.abspath(path))
    if create and not os.path.isdir(parent):
        try:
            os.makedirs(parent, 0o700, exist_ok=True)
        except OSError as exc:
            raise HistoryError(f"{parent}: {exc.strerror or exc}") from None
    try:
        up = os.stat(parent)
    except OSError as exc:
        raise HistoryError(f"{parent}: {exc.strerror or exc}") from None
    if up.st_mode & stat.S_IWOTH and not up.st_mode & stat.S_ISVTX:
        raise HistoryError(f"{parent}: writable by everyone; not used for job history")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if create:
            return
        raise HistoryError(f"{path}: no job history yet") from None
    except OSError as exc:
        raise HistoryError(f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise HistoryError(f"{path}: not a regular file (a link?); not used")
    if create and info.st_uid not in (os.geteuid(), 0):
        raise HistoryError(f"{path}: owned by uid {info.st_uid}; not used")


def ensure_table(conn: Connection) -> None:
    """The history table in an open ledger (one that has none yet); a table made before
    ``cancelled_by`` (issue 38.1) gets the column."""
    for statement in dialect_of(conn).schema(_SCHEMA):
        conn.execute(statement)
    have = {d[0] for d in conn.execute(f"SELECT * FROM {TABLE} LIMIT 0").description}
    if "cancelled_by" not in have:
        conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN cancelled_by TEXT")


def store(conn: Connection, rows: Iterable[dict[str, Any]]) -> None:
    """Rows as ``read`` returns them, into ``conn``'s history: a row newer than the one
    held replaces it (the recorder's collector, issue 38.1)."""
    values = []
    for row in rows:
        raw = {name: row.get(name) for name in FIELDS}
        raw.update(request=json.dumps(row.get("request") or {}, sort_keys=True),
                   gpus=",".join(str(i) for i in row.get("gpus") or ()))
        values.append(tuple(raw[n] for n in FIELDS))
    if not values:
        return
    with transaction(conn):
        conn.executemany(_UPSERT + f" WHERE excluded.updated >= {TABLE}.updated", values)


def open_writer(path: str) -> sqlite3.Connection:
    _safe_file(path, create=True)
    try:
        conn = sqlite3.connect(path, timeout=5.0, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        ensure_table(conn)
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path}: cannot record job history ({exc})") from None
    with contextlib.suppress(OSError):
        os.chmod(path, 0o600 if path == own_path() else os.stat(path).st_mode & 0o7777)
    return conn


@dataclass
class Attempt:
    """One attempt of a job as it is recorded: started, sampled, ended."""

    path: str
    conn: sqlite3.Connection | None
    key: tuple[str, int]
    peak_mem: int | None = None
    sm_sum: float = 0.0
    samples: int = 0
    warned: bool = False

    def sample(self, mem: int | None, sm: float | None) -> None:
        """One look at the job's cards: the memory its processes hold, its cards' SM %."""
        if mem is not None:
            self.peak_mem = max(self.peak_mem or 0, mem)
        if sm is not None:
            self.sm_sum += sm
            self.samples += 1
        self._update({})

    def end(self, status: str, reason: str, exit_code: int | None, signum: int | None,
            at: float | None = None) -> None:
        """The attempt ended, now, or ``at`` (a past the caller knows: a test's recorded
        hours, which the ledger's samples are of)."""
        now = time.time() if at is None else at
        self._update({"ended": now, "status": status, "reason": reason,
                      "exit_code": exit_code, "signal": signum}, now)
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    @property
    def mean_sm(self) -> float | None:
        return round(self.sm_sum / self.samples, 1) if self.samples else None

    def _update(self, fields: dict[str, Any], now: float | None = None) -> None:
        if self.conn is None:
            return
        fields = dict(fields, updated=time.time() if now is None else now, peak_mem=self.peak_mem,
                      mean_sm=self.mean_sm, samples=self.samples)
        assigns = ", ".join(f"{name} = ?" for name in fields)
        try:
            self.conn.execute(f"UPDATE {TABLE} SET {assigns} WHERE id = ? AND attempt = ?",
                              (*fields.values(), *self.key))
        except sqlite3.Error as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        if not self.warned:
            print(f"gputop run: {self.path}: job history not written ({exc})", file=sys.stderr)
            self.warned = True
        if self.conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self.conn.close()
            self.conn = None


def begin(record: dict[str, Any], path: str | None = None) -> Attempt:
    """Record an attempt (or a job that never ran) as it begins; never raises."""
    path = path or write_path()
    row = {name: record.get(name) for name in FIELDS}
    row.update(updated=time.time(), samples=0,
               request=json.dumps(record.get("request") or {}, sort_keys=True),
               gpus=",".join(str(i) for i in record.get("gpus") or ()))
    attempt = Attempt(path, None, (str(row["id"]), int(row["attempt"] or 1)))
    try:
        conn = open_writer(path)
        conn.execute(_UPSERT, tuple(row[n] for n in FIELDS))
        attempt.conn = conn
    except (HistoryError, sqlite3.Error, OSError) as exc:
        attempt._fail(exc)
    return attempt


# ---------------------------------------------------------------------------------------
# reading


def read(paths: Iterable[str], since: float | None = None, user: str | None = None,
         problems: list[str] | None = None, strict: bool = False) -> list[dict[str, Any]]:
    """Every recorded attempt (newest first) from these files, one per (id, attempt);
    an attempt still "running" whose `gputop run` is gone ended with it.  A file that
    cannot be read is skipped (named in ``problems`` when it is the user's own), or with
    ``strict`` raised as HistoryError: a file the caller named must not read as empty."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for path in paths:
        try:
            rows = list(_rows(path, since, user))
        except HistoryError as exc:
            if strict:
                raise
            if problems is not None and os.path.exists(path) and path == own_path():
                problems.append(str(exc))
            continue
        for row in rows:
            key = (row["id"], row["attempt"])
            if key not in found or row["updated"] > found[key]["updated"]:
                found[key] = row
    out = [_settled(row) for row in found.values()]
    out.sort(key=lambda r: (-(r["ended"] or r["updated"]), r["id"], -r["attempt"]))
    return out[:MAX_ROWS]


def _rows(path: str, since: float | None, user: str | None) -> Iterator[dict[str, Any]]:
    conn: Connection
    if is_url(path):  # the lab's ledger (issue 38.3)
        try:
            conn = open_reader(path)
        except LedgerError as exc:
            raise HistoryError(str(exc)) from None
    else:
        _safe_file(path, create=False)
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2.0,
                                   isolation_level=None)
        except sqlite3.Error as exc:
            raise HistoryError(f"{path}: cannot open ({exc})") from None
    try:
        if conn.execute(dialect_of(conn).has_table, (TABLE,)).fetchone() is None:
            return
        where = ["updated >= ?"]
        args: list[Any] = [since if since is not None else 0.0]
        if user is not None:
            where.append('"user" = ?')
            args.append(user)
        if os.geteuid() != 0:
            # The ledger holds every user's jobs (issue 38.1): a user reads their own.
            where.append("uid = ?")
            args.append(os.geteuid())
        # SELECT *: a file written before a column was added (read-only here) reads too.
        cursor = conn.execute(f"SELECT * FROM {TABLE} WHERE"
                              f" {' AND '.join(where)} ORDER BY updated DESC LIMIT ?",
                              (*args, MAX_ROWS))
        names = [d[0] for d in cursor.description]
        for values in cursor:
            row = dict.fromkeys(FIELDS) | dict(zip(names, values, strict=True))
            if _valid(row):
                yield row
    except sqlite3.Error as exc:
        raise HistoryError(f"{shown(path)}: not a job history ({exc})") from None
    finally:
        conn.close()


def _valid(row: dict[str, Any]) -> bool:
    """A row is someone's input too (the ledger is shared): the shapes we rely on."""
    return (isinstance(row["id"], str) and isinstance(row["attempt"], int)
            and isinstance(row["updated"], (int, float)) and row["status"] in STATUSES
            and isinstance(row["submitted"], (int, float)))


def _settled(row: dict[str, Any]) -> dict[str, Any]:
    row = dict(row)
    try:
        row["request"] = json.loads(row["request"] or "{}")
    except ValueError:
        row["request"] = {}
    row["gpus"] = [int(g) for g in str(row["gpus"] or "").split(",") if g.isdigit()]
    if row["status"] == "running" and not process_alive(row["pid"], row["pid_start"],
                                                        _uid(row)):
        row.update(status="failed", reason="gputop run killed", ended=row["updated"])
    started = row["started"]
    row["waited_s"] = round((started if started is not None else row["ended"] or
                             row["updated"]) - row["submitted"], 1)
    row["ran_s"] = (round((row["ended"] or time.time()) - started, 1)
                    if started is not None else None)
    return row


def _uid(row: dict[str, Any]) -> int:
    return row["uid"] if isinstance(row["uid"], int) else -1
