"""The dashboard's Q view shows the last finished `gputop run` jobs with their status,
from a real history file written by gputop.ledger.jobs."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from pathlib import Path

from gputop.actions.liveness import process_start
from gputop.ledger import jobs


def _row(job_id: str, attempt: int, pid: int, **extra: object) -> dict[str, object]:
    row: dict[str, object] = {
        "id": job_id, "attempt": attempt, "user": "alice", "uid": os.geteuid(),
        "host": "node", "command": f"python {job_id}.py", "request": {"gpus": 1},
        "gpus": [0], "submitted": time.time() - 70, "started": time.time() - 60,
        "status": "running",
        "log": None, "pid": pid, "pid_start": process_start(pid)}
    row.update(extra)
    return row


async def test_the_queue_view_lists_the_last_finished_jobs(tmp_path: Path) -> None:
    from helpers.ui import demo_app, feed_all, plain, wait_for

    from gputop.ui.screens.queue import QueueScreen

    path = str(tmp_path / "jobs.sqlite")
    jobs.begin(_row("0000aaaa", 1, os.getpid()), path).end("success", "done", 0, None)
    jobs.begin(_row("0000bbbb", 2, os.getpid()), path).end("failed", "time cap", None, 15)
    jobs.begin(_row("0000cccc", 1, os.getpid()), path).end("failed", "failed", 3, None)
    # A row left "running" by a run that was SIGKILLed: its process is gone.
    gone = subprocess.Popen(["true"])
    gone.wait()
    jobs.begin(_row("0000dddd", 1, gone.pid), path)
    app, _ = demo_app("lab")
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        # As a real host's snapshots (a demo shows no history of this user's).
        feed_all(app, [dataclasses.replace(s, demo=False)
                       for s in app._test_snapshots])  # type: ignore[attr-defined]
        app.push_screen(QueueScreen(history_paths=[path]))
        await wait_for(pilot, lambda: isinstance(app.screen, QueueScreen))
        await pilot.pause()
        text = plain(app.screen.query_one("#history").render())
        lines = [line for line in text.split("\n") if line.strip()]
        assert len(lines) == 4
        # Newest first: the killed run's row last updated now, then in the order written.
        assert "0000dddd" in lines[0] and "failed" in lines[0]
        assert "gputop run killed" in lines[0]
        by_id = {line.split()[2]: line for line in lines}
        assert "success" in by_id["0000aaaa"] and "done, exit 0" in by_id["0000aaaa"]
        assert "time cap, signal 15" in by_id["0000bbbb#2"]
        assert all("ran   1m0" in line for line in lines if "dddd" not in line)
        assert "failed, exit 3" in by_id["0000cccc"] and "python 0000cccc.py" in by_id[
            "0000cccc"]
    empty = jobs.read([str(tmp_path / "absent.sqlite")])
    assert empty == []


def test_a_history_file_that_is_a_link_or_foreign_is_not_used(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.sqlite"
    jobs.begin(_row("0000eeee", 1, os.getpid()), str(target)).end("success", "done", 0, None)
    link = tmp_path / "link.sqlite"
    link.symlink_to(target)
    attempt = jobs.begin(_row("0000ffff", 1, os.getpid()), str(link))
    attempt.end("success", "done", 0, None)  # never raises: the job runs on
    assert attempt.warned
    problems: list[str] = []
    assert jobs.read([str(link)], problems=problems) == []
    # A file of another program (not SQLite) and one without our table: nothing read.
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    empty = tmp_path / "empty.sqlite"
    import sqlite3

    sqlite3.connect(empty).execute("CREATE TABLE other (x)").connection.close()
    assert jobs.read([str(junk), str(empty)]) == []
    assert [r["id"] for r in jobs.read([str(target)])] == ["0000eeee"]
    # A directory anyone may write is refused for writing.
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    assert jobs.begin(_row("0000abcd", 1, os.getpid()), str(open_dir / "j.sqlite")).warned
