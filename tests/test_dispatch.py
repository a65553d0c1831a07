"""dispatch.handle: request validation, readonly, real kills, and --demo kills that stay
inside the simulation."""

from __future__ import annotations

import time

import pytest
from helpers.procs import alive, start_sleeper, start_term_ignorer, start_ticks

from gputop.actions.dispatch import ActionEnv, handle
from gputop.sources import sim
from gputop.sources.procfs import ProcFs

START = 1_764_680_000.0


def _lab() -> tuple[sim.SimNvml, sim.SimProcs]:
    nvml = sim.SimNvml(sim.load_scenario("lab"), clock=lambda: START)
    return nvml, sim.SimProcs(nvml)


@pytest.mark.parametrize(
    "request_",
    [
        None,
        [],
        "kill 123",
        {},
        {"op": "explode"},
        {"op": "kill", "pid": "123", "start_ticks": 1},
        {"op": "kill", "pid": True, "start_ticks": 1},
        {"op": "kill", "pid": 1, "start_ticks": 1},
        {"op": "kill", "pid": 0, "start_ticks": 1},
        {"op": "kill", "pid": -5, "start_ticks": 1},
        {"op": "kill", "pid": 12345},
        {"op": "kill", "pid": 12345, "start_ticks": 1.5},
        {"op": "kill", "pid": 12345, "start_ticks": 1, "signal": "HUP"},
        {"op": "kill", "pid": 12345, "start_ticks": 1, "signal": 9},
        {"op": "kill", "pid": 12345, "start_ticks": 1, "grace": -1},
        {"op": "kill", "pid": 12345, "start_ticks": 1, "grace": float("nan")},
        {"op": "kill", "pid": 12345, "start_ticks": 1, "grace": "5"},
        {"op": "kill", "pid": 12345, "start_ticks": 1, "grace": 1e9},
    ],
)
def test_bad_requests_get_a_message_never_an_exception(request_):
    result = handle(request_, ActionEnv())
    assert result["ok"] is False
    assert isinstance(result["message"], str) and result["message"]
    assert "outcome" not in result  # nothing was attempted


def test_readonly_signals_nothing(reaper):
    proc = start_sleeper(reaper)
    req = {"op": "kill", "pid": proc.pid, "start_ticks": start_ticks(proc.pid), "signal": "KILL"}
    result = handle(req, ActionEnv(readonly=True))
    assert result["outcome"] == "readonly" and result["ok"] is False
    assert alive(proc.pid)
    released = handle({"op": "release", "gpus": [0]}, ActionEnv(readonly=True))
    assert released["ok"] is False and released["outcome"] == "readonly"


def test_readonly_reserves_nothing(tmp_path):
    env = ActionEnv(reservations_dir=str(tmp_path / "res"), readonly=True)
    req = {"op": "reserve", "gpus": [0], "until": time.time() + 600}
    result = handle(req, env)
    assert result["ok"] is False and result["outcome"] == "readonly"
    assert not (tmp_path / "res").exists() or not any((tmp_path / "res").iterdir())


def test_real_kill_with_escalation_through_dispatch(reaper):
    proc = start_term_ignorer(reaper)
    req = {"op": "kill", "pid": proc.pid, "start_ticks": start_ticks(proc.pid), "grace": 0.3}
    result = handle(req, ActionEnv(procs=ProcFs()))
    assert result["outcome"] == "killed" and result["ok"] is True
    assert proc.wait(5) == -9


def test_real_kill_of_a_reused_pid_is_refused(reaper):
    proc = start_sleeper(reaper)
    req = {"op": "kill", "pid": proc.pid, "start_ticks": start_ticks(proc.pid) + 1, "grace": 0}
    assert handle(req, ActionEnv(procs=ProcFs()))["outcome"] == "pid reused"
    assert alive(proc.pid)


def test_demo_kill_never_touches_a_real_process(reaper):
    """A real process whose pid the simulation does not know survives a demo kill."""
    nvml, procs = _lab()
    real = start_sleeper(reaper)
    req = {"op": "kill", "pid": real.pid, "start_ticks": start_ticks(real.pid), "signal": "KILL"}
    result = handle(req, ActionEnv(sim=nvml, procs=procs))
    assert result["outcome"] == "already gone" and result["simulated"] is True
    assert alive(real.pid)


def test_demo_kill_changes_the_simulation():
    nvml, procs = _lab()
    kernel = procs.process(5100034)  # alice's orphaned kernel
    assert kernel is not None
    req = {"op": "kill", "pid": 5100034, "start_ticks": kernel["start_ticks"], "grace": 5.0}
    result = handle(req, ActionEnv(sim=nvml, procs=procs))
    assert result["outcome"] == "exited" and result["ok"] is True
    assert procs.process(5100034) is None
    assert 5100034 not in nvml.processes()


def test_demo_term_ignorer_escalates_to_kill():
    nvml, procs = _lab()
    info = procs.process(5100033)  # stubborn_worker.py ignores SIGTERM
    assert info is not None
    req = {"op": "kill", "pid": 5100033, "start_ticks": info["start_ticks"], "signal": "TERM"}
    result = handle(req, ActionEnv(sim=nvml, procs=procs))
    assert result["outcome"] == "killed"
    assert "ignored SIGTERM" in result["message"]
    assert procs.process(5100033) is None


def test_demo_guards_reuse_permission_and_zombies():
    nvml, procs = _lab()
    env = ActionEnv(sim=nvml, procs=procs)
    kernel = procs.process(5100032)
    assert kernel is not None
    reused = {"op": "kill", "pid": 5100032, "start_ticks": kernel["start_ticks"] + 1}
    reused_result = handle(reused, env)
    assert reused_result["outcome"] == "pid reused" and reused_result["ok"] is False
    carol = procs.process(5100021)  # the scenario's user is alice
    assert carol is not None
    denied = handle({"op": "kill", "pid": 5100021, "start_ticks": carol["start_ticks"]}, env)
    assert denied["outcome"] == "permission denied" and denied["owner"] == "carol"
    assert denied["ok"] is False
    zombie = procs.process(5100041)
    assert zombie is not None and zombie["state"] == "Z"
    result = handle({"op": "kill", "pid": 5100041, "start_ticks": zombie["start_ticks"]}, env)
    assert result["outcome"] == "zombie" and result["ok"] is False
    assert result["message"].startswith("zombie: its parent 5100040 must reap it")
    # A stale start time is a reused pid, even when the pid is now a zombie.
    stale = {"op": "kill", "pid": 5100041, "start_ticks": zombie["start_ticks"] + 1}
    assert handle(stale, env)["outcome"] == "pid reused"
    assert procs.process(5100032) is not None and procs.process(5100021) is not None


def test_reservation_ops_reach_the_store(tmp_path):
    env = ActionEnv(reservations_dir=str(tmp_path / "res"), gpu_uuids=["GPU-aaaa", "GPU-bbbb"])
    result = handle({"op": "reservations"}, env)
    assert result["ok"] is True and result["reservations"] == []
    until = time.time() + 3600
    made = handle({"op": "reserve", "gpus": [1], "until": until, "note": "sweep"}, env)
    assert made["ok"] is True, made
    listed = handle({"op": "reservations"}, env)["reservations"]
    assert [(r["gpu"], r["gpu_uuid"], r["note"]) for r in listed] == [(1, "GPU-bbbb", "sweep")]
    assert listed[0]["until"] == pytest.approx(until)
    assert any((tmp_path / "res").iterdir())  # it went to disk, not to memory
    # A readonly env over the same directory still reads what is there.
    ro = ActionEnv(reservations_dir=str(tmp_path / "res"), readonly=True)
    assert len(handle({"op": "reservations"}, ro)["reservations"]) == 1
    gone = handle({"op": "release", "gpus": [1]}, env)
    assert gone["ok"] is True and gone["released"]
    assert handle({"op": "reservations"}, env)["reservations"] == []
