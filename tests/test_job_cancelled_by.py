"""Who cancelled a job (issue 38.1): the owner or root, from the `gputop queue cancel`
path, kept in the job's history row (``cancelled_by``) and shown by `queue --history`
and `report --jobs`."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

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
