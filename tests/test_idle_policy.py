"""The opt-in idle policy (issue 28.7) with real users, real processes and gputop's fake
driver: `gputop record` warns, reminds and then SIGTERMs an idle process of a user, leaves
root's and a busy one alone, logs every step with its evidence; `--dry-run` only says."""

from __future__ import annotations

import json
import select
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import fakenvml
from helpers.procs import Reaper, _python, alive, start_sleeper, wait_for
from test_run_queue import users  # noqa: F401 (real users, module-scoped)

from gputop.analysis.idle_policy import IdlePolicy, IdleProcess, IdleTracker, why_not
from gputop.policy import PolicyError, parse_accounting

GIB = 1024**3
LIMIT_S = 120.0


def _policy(path: Path, notes: Path, extra: str = "") -> Path:
    path.write_text("idle: {warn_after: 1s, release_after: 3s, action: kill, grace: 1s,"
                    f" notify: [/usr/bin/tee, -a, {notes}]{extra}}}\n")
    path.chmod(0o644)
    return path


def _start(tmp_path: Path, reaper: Reaper, users: dict[str, Any],  # noqa: F811
           dry_run: bool) -> tuple[dict[str, int], subprocess.Popen[str], Path, Path]:
    idle = start_sleeper(reaper, user=users["gt18a"].pw_uid, args=("idle-kernel",))
    busy = start_sleeper(reaper, user=users["gt18b"].pw_uid, args=("busy-train",))
    roots = start_sleeper(reaper, args=("root-idle",))
    pids = {"idle": idle.pid, "busy": busy.pid, "root": roots.pid}
    scenario = fakenvml.write_scenario(tmp_path / "scenario", {"devices": [
        {"name": "NVIDIA H100", "memory_total_mib": 81559, "util_gpu": 0,
         "processes": [{"pid": idle.pid, "used_mib": 4096, "sm_util": 0},
                       {"pid": roots.pid, "used_mib": 4096, "sm_util": 0}]},
        {"name": "NVIDIA H100", "memory_total_mib": 81559, "util_gpu": 80,
         "processes": [{"pid": busy.pid, "used_mib": 4096, "sm_util": 80}]}]})
    notes = tmp_path / "notes.txt"
    env = fakenvml.environment(scenario)
    env["GPUTOP_POLICY"] = str(_policy(tmp_path / "policy.yaml", notes))
    db = tmp_path / "ledger.sqlite"
    cmd = [sys.executable, "-m", "gputop.cli", "record", "--local", "--interval", "0.3",
           "--db", str(db)] + (["--dry-run"] if dry_run else [])
    rec = reaper.add(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))
    return pids, rec, db, notes


def _actions(db: Path) -> list[tuple[Any, ...]]:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.OperationalError:
        return []  # not made yet
    try:
        return conn.execute("SELECT pid, user, step, outcome, evidence FROM actions"
                            " ORDER BY t").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def test_idle_process_is_warned_reminded_then_stopped(
    tmp_path: Path, reaper: Reaper, users: dict[str, Any]  # noqa: F811
) -> None:
    pids, rec, db, notes = _start(tmp_path, reaper, users, dry_run=False)
    wait_for(lambda: not alive(pids["idle"]), timeout=LIMIT_S, what="the idle process to end")
    wait_for(lambda: len(_actions(db)) >= 3, timeout=LIMIT_S, what="three steps logged")
    rec.send_signal(signal.SIGTERM)
    assert rec.wait(60) == 0
    assert alive(pids["busy"]) and alive(pids["root"])
    rows = _actions(db)
    assert [(pid, user, step) for pid, user, step, _o, _e in rows] == [
        (pids["idle"], "gt18a", "warn"), (pids["idle"], "gt18a", "remind"),
        (pids["idle"], "gt18a", "release")]
    assert [o for *_x, o, _e in rows] == ["told", "told", "exited"]
    evidence = json.loads(rows[-1][4])
    assert evidence["mem_bytes"] == 4096 * 1024 * 1024 and evidence["sm_pct"] == 0
    assert evidence["gpus"] == [0] and "idle-kernel" in evidence["command"]
    assert evidence["kill"]["outcome"] == "exited"
    assert evidence["idle_for_s"] >= 3.0 and evidence["told"]["notify"] == "ok"
    # This machine's process (the snapshot says "localhost"): its owner's terminals were
    # looked for and written to (issue 38.6; the test user has none logged in).
    assert evidence["told"]["write"] == {}
    text = notes.read_text()
    assert text.count(f"your process {pids['idle']} ") == 3
    assert "It was stopped with SIGTERM under the host's idle policy: exited." in text
    assert str(pids["root"]) not in text and str(pids["busy"]) not in text


_TERM_THEN_BUSY = (
    "import signal,sys,time\n"
    "signal.signal(signal.SIGTERM, lambda *a: print('term', flush=True))\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(60)\n"
)


def test_a_process_busy_again_after_sigterm_is_not_sigkilled(
    tmp_path: Path, reaper: Reaper, users: dict[str, Any]  # noqa: F811
) -> None:
    # Issue 38.6: it takes the SIGTERM and goes back to work (saving a checkpoint, say):
    # the look after the grace sees it busy, and no SIGKILL follows.
    proc = _python(reaper, _TERM_THEN_BUSY, "checkpointer", user=users["gt18a"].pw_uid)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

    def devices(sm: int) -> dict[str, Any]:
        return {"devices": [{"name": "NVIDIA H100", "memory_total_mib": 81559,
                             "util_gpu": sm, "processes": [
                                 {"pid": proc.pid, "used_mib": 4096, "sm_util": sm}]}]}

    scenario = fakenvml.write_scenario(tmp_path / "scenario", devices(0))
    notes = tmp_path / "notes.txt"
    env = fakenvml.environment(scenario)
    policy = tmp_path / "policy.yaml"
    policy.write_text("idle: {warn_after: 1s, release_after: 3s, action: kill, grace: 10s,"
                      f" notify: [/usr/bin/tee, -a, {notes}]}}\n")
    policy.chmod(0o644)
    env["GPUTOP_POLICY"] = str(policy)
    db = tmp_path / "ledger.sqlite"
    rec = reaper.add(subprocess.Popen(
        [sys.executable, "-m", "gputop.cli", "record", "--local", "--interval", "0.3",
         "--db", str(db)], env=env, stderr=subprocess.PIPE, text=True))
    out = proc.stdout
    wait_for(lambda: select.select([out], [], [], 0)[0], timeout=LIMIT_S,
             what="the SIGTERM")
    assert out.readline().strip() == "term"
    fakenvml.write_scenario(tmp_path / "scenario", devices(70))  # busy again
    wait_for(lambda: any(step == "release" for _p, _u, step, _o, _e in _actions(db)),
             timeout=LIMIT_S, what="the release step logged")
    rec.send_signal(signal.SIGTERM)
    assert rec.wait(60) == 0
    assert alive(proc.pid)
    (release,) = [row for row in _actions(db) if row[2] == "release"]
    assert release[3] == "spared"
    kill = json.loads(release[4])["kill"]
    assert kill["outcome"] == "spared" and "busy now: not killed" in kill["message"]


def test_dry_run_only_says(tmp_path: Path, reaper: Reaper, users: dict[str, Any]) -> None:  # noqa: F811
    pids, rec, db, notes = _start(tmp_path, reaper, users, dry_run=True)
    wait_for(lambda: len(_actions(db)) >= 3, timeout=LIMIT_S, what="three dry-run steps")
    rec.send_signal(signal.SIGTERM)
    assert rec.wait(60) == 0
    assert rec.stderr is not None
    err = rec.stderr.read()
    assert f"dry run: would SIGTERM gt18a's pid {pids['idle']} on " in err
    assert all(alive(pid) for pid in pids.values())
    assert {o for *_x, o, _e in _actions(db)} == {"dry run"}
    assert not notes.exists()  # nobody was told


def _proc(**kw: Any) -> IdleProcess:
    base: dict[str, Any] = dict(host="h", pid=10, start=5, start_ticks=7, user="alice",
                                uid=1000, gpus=(0,), mem=4 * GIB, sm=0, command="python",
                                workload=None, simulated=False)
    base.update(kw)
    return IdleProcess(**base)


def test_who_the_policy_may_touch() -> None:
    policy = IdlePolicy(7200.0, 28800.0, "kill", include=frozenset({"docker"}))
    assert why_not(_proc(), policy, GIB) is None
    assert why_not(_proc(user="root", uid=0), policy, GIB) == "root's process"
    assert why_not(_proc(workload="slurm"), policy, GIB) == (
        "in a slurm workload (not in the policy's include)")
    assert why_not(_proc(workload="docker"), policy, GIB) is None  # named by the policy
    assert why_not(_proc(sm=3), policy, GIB) == "busy"
    assert why_not(_proc(sm=None), policy, GIB) == "SM % unknown"
    assert why_not(_proc(mem=GIB // 2), policy, GIB) == "holds less than the idle threshold"
    assert why_not(_proc(start_ticks=None), policy, GIB) == "not in this pid namespace"


def test_steps_come_in_order_and_a_kill_only_after_notice() -> None:
    policy = IdlePolicy(7200.0, 28800.0, "kill")
    tracker = IdleTracker(policy, GIB)
    p = _proc()
    t0 = 1_000_000.0

    def at(hours: float) -> list[str]:
        due = tracker.observe("h", [p], t0 + hours * 3600)
        for d in due:
            tracker.taken(d, t0 + hours * 3600)
        return [d.step for d in due]

    assert at(0) == [] and at(1.99) == []
    assert at(2) == ["warn"] and at(4.9) == []
    assert at(5) == ["remind"] and at(7.99) == []  # half way from 2 h to 8 h
    assert at(8) == ["release"] and at(9) == []
    # Busy for a moment: a new idle run, from the start.
    assert tracker.observe("h", [_proc(sm=20)], t0 + 10 * 3600) == []
    assert at(10.5) == [] and at(12.4) == [] and at(12.5) == ["warn"]
    # A recorder that starts beside a process idle for days warns first; the kill waits
    # half the warn-to-release gap (3 h) after that warning.
    late = IdleTracker(policy, GIB)
    late.seed(p.key, t0 - 3 * 86400, {})
    steps = []
    for hours in (0, 0.1, 1, 2.9, 3):
        for d in late.observe("h", [p], t0 + hours * 3600):
            late.taken(d, t0 + hours * 3600)
            steps.append((hours, d.step))
    assert steps == [(0, "warn"), (0.1, "remind"), (3, "release")]


@pytest.mark.parametrize(("section", "words"), [
    ("{warn_after: 2h}", "needs 'warn_after' and 'release_after'"),
    ("{warn_after: 8h, release_after: 2h}", "must be longer than 'warn_after'"),
    ("{warn_after: 2h, release_after: 8h, action: shoot}", "expected one of notify, kill"),
    ("{warn_after: 2h, release_after: 8h, notify: [mail, x]}", "must be an absolute path"),
    ("{warn_after: 2h, release_after: 8h, notify: '/bin/sh -c x'}", "as a list"),
    ("{warn_after: 2h, release_after: 8h, notify: [/usr/bin/mail, '{command}']}",
     "only {user}, {host}, {pid}, {gpu}, {step} may be filled in"),
    ("{warn_after: 2h, release_after: 8h, include: [vm]}", "is not one of slurm"),
])
def test_bad_idle_sections_name_the_line(section: str, words: str) -> None:
    with pytest.raises(PolicyError, match=words.replace("{", r"\{").replace("}", r"\}")):
        parse_accounting(f"# the idle policy\nidle: {section}\n", "policy.yaml")
    with pytest.raises(PolicyError, match=r"^policy\.yaml:2: "):
        parse_accounting(f"# the idle policy\nidle: {section}\n", "policy.yaml")
