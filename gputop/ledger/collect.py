"""Every user's finished `gputop run` jobs into the host's ledger (issue 38.1).

A user's `gputop run` records its attempts in a history file of the user's own (0600),
unless it may write the ledger (root's jobs, or a recorder the user runs). A recorder run
by root watches this host's line (the job files of the reservation store) and, once a job
has left it, copies that job's rows from its owner's history into the ledger's
``job_history``: then root's `queue --history` and `report --jobs` show everyone's.

Trust: only jobs seen in the line are taken (a user cannot plant a job that never
waited), only rows of that job id with the line's uid, from a regular file that uid owns
(never through a link; a FIFO or device is never opened). The file (and its WAL) is
copied into a private folder and read there, so root's SQLite never writes into a user's
directory (no root-owned ``-shm`` left beside the user's file).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import sqlite3
import stat
import tempfile
from dataclasses import dataclass
from typing import Any

from gputop.actions import queue
from gputop.ledger import jobs
from gputop.ledger.engine import Connection

# How long a job that left the line is looked for in its owner's history: its last row is
# written just after it leaves (the cards are given back first).
SETTLE_S = 600.0
MAX_COPY_BYTES = 64 * 2**20  # a history file larger than this is not read
MAX_TRACKED = 10_000


@dataclass
class Seen:
    """A job of the line as the recorder saw it."""

    uid: int
    history: str
    last_seen: float
    left: float | None = None  # when it was first missing from the line


class Collector:
    """Watches one host's line and moves its finished jobs into the ledger ``conn``."""

    def __init__(self, conn: Connection, directory: str, ledger: str) -> None:
        self.conn, self.directory, self.ledger = conn, directory, ledger
        self.seen: dict[str, Seen] = {}
        jobs.ensure_table(conn)

    def observe(self, now: float) -> list[str]:
        """One look at the line; returns the ids of the jobs copied into the ledger."""
        in_line, _problems = queue.read_jobs(self.directory)
        for job in in_line:
            path = history_path(job.record.get("history"), job.uid)
            if path is None:
                continue
            known = self.seen.get(job.id)
            if known is None and len(self.seen) >= MAX_TRACKED:
                continue
            self.seen[job.id] = Seen(job.uid, path, now)
        current = {job.id for job in in_line}
        gone = {i: s for i, s in self.seen.items() if i not in current}
        for seen in gone.values():
            seen.left = seen.left if seen.left is not None else now
        return self._collect(gone, now)

    def _collect(self, gone: dict[str, Seen], now: float) -> list[str]:
        by_file: dict[tuple[int, str], dict[str, Seen]] = {}
        for job_id, seen in gone.items():
            by_file.setdefault((seen.uid, seen.history), {})[job_id] = seen
        done: list[str] = []
        for (uid, path), wanted in by_file.items():
            if os.path.abspath(path) == os.path.abspath(self.ledger):
                done += wanted  # written into the ledger by `gputop run` itself
                continue
            rows = read_user_history(path, uid)
            found: dict[str, list[dict[str, Any]]] = {}
            for row in rows:
                if row["id"] in wanted and row["uid"] == uid:
                    found.setdefault(row["id"], []).append(row)
            for job_id, seen in wanted.items():
                attempts = found.get(job_id, [])
                final = attempts and all(r["status"] != "running" for r in attempts)
                late = seen.left is not None and now - seen.left >= SETTLE_S
                if final or late:
                    jobs.store(self.conn, [_seen_end(r, seen) for r in attempts])
                    done.append(job_id)
        for job_id in done:
            self.seen.pop(job_id, None)
        return done


def _seen_end(row: dict[str, Any], seen: Seen) -> dict[str, Any]:
    """A `gputop run` killed outright stopped updating its row; the line saw it later."""
    if row["reason"] == "gputop run killed" and seen.last_seen > (row["ended"] or 0.0):
        row = dict(row, ended=seen.last_seen, updated=seen.last_seen)
    return row


def history_path(value: Any, uid: int) -> str | None:
    """The history file a job's record names (checked: it is someone's input), else the
    default one in its owner's home; None when there is none."""
    if isinstance(value, str) and value.startswith("/") and len(value) < 4096 \
            and "\0" not in value:
        return value
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        return None
    return os.path.join(home, ".local", "state", "gputop", "jobs.sqlite")


def read_user_history(path: str, uid: int) -> list[dict[str, Any]]:
    """The rows of ``uid``'s history file at ``path``, read from a private copy; [] when
    it is not that user's regular file or cannot be read."""
    with tempfile.TemporaryDirectory(prefix="gputop-collect-") as folder:
        copy = os.path.join(folder, "jobs.sqlite")
        if not _copy_owned(path, copy, uid):
            return []
        _copy_owned(path + "-wal", copy + "-wal", uid)
        try:
            return jobs.read([copy])
        except (jobs.HistoryError, sqlite3.Error):
            return []


def _copy_owned(source: str, target: str, uid: int) -> bool:
    """Copy ``source`` when it is a regular file of ``uid`` (not a link) of a sane size."""
    try:
        before = os.lstat(source)
    except OSError:
        return False
    if not stat.S_ISREG(before.st_mode) or before.st_uid != uid \
            or before.st_size > MAX_COPY_BYTES:
        return False
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(source, flags)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino) \
                or not stat.S_ISREG(info.st_mode):
            return False
        copied = 0
        with open(target, "wb") as dst:
            while chunk := os.read(fd, 1 << 20):
                copied += len(chunk)
                if copied > MAX_COPY_BYTES:  # grew since it was looked at
                    return False
                dst.write(chunk)
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
