"""Who cancelled a job (issue 38.1): the owner or root, from the `gputop queue cancel`
path, kept in the job's history row (``cancelled_by``) and shown by `queue --history`
and `report --jobs`."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import asdict, replace
from pathlib import Path

from helpers.users import ensure_users

from gputop.actions import queue
from gputop.analysis.jobstats import Job
from gputop.commands.queue import history_table
from gputop.commands.report_jobs import render
from gputop.ledger import jobs

# job_history as it was before the column: what an older gputop left in a user's file.
_OLD = """CREATE TABLE job_history (
    id TEXT NOT NULL, attempt INTEGER NOT NULL, user TEXT NOT NULL, uid INTEGER NOT NULL,
    host TEXT NOT NULL, command TEXT NOT NULL, request TEXT NOT NULL, gpus TEXT NOT NULL,
    submitted REAL NOT NULL, started REAL, ended REAL, updated REAL NOT NULL,
    status TEXT NOT NULL, reason TEXT, exit_code INTEGER, signal INTEGER,
    peak_mem INTEGER, mean_sm REAL, samples INTEGER NOT NULL DEFAULT 0, log TEXT,
    pid INTEGER NOT NULL, pid_start INTEGER, PRIMARY KEY (id, attempt))"""


def _old_file(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute(_OLD)
    conn.execute("INSERT INTO job_history VALUES ('0000abcd', 1, 'root', 0, 'lab-1', 'sleep 1',"
                 " '{}', '', 100.0, NULL, 110.0, 110.0, 'cancelled', 'cancelled', NULL, NULL,"
                 " NULL, NULL, 0, NULL, 1, NULL)")
    conn.commit()
    conn.close()
    os.chmod(path, 0o600)


def test_a_history_made_before_the_column_reads_and_gains_it(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    _old_file(path)
    (old,) = jobs.read([str(path)], strict=True)  # read-only: no column, None
    assert (old["id"], old["status"], old["cancelled_by"]) == ("0000abcd", "cancelled", None)
    # The next writer adds it; a row written then keeps who cancelled.
    row = {"id": "0000beef", "attempt": 1, "user": "root", "uid": 0, "host": "lab-1",
           "command": "sleep 2", "request": {}, "gpus": [], "submitted": 200.0,
           "status": "cancelled", "pid": 1, "cancelled_by": "root"}
    jobs.begin(row, str(path)).end("cancelled", "cancelled", None, None, at=210.0)
    found = {r["id"]: r["cancelled_by"] for r in jobs.read([str(path)], strict=True)}
    assert found == {"0000abcd": None, "0000beef": "root"}


def _job(directory: Path) -> queue.Job:
    return queue.submit(str(directory), {"gpus": 1, "priority": "normal",
                                         "command": "sleep 1"})


def test_root_s_cancel_is_said_and_read_by_the_job(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    job = _job(store_dir)
    assert queue.cancel(str(store_dir), job.id)["ok"]
    assert not queue.in_line(job)
    # The mark is no job file and no junk for the line's readers.
    assert queue.read_jobs(str(store_dir)) == ([], [])
    assert queue.cancelled_by(job) == "root"
    assert queue.cancelled_by(job) is None  # my own mark: removed once read


def test_only_the_owner_s_or_root_s_mark_counts(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    job = _job(store_dir)
    with ensure_users(["acc38own", "acc38other"]) as (owner, other):
        os.chown(job.path, owner.pw_uid, -1)  # the job is the owner's, as its file says
        job = replace(job, uid=owner.pw_uid)
        os.unlink(job.path)

        def plant(named: int, owned_by: int) -> Path:
            mark = store_dir / f"job.{job.id}.cancelled-by.{named}"
            mark.write_text("{}")
            os.chown(mark, owned_by, -1)
            return mark

        # Another user's mark, and one they named for the owner: neither counts.
        plant(other.pw_uid, other.pw_uid)
        forged = plant(owner.pw_uid, other.pw_uid)
        assert queue.cancelled_by(job) is None
        forged.unlink()
        plant(owner.pw_uid, owner.pw_uid)
        assert queue.cancelled_by(job) == "acc38own"


def test_history_and_the_job_report_say_who_cancelled() -> None:
    row = {"id": "0000beef", "attempt": 1, "user": "bob", "status": "cancelled",
           "reason": "cancelled", "cancelled_by": "root", "exit_code": None, "signal": None,
           "ended": 210.0, "gpus": [], "peak_mem": None, "mean_sm": None, "ran_s": None,
           "waited_s": 10.0, "command": "sleep 2"}
    assert "cancelled by root" in history_table([row]).splitlines()[1]
    assert "cancelled by" not in history_table([dict(row, cancelled_by=None)])
    job = Job(kind="run", id="0000beef", host="lab-1", user="bob", name="sleep 2",
              start=None, end=210.0, runtime_s=0.0, requested_s=None, wait_s=None,
              status="cancelled", gpus=[], finished=True, cancelled_by="bob")
    text = render({"from": 0.0, "to": 300.0, "jobs": [
        dict(asdict(job), recommendations=[])]}, "text")
    assert "bob on lab-1  cancelled by bob  ran 0s" in text
