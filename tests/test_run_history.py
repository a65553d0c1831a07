"""`gputop run`'s job history, --log, --quiet, --retries and --hang, with real users,
real processes and gputop's fake NVIDIA driver (tests/fakenvml) read through the real
pynvml. The fixtures are tests/test_run_queue.py's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import test_run_queue as rq
from helpers import fakenvml
from helpers.users import ensure_users
from test_run_queue import LIMIT_S, Host, _holding, wait_for

# The portable copy of gputop and the fake driver's 4-card host are test_run_queue's;
# the users are this module's own (other checkouts on a shared machine may be running
# test_run_queue.py, whose users come and go with it).
portable, driver, host = rq.portable, rq.driver, rq.host
USERS = ["gt28a", "gt28b", "gt28c", "gt28d"]


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, Any]]:
    with ensure_users(USERS) as entries:
        yield {e.pw_name: e for e in entries}


def _state_home(host: Host, user: str) -> dict[str, str]:
    """Each user's own XDG_STATE_HOME, as a real home has: their history lives there."""
    entry = host.users[user]
    state = host.root / f"state-{user}"
    state.mkdir(exist_ok=True)
    os.chown(state, entry.pw_uid, entry.pw_gid)
    state.chmod(0o700)
    return dict(host.env, XDG_STATE_HOME=str(state))


def _as(host: Host, user: str, *args: str, **popen: Any) -> subprocess.Popen[str]:
    entry = host.users[user]
    command = ["/usr/bin/python3", "-m", "gputop.cli", args[0], "--config",
               str(host.root / "config.yaml"), *args[1:]]
    return subprocess.Popen(command, env=_state_home(host, user), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], cwd="/",
                            **popen)


def _done(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    out, err = proc.communicate(timeout=LIMIT_S)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _history(host: Host, user: str, *args: str) -> list[dict[str, Any]]:
    result = _done(_as(host, user, "queue", "--history", "--json", *args))
    assert result.returncode == 0, result.stderr
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def test_every_job_leaves_a_history_row_however_it_ends(host: Host) -> None:
    ok = _done(_as(host, "gt28a", "run", "--gpus", "2", "--note", "n", "--", "true"))
    assert ok.returncode == 0, ok.stderr
    failed = _done(_as(host, "gt28a", "run", "--", "sh", "-c", "exit 3"))
    assert failed.returncode == 3
    capped = _done(_as(host, "gt28a", "run", "--for", "1s", "--", "sleep", "60"))
    assert capped.returncode == 124
    term = _as(host, "gt28a", "run", "--", "sleep", "60")
    wait_for(host.held, "the job running", term)
    # Its command started too: a SIGTERM between the reservation and the start (a loaded
    # machine) ends a job that ran nothing, with no signal to record.
    wait_for(lambda: any(p.name() == "sleep" for p in
                         psutil.Process(term.pid).children(recursive=True)),
             "the job's command started", term)
    term.send_signal(signal.SIGTERM)
    assert _done(term).returncode == 128 + signal.SIGTERM
    holder = _as(host, "gt28b", "run", "--gpus", "4", "--", "sleep", "300",
                 start_new_session=True)
    wait_for(_holding(host, 4), "gt28b holding every card", holder)
    expired = _done(_as(host, "gt28a", "run", "--no-wait", "--", "true"))
    assert expired.returncode == 5
    holder.kill()  # SIGKILL: its row is left "running", and read as ended with it
    holder.wait(timeout=LIMIT_S)
    rows = _history(host, "gt28a")
    got = [(r["status"], r["reason"], r["exit_code"], r["signal"]) for r in rows]
    assert got == [("cancelled", "wait expired", None, None),
                   ("cancelled", "killed", None, signal.SIGTERM),
                   ("failed", "time cap", None, signal.SIGTERM),
                   ("failed", "failed", 3, None),
                   ("success", "done", 0, None)]
    first = rows[-1]
    assert first["user"] == "gt28a" and first["gpus"] == [0, 1] and first["attempt"] == 1
    assert first["request"]["gpus"] == 2 and first["request"]["note"] == "n"
    assert first["command"] == "true" and first["host"]
    assert first["submitted"] <= first["started"] <= first["ended"]
    assert first["waited_s"] == round(first["started"] - first["submitted"], 1)
    assert rows[0]["started"] is None and rows[0]["gpus"] == []
    # Each user's history is their own file: gt28b's SIGKILLed run is in theirs.
    (killed,) = _history(host, "gt28b")
    assert (killed["status"], killed["reason"]) == ("failed", "gputop run killed")
    assert killed["gpus"] == [0, 1, 2, 3] and killed["ended"] is not None
    assert _history(host, "gt28a", "--user", "gt28b") == []
    assert len(_history(host, "gt28a", "--since", "1h")) == 5
    table = _done(_as(host, "gt28a", "queue", "--history"))
    assert table.stdout.split("\n")[0].split()[:5] == ["JOB", "TRY", "USER", "STATUS", "WHY"]
    assert "wait expired" in table.stdout and "time cap" in table.stdout
    bad = _done(_as(host, "gt28a", "queue", "--history", "--since", "yesterday"))
    assert bad.returncode == 2 and "--since" in bad.stderr and "Traceback" not in bad.stderr
    missing = _done(_as(host, "gt28a", "run", "--", "no-such-command-here"))
    assert missing.returncode == 127
    assert "no-such-command-here: command not found" in missing.stderr


def test_log_quiet_and_retries_with_a_back_off(host: Host) -> None:
    log = host.root / "gt28a.log"
    script = 'echo "out $GPUTOP_JOB_ID"; echo err >&2; exit 1'
    retried = _done(_as(host, "gt28a", "run", "--log", str(log), "--retries", "2",
                        "--retry-delay", "1s", "--", "sh", "-c", script))
    assert retried.returncode == 1
    assert retried.stdout.count("out ") == 3 and retried.stderr.count("err\n") == 3
    assert "attempt 1 failed (exit 1); attempt 2 of 3 in 1s" in retried.stderr
    assert "attempt 2 failed (exit 1); attempt 3 of 3 in 2s" in retried.stderr
    text = log.read_text()
    assert text.count("out ") == 3 and text.count("err\n") == 3
    assert "attempt 3: failed (exit 1)" in text
    rows = _history(host, "gt28a")
    assert [(r["attempt"], r["status"], r["log"]) for r in rows] == [
        (3, "failed", str(log)), (2, "failed", str(log)), (1, "failed", str(log))]
    assert len({r["id"] for r in rows}) == 1
    # The back-off doubles: 1 s, then 2 s between the attempts.
    assert rows[1]["started"] - rows[2]["ended"] >= 1.0
    assert rows[0]["started"] - rows[1]["ended"] >= 2.0
    quiet_log = host.root / "quiet.log"
    quiet = _done(_as(host, "gt28a", "run", "--quiet", "--log", str(quiet_log), "--", "sh",
                      "-c", "echo hidden; echo hidden-err >&2"))
    assert quiet.returncode == 0 and "hidden" not in quiet.stdout + quiet.stderr
    assert "hidden\n" in quiet_log.read_text() and "hidden-err" in quiet_log.read_text()
    alone = _done(_as(host, "gt28a", "run", "--quiet", "--", "true"))
    assert alone.returncode == 2 and "give --log" in alone.stderr
    once = _done(_as(host, "gt28a", "run", "--retries", "3", "--", "true"))
    assert once.returncode == 0 and "attempt" not in once.stderr.replace("(attempt 1 of 4)",
                                                                          "")


def test_hang_stops_a_job_whose_gpus_sit_idle_holding_memory(host: Host) -> None:
    scenario = Path(host.env["FAKENVML_SCENARIO"])
    pid_file = host.root / "cmd.pid"
    script = f'echo $$ > {pid_file}; exec sleep 300'
    job = _as(host, "gt28a", "run", "--gpu-ids", "1", "--hang", "2s", "--retries", "1",
              "--retry-delay", "1s", "--", "sh", "-c", script)
    seen: set[int] = set()
    for _attempt in range(2):
        def new_pid() -> int | None:
            text = pid_file.read_text().strip() if pid_file.exists() else ""
            return int(text) if text and int(text) not in seen else None

        pid = wait_for(new_pid, "CMD's pid", job)
        seen.add(pid)
        # The driver now shows CMD holding 2 GiB on GPU 1 at 0 % SM.
        cards = fakenvml.idle_cards(4)
        cards["devices"][1]["processes"] = [{"pid": pid, "used_mib": 2048, "sm_util": 0}]
        fakenvml.write_scenario(scenario, cards)
    result = _done(job)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert result.stderr.count("sat at 0 % SM holding 2.0 GiB") == 2, result.stderr
    assert "attempt 1 hang" in result.stderr
    rows = _history(host, "gt28a")
    assert [(r["attempt"], r["status"], r["reason"]) for r in rows] == [
        (2, "failed", "hang"), (1, "failed", "hang")]
    assert all(r["peak_mem"] == 2048 * 2**20 and r["mean_sm"] == 0.0 for r in rows)
    assert all(r["samples"] >= 2 for r in rows)
    fakenvml.write_scenario(scenario, fakenvml.idle_cards(4))


def test_fair_share_orders_equal_priorities_by_recent_gpu_hours(host: Host) -> None:
    # gt28a used 40 GPU-h yesterday (a real ledger file); gt28b none. gt28a's job came
    # first, yet gt28b's goes first, and `gputop queue` says why.
    from test_fair_share import _ledger

    # The ledger in a folder only its owner writes (the store's root is everyone's, and
    # the ledger refuses such a place).
    (host.root / "ledger").mkdir(mode=0o755)
    ledger = host.root / "ledger" / "ledger.sqlite"
    hour = int(time.time() // 3600) - 24
    _ledger(ledger, [("gt28a", g % 2, hour - g // 2, 3600.0) for g in range(40)])
    for path in ledger.parent.glob("ledger.sqlite*"):
        path.chmod(0o644)
    host.policy(f"fair_share: {{half_life: 7d, ledger: {ledger}}}\n")
    (host.root / "order").touch()
    (host.root / "order").chmod(0o666)
    # Cards 1-3 taken by a plain reservation, card 0 by a job: one card frees at a time.
    assert rq.reservations.reserve(str(host.store), [1, 2, 3], time.time() + 3600, "busy",
                                   gpu_uuids=rq._UUIDS)["ok"]
    holder = _as(host, "gt28c", "run", "--gpus", "1", "--", "sh", "-c",
                 f"while [ ! -e {host.root}/holder.go ]; do sleep 0.05; done")
    wait_for(_holding(host, 1), "the holder running", holder)
    first = _as(host, "gt28a", "run", "--", "sh", "-c", f"echo gt28a >> {host.root}/order")
    wait_for(lambda: len(host.jobs_in_line()) == 2, "gt28a in line", first)
    second = _as(host, "gt28b", "run", "--", "sh", "-c", f"echo gt28b >> {host.root}/order")
    wait_for(lambda: len(host.jobs_in_line()) == 3, "gt28b in line", second)
    listing = json.loads(_done(_as(host, "gt28d", "queue", "--json")).stdout)
    waiting = [(r["user"], r["position"]) for r in listing if r["state"] == "waiting"]
    assert waiting == [("gt28b", 1), ("gt28a", 2)], listing
    shares = {r["user"]: r["share"] for r in listing if r["state"] == "waiting"}
    assert shares["gt28b"]["gpu_hours"] == 0.0
    assert 30 < shares["gt28a"]["gpu_hours"] < 40  # 40 GPU-h from a day or two ago, decayed
    assert "ahead of earlier jobs of gt28a" in shares["gt28b"]["why"]
    table = _done(_as(host, "gt28d", "queue")).stdout
    assert "fair share: gt28b used 0.0 GPU-h recently" in table
    (host.root / "holder.go").touch()
    results = [_done(proc) for proc in (holder, first, second)]
    assert [r.returncode for r in results] == [0, 0, 0], [r.stderr for r in results]
    assert (host.root / "order").read_text().split() == ["gt28b", "gt28a"], [
        r.stderr for r in results]


def test_with_a_recorder_running_the_history_goes_into_its_ledger(host: Host,
                                                                   tmp_path: Path) -> None:
    # The recorder's ledger is this user's (root's here) and its writer lock is held, as
    # a running `gputop record` holds it: the job's row goes there, not to jobs.sqlite.
    from gputop.commands.record import _open_live
    from gputop.ledger import jobs, paths

    state = tmp_path / "state"
    ledger = state / "gputop" / "ledger.sqlite"
    env = dict(host.env, XDG_STATE_HOME=str(state))
    lock, conn, _ = _open_live(str(ledger))  # the live database, private, and its copy
    try:
        assert jobs.recorder_running(paths.live_path(str(ledger)))
        done = subprocess.run(["/usr/bin/python3", "-m", "gputop.cli", "run", "--config",
                               str(host.root / "config.yaml"), "--", "sh", "-c", "exit 7"],
                              env=env, capture_output=True, text=True, timeout=LIMIT_S)
        assert done.returncode == 7, done.stderr
    finally:
        lock.release()
    assert not jobs.recorder_running(paths.live_path(str(ledger)))
    rows = conn.execute(f"SELECT status, reason, exit_code FROM {jobs.TABLE}").fetchall()
    assert rows == [("failed", "failed", 7)]
    conn.close()
    assert not (state / "gputop" / "jobs.sqlite").exists()
    # `queue --history` reads it from there.
    listed = subprocess.run(["/usr/bin/python3", "-m", "gputop.cli", "queue", "--history",
                             "--json"], env=env, capture_output=True, text=True,
                            timeout=LIMIT_S)
    assert [(r["reason"], r["exit_code"]) for r in json.loads(listed.stdout)] == [
        ("failed", 7)]


def test_the_history_says_who_cancelled_a_waiting_job(host: Host) -> None:
    """Issue 38.1: root's cancel and the owner's own, each in the owner's history."""
    holder = _as(host, "gt28c", "run", "--gpus", "4", "--", "sleep", "300",
                 start_new_session=True)
    wait_for(_holding(host, 4), "gt28c holding every card", holder)
    try:
        ids = []
        for canceller in (None, "gt28d"):
            waiting = _as(host, "gt28d", "run", "--", "true")
            (job,) = wait_for(lambda: [j for j in host.jobs_in_line() if j.user == "gt28d"],
                              "gt28d in line", waiting)
            cancel = (host.run(None, "queue", "cancel", job.id) if canceller is None
                      else _done(_as(host, canceller, "queue", "cancel", job.id)))
            assert cancel.returncode == 0, cancel.stderr
            assert _done(waiting).returncode == 4
            ids.append(job.id)
    finally:
        holder.kill()
        holder.wait(timeout=LIMIT_S)
    by = {r["id"]: (r["status"], r["reason"], r["cancelled_by"])
          for r in _history(host, "gt28d")}
    assert by == {ids[0]: ("cancelled", "cancelled", "root"),
                  ids[1]: ("cancelled", "cancelled", "gt28d")}
    text = _done(_as(host, "gt28d", "queue", "--history")).stdout
    assert "cancelled by root" in text and "cancelled by gt28d" in text
