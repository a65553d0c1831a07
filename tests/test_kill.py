"""signal_process on real processes: exits, escalation, reuse guard, zombies, permissions."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from helpers.procs import (
    SYSTEM_PYTHON,
    alive,
    start_sleeper,
    start_term_ignorer,
    start_ticks,
    start_zombie,
)

from gputop.actions.kill import read_stat, signal_process
from gputop.sources.procfs import ProcFs

REPO = Path(__file__).resolve().parent.parent
NOBODY = 65534
OTHER_UID = 43210  # no passwd entry needed: os.setuid takes any number


def test_term_exits_a_well_behaved_process(reaper):
    proc = start_sleeper(reaper)
    result = signal_process(proc.pid, start_ticks(proc.pid), "TERM", grace=5.0)
    assert result["outcome"] == "exited" and result["ok"] is True
    assert result["owner"] == "root" and result["signal"] == "TERM"
    assert proc.wait(5) == -15  # it died of the SIGTERM, not of the escalation


def test_term_escalates_to_kill_when_ignored(reaper):
    proc = start_term_ignorer(reaper)
    result = signal_process(proc.pid, start_ticks(proc.pid), "TERM", grace=0.3)
    assert result["outcome"] == "killed" and result["ok"] is True
    assert "ignored SIGTERM" in result["message"]
    assert proc.wait(5) == -9


def test_int_escalates_to_kill_too(reaper):
    proc = start_term_ignorer(reaper)
    result = signal_process(proc.pid, start_ticks(proc.pid), "INT", grace=0.2)
    assert result["outcome"] == "killed"
    assert proc.wait(5) == -9


def test_kill_signal_is_reported_as_killed(reaper):
    proc = start_term_ignorer(reaper)
    result = signal_process(proc.pid, start_ticks(proc.pid), "KILL", grace=1.0)
    assert result["outcome"] == "killed"
    assert proc.wait(5) == -9


def test_reused_pid_is_never_signalled(reaper):
    proc = start_sleeper(reaper)
    ticks = start_ticks(proc.pid)
    result = signal_process(proc.pid, ticks - 1, "KILL", grace=0.1)
    assert result["outcome"] == "pid reused" and result["ok"] is False
    assert "not signalled" in result["message"]
    time.sleep(0.2)
    assert alive(proc.pid) and start_ticks(proc.pid) == ticks


def test_already_gone(reaper):
    proc = start_sleeper(reaper)
    ticks = start_ticks(proc.pid)
    proc.kill()
    proc.wait(5)
    result = signal_process(proc.pid, ticks, "TERM", grace=0.1)
    if read_stat(proc.pid) is not None:  # the pid went to a new process at once
        assert result["outcome"] == "pid reused"
        return
    assert result["outcome"] == "already gone" and result["ok"] is True
    assert result["message"] == f"pid {proc.pid} is already gone"


def test_zombie_is_not_signalled_and_names_its_parent(reaper):
    zombie = start_zombie(reaper)
    result = signal_process(zombie.pid, start_ticks(zombie.pid), "KILL", grace=0.1)
    assert result["outcome"] == "zombie" and result["ok"] is False
    assert result["message"].startswith(f"zombie: its parent {os.getpid()} must reap it")


def test_unknown_signal_is_refused(reaper):
    proc = start_sleeper(reaper)
    result = signal_process(proc.pid, start_ticks(proc.pid), "HUP", grace=0.1)
    assert result["ok"] is False and "unknown signal" in result["message"]
    assert alive(proc.pid)


def test_identity_through_procfs_and_without_pidfd(reaper, monkeypatch):
    """Old kernels have no pidfd: the os.kill path must keep every guarantee."""
    monkeypatch.delattr(os, "pidfd_open")
    proc = start_term_ignorer(reaper)
    ticks = start_ticks(proc.pid)
    assert signal_process(proc.pid, ticks + 7, "TERM", 0.1, ProcFs())["outcome"] == "pid reused"
    assert alive(proc.pid)
    result = signal_process(proc.pid, ticks, "TERM", 0.3, ProcFs())
    assert result["outcome"] == "killed"
    assert proc.wait(5) == -9


def _signal_as(uid: int, pid: int, ticks: int) -> dict:
    """Run signal_process in a child process that has dropped to ``uid``."""
    code = (
        "import json,sys\n"
        "from gputop.actions.kill import signal_process\n"
        "print(json.dumps(signal_process(int(sys.argv[1]), int(sys.argv[2]), 'TERM', 0.2)))\n"
    )
    # The system python, with only our source tree on its path: kill.py must work on a
    # host where nothing but the standard library is installed (as in the remote probe).
    out = subprocess.run(
        [SYSTEM_PYTHON, "-c", code, str(pid), str(ticks)],
        user=uid,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start processes as other users")
def test_permission_denied_names_the_owner(reaper):
    target = start_sleeper(reaper, user=NOBODY)
    ticks = start_ticks(target.pid)
    result = _signal_as(OTHER_UID, target.pid, ticks)
    assert result["outcome"] == "permission denied" and result["ok"] is False
    assert result["owner"] == "nobody"
    assert result["message"] == f"permission denied: pid {target.pid} belongs to nobody"
    assert alive(target.pid)
    # The owner may: the same request as nobody succeeds.
    assert _signal_as(NOBODY, target.pid, ticks)["outcome"] == "exited"
