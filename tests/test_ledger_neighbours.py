"""No user can block the ledger's writer, and samples wait until they can be written
(issue 41, point 5).

The attack: any user took a read lock on the world-readable ledger's ``-shm`` and the root
recorder printed "database is locked" every interval, losing its samples.  Now the live
files are private (a 0700 directory, the database 0600) and readers open a published copy
(gputop/ledger/publish.py); a busy database (the owner's own long transaction) makes the
recorder hold its samples in memory and write them, in order, when it is free.  The
neighbour is a real second user with real locks (fcntl, flock, a read transaction).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.procs import wait_for
from helpers.users import SYSTEM_PYTHON, ensure_users

from gputop.commands.record import _open_live
from gputop.ledger import paths, publish, store
from gputop.ledger.writer import Recorder
from gputop.model import Gpu, HostSnapshot

NEIGHBOUR = "gt41ledger"
LOCKS_HELD = 8  # published updates the recorder must make while the neighbour locks
DEADLINE_S = 120.0  # generous: a loaded machine is slow, never a reason to fail

# The neighbour: every lock it can take on every ledger file it can open, then a read
# transaction on the readers' copy, held until killed.
LOCKER = r"""
import errno, fcntl, json, os, sqlite3, sys, time
path, live = sys.argv[1], sys.argv[2]
got, keep = {}, []
for name in (path + "-shm", path + "-wal", path, path + ".lock",
             live + "-shm", live + "-wal", live, live + ".lock"):
    try:
        fd = os.open(name, os.O_RDONLY)
    except OSError as err:
        got[name] = errno.errorcode[err.errno]
        continue
    keep.append(fd)
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH)          # the whole file, as SQLite's readers lock
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        got[name] = "locked"
    except OSError as err:
        got[name] = "open, lock refused: " + errno.errorcode[err.errno]
conn = sqlite3.connect("file:" + path + "?mode=ro", uri=True, isolation_level=None)
conn.execute("BEGIN")
got["read transaction"] = conn.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
print(json.dumps(got), flush=True)
time.sleep(3600)
"""


def _samples(path: Path) -> int:
    """Intervals recorded of one card in the readers' copy (0 while there is none)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return int(conn.execute(
                "SELECT COALESCE(SUM(n), 0) FROM gpu_samples"
                " WHERE gpu_id = (SELECT MIN(gpu_id) FROM gpu_samples)").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


@pytest.fixture(scope="module")
def neighbour() -> Iterator[object]:
    with ensure_users([NEIGHBOUR]) as (entry,):
        yield entry


def test_a_neighbours_locks_cannot_stop_the_recorder(neighbour: object) -> None:
    root = Path(tempfile.mkdtemp(prefix="gputop-ledger-neighbour-"))
    os.chmod(root, 0o755)  # like /var/lib/gputop: every user may read the ledger
    db = root / "ledger.sqlite"
    recorder = subprocess.Popen(
        [sys.executable, "-m", "gputop.cli", "record", "--demo", "lab", "--interval", "0.3",
         "--db", str(db)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    locker = None
    try:
        wait_for(lambda: _samples(db) > 0, DEADLINE_S, "the readers' first copy")
        locker = subprocess.Popen(
            [SYSTEM_PYTHON, "-c", LOCKER, str(db), paths.live_path(str(db))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/",
            user=neighbour.pw_uid, group=neighbour.pw_gid, extra_groups=[])  # type: ignore[attr-defined]
        assert locker.stdout is not None
        got = json.loads(locker.stdout.readline() or "{}")
        assert got, locker.stderr.read() if locker.stderr else ""
        live = paths.live_path(str(db))
        # What the neighbour can reach is the readers' copy, which it did lock ...
        assert got[str(db)] == "locked" and got["read transaction"] > 0
        # ... and nothing of the writer's: no -wal or -shm beside the copy, the live files
        # behind a directory it may not enter.
        assert got[f"{db}-shm"] == got[f"{db}-wal"] == "ENOENT"
        assert {got[live + s] for s in ("", "-wal", "-shm", ".lock")} == {"EACCES"}
        before = _samples(db)
        wait_for(lambda: _samples(db) >= before + LOCKS_HELD, DEADLINE_S,
                 "the recorder writing while the neighbour holds its locks")
        assert locker.poll() is None  # still holding every lock it got
    finally:
        recorder.send_signal(signal.SIGTERM)
        _, err = recorder.communicate(timeout=DEADLINE_S)
        if locker is not None:
            locker.kill()
            locker.communicate()
        subprocess.run(["rm", "-rf", str(root)], check=False)
    assert recorder.returncode == 0, err
    assert "locked" not in err and "busy" not in err and "holding" not in err, err


def _card(tick: int) -> HostSnapshot:
    return HostSnapshot(host="h", time=1_700_000_000.0 + 10.0 * tick,
                        gpus=(Gpu(index=0, uuid="GPU-0", util_gpu=tick, mem_used=tick),))


def test_samples_wait_while_the_database_is_busy_and_all_land(tmp_path: Path) -> None:
    lock, conn, _ = _open_live(str(tmp_path / "ledger.sqlite"))
    try:
        conn.execute("PRAGMA busy_timeout = 0")  # fail at once: the test needs no waits
        said: list[str] = []
        backlog = publish.Backlog(Recorder(conn, 10.0, 1), said.append)
        other = sqlite3.connect(paths.live_path(str(tmp_path / "ledger.sqlite")),
                                isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # an administrator's long write transaction
        assert [backlog.record(_card(t)) for t in range(5)] == [False] * 5
        assert len(said) == 1 and "database is locked" in said[0] and "holding" in said[0]
        other.execute("ROLLBACK")
        assert backlog.record(_card(5)) is True
        assert said[1] == "the ledger is free again: 6 held samples written"
        rows = conn.execute("SELECT t0, util FROM gpu_samples ORDER BY t0").fetchall()
        assert rows == [(_card(t).time, t) for t in range(6)]
        other.close()
    finally:
        conn.close()
        lock.release()


def test_over_the_cap_the_oldest_samples_go_and_that_is_said(tmp_path: Path) -> None:
    lock, conn, _ = _open_live(str(tmp_path / "ledger.sqlite"))
    try:
        conn.execute("PRAGMA busy_timeout = 0")
        said: list[str] = []
        backlog = publish.Backlog(Recorder(conn, 10.0, 1), said.append, cap=3)
        other = sqlite3.connect(paths.live_path(str(tmp_path / "ledger.sqlite")),
                                isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        for t in range(5):
            backlog.record(_card(t))
        other.execute("ROLLBACK")
        backlog.record(_card(5))
        assert said[-1] == ("the ledger is free again: 3 held samples written;"
                            " 3 older ones dropped (over 3)")
        kept = [t for (t,) in conn.execute("SELECT util FROM gpu_samples ORDER BY t0")]
        assert kept == [3, 4, 5]
        other.close()
    finally:
        conn.close()
        lock.release()


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_live_files_are_private_and_the_copy_is_what_readers_get(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.sqlite")
    lock, conn, publisher = _open_live(path)
    try:
        Recorder(conn, 10.0, 1).record(_card(1))
        publisher.publish()
        live = paths.live_path(path)
        assert _mode(paths.live_dir(path)) == 0o700
        assert _mode(live) == 0o600 and _mode(live + "-wal") == 0o600
        assert _mode(live + "-shm") == 0o600
        assert _mode(path) == 0o644
        # The copy: a rollback-journal file, nothing beside it for anyone to lock.
        with open(path, "rb") as f:
            assert f.read(20)[18:20] == b"\x01\x01"
        assert sorted(os.listdir(tmp_path)) == [".ledger.sqlite.live", "ledger.sqlite"]
        reader = store.open_reader(path)
        assert reader.execute("SELECT util FROM gpu_samples").fetchall() == [(1,)]
        # A reader keeps the copy it opened; the next copy is a new file.
        Recorder(conn, 10.0, 1).record(_card(2))
        publisher.publish()
        assert reader.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] == 1
        reader.close()
        assert _samples(Path(path)) == 2
    finally:
        conn.close()
        lock.release()


def test_a_ledger_written_in_place_moves_into_the_private_directory(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.sqlite")
    old = store.open_writer(path)  # the layout before issue 41: live at the readers' path
    Recorder(old, 10.0, 1).record(_card(7))
    old.close()
    lock, conn, _ = _open_live(path)
    try:
        assert conn.execute("SELECT util FROM gpu_samples").fetchall() == [(7,)]
        assert _samples(Path(path)) == 1 and _mode(path) == 0o644
        assert not os.path.exists(path + "-wal") and not os.path.exists(path + "-shm")
        assert _mode(paths.live_path(path)) == 0o600
    finally:
        conn.close()
        lock.release()


def test_a_private_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "ledger").mkdir()
    path = str(tmp_path / "ledger" / "ledger.sqlite")
    os.symlink(elsewhere, paths.live_dir(path))
    with pytest.raises(store.LedgerError, match="not a directory"):
        publish.private_place(path)
    assert list(elsewhere.iterdir()) == []
