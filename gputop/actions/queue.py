"""The on-disk queue of `gputop run`: one file per job, in the reservation store.

Stdlib-only: the remote probe ships this file to list and cancel jobs on its host.
The design (docs/queue.md explains it for users):

- A job is ``job.<id>.json`` in the reservation directory (sticky, world-writable): the
  file's owner uid is who submitted it, and only they (or root) can remove it.
- Its place in line is the inode's change time, set by the kernel when the file is
  linked into place. A user cannot move it earlier (only ``touch`` it later), so nobody
  can jump the queue by writing an old time into a file.
- A job is in line while the process that submitted it lives: the record names its pid
  and that pid's start time, and the pid must belong to the file's owner. A `gputop run`
  killed with SIGKILL therefore leaves the line at once, for every reader; its owner
  (or root) removes the file later.
- Whether a job is running is not in this file: the job's reservation says so
  (``gputop.actions.reservations``, field ``job``).
- The directory's trust, whole-file writes and careful reads are ``store.py``'s, as for
  reservations; this module holds the job record and its rules.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
import time
from typing import TYPE_CHECKING, Any

from gputop.actions import reservations, store
from gputop.actions.liveness import MAX_PID, process_alive, process_start
from gputop.actions.store import JOB_PREFIX, StoreError
from gputop.records import Record, record
from gputop.storedir import RESERVATIONS_DIR

if TYPE_CHECKING:
    from gputop.actions.env import ActionEnv

PRIORITIES = ("low", "normal", "high")
MAX_JOB_BYTES = 4096
MAX_COMMAND_CHARS = 400
MAX_JOBS_READ = 2000  # a directory of junk must not cost every reader a core
MAX_WAITING_PER_USER = 32  # accepted at submission, and read per owner
MAX_GPU_INDEX = 4095
MAX_MEM_BYTES = 2**50

_NAME = re.compile(r"job\.([0-9a-f]{8})\.json")
# What a cancel leaves beside the job it removes: its owner (the kernel's word) is who
# cancelled, the job's `gputop run` reads it for its history (``cancelled_by``).
_MARK = re.compile(r"job\.([0-9a-f]{8})\.cancelled-by\.(\d+)")
MARK_KEEP_S = 86400.0  # root's marks, which the owner's run cannot remove, live this long


@record(frozen=True, slots=True)
class Job(Record):
    """One job in line, as read and checked from its file."""

    id: str
    path: str
    uid: int
    user: str
    submitted: float  # the file's change time: the kernel's word, not the file's
    inode: int
    record: dict[str, Any]

    @property
    def pid(self) -> int:
        return int(self.record["pid"])

    def public(self) -> dict[str, Any]:
        """The dict the collector and the views use: model.QueueJob's fields."""
        r = self.record
        return {
            "id": self.id, "user": self.user, "uid": self.uid, "submitted": self.submitted,
            "pid": r["pid"], "priority": r["priority"], "gpus": r.get("gpus"),
            "gpu_ids": r.get("gpu_ids"), "min_free_mem": r.get("min_free_mem"),
            "max_util": r.get("max_util"), "for_s": r.get("for_s"),
            "note": r.get("note", ""), "command": r.get("command", ""),
            "share": r.get("share") is True, "whole": r.get("whole") is True,
        }


# ---------------------------------------------------------------------------------------
# public API


def job_name(job_id: str) -> str:
    return f"{JOB_PREFIX}{job_id}.json"


def submit(directory: str, request: dict[str, Any]) -> Job:
    """Put a job in line for the calling process; raises StoreError (which is
    reservations.ReservationError)."""
    record = dict(request)
    record.update(uid=os.geteuid(), pid=os.getpid(), pid_start=process_start(os.getpid()))
    record.setdefault("user", store.user_name(os.geteuid()))
    problem = record_problem(record, os.geteuid())
    if problem:
        raise StoreError(problem)
    store.ensure_directory(directory)
    # No lock: a job file is linked into place whole, names are random and the order is
    # the kernel's; the cards themselves are taken under the store's per-card locks.
    _remove_dead(directory)
    mine = [j for j in read_jobs(directory)[0] if j.uid == os.geteuid()]
    if len(mine) >= MAX_WAITING_PER_USER:
        raise StoreError(
            f"you have {len(mine)} jobs in line already (at most {MAX_WAITING_PER_USER})"
        )
    import secrets  # only when writing: reading the line is on `gputop --once`'s path

    for _ in range(10):
        job_id = secrets.token_hex(4)
        record["id"] = job_id
        path = os.path.join(directory, job_name(job_id))
        if store.link_new(directory, path, record, "job"):
            store.fsync_dir(directory)
            info = os.lstat(path)
            return Job(job_id, path, info.st_uid, record["user"], info.st_ctime,
                       info.st_ino, record)
    raise StoreError(f"{directory}: cannot create a job file")


def withdraw(job: Job) -> None:
    """Take my job out of line (it ended, or it was cancelled): never raises."""
    with contextlib.suppress(OSError):
        os.unlink(job.path)


def in_line(job: Job) -> bool:
    """Is my job still in line? False once someone (root, or I) cancelled it."""
    try:
        info = os.lstat(job.path)
    except OSError:
        return False
    return info.st_ino == job.inode


def list_jobs(directory: str) -> dict[str, Any]:
    """The jobs in line (live submitters only), oldest first, and what was skipped."""
    jobs, problems = read_jobs(directory)
    return {"ok": True, "jobs": [job.public() for job in jobs], "problems": problems}


def cancel(directory: str, job_id: Any) -> dict[str, Any]:
    """Remove a job from the line: my own, or anyone's as root."""
    if not isinstance(job_id, str) or not re.fullmatch(r"[0-9a-f]{8}", job_id):
        return {"ok": False, "message": f"not a job id: {job_id!r} (8 hex digits)"}
    path = os.path.join(directory, job_name(job_id))
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"ok": False, "message": f"no job {job_id} in line"}
    except OSError as exc:
        return {"ok": False, "message": f"{path}: {exc.strerror or exc}"}
    me = os.geteuid()
    if info.st_uid != me and me != 0:
        owner = store.user_name(info.st_uid)
        return {"ok": False, "holder": owner,
                "message": f"job {job_id} is {owner}'s: only they or root can cancel it"}
    _mark(directory, job_id, me)
    try:
        os.unlink(path)
    except OSError as exc:
        return {"ok": False, "message": f"{path}: {exc.strerror or exc}"}
    return {"ok": True, "message": f"cancelled job {job_id}"}


def _mark_name(job_id: str, uid: int) -> str:
    return f"{JOB_PREFIX}{job_id}.cancelled-by.{uid}"


def _mark(directory: str, job_id: str, uid: int) -> None:
    """Say who cancels (a file of mine, named for the job), and drop my marks older than
    MARK_KEEP_S. A mark that cannot be written leaves the cancel unsaid, never undone."""
    with contextlib.suppress(OSError, StoreError):
        store.link_new(directory, os.path.join(directory, _mark_name(job_id, uid)),
                       {"job": job_id}, "job")
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            found = _MARK.fullmatch(name)
            if found and int(found.group(2)) == uid:
                path = os.path.join(directory, name)
                info = os.lstat(path)
                if info.st_uid == uid and time.time() - info.st_mtime > MARK_KEEP_S:
                    os.unlink(path)


def cancelled_by(job: Job) -> str | None:
    """Who cancelled my job, once ``in_line`` says it left: its owner or root, by the
    owner of the mark the cancel left (made after the job was; another user's cannot
    count); None when there is none. My own mark is removed once read."""
    directory = os.path.dirname(job.path)
    for uid in dict.fromkeys((job.uid, 0)):
        path = os.path.join(directory, _mark_name(job.id, uid))
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_uid != uid \
                or info.st_ctime < job.submitted:
            continue
        if uid == os.geteuid():
            with contextlib.suppress(OSError):
                os.unlink(path)
        return store.user_name(uid)
    return None


def stall_note(pid: int | None) -> str:
    """What the process of a job that let its turn pass is doing, for the line that says
    so (``queue_plan.Turns``): stopped, not a `gputop run` at all, or just slow."""
    if pid is None:
        return "it names no process"
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read(4096)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read(4096).split(b"\0")
    except OSError:
        return "its process is gone"
    if stat_line[stat_line.rfind(b")") + 2:][:1] in (b"T", b"t"):
        return "its process is stopped: Ctrl+Z or SIGSTOP"
    if not any(b"gputop" in word for word in argv) or b"run" not in argv:
        return "its process is not a gputop run"
    return "its gputop run did not take them"


def handle(op: str, request: dict[str, Any], env: ActionEnv) -> dict[str, Any]:
    """Entry for gputop.actions.dispatch (ops "queue" and "queue_cancel")."""
    directory = env.reservations_dir or RESERVATIONS_DIR
    if op == "queue":
        return list_jobs(directory)
    if env.readonly:
        return {"ok": False, "message": "read-only: cancelling is disabled"}
    return cancel(directory, request.get("id"))


# ---------------------------------------------------------------------------------------
# reading and checking


def read_jobs(directory: str) -> tuple[list[Job], list[str]]:
    """Live jobs in arrival order, and one line per job file that was skipped."""
    jobs, problems = _read_all(directory)
    return [job for job in jobs if _alive(job)], problems


def _alive(job: Job) -> bool:
    return process_alive(job.pid, job.record["pid_start"], job.uid)


def _remove_dead(directory: str) -> None:
    """Remove the files of jobs whose `gputop run` died (SIGKILL, a crash) that we may
    remove: our own, or anyone's as root. Others' stay but count for nothing."""
    me = os.geteuid()
    for job in _read_all(directory)[0]:
        if (job.uid == me or me == 0) and not _alive(job):
            withdraw(job)


# The line as last read, per directory: the dashboard reads it every refresh.
_CACHE: store.ScanCache[tuple[list[Job], list[str]]] = store.ScanCache()


def _read_all(directory: str) -> tuple[list[Job], list[str]]:
    """Every valid job file, cached by the directory's stamp as the reservation scan is;
    who is alive is checked by the caller."""
    problems: list[str] = []
    with store.open_directory(directory, problems) as fd:
        if fd is None:
            return [], problems
        info = os.fstat(fd)
        cached = _CACHE.get(directory, info)
        if cached is not None:
            return list(cached[0]), list(cached[1])
        names = _job_names(fd, directory, problems)
        jobs = [job for name in names
                if (job := _read_job(fd, directory, name, problems)) is not None]
        jobs.sort(key=lambda j: (j.submitted, j.id))
        _CACHE.put(directory, info, (jobs, problems))
        return list(jobs), list(problems)


def _job_names(dir_fd: int, directory: str, problems: list[str]) -> list[str]:
    """The job file names worth reading, in no particular order.

    Names are checked before any cap, so junk named ``job.*`` costs nothing but one
    line. Then at most MAX_WAITING_PER_USER files per owner (the oldest: the head of
    that owner's line) and MAX_JOBS_READ in all, the reader's own always first: what
    one user plants pushes out only that user's files, never someone else's job."""
    listed = [n for n in os.listdir(dir_fd) if n.startswith(JOB_PREFIX)]
    names = [n for n in listed if _NAME.fullmatch(n)]
    junk = len(listed) - len(names) - sum(1 for n in listed if _MARK.fullmatch(n))
    if junk:
        problems.append(f"{directory}: {junk} file(s) named {JOB_PREFIX}* that are not"
                        " job files (job.<8 hex>.json); skipped")
    if len(names) <= MAX_WAITING_PER_USER:
        return names
    by_owner: dict[int, list[tuple[int, str]]] = {}
    for name in names:
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue
        by_owner.setdefault(info.st_uid, []).append((info.st_ctime_ns, name))
    me = os.geteuid()
    kept: list[str] = []
    for uid in sorted(by_owner, key=lambda u: (u != me, min(by_owner[u]))):
        files = sorted(by_owner[uid])
        if len(files) > MAX_WAITING_PER_USER:
            problems.append(f"{directory}: {store.user_name(uid)} has {len(files)} job"
                            f" files; read the oldest {MAX_WAITING_PER_USER}")
        kept += [name for _t, name in files[:MAX_WAITING_PER_USER]]
    if len(kept) > MAX_JOBS_READ:
        problems.append(f"{directory}: {len(kept)} job files; read {MAX_JOBS_READ}")
        kept = kept[:MAX_JOBS_READ]
    return kept


def _read_job(dir_fd: int, directory: str, name: str, problems: list[str]) -> Job | None:
    path = os.path.join(directory, name)
    match = _NAME.fullmatch(name)
    if not match:
        problems.append(f"{path}: not a job file name; skipped")
        return None
    loaded = store.read_json(dir_fd, name, path, MAX_JOB_BYTES, problems)
    if loaded is None:
        return None
    record, info = loaded
    why = record_problem(record, info.st_uid)
    if why is None and record.get("id") != match.group(1):
        why = "its 'id' does not match its name"
    if why:
        problems.append(f"{path}: {why}; skipped")
        return None
    return Job(match.group(1), path, info.st_uid, store.user_name(info.st_uid),
               info.st_ctime, info.st_ino, record)


def record_problem(record: Any, owner_uid: int) -> str | None:
    """Why a job record is not acceptable, or None. Every field is someone's input."""
    if not isinstance(record, dict):
        return "not a JSON object"
    foreign = store.owner_problem(record, owner_uid)
    if foreign:
        return foreign
    if not _int_in(record.get("pid"), 1, MAX_PID):
        return "bad 'pid'"
    if not _int_in(record.get("pid_start"), 0, 2**63):
        return "bad 'pid_start'"
    if record.get("priority") not in PRIORITIES:
        return f"'priority' must be one of {', '.join(PRIORITIES)}"
    gpus, gpu_ids = record.get("gpus"), record.get("gpu_ids")
    if (gpus is None) == (gpu_ids is None):
        return "exactly one of 'gpus' and 'gpu_ids'"
    if gpus is not None and not _int_in(gpus, 1, reservations.MAX_GPUS):
        return f"'gpus' must be 1..{reservations.MAX_GPUS}"
    if gpu_ids is not None and not (
        isinstance(gpu_ids, list) and 0 < len(gpu_ids) <= reservations.MAX_GPUS
        and all(_int_in(i, 0, MAX_GPU_INDEX) for i in gpu_ids)
        and len(set(gpu_ids)) == len(gpu_ids)
    ):
        return "bad 'gpu_ids'"
    if record.get("min_free_mem") is not None and not _int_in(
            record["min_free_mem"], 0, MAX_MEM_BYTES):
        return "bad 'min_free_mem'"
    if record.get("max_util") is not None and not _number_in(record["max_util"], 0, 100):
        return "bad 'max_util'"
    if record.get("for_s") is not None and not _number_in(
            record["for_s"], 1, reservations.MAX_RESERVATION_S):
        return "bad 'for_s'"
    for flag in ("share", "whole"):
        if record.get(flag) not in (None, True, False):
            return f"bad {flag!r}"
    command = record.get("command", "")
    if not isinstance(command, str) or len(command) > MAX_COMMAND_CHARS:
        return f"'command' must be text of at most {MAX_COMMAND_CHARS} characters"
    if not isinstance(record.get("user"), str):
        return "bad 'user'"
    try:
        reservations.check_note(record.get("note", ""))
    except StoreError as exc:
        return str(exc)
    return None


def _int_in(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _number_in(value: Any, low: float, high: float) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and low <= value <= high)
