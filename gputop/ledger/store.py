"""Opening the ledger: schema, version check, the one-writer lock.

One SQLite file in WAL mode: the recorder is the one writer, readers (reports, the
dashboard) never block it.  Each interval is one transaction with synchronous=FULL, so a
crash or SIGKILL loses at most the interval being written and never corrupts the file.
Or, for a lab, a PostgreSQL database named by a URL (engine.py): the same schema, one
recorder per host writing into it (rows keyed by host), every host reading it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pwd
import socket
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gputop.ledger import engine
from gputop.text import visible

SCHEMA_VERSION = 2
APPLICATION_ID = 0x67707574  # "gput": marks the file as ours in its header

# Times are epoch seconds; ``hour`` is floor(t0 / 3600), the rollup and filter key.
# Sample rows are run-length merged: n intervals of identical values, ``dur`` seconds.
# ``held``: some process held at least the idle threshold of memory on the GPU then.
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE hosts (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE gpus (
    id INTEGER PRIMARY KEY, host_id INTEGER NOT NULL REFERENCES hosts(id),
    idx INTEGER NOT NULL, uuid TEXT NOT NULL, name TEXT, mem_total INTEGER,
    UNIQUE (host_id, idx, uuid));
CREATE TABLE procs (
    id INTEGER PRIMARY KEY, host_id INTEGER NOT NULL REFERENCES hosts(id),
    pid INTEGER NOT NULL, start INTEGER NOT NULL, "user" TEXT, workload TEXT, command TEXT,
    UNIQUE (host_id, pid, start));
CREATE TABLE gpu_samples (
    gpu_id INTEGER NOT NULL, hour INTEGER NOT NULL, t0 REAL NOT NULL, t1 REAL NOT NULL,
    n INTEGER NOT NULL, dur REAL NOT NULL, state TEXT NOT NULL, util INTEGER,
    mem_used INTEGER, power REAL, temp INTEGER, held INTEGER NOT NULL);
CREATE INDEX gpu_samples_t ON gpu_samples (t0);
CREATE TABLE proc_samples (
    proc_id INTEGER NOT NULL, gpu_id INTEGER NOT NULL, hour INTEGER NOT NULL,
    t0 REAL NOT NULL, t1 REAL NOT NULL, n INTEGER NOT NULL, dur REAL NOT NULL,
    mem INTEGER, sm INTEGER);
CREATE INDEX proc_samples_t ON proc_samples (t0);
CREATE INDEX proc_samples_proc ON proc_samples (proc_id, t0);
CREATE TABLE events (
    gpu_id INTEGER, host_id INTEGER NOT NULL, t REAL NOT NULL, kind TEXT NOT NULL,
    code TEXT NOT NULL, severity TEXT, message TEXT);
CREATE INDEX events_t ON events (t);
CREATE TABLE gpu_hourly (
    gpu_id INTEGER NOT NULL, hour INTEGER NOT NULL, dur REAL NOT NULL, busy_s REAL NOT NULL,
    held_idle_s REAL NOT NULL, util_s REAL NOT NULL, energy_j REAL NOT NULL,
    mem_max INTEGER, temp_max INTEGER,
    PRIMARY KEY (gpu_id, hour)) WITHOUT ROWID;
CREATE TABLE proc_hourly (
    proc_id INTEGER NOT NULL, gpu_id INTEGER NOT NULL, hour INTEGER NOT NULL,
    dur REAL NOT NULL, busy_s REAL NOT NULL, idle_s REAL NOT NULL, sm_s REAL NOT NULL,
    mem_s REAL NOT NULL, mem_max INTEGER,
    PRIMARY KEY (proc_id, gpu_id, hour)) WITHOUT ROWID;
"""

# Schema 2 (issue 28): what a holder (a user, a workload, anyone: kind 'card') did on a card
# per hour, counted once however many processes it ran there; workloads (Slurm jobs and
# the like) with their time limit; what the idle policy did.  `gputop run` jobs are
# gputop/ledger/jobs.py's ``job_history``, which that module creates when the first job is
# recorded.  (A ``jobs`` table, which nothing wrote, was part of schema 2 before schema 2
# was released; a ledger made then keeps it, empty and unread: removing a table nobody
# reads changes nothing a reader relies on, so it is no new version.)
# holder_hourly's key is in the order reports group by (a report's GROUP BY then needs no
# sort: 0.13 s instead of 1.1 s for 30 days of 8 GPUs and 17 users).
_SCHEMA_2 = """
CREATE TABLE holder_hourly (
    gpu_id INTEGER NOT NULL, hour INTEGER NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL,
    dur REAL NOT NULL, busy_s REAL NOT NULL, idle_s REAL NOT NULL, sm_s REAL NOT NULL,
    PRIMARY KEY (gpu_id, kind, name, hour)) WITHOUT ROWID;
CREATE TABLE workloads (
    host_id INTEGER NOT NULL, label TEXT NOT NULL, kind TEXT NOT NULL, wid TEXT NOT NULL,
    "user" TEXT, name TEXT, end_time REAL, first REAL NOT NULL, last REAL NOT NULL,
    PRIMARY KEY (host_id, label)) WITHOUT ROWID;
CREATE TABLE actions (
    host_id INTEGER NOT NULL, t REAL NOT NULL, pid INTEGER NOT NULL, start INTEGER NOT NULL,
    gpu INTEGER, "user" TEXT, step TEXT NOT NULL, outcome TEXT NOT NULL, evidence TEXT NOT NULL);
CREATE INDEX actions_t ON actions (t);
"""

# A schema-1 ledger's hours get holder rows from the per-process rollups: a holder's
# processes on one card in one hour are taken to overlap as little as the card's recorded
# time allows (exact for one process, and for processes there all hour or one after the
# other).  New hours are written exactly.
HOLDERS_FROM_PROCS = f"""
SELECT p.gpu_id AS gpu_id, p.hour AS hour, k.kind AS kind, k.name AS name,
  {engine.least("SUM(p.dur)", "MAX(g.dur)")} AS dur,
  {engine.least("SUM(p.busy_s)", "MAX(g.dur)")} AS busy_s,
  {engine.least("SUM(p.idle_s)", "MAX(g.dur)")} AS idle_s,
  {engine.least("SUM(p.sm_s)", "100 * MAX(g.dur)")} AS sm_s
FROM proc_hourly AS p
  JOIN (SELECT id, 'user' AS kind, COALESCE("user", '') AS name FROM procs
        UNION ALL SELECT id, 'workload', COALESCE(workload, '') FROM procs
        UNION ALL SELECT id, 'card', '' FROM procs
        UNION ALL SELECT id, 'quota', "user" FROM procs WHERE "user" IS NOT NULL) AS k
    ON k.id = p.proc_id
  JOIN gpu_hourly AS g ON g.gpu_id = p.gpu_id AND g.hour = p.hour
GROUP BY p.gpu_id, p.hour, k.kind, k.name
"""


class LedgerError(Exception):
    """A ledger that cannot be used; str() is one line naming the file."""


class LedgerBusy(LedgerError):
    """Another recorder holds the ledger; str() says who."""


_LOCKED = ("{path}: locked by another program ({err}); try again when it lets go"
           " (gputop's recorder never locks readers out)")
BUSY_TIMEOUT_S = 5.0


def _check(conn: sqlite3.Connection, path: str) -> int:
    """Refuse a file that is not a ledger, or one of a newer schema."""
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.OperationalError as err:
        if _locked(err):
            raise LedgerError(_LOCKED.format(path=path, err=err)) from None
        raise LedgerError(f"{path}: not a gputop ledger ({err})") from None
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"{path}: not a gputop ledger ({err})") from None
    if app_id != APPLICATION_ID or row is None:
        raise LedgerError(f"{path}: not a gputop ledger (no gputop schema in it)")
    try:
        version = int(row[0])
    except ValueError:
        raise LedgerError(f"{path}: not a gputop ledger (schema {row[0]!r})") from None
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"{path}: ledger schema version {version} is newer than this gputop's "
            f"({SCHEMA_VERSION}); upgrade gputop to read it"
        )
    return version


def _migrate(conn: engine.Connection, version: int) -> None:
    """Schema 1 to 2 in one transaction: the new tables, and holder rows for the hours
    recorded before (see HOLDERS_FROM_PROCS)."""
    if version >= SCHEMA_VERSION:
        return
    with transaction(conn):
        for statement in engine.dialect_of(conn).schema(_SCHEMA_2):
            conn.execute(statement)
        conn.execute("INSERT INTO holder_hourly" + HOLDERS_FROM_PROCS)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(SCHEMA_VERSION),))


def _create(conn: engine.Connection) -> None:
    """The whole schema, in the transaction the caller holds."""
    for statement in engine.dialect_of(conn).schema(_SCHEMA + _SCHEMA_2):
        conn.execute(statement)
    conn.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
    conn.execute("INSERT INTO meta VALUES ('created', ?)", (str(time.time()),))


def has_table(conn: engine.Connection, name: str) -> bool:
    """A schema-1 ledger read without migrating it lacks schema 2's tables."""
    return conn.execute(engine.dialect_of(conn).has_table, (name,)).fetchone() is not None


# The files SQLite and the lock make beside the ledger: a link planted at any of them would
# send the recorder's writes (often root's) into someone else's file.
_COMPANIONS = ("", "-wal", "-shm", "-journal", ".lock")


def check_place(path: str) -> None:
    """Refuse to write a ledger where another user could redirect or swap its files: a
    symbolic link at the ledger or a companion file, a directory that others may write,
    or a file that is not a regular one, or another user's (issue 25.10)."""
    parent = os.path.dirname(os.path.abspath(path))
    info = os.stat(parent)
    me = os.geteuid()
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or info.st_uid not in (me, 0):
        who = "others may write it" if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) \
            else "it belongs to another user"
        raise LedgerError(f"{path}: not written: {parent} is a directory {who}"
                          f" (mode {stat.S_IMODE(info.st_mode):o}); keep the ledger in one"
                          " only its owner can write")
    for suffix in _COMPANIONS:
        name = path + suffix
        try:
            found = os.lstat(name)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(found.st_mode):
            raise LedgerError(f"{name}: a symbolic link; not written through")
        if not stat.S_ISREG(found.st_mode):
            raise LedgerError(f"{name}: not a regular file; not written")
        if found.st_uid != me:
            raise LedgerError(f"{name}: belongs to uid {found.st_uid}, not to this recorder;"
                              " not written")


def _locked(err: sqlite3.Error) -> bool:
    text = str(err).lower()
    return "locked" in text or "busy" in text


def open_writer(path: str) -> Any:
    """The ledger for recording, created when missing.  The caller holds the lock (a
    file's WriterLock; a database's is taken here, per host)."""
    if engine.is_url(path):
        return _open_database(path, write=True)
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, mode=0o755, exist_ok=True)
        check_place(path)
        fresh = not os.path.exists(path) or os.path.getsize(path) == 0
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        if not fresh:
            # Another program's database is refused before anything is written to it
            # (journal_mode=WAL would change it).
            _check(conn, path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        if fresh:
            with transaction(conn):
                _create(conn)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    except sqlite3.OperationalError as err:
        if _locked(err):
            raise LedgerError(_LOCKED.format(path=path, err=err)) from None
        raise LedgerError(f"{path}: not a gputop ledger ({err})") from None
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"{path}: not a gputop ledger ({err})") from None
    except OSError as err:
        raise LedgerError(f"{path}: {err.strerror or err}") from None
    version = _check(conn, path)
    try:
        _migrate(conn, version)
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"{path}: cannot upgrade the ledger to schema {SCHEMA_VERSION}"
                          f" ({err})") from None
    return conn


def open_reader(path: str) -> Any:
    """The ledger read-only; a missing, foreign or future file is a LedgerError."""
    if engine.is_url(path):
        return _open_database(path, write=False)
    if not os.path.isfile(path):
        raise LedgerError(f"{path}: no ledger here (record one with `gputop record`)")
    uri = "file:" + urllib.parse.quote(os.path.abspath(path))
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None,
                               timeout=BUSY_TIMEOUT_S)
    except sqlite3.DatabaseError as err:
        raise LedgerError(f"{path}: cannot open ({err})") from None
    try:
        _check(conn, path)
    except LedgerError as err:
        # A reader who may not write the ledger's directory (the system's, read by a user)
        # cannot make the WAL index while no recorder runs; then the file holds everything
        # (the last recorder checkpointed it on closing) and is read as it stands.
        conn.close()
        if ("readonly" not in str(err) and "unable to open" not in str(err)) \
                or os.path.exists(path + "-wal"):
            raise
        try:
            conn = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True,
                                   isolation_level=None, timeout=BUSY_TIMEOUT_S)
        except sqlite3.DatabaseError as again:
            raise LedgerError(f"{path}: cannot open ({again})") from None
        _check(conn, path)
    return conn


def _open_database(url: str, write: bool) -> engine.PgConnection:
    """A PostgreSQL ledger: a fresh database gets the schema (one recorder at a time, by
    an advisory lock), a foreign or newer one is refused; the recorder of this host
    holds an advisory lock of this host's name while it writes (one writer per host)."""
    name = engine.shown(url)
    try:
        conn = engine.connect(url)
    except engine.PgError as err:
        raise LedgerError(f"{name}: {err}") from None
    try:
        if write:
            held = conn.execute("SELECT pg_try_advisory_lock(hashtext(?))",
                                ("gputop record on " + socket.gethostname(),)).fetchone()[0]
            if not held:
                raise LedgerBusy(f"{name}: already being recorded by another recorder on"
                                 f" {socket.gethostname()}")
            if not has_table(conn, "meta"):
                with transaction(conn):
                    conn.execute(engine.POSTGRES.schema_lock or "")
                    if not has_table(conn, "meta"):
                        _create(conn)
        if not has_table(conn, "meta"):
            raise LedgerError(f"{name}: no ledger in this database yet (a recorder writing"
                              " into it makes one)")
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        version = int(row[0]) if row is not None and str(row[0]).isdigit() else None
        if version is None:
            raise LedgerError(f"{name}: not a gputop ledger (no gputop schema in it)")
        if version > SCHEMA_VERSION:
            raise LedgerError(f"{name}: ledger schema version {version} is newer than this"
                              f" gputop's ({SCHEMA_VERSION}); upgrade gputop to read it")
    except (LedgerError, sqlite3.Error) as err:
        conn.close()
        if isinstance(err, LedgerError):
            raise
        raise LedgerError(f"{name}: {err}") from None
    return conn


@contextlib.contextmanager
def transaction(conn: Any) -> Iterator[Any]:
    conn.execute(engine.dialect_of(conn).begin)
    try:
        yield conn
    except BaseException:
        # SQLite has already rolled back after some errors (SQLITE_FULL among them).
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@dataclass
class WriterLock:
    """The one-writer lock: an flock on PATH.lock, which says who holds it."""

    path: str
    fd: int = -1

    def acquire(self) -> None:
        if engine.is_url(self.path):
            return  # a database's writer lock is open_writer's, one per host
        lock_path = self.path + ".lock"
        try:
            os.makedirs(os.path.dirname(os.path.abspath(lock_path)), mode=0o755, exist_ok=True)
            check_place(self.path)
            # O_NOFOLLOW: a link planted here must not make us truncate its target.
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644)
        except OSError as err:
            raise LedgerError(f"{lock_path}: {err.strerror or err}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = _read_holder(fd)
            os.close(fd)
            if err.errno in (errno.EAGAIN, errno.EACCES):
                raise LedgerBusy(f"{self.path}: already being recorded by {holder}") from None
            raise LedgerError(f"{lock_path}: {err.strerror or err}") from None
        who = {"pid": os.getpid(), "user": _user(), "host": socket.gethostname(),
               "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(who).encode() + b"\n", 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _read_holder(fd: int) -> str:
    """Who holds the lock, in words; the file is another process's, so checked."""
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
        pid, user, host = int(data["pid"]), str(data["user"])[:64], str(data["host"])[:64]
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(data["since"])))
    except (ValueError, KeyError, TypeError, OverflowError, OSError):
        return "another recorder (its lock file says no more)"
    return f"pid {pid} (user {visible(user)} on {visible(host)}, since {since})"
