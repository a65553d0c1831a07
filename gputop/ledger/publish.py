"""No reader can block the ledger's writer (issue 41.5): private live files, a published copy.

SQLite's readers take locks the writer needs: a read lock on a WAL ledger's ``-shm`` (any
user who can open it) stalls every write with "database is locked".  So the recorder's
live files (database, ``-wal``, ``-shm``, ``.lock``) are in a directory only it may enter
(``paths.live_dir``: mode 0700, the database 0600), and what readers open at the ledger's
path is a copy: SQLite's backup of the live database into a temporary file beside it,
switched to a rollback journal (no ``-wal``/``-shm`` for anyone to lock), made readable
and renamed over the ledger's path.  A reader holds the copy it opened, whatever it
locks; the next copy is a new file.  ``Backlog`` keeps the snapshots a busy database
(an administrator's long transaction, a backup tool) could not take, in memory and capped,
and writes them, oldest first, as soon as it can.
"""

from __future__ import annotations

import contextlib
import glob
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gputop.ledger import paths, store
from gputop.ledger.store import LedgerError, check_place
from gputop.ledger.writer import LedgerLocked, Recorder
from gputop.model import HealthWarning, HostSnapshot

PRIVATE_DIR_MODE = 0o700
LIVE_MODE = 0o600
# Readers are every user for root's ledger (reports, quotas, fair share read it); a
# user's own ledger is readable as it was before (SQLite made it 0644 under umask 022).
PUBLISHED_MODE = 0o644
# A copy costs a read of the whole file: publish after a write once the last copy is older
# than this many times what that copy took (at most 1/20 of the time spent copying), so a
# small ledger is current after every interval and a large one within minutes.
COST_SHARE = 20.0
# Snapshots held while the database is busy: two hours of one host at the default 10 s.
HOLD_MAX = 720
_TEMP = ".publish-"


def private_place(path: str) -> str:
    """Make (or check) the private directory of ``path``'s live files; the live path.
    Refuses a published place others could redirect (store.check_place) and a private
    directory that is a link or another user's."""
    parent = os.path.dirname(os.path.abspath(path))
    private = paths.live_dir(path)
    try:
        os.makedirs(parent, mode=0o755, exist_ok=True)
        check_place(path)
        with contextlib.suppress(FileExistsError):
            os.mkdir(private, PRIVATE_DIR_MODE)
        info = os.lstat(private)
        if not stat.S_ISDIR(info.st_mode):
            raise LedgerError(f"{private}: not a directory (a link?); not written")
        if info.st_uid != os.geteuid():
            raise LedgerError(f"{private}: belongs to uid {info.st_uid}, not to this"
                              " recorder; not written")
        if stat.S_IMODE(info.st_mode) != PRIVATE_DIR_MODE:
            os.chmod(private, PRIVATE_DIR_MODE)
    except OSError as err:
        raise LedgerError(f"{private}: {err.strerror or err}") from None
    return paths.live_path(path)


def adopt(path: str, live: str) -> None:
    """Under the writer's lock, with no live database yet: a ledger at ``path`` (one an
    older gputop wrote in place, or the readers' copy of a private directory that was
    removed) moves into the private directory with its WAL; a file there that is not a
    gputop ledger, or of a newer schema, is refused and left alone.  The live database
    exists, mode 0600, before SQLite opens it (its -wal and -shm take its mode)."""
    try:
        if not os.path.lexists(live) and os.path.isfile(path) and os.path.getsize(path):
            store.open_reader(path).close()  # LedgerError: foreign, corrupt or future
            for suffix in ("-wal", ""):
                if os.path.lexists(path + suffix):
                    os.rename(path + suffix, live + suffix)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path + "-shm")
        if not os.path.lexists(live):
            os.close(os.open(live, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, LIVE_MODE))
        check_place(live)
        os.chmod(live, LIVE_MODE)
        for leftover in glob.glob(glob.escape(_temp_prefix(path)) + "*"):
            with contextlib.suppress(OSError):
                if os.lstat(leftover).st_uid == os.geteuid():
                    os.unlink(leftover)  # a copy a crash left half made
    except OSError as err:
        raise LedgerError(f"{live}: {err.strerror or err}") from None


def _temp_prefix(path: str) -> str:
    parent, name = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".{name}{_TEMP}")


@dataclass
class Publisher:
    """Copies the live database ``conn`` to ``path`` for the readers."""

    path: str
    conn: sqlite3.Connection
    mode: int = PUBLISHED_MODE
    last: float | None = None  # when the last copy was made (monotonic)
    cost: float = 0.0  # what it took, seconds

    def due(self, now: float) -> bool:
        return self.last is None or now - self.last >= COST_SHARE * self.cost

    def maybe(self) -> None:
        if self.due(time.monotonic()):
            self.publish()

    def publish(self) -> None:
        """One consistent copy (SQLite's backup reads a snapshot of the live database),
        written whole and renamed over ``path``.  Raises LedgerError."""
        start = time.monotonic()
        temp = f"{_temp_prefix(self.path)}{os.getpid()}"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, LIVE_MODE))
            dest = sqlite3.connect(temp, isolation_level=None)
            try:
                self.conn.backup(dest)
                dest.execute("PRAGMA journal_mode=DELETE")
            finally:
                dest.close()
            fd = os.open(temp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fchmod(fd, self.mode)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, self.path)
            _fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        except (OSError, sqlite3.Error) as err:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            text = err.strerror if isinstance(err, OSError) and err.strerror else err
            raise LedgerError(f"{self.path}: readers' copy not updated ({text})") from None
        now = time.monotonic()
        self.last, self.cost = now, now - start


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Backlog:
    """The recorder's writes, through a queue that a busy database cannot empty: each
    snapshot waits (at most ``cap``, the oldest dropped beyond it, and said) until the
    database takes it; ``say`` gets one line when holding starts and when it ends."""

    recorder: Recorder
    say: Callable[[str], None]
    cap: int = HOLD_MAX
    held: list[tuple[HostSnapshot, list[HealthWarning]]] = field(default_factory=list)
    dropped: int = 0
    holding: bool = False

    def record(self, snap: HostSnapshot, warnings: Iterable[HealthWarning] = ()) -> bool:
        """Queue ``snap`` and write what the database takes, oldest first; True when
        nothing is left waiting.  LedgerFull and other LedgerErrors pass through (that
        snapshot is not kept: a full disk pauses recording, as it always did)."""
        self.held.append((snap, list(warnings)))
        if len(self.held) > self.cap:
            del self.held[0]
            self.dropped += 1
        waiting = len(self.held)
        while self.held:
            first, found = self.held[0]
            try:
                self.recorder.record(first, found)
            except LedgerLocked as err:
                if not self.holding:
                    self.holding = True
                    self.say(f"{err}; holding samples in memory until it is free"
                             f" (at most {self.cap})")
                return False
            except LedgerError:
                del self.held[0]
                raise
            del self.held[0]
        if self.holding:
            self.holding = False
            lost = f"; {self.dropped} older ones dropped (over {self.cap})" if self.dropped else ""
            self.say(f"the ledger is free again: {waiting} held samples written{lost}")
            self.dropped = 0
        return True
