"""Is a recorded process still the same process? For queue jobs and `gputop run`'s
reservations, which live exactly as long as the process that made them.

Stdlib-only: shipped to remote hosts with the probe.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from typing import Any

MAX_PID = 2**22  # Linux's pid_max limit


def process_start(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (/proc/PID/stat field 22),
    which tells a process from a later one that got the same pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def process_alive(pid: Any, start: Any, uid: int) -> bool:
    """Is ``pid`` the process that was recorded (same start time), owned by ``uid``?

    A record can name any pid; the owner check keeps it from borrowing another user's
    long-lived process to stay in line, or to keep a card, forever."""
    if isinstance(pid, bool) or not isinstance(pid, int) or not 1 <= pid <= MAX_PID:
        return False
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return False
    return owner == uid and process_start(pid) == start


def _stat_fields(pid: int) -> list[bytes] | None:
    """Fields 3.. of /proc/PID/stat (state, ppid, pgrp, session, ...), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2:].split()


def job_processes(sid: int, uid: int | None = None, below: int | None = None) -> list[int]:
    """The live (not zombie) processes of a `gputop run` job: those in session ``sid``
    (CMD's own: `run` starts it with setsid), and, when ``below`` is given, every
    descendant of that process (`run` is its job's subreaper, so what left the session
    and was orphaned is still below it). ``uid``: only that user's processes.

    A process that leaves the session and whose parent is gone escapes once `run` is
    gone too; a cgroup would catch it (docs/queue.md says so)."""
    parents: dict[int, int] = {}
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        fields = _stat_fields(pid)
        if not fields or len(fields) < 4 or fields[0] in (b"Z", b"X"):
            continue
        try:
            ppid, session = int(fields[1]), int(fields[3])
        except ValueError:
            continue
        parents[pid] = ppid
        if session == sid:
            found.append(pid)
    if below is not None:
        for pid in parents:
            seen, up = 0, parents.get(pid)
            while up is not None and up > 1 and seen < 512:
                if up == below:
                    if pid not in found:
                        found.append(pid)
                    break
                up, seen = parents.get(up), seen + 1
    # The owner last, and only for what matched: a stat per process would cost every
    # reader of the store a /proc walk twice over.
    return sorted(p for p in found if p != below and (uid is None or _owner(p) == uid))


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def has_children() -> bool:
    """Has this process any child left, running or not yet collected? One system call
    (waitid without waiting or collecting)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def session_alive(sid: Any, uid: int) -> bool:
    """Does any process of ``uid`` still run in session ``sid``? While one does, the
    session id cannot be given to another process (the kernel keeps it taken)."""
    if isinstance(sid, bool) or not isinstance(sid, int) or not 1 <= sid <= MAX_PID:
        return False
    return bool(job_processes(sid, uid))


def child_zombies(parent: int) -> list[int]:
    """The zombie children of ``parent``: ended, waiting to be collected."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields and len(fields) > 1 and fields[0] == b"Z" and fields[1] == str(
                    parent).encode():
                found.append(int(name))
    return found


# ---------------------------------------------------------------------------------------
# a cgroup per job, where one can be made: nothing in it can leave it (a process may move
# only into cgroups its user may write), so "the job still runs" is exact.

# Patterns compiled when first used (re's own cache), not at import: a one-shot that
# parses none of them does not pay for them.
_CGROUP_NAME = r"(?:/[A-Za-z0-9_.@:=+-]{1,255}){0,32}/gputop-job-[0-9a-f]{8}-\d{1,3}"


@functools.lru_cache(maxsize=4)
def cgroup2_root(mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """Where the cgroup v2 hierarchy is mounted, or None (read once per process)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return left.split()[4]
    except OSError:
        return None
    return None


def make_job_cgroup(job_id: str, attempt: int) -> str | None:
    """A new cgroup under this process's own (cgroup v2), for one attempt of a job; its
    path within the hierarchy, or None where none can be made (no cgroup v2, no right
    to make one: the usual case for a user without a delegated cgroup)."""
    root = cgroup2_root()
    if root is None:
        return None
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            mine = next((line[3:].strip() for line in f if line.startswith("0::")), None)
    except OSError:
        return None
    if mine is None:
        return None
    rel = f"{mine.rstrip('/')}/gputop-job-{job_id}-{attempt}"
    if not re.fullmatch(_CGROUP_NAME, rel):
        return None
    try:
        os.mkdir(root + rel, 0o755)
    except OSError:
        return None
    return rel


def enter_cgroup(rel: str, pid: int) -> bool:
    """Move ``pid`` (and so everything it starts from now on) into the job's cgroup."""
    root = cgroup2_root()
    try:
        with open(f"{root}{rel}/cgroup.procs", "w", encoding="ascii") as f:
            f.write(str(pid))
    except OSError:
        return False
    return True


def cgroup_pids(rel: Any, uid: int | None = None) -> list[int]:
    """The processes in a job's cgroup. ``rel`` is someone's input (a reservation's): it
    must be a job cgroup's path and, with ``uid``, that user's (they made it)."""
    if not isinstance(rel, str) or len(rel) > 4096 or not re.fullmatch(_CGROUP_NAME, rel):
        return []
    root = cgroup2_root()
    if root is None:
        return []
    path = root + rel
    try:
        if uid is not None and os.stat(path, follow_symlinks=False).st_uid != uid:
            return []
        with open(f"{path}/cgroup.procs", encoding="ascii") as f:
            return [int(line) for line in f.read(1 << 20).split() if line.isdigit()]
    except OSError:
        return []


def kill_cgroup(rel: str) -> bool:
    """SIGKILL everything in the cgroup at once (cgroup.kill, Linux 5.14); False where
    the kernel has no cgroup.kill (then the caller signals each process)."""
    try:
        with open(f"{cgroup2_root()}{rel}/cgroup.kill", "w", encoding="ascii") as f:
            f.write("1")
    except OSError:
        return False
    return True


def remove_cgroup(rel: str) -> bool:
    """Remove the job's cgroup once it is empty; False while something is left in it."""
    try:
        os.rmdir(f"{cgroup2_root()}{rel}")
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def sweep_job_cgroups() -> None:
    """Remove the empty job cgroups under this process's own: what a `gputop run`
    killed with SIGKILL left. A cgroup still holding a process cannot be removed."""
    root = cgroup2_root()
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            mine = next((line[3:].strip() for line in f if line.startswith("0::")), None)
        if root is None or mine is None:
            return
        base = root + mine.rstrip("/")
        names = [n for n in os.listdir(base) if n.startswith("gputop-job-")]
    except OSError:
        return
    for name in names:
        if re.fullmatch(_CGROUP_NAME, f"{mine.rstrip('/')}/{name}"):
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(base, name))
