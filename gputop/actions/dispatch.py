"""The one entry for every action: a request dict in, a result dict out.

Standard library only: the remote probe calls ``handle`` for requests that arrive over
SSH, the local feed calls it in a worker thread, and --demo calls it with a simulation.
Requests may come from another machine, so every field is checked here and a bad request
gets ``{"ok": False, "message": ...}``; ``handle`` never raises.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

from gputop.actions import kill
from gputop.actions.env import ActionEnv

MAX_GRACE = 600.0


@runtime_checkable
class SimulatedProcesses(kill.Processes, Protocol):
    """A simulation's process table (sim.SimProcs): kills change only the simulation."""

    def signal(self, pid: int, start_ticks: int | None, sig: int | str) -> dict[str, Any]: ...


class BadRequest(Exception):
    pass


def handle(request: Any, env: ActionEnv) -> dict:
    try:
        if not isinstance(request, dict):
            raise BadRequest("a request must be a JSON object")
        op = request.get("op")
        if op == "kill":
            return _kill(request, env)
        if op in ("reserve", "release", "reservations"):
            return _reservations(op, request, env)
        if op in ("queue", "queue_cancel"):
            from gputop.actions import queue

            return queue.handle(op, request, env)
        raise BadRequest(f"unknown op {op!r}")
    except BadRequest as exc:
        return {"ok": False, "message": str(exc)}
    except Exception as exc:  # a remote probe must answer, whatever went wrong
        return {"ok": False, "message": f"{type(exc).__name__}: {exc}"}


def _int(request: dict, key: str, minimum: int) -> int:
    value = request.get(key)
    # bool is an int subclass; JSON true must not become pid 1.
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def _kill(request: dict, env: ActionEnv) -> dict:
    pid = _int(request, "pid", 2)
    start_ticks = _int(request, "start_ticks", 0)
    sig = request.get("signal", "TERM")
    if sig not in kill.SIGNALS:
        raise BadRequest(f"signal must be one of {', '.join(kill.SIGNALS)}, got {sig!r}")
    grace = request.get("grace", 5.0)
    if (
        not isinstance(grace, (int, float))
        or isinstance(grace, bool)
        or not math.isfinite(grace)
        or not 0 <= grace <= MAX_GRACE
    ):
        raise BadRequest(f"grace must be a number of seconds in 0..{MAX_GRACE:g}, got {grace!r}")
    escalate = request.get("escalate", True)
    if not isinstance(escalate, bool):
        raise BadRequest(f"escalate must be true or false, got {escalate!r}")
    if env.readonly:
        return {
            "ok": False,
            "outcome": kill.READONLY,
            "message": "read-only mode: nothing was signalled",
            "owner": None,
            "pid": pid,
            "signal": sig,
        }
    if env.sim is not None:
        return _sim_kill(pid, start_ticks, sig, env, escalate)
    return kill.signal_process(pid, start_ticks, sig, float(grace), env.procs, escalate)


def _sim_kill(pid: int, start_ticks: int, sig: str, env: ActionEnv,
              escalate: bool = True) -> dict:
    """--demo: the simulation decides; never a real signal for a simulated pid."""
    procs = env.procs
    if not isinstance(procs, SimulatedProcesses):
        raise BadRequest("demo mode without a simulated process table")
    info = procs.process(pid)
    if info is not None and info.get("start_ticks") == start_ticks and info.get("state") == "Z":
        return _sim_result(
            {"outcome": kill.ZOMBIE, "owner": info.get("user"),
             "message": f"zombie: its parent {info.get('ppid')} must reap it (signals do nothing)"},
            pid, sig,
        )
    answer = _sim_answer(procs.signal(pid, start_ticks, sig))
    if answer.get("outcome") == kill.STILL_ALIVE and sig in ("TERM", "INT") and escalate:
        # Simulated time does not wait out a grace period (and the feed holds the
        # simulation's lock meanwhile): escalate at once, as the real kill would later.
        second = _sim_answer(procs.signal(pid, start_ticks, "KILL"))
        if second.get("outcome") == kill.KILLED:
            second["message"] = f"pid {pid} ignored SIG{sig}; killed with SIGKILL (simulated)"
            answer = second
    return _sim_result(answer, pid, sig)


def _sim_answer(answer: Any) -> dict:
    if isinstance(answer, dict):
        return dict(answer)
    return {"outcome": str(answer)}


def _sim_result(result: dict, pid: int, sig: str) -> dict:
    outcome = result.get("outcome")
    result["ok"] = outcome in (kill.EXITED, kill.KILLED, kill.ALREADY_GONE)
    result.setdefault("message", f"pid {pid} (simulated): {outcome}")
    result.setdefault("owner", None)
    result["pid"] = pid
    result["signal"] = sig
    result["simulated"] = True
    return result


def _reservations(op: str, request: dict, env: ActionEnv) -> dict:
    if env.readonly and op != "reservations":
        return {"ok": False, "outcome": kill.READONLY, "message": "read-only mode: nothing changed"}
    # Imported here: a probe that is only asked to kill need not load the store.
    from gputop.actions import reservations

    return reservations.handle(op, request, env)
