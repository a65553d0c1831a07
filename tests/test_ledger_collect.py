"""Issue 38.1: a recorder run by root takes every user's finished `gputop run` jobs from
the line it watches into the host's ledger, so that root's `queue --history` shows them;
a user reading the ledger sees their own. Real users, a real `gputop record` as root, the
fake NVIDIA driver through the real pynvml (test_run_queue's host)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_run_queue as rq
from helpers.users import SYSTEM_PYTHON, ensure_users
from test_run_queue import JOB, LIMIT_S, Host, wait_for

from gputop.ledger import collect, jobs

portable, driver, host = rq.portable, rq.driver, rq.host
USERS = ["gt38a", "gt38b", "gt38c", "gt38d"]


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, Any]]:
    with ensure_users(USERS) as entries:
        yield {e.pw_name: e for e in entries}


def _env(host: Host, user: str | None, state: Path | None = None) -> dict[str, str]:
    """A user's own XDG_STATE_HOME (their history lives there), or the one given."""
    if state is None:
        assert user is not None
        entry = host.users[user]
        state = host.root / f"state-{user}"
        state.mkdir(exist_ok=True)
        os.chown(state, entry.pw_uid, entry.pw_gid)
        state.chmod(0o700)
    return dict(host.env, XDG_STATE_HOME=str(state))


def _gputop(host: Host, user: str | None, env: dict[str, str], *args: str
            ) -> subprocess.Popen[str]:
    entry = host.users[user] if user else None
    command = [SYSTEM_PYTHON, "-m", "gputop.cli", args[0], "--config",
               str(host.root / "config.yaml"), *args[1:]]
    return subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd="/",
                            user=entry.pw_uid if entry else None,
                            group=entry.pw_gid if entry else None,
                            extra_groups=[] if entry else None)


def _history(host: Host, user: str | None, env: dict[str, str], *args: str
             ) -> list[dict[str, Any]]:
    proc = _gputop(host, user, env, "queue", "--history", "--json", *args)
    out, err = proc.communicate(timeout=LIMIT_S)
    assert proc.returncode == 0, err
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


def _recorded_after(ledger: Path, moment: float) -> bool:
    """Has the recorder written a sample taken after ``moment`` (so it has looked at the
    line since)?"""
    if not ledger.exists():
        return False
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        (last,) = conn.execute("SELECT max(t1) FROM gpu_samples").fetchone()
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    return last is not None and last > moment


def test_root_recorder_collects_every_users_finished_jobs(host: Host) -> None:
    state = Path(tempfile.mkdtemp(prefix="gputop-collect-state-"))
    state.chmod(0o755)  # the ledger's folder: root writes, users read
    ledger = state / "gputop" / "ledger.sqlite"
    root_env = _env(host, None, state)
    recorder = _gputop(host, None, root_env, "record", "--db", str(ledger),
                       "--interval", "0.5")
    try:
        # Two users' jobs, each held running until the recorder has seen it in line.
        a = _gputop(host, "gt38a", _env(host, "gt38a"), "run", "--note", "a", "--",
                    "sh", "-c", JOB, "sh", "ja", str(host.root), "hold")
        b = _gputop(host, "gt38b", _env(host, "gt38b"), "run", "--", "sh", "-c",
                    JOB + "; exit 3", "sh", "jb", str(host.root), "hold")
        wait_for(lambda: len(host.held()) == 2, "both jobs running", recorder)
        seen = time.time()
        wait_for(lambda: _recorded_after(ledger, seen), "the recorder seeing them", recorder)
        host.go("ja")
        host.go("jb")
        assert a.wait(timeout=LIMIT_S) == 0
        assert b.wait(timeout=LIMIT_S) == 3

        def collected() -> list[dict[str, Any]]:
            rows = _history(host, None, root_env)
            return rows if {r["user"] for r in rows} == {"gt38a", "gt38b"} else []

        rows = wait_for(collected, "both users' jobs in root's history", recorder)
    finally:
        recorder.send_signal(signal.SIGTERM)
        _out, err = recorder.communicate(timeout=LIMIT_S)
    assert recorder.returncode == 0, err
    by_user = {r["user"]: r for r in rows}
    assert len(rows) == 2
    assert (by_user["gt38a"]["status"], by_user["gt38a"]["reason"],
            by_user["gt38a"]["exit_code"]) == ("success", "done", 0)
    assert by_user["gt38a"]["request"]["note"] == "a"
    assert (by_user["gt38b"]["status"], by_user["gt38b"]["exit_code"]) == ("failed", 3)
    assert by_user["gt38b"]["uid"] == host.users["gt38b"].pw_uid
    assert all(r["started"] <= r["ended"] for r in rows)
    only_b = _history(host, None, root_env, "--user", "gt38b")
    assert [r["id"] for r in only_b] == [by_user["gt38b"]["id"]]
    # A user who reads that ledger sees their own jobs there, nobody else's: gt38b's own
    # file is moved away, so what gt38b sees comes from the ledger.
    own = host.root / "state-gt38b" / "gputop" / "jobs.sqlite"
    own.rename(own.with_name("moved.sqlite"))
    mine = _history(host, "gt38b", root_env)
    assert [(r["id"], r["user"]) for r in mine] == [(by_user["gt38b"]["id"], "gt38b")]
    subprocess.run(["rm", "-rf", str(state)], check=False)


def test_a_planted_history_is_not_read_as_root(tmp_path: Path, users: dict[str, Any]) -> None:
    # The history a job names is its owner's input: a link, a file of someone else or a
    # FIFO is never read (the recorder is root, the user may point it anywhere).
    uid = users["gt38c"].pw_uid
    real = tmp_path / "real.sqlite"
    conn = jobs.open_writer(str(real))
    jobs.store(conn, [{"id": "0000aaaa", "attempt": 1, "user": "gt38c", "uid": uid,
                       "host": "h", "command": "c", "request": {}, "gpus": [0],
                       "submitted": 1.0, "started": 2.0, "ended": 3.0, "updated": 3.0,
                       "status": "success", "reason": "done", "exit_code": 0,
                       "samples": 0, "pid": 1, "pid_start": 0}])
    conn.close()
    assert collect.read_user_history(str(real), uid) == []  # root's file, not gt38c's
    os.chown(real, uid, -1)
    (row,) = collect.read_user_history(str(real), uid)
    assert row["id"] == "0000aaaa" and row["uid"] == uid
    link = tmp_path / "link.sqlite"
    link.symlink_to(real)
    os.lchown(link, uid, -1)
    assert collect.read_user_history(str(link), uid) == []
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    os.chown(fifo, uid, -1)
    assert collect.read_user_history(str(fifo), uid) == []  # and it did not block
    assert collect.history_path("relative/path", uid) != "relative/path"
    assert collect.history_path("/x/jobs.sqlite", uid) == "/x/jobs.sqlite"
