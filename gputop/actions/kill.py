"""Signal a process safely: only the one the user saw, only if allowed, and report why.

Standard library only: this module runs inside the remote probe too, as the connected
user, so the same checks guard a kill on any host.

The identity of a process is (pid, start_ticks): field 22 of /proc/PID/stat, the start
time in clock ticks since boot.  A pid that was reused by a new process has another start
time, and is never signalled.  Where the kernel offers pidfds (Linux 5.3+), the check and
the signal go through one pidfd, so the pid cannot be reused between them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import select
import signal
import time
from typing import Any, Protocol

SIGNALS = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL, "INT": signal.SIGINT}

EXITED = "exited"
KILLED = "killed"
STILL_ALIVE = "still alive"
PERMISSION_DENIED = "permission denied"
ALREADY_GONE = "already gone"
PID_REUSED = "pid reused"
READONLY = "readonly"
ZOMBIE = "zombie"

# After SIGKILL a process dies as soon as it leaves the kernel; one stuck in an
# uninterruptible wait (state D, e.g. a hung driver call) may not, and we say so.
KILL_WAIT = 2.0
_POLL_STEP = 0.05


def read_stat(pid: int, root: str = "/proc") -> dict[str, Any] | None:
    """state, ppid and start_ticks of a pid, or None when it does not exist."""
    try:
        with open(f"{root}/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    # The command name (field 2) is in parentheses and may itself contain ") ".
    rest = raw[raw.rfind(")") + 2 :].split()
    try:
        return {"state": rest[0], "ppid": int(rest[1]), "start_ticks": int(rest[19])}
    except (IndexError, ValueError):
        return None


def owner_of(pid: int, root: str = "/proc") -> tuple[int | None, str | None]:
    try:
        uid = os.stat(f"{root}/{pid}").st_uid
    except OSError:
        return None, None
    try:
        return uid, pwd.getpwuid(uid).pw_name
    except KeyError:
        return uid, str(uid)


class Processes(Protocol):
    """What a kill reads a process's identity from (ProcFs, SimProcs)."""

    def process(self, pid: int) -> dict[str, Any] | None: ...


class _Target:
    """Reads and signals one process, through a pidfd when the kernel has them."""

    def __init__(self, pid: int, procs: Processes | None) -> None:
        self.pid = pid
        self.procs = procs
        self.fd: int | None = None
        if hasattr(os, "pidfd_open"):
            try:
                self.fd = os.pidfd_open(pid)
            except OSError:
                # ESRCH: gone (the stat read says so too); ENOSYS: old kernel.
                self.fd = None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def stat(self) -> dict[str, Any] | None:
        if self.procs is not None:
            info = self.procs.process(self.pid)
            if info is None:
                return None
            return {
                "state": info.get("state"),
                "ppid": info.get("ppid"),
                "start_ticks": info.get("start_ticks"),
            }
        return read_stat(self.pid)

    def send(self, signum: int) -> None:
        if self.fd is not None:
            signal.pidfd_send_signal(self.fd, signum)
        else:
            os.kill(self.pid, signum)

    def wait_gone(self, start_ticks: int, timeout: float) -> bool:
        """True once the process has exited (a zombie counts: it holds nothing)."""
        deadline = time.monotonic() + timeout
        if self.fd is not None:
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            while True:
                left = deadline - time.monotonic()
                if poller.poll(max(0, int(left * 1000))):
                    return True
                if left <= 0:
                    return False
        while True:
            if self._gone(start_ticks):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_STEP)

    def _gone(self, start_ticks: int) -> bool:
        info = self.stat()
        return info is None or info["start_ticks"] != start_ticks or info["state"] in ("Z", "X")


def _result(outcome: str, message: str, pid: int, sig: str, owner: str | None) -> dict:
    return {
        "ok": outcome in (EXITED, KILLED, ALREADY_GONE),
        "outcome": outcome,
        "message": message,
        "owner": owner,
        "pid": pid,
        "signal": sig,
    }


def signal_process(
    pid: int,
    start_ticks: int,
    sig: str = "TERM",
    grace: float = 5.0,
    procs: Processes | None = None,
    escalate: bool = True,
) -> dict:
    """Send ``sig`` (TERM, KILL or INT) to the process (pid, start_ticks) and report.

    TERM and INT escalate to KILL after ``grace`` seconds if the process is still alive,
    re-checking its identity first; with ``escalate`` False they only wait that long and
    report "still alive" (the idle policy looks at the process again before a KILL).
    Blocks up to grace + KILL_WAIT seconds: call it from a worker thread.  ``procs`` is an
    object with ``process(pid) -> dict | None`` (the ProcFs interface) to read the
    identity from; default: /proc directly.
    """
    signum = SIGNALS.get(sig)
    if signum is None:
        return _result(STILL_ALIVE, f"unknown signal {sig!r}", pid, sig, None)
    target = _Target(pid, procs)
    try:
        return _signal(target, start_ticks, sig, signum, max(0.0, float(grace)), escalate)
    finally:
        target.close()


def _signal(target: _Target, start_ticks: int, sig: str, signum: int, grace: float,
            escalate: bool = True) -> dict:
    pid = target.pid
    info = target.stat()
    _, owner = owner_of(pid)
    if info is None:
        return _result(ALREADY_GONE, f"pid {pid} is already gone", pid, sig, owner)
    if info["start_ticks"] != start_ticks:
        return _result(
            PID_REUSED,
            f"pid {pid} now belongs to another process (started later): not signalled",
            pid,
            sig,
            owner,
        )
    if info["state"] == "Z":
        return _result(
            ZOMBIE,
            f"zombie: its parent {info['ppid']} must reap it (signals do nothing)",
            pid,
            sig,
            owner,
        )
    denied = _send(target, signum, sig, owner)
    if denied is not None:
        return denied
    if signum == signal.SIGKILL:
        if target.wait_gone(start_ticks, max(grace, KILL_WAIT)):
            return _result(KILLED, f"pid {pid} killed (SIGKILL)", pid, sig, owner)
        return _still_alive(target, sig, owner)
    if target.wait_gone(start_ticks, grace):
        return _result(EXITED, f"pid {pid} exited after SIG{sig}", pid, sig, owner)

    # Still there after the grace period: make sure it is still the same process.
    info = target.stat()
    if info is None or info["start_ticks"] != start_ticks or info["state"] in ("Z", "X"):
        return _result(EXITED, f"pid {pid} exited after SIG{sig}", pid, sig, owner)
    if not escalate:
        return _result(STILL_ALIVE, f"pid {pid} is still alive {grace:g} s after SIG{sig}",
                       pid, sig, owner)
    denied = _send(target, signal.SIGKILL, sig, owner)
    if denied is not None:
        return denied
    if target.wait_gone(start_ticks, KILL_WAIT):
        return _result(
            KILLED,
            f"pid {pid} ignored SIG{sig} for {grace:g} s; killed with SIGKILL",
            pid,
            sig,
            owner,
        )
    return _still_alive(target, sig, owner)


def _send(target: _Target, signum: int, sig: str, owner: str | None) -> dict | None:
    pid = target.pid
    try:
        target.send(signum)
    except PermissionError:
        who = owner or "another user"
        return _result(
            PERMISSION_DENIED,
            f"permission denied: pid {pid} belongs to {who}",
            pid,
            sig,
            owner,
        )
    except ProcessLookupError:
        return _result(ALREADY_GONE, f"pid {pid} is already gone", pid, sig, owner)
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            return _result(ALREADY_GONE, f"pid {pid} is already gone", pid, sig, owner)
        raise
    return None


def _still_alive(target: _Target, sig: str, owner: str | None) -> dict:
    state = None
    with contextlib.suppress(Exception):
        state = (target.stat() or {}).get("state")
    why = " (uninterruptible wait, state D: a driver call may hang)" if state == "D" else ""
    return _result(
        STILL_ALIVE,
        f"pid {target.pid} is still alive after SIGKILL{why}",
        target.pid,
        sig,
        owner,
    )
