"""Issue 41: no neighbour can stop anyone's `gputop run`. Real users, real processes,
the fake driver through the real pynvml, a private store (test_run_queue's host).

Nothing here measures time: limits are generous, and a test that would pass on a
machine where the old code hangs fails through `--wait` instead of the harness limit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from helpers.users import SYSTEM_PYTHON
from test_run_queue import (  # noqa: F401  (fixtures)
    LIMIT_S,
    Host,
    driver,
    host,
    portable,
    users,
    wait_for,
)


def _err(proc: subprocess.Popen[str]) -> str:
    return proc.stderr.read() if proc.stderr else ""


def _forge_job(host: Host, user: str, request: dict[str, object]) -> subprocess.Popen[str]:  # noqa: F811
    """A job file that names the forger's own `sleep`: a process that lives and never
    takes cards (the job is submitted by a python that then becomes `sleep`: same pid,
    same start time)."""
    code = ("import os, sys; from gputop.actions import queue;"
            f" queue.submit(sys.argv[1], {request!r}); print('in', flush=True);"
            " os.execvp('sleep', ['sleep', '600'])")
    entry = host.users[user]
    proc = subprocess.Popen([SYSTEM_PYTHON, "-c", code, str(host.store)], env=host.env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            user=entry.pw_uid, group=entry.pw_gid, extra_groups=[], cwd="/")
    assert proc.stdout is not None
    assert proc.stdout.readline() == "in\n", _err(proc)
    return proc


def test_a_stopped_head_of_line_loses_its_turn_and_runs_when_it_wakes(host: Host) -> None:  # noqa: F811
    host.policy("turn_limit: 15s\n")
    first = host.job("gt18a", "first", "--gpus", "4", mode="hold")
    wait_for(host.held, "the first job running", first)
    stalled = host.job("gt18b", "stalled", "--gpus", "3", mode="0.1")
    wait_for(lambda: len(host.jobs_in_line()) == 2, "the 3-GPU job in line", stalled)
    os.kill(stalled.pid, signal.SIGSTOP)  # Ctrl+Z: its turn comes while it sleeps
    try:
        host.go("first")
        assert first.wait(timeout=LIMIT_S) == 0
        # Three of four cards go to the stopped job; this one needs two. Without the
        # turn limit it waits for ever (here: gives up after 90 s, exit 5).
        behind = host.job("gt18c", "behind", "--gpus", "2", "--wait", "90s", mode="0.1")
        assert behind.wait(timeout=LIMIT_S) == 0, _err(behind)
        err = _err(behind)
        assert "gt18b's job" in err and "lost its turn" in err, err
        assert "its process is stopped: Ctrl+Z or SIGSTOP" in err, err
    finally:
        os.kill(stalled.pid, signal.SIGCONT)
    # Woken, it is still in line (behind others, not out) and runs.
    assert stalled.wait(timeout=LIMIT_S) == 0, _err(stalled)
    starts = [label for label, _cvd, what, _t in host.log() if what == "start"]
    assert starts == ["first", "behind", "stalled"]


def test_a_forged_job_naming_a_sleep_never_holds_the_line(host: Host) -> None:  # noqa: F811
    host.policy("turn_limit: 15s\n")
    forged = _forge_job(host, "gt18d", {"gpus": 4, "priority": "high", "command": "forged"})
    try:
        (job,) = host.jobs_in_line()
        listing = json.loads(host.run(None, "queue", "--json").stdout)
        assert [(row["id"], row["position"]) for row in listing] == [(job.id, 1)]
        behind = host.job("gt18c", "behind", "--gpus", "1", "--wait", "90s", mode="0.1")
        assert behind.wait(timeout=LIMIT_S) == 0, _err(behind)
        err = _err(behind)
        assert f"gt18d's job {job.id} lost its turn" in err, err
        assert "its process is not a gputop run" in err, err
    finally:
        forged.kill()
        forged.wait()
    assert [label for label, *_ in host.log()] == ["behind", "behind"]


def test_the_turn_limit_is_checked(host: Host, tmp_path: Path) -> None:  # noqa: F811
    host.policy("turn_limit: 1s\n")
    refused = host.run("gt18a", "run", "--gpus", "1", "--", "true")
    assert refused.returncode == 2, refused.stderr
    assert "policy.yaml:1: key 'turn_limit': expected 15s..60m" in refused.stderr


HOLD_LOCK = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o444);"
             " fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()")


def _as(host: Host, user: str, *argv: str, **popen: object) -> subprocess.Popen[str]:  # noqa: F811
    entry = host.users[user]
    return subprocess.Popen(list(argv), env=host.env, text=True, user=entry.pw_uid,
                            group=entry.pw_gid, extra_groups=[], cwd="/", **popen)  # type: ignore[call-overload]


def _cards_started(host: Host, label: str) -> list[str]:  # noqa: F811
    return [cvd for name, cvd, what, _t in host.log() if name == label and what == "start"]


def test_a_held_lock_stops_only_its_card_and_names_its_holder(host: Host) -> None:  # noqa: F811
    holder = _as(host, "gt18d", SYSTEM_PYTHON, "-c", HOLD_LOCK, str(host.store / ".lock-gpu0"),
                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        # The plan's first choice is GPU 0: its lock cannot be had, so the next card.
        first = host.job("gt18a", "one", "--gpus", "1", "--wait", "60s", mode="0.1")
        assert first.wait(timeout=LIMIT_S) == 0, _err(first)
        assert _cards_started(host, "one") == ["1"]
        # A job that wants that card waits, and says who holds it.
        mine = host.job("gt18b", "zero", "--gpu-ids", "0", "--wait", "25s", mode="0.1")
        assert mine.wait(timeout=LIMIT_S) == 5
        err = _err(mine)
        assert f"GPU 0 lock held by pid {holder.pid} (gt18d)" in err, err
        taken = host.run("gt18c", "reserve", "--count", "1", "--for", "1h")
        assert taken.returncode == 0, taken.stderr
        assert taken.stdout == "CUDA_VISIBLE_DEVICES=1\n", taken.stdout
    finally:
        holder.kill()
        holder.wait()


def test_planted_unusable_lock_files_stop_only_their_cards(host: Host) -> None:  # noqa: F811
    for name, make in ((".lock-gpu0", "touch {0} && chmod 000 {0}"), (".lock-gpu1", "mkfifo {0}")):
        _as(host, "gt18d", "/bin/sh", "-c", make.format(host.store / name)).wait(timeout=LIMIT_S)
    assert (host.store / ".lock-gpu1").is_fifo()
    job = host.job("gt18a", "two", "--gpus", "1", "--wait", "60s", mode="0.1")
    assert job.wait(timeout=LIMIT_S) == 0, _err(job)
    assert _cards_started(host, "two") == ["2"]
    taken = host.run("gt18c", "reserve", "--count", "2", "--for", "1h")
    assert taken.returncode == 0, taken.stderr
    assert taken.stdout == "CUDA_VISIBLE_DEVICES=2,3\n", taken.stdout
    blocked = host.run("gt18b", "reserve", "--gpus", "1", "--for", "1h")
    assert blocked.returncode != 0
    assert "not a regular file (gt18d's)" in blocked.stderr, blocked.stderr


# The fixed place stands in for /etc/gputop/policy.yaml (a test never touches the host's).
FIXED_PLACE = ("import sys, gputop.policy as p; p.DEFAULT_PATH = sys.argv[1];"
               " from gputop.cli import main; sys.exit(main(sys.argv[2:]))")


def test_the_policy_place_is_fixed_for_users(host: Host) -> None:  # noqa: F811
    fixed = host.root / "etc-policy.yaml"
    fixed.write_text("max_gpus_per_user: 1\n")
    fixed.chmod(0o644)
    mine = host.root / "mine.yaml"
    mine.write_text("max_gpus_per_user: 4\n")
    mine.chmod(0o644)
    os.chown(mine, host.users["gt18a"].pw_uid, -1)
    empty = host.root / "empty.yaml"
    empty.write_text("# nothing\n")
    empty.chmod(0o644)
    loose = host.root / "loose.yaml"
    loose.write_text("max_gpus_per_user: 4\n")
    loose.chmod(0o666)
    admins = host.root / "admins.yaml"
    admins.write_text("max_gpus_per_user: 3\n")
    admins.chmod(0o644)

    def run_as(user: str, policy: str) -> subprocess.CompletedProcess[str]:
        env = dict(host.env, GPUTOP_POLICY=policy)
        entry = host.users[user] if user else None
        return subprocess.run(
            [SYSTEM_PYTHON, "-c", FIXED_PLACE, str(fixed), "run", "--config",
             str(host.root / "config.yaml"), "--gpus", "3", "--priority", "high", "--",
             "true"], env=env, text=True, capture_output=True, timeout=LIMIT_S, cwd="/",
            user=entry.pw_uid if entry else None, group=entry.pw_gid if entry else None,
            extra_groups=[] if entry else None)

    for override, why in (("/nonexistent", "(no such file)"),
                          (str(mine), "must be owned by root"),
                          (str(empty), "it states no rule"),
                          (str(loose), "must be owned by root and writable by nobody else")):
        refused = run_as("gt18a", override)
        assert refused.returncode == 4, (override, refused.stderr)
        assert "at most 1 per user" in refused.stderr, refused.stderr
        assert f"GPUTOP_POLICY='{override}' ignored (" in refused.stderr, refused.stderr
        assert why in refused.stderr, refused.stderr
    # The admin's own file elsewhere counts; and root may name any file.
    assert run_as("gt18a", str(admins)).returncode == 0
    assert run_as("", str(mine)).returncode == 0


def test_run_log_refuses_planted_files_fifos_and_links(host: Host) -> None:  # noqa: F811
    alice, mallory = host.users["gt18a"], host.users["gt18d"]
    home = host.root / "alice-home"
    home.mkdir(mode=0o700)
    os.chown(home, alice.pw_uid, alice.pw_gid)
    profile = home / ".profile"
    profile.write_text("PATH=/usr/bin\n")
    os.chown(profile, alice.pw_uid, alice.pw_gid)
    plant = (f"umask 0; echo > {host.root}/planted.log; mkfifo {host.root}/fifo.log;"
             f" ln -s {home} {host.root}/logs")
    assert _as(host, "gt18d", "/bin/sh", "-c", plant).wait(timeout=LIMIT_S) == 0
    assert (host.root / "planted.log").stat().st_uid == mallory.pw_uid
    secret = "token-4f1c"
    for log, why in (("planted.log", "gt18d's file, not yours; not used"),
                     ("fifo.log", "not a regular file"),
                     ("logs/.profile", "'logs' is a link of gt18d's; not followed")):
        refused = host.run("gt18a", "run", "--log", str(host.root / log), "--", "echo", secret)
        assert refused.returncode != 0, (log, refused.stderr)
        assert why in refused.stderr, refused.stderr
        assert secret not in refused.stdout
    assert (host.root / "planted.log").read_text() == "\n"
    assert profile.read_text() == "PATH=/usr/bin\n"
    # Her own link is followed; the new file is hers alone.
    os.symlink(home, host.root / "mine")
    os.lchown(host.root / "mine", alice.pw_uid, alice.pw_gid)
    ok = host.run("gt18a", "run", "--log", str(host.root / "mine" / "job.log"), "--",
                  "echo", secret)
    assert ok.returncode == 0, ok.stderr
    made = home / "job.log"
    assert secret in made.read_text()
    assert (made.stat().st_uid, made.stat().st_mode & 0o777) == (alice.pw_uid, 0o600)
