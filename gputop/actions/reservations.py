"""The on-disk reservation store: who holds which GPU of this host until when, and why.

Stdlib-only: the remote probe ships this file and runs it as the connected user.
The design (docs/reservations.md explains it at length):

- One directory per host, sticky and world-writable like /tmp (mode 1777): everybody
  can create files, only a file's owner (or root) can remove or replace it. That is
  what makes ownership an operating-system fact instead of a promise of this code.
- A reservation is one small JSON file named ``<key>.<generation>.json``, where key is
  the GPU UUID when known (stable across reboots) or ``index-N``. The file's owner uid is
  the holder: the user name shown is the owner's, never the text inside.
- Every change happens under an advisory ``flock`` on ``.lock`` in the directory, and new
  files appear with ``link()`` of a complete, fsync'd temp file, which fails if the name
  exists: two racers cannot both win, and a reader sees a whole file or none.
- An expired file of another user cannot be removed by us (sticky bit), so taking over
  an expired reservation creates the next generation beside it; the old one counts for
  nothing and its owner (or root) cleans it up later.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import pwd
import re
import secrets
import socket
import stat
import time
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gputop.actions.liveness import MAX_PID, process_alive

DEFAULT_DIRECTORY = "/var/tmp/gputop-reservations"
DIR_MODE = 0o1777
FILE_MODE = 0o644
MAX_NOTE_CHARS = 200
MAX_RESERVATION_S = 31 * 86400
MAX_FILE_BYTES = 4096
MAX_GPUS = 64  # per request: a request may come from anyone over SSH
MAX_MIG_SLOTS = 7  # MIG devices per card (A100/H100/B200)
LOCK_NAME = ".lock"
QUEUE_PREFIX = "job."  # `gputop run`'s queue (gputop/actions/queue.py) shares the store
TMP_PREFIX = ".tmp-"
LOCK_TIMEOUT_S = 10.0

_FILE_NAME = re.compile(r"((?:GPU|MIG)-[0-9A-Za-z-]{1,80}|index-\d{1,4})\.(\d{1,12})\.json")
_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z-]{1,80}")
# Bidi overrides and isolates can make a note display as something else; they are
# format characters (Cf) but are refused like control characters.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


class ReservationError(ValueError):
    """Bad input or an unusable directory; the message is one line for the user."""


@dataclass(frozen=True)
class _Target:
    index: int
    uuid: str | None
    mig: int | None = None  # issue 19: one MIG device (its slot) of card ``index``
    parent_uuid: str | None = None  # a MIG target's card

    @property
    def key(self) -> str:
        return self.uuid if self.uuid else f"index-{self.index}"

    def label(self) -> str:
        return f"GPU {self.index}:{self.mig}" if self.mig is not None else f"GPU {self.index}"


@dataclass
class _Entry:
    name: str
    path: str
    key: str
    generation: int
    owner_uid: int
    owner: str
    data: dict[str, Any]

    @property
    def until(self) -> float:
        return float(self.data["until"])

    def active(self, now: float) -> bool:
        # A `gputop run` job's cards are free the moment its process is gone (SIGKILL
        # included), not when the lease runs out.
        job = self.data.get("job")
        return self.until > now and (
            job is None or process_alive(job["pid"], job["pid_start"], self.owner_uid))

    def public(self) -> dict[str, Any]:
        """The dict the collector and the views use: model.Reservation's fields."""
        return _public(self.data, self.owner)


@dataclass
class _Scan:
    entries: list[_Entry]
    problems: list[str]
    tmp_files: list[tuple[str, int]]  # (path, owner uid): leftovers of killed writers
    # Every generation in use per key, skipped files included: a new file must not
    # collide with a corrupt one that we cannot remove.
    generations: dict[str, set[int]] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# public API


def list_active(directory: str, now: float | None = None) -> list[dict[str, Any]]:
    """Active reservations, one per GPU, sorted by GPU index. Missing directory: []."""
    now = time.time() if now is None else now
    return scan(directory, now)["reservations"]


def scan(directory: str, now: float | None = None) -> dict[str, Any]:
    """Active reservations plus one line per file that was skipped and why."""
    now = time.time() if now is None else now
    found = _scan(directory)
    holders = _holders(found.entries, now)
    problems = list(found.problems)
    for entries in _active_by_slot(found.entries, now).values():
        for extra in entries[1:]:
            problems.append(
                f"{extra.path}: conflicts with {entries[0].name} (held by {entries[0].owner});"
                " ignored"
            )
    return {
        "ok": True,
        "reservations": [entry.public() for entry in holders],
        "problems": problems,
    }


def reserve(
    directory: str,
    gpus: Sequence[int | str],
    until: float,
    note: str = "",
    gpu_uuids: Sequence[str | None] | dict[int, str | None] | None = None,
    now: float | None = None,
    job: dict[str, Any] | None = None,
    mig_devices: dict[str, tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """Reserve all of `gpus` until `until` (epoch s), or none of them.

    A GPU I already hold is extended (its file atomically replaced). A GPU held by
    someone else makes the whole request fail with ``holder`` naming them.
    ``job`` ({id, pid, pid_start}): a `gputop run` job's reservation, which ends with
    that process.
    """
    now = time.time() if now is None else now
    try:
        until = _check_until(until, now)
        note = check_note(note)
        targets = resolve_gpus(gpus, gpu_uuids, mig_devices)
        if not targets:
            raise ReservationError("no GPU given")
        ensure_directory(directory)
        with locked(directory):
            return _reserve_locked(directory, targets, until, note, now, job)
    except ReservationError as exc:
        return {"ok": False, "message": str(exc), "reservations": []}
    except OSError as exc:
        return {"ok": False, "message": f"{directory}: {_os_reason(exc)}", "reservations": []}


def release(
    directory: str,
    gpus: Sequence[int | str] | None = None,
    gpu_uuids: Sequence[str | None] | dict[int, str | None] | None = None,
    now: float | None = None,
    mig_devices: dict[str, tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """Release my reservations (all, or those of `gpus`). Root may release anyone's."""
    now = time.time() if now is None else now
    try:
        targets = resolve_gpus(gpus, gpu_uuids, mig_devices) if gpus is not None else None
        if not os.path.isdir(directory):
            return {"ok": True, "released": [], "message": "no reservations"}
        ensure_directory(directory)
        with locked(directory):
            return _release_locked(directory, targets, now)
    except ReservationError as exc:
        return {"ok": False, "message": str(exc), "released": []}
    except OSError as exc:
        return {"ok": False, "message": f"{directory}: {_os_reason(exc)}", "released": []}


def handle(op: str, request: dict[str, Any], env: Any) -> dict[str, Any]:
    """Entry for gputop.actions.dispatch: `env` is its ActionEnv (reservations_dir,
    gpu_uuids); `op` is request["op"], already checked to be one of ours."""
    directory = getattr(env, "reservations_dir", None) or DEFAULT_DIRECTORY
    return handle_request({**request, "op": op}, directory, getattr(env, "gpu_uuids", None),
                          mig_devices=getattr(env, "mig_devices", None))


def handle_request(
    request: dict[str, Any],
    directory: str,
    gpu_uuids: Sequence[str | None] | dict[int, str | None] | None = None,
    now: float | None = None,
    mig_devices: dict[str, tuple[int, int]] | None = None,
) -> dict[str, Any]:
    """The reservation ops of the action protocol (docs/architecture.md), never raising."""
    op = request.get("op")
    if op == "reservations":
        return scan(directory, now)
    if op == "reserve":
        gpus = request.get("gpus")
        until = request.get("until")
        note = request.get("note") or ""
        if not isinstance(gpus, list):
            return {"ok": False, "message": "reserve: 'gpus' must be a list", "reservations": []}
        if isinstance(until, bool) or not isinstance(until, (int, float)):
            return {"ok": False, "message": "reserve: 'until' must be a number", "reservations": []}
        if not isinstance(note, str):
            return {"ok": False, "message": "reserve: 'note' must be text", "reservations": []}
        return reserve(directory, gpus, float(until), note, gpu_uuids=gpu_uuids, now=now,
                       mig_devices=mig_devices)
    if op == "release":
        gpus = request.get("gpus")
        if gpus is not None and not isinstance(gpus, list):
            return {"ok": False, "message": "release: 'gpus' must be a list", "released": []}
        return release(directory, gpus, gpu_uuids=gpu_uuids, now=now, mig_devices=mig_devices)
    return {"ok": False, "message": f"not a reservation op: {op!r}"}


# ---------------------------------------------------------------------------------------
# validation


def check_note(note: Any) -> str:
    if not isinstance(note, str):
        raise ReservationError("the note must be text")
    if len(note) > MAX_NOTE_CHARS:
        raise ReservationError(f"the note is too long ({len(note)} > {MAX_NOTE_CHARS} characters)")
    for position, char in enumerate(note):
        if char in _BIDI or unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            raise ReservationError(
                f"the note has a control character ({char!r} at position {position + 1})"
            )
    return note


def _check_until(until: Any, now: float) -> float:
    if isinstance(until, bool) or not isinstance(until, (int, float)) or not math.isfinite(until):
        raise ReservationError("the end time must be a number of epoch seconds")
    if until <= now:
        raise ReservationError("the end time is in the past")
    if until - now > MAX_RESERVATION_S:
        raise ReservationError(f"at most {MAX_RESERVATION_S // 86400} days, please")
    return float(until)


def resolve_gpus(
    gpus: Sequence[int | str] | None,
    gpu_uuids: Sequence[str | None] | dict[int, str | None] | None,
    mig_devices: dict[str, tuple[int, int]] | None = None,
) -> list[_Target]:
    """GPU indexes or UUIDs -> targets. With the host's GPU list, unknown ones are errors.

    Issue 19: a MIG device is named by its MIG-... UUID or as "card:slot" ("0:1");
    ``mig_devices`` (MIG UUID -> (card index, slot)) says which exist."""
    if gpus is None or isinstance(gpus, (str, bytes)):
        raise ReservationError("GPUs must be a list of indexes or UUIDs")
    if len(gpus) > MAX_GPUS:
        raise ReservationError(f"at most {MAX_GPUS} GPUs at once")
    known = _uuid_map(gpu_uuids)
    targets: list[_Target] = []
    for gpu in gpus:
        target = _resolve_mig(gpu, known, mig_devices) or _resolve_one(gpu, known)
        if target not in targets:
            targets.append(target)
    return targets


def _uuid_map(
    gpu_uuids: Sequence[str | None] | dict[int, str | None] | None,
) -> dict[int, str | None] | None:
    if gpu_uuids is None:
        return None
    if isinstance(gpu_uuids, dict):
        return {int(index): uuid for index, uuid in gpu_uuids.items()}
    return dict(enumerate(gpu_uuids))


def _resolve_one(gpu: Any, known: dict[int, str | None] | None) -> _Target:
    if isinstance(gpu, str) and gpu.strip().isdigit():
        gpu = int(gpu.strip())
    if isinstance(gpu, bool):
        raise ReservationError(f"bad GPU {gpu!r}")
    if isinstance(gpu, int):
        if gpu < 0 or gpu > 9999:
            raise ReservationError(f"bad GPU index {gpu}")
        if known is None:
            return _Target(gpu, None)
        if gpu not in known:
            raise ReservationError(f"no GPU {gpu} on this host (it has {_describe(known)})")
        uuid = known[gpu]
        return _Target(gpu, uuid if uuid and _UUID.fullmatch(uuid) else None)
    if isinstance(gpu, str):
        text = gpu.strip()
        if not _UUID.fullmatch(text):
            raise ReservationError(f"bad GPU {gpu!r}: give an index or a GPU-... UUID")
        if known is None:
            raise ReservationError(f"cannot check GPU {text}: this host's GPUs are unknown")
        for index, uuid in known.items():
            if uuid == text:
                return _Target(index, uuid)
        raise ReservationError(f"no GPU {text} on this host")
    raise ReservationError(f"bad GPU {gpu!r}")


def _resolve_mig(
    gpu: Any, known: dict[int, str | None] | None, mig_devices: dict[str, tuple[int, int]] | None
) -> _Target | None:
    """A target for a MIG device, None for anything that does not name one."""
    if not isinstance(gpu, str):
        return None
    text = gpu.strip()
    label = re.fullmatch(r"(\d{1,4}):(\d)", text)
    if not text.startswith("MIG-") and label is None:
        return None
    for uuid, (index, slot) in (mig_devices or {}).items():
        if uuid == text or (label and (index, slot) == (int(label[1]), int(label[2]))):
            if not _UUID.fullmatch(uuid):
                # Old drivers' "MIG-GPU-.../1/0" cannot name a file: no reservation.
                raise ReservationError(f"MIG device {text} has no usable UUID ({uuid!r})")
            parent = (known or {}).get(index)
            return _Target(index, uuid, slot, parent if parent and _UUID.fullmatch(parent)
                           else None)
    if mig_devices is None:
        raise ReservationError(f"cannot check MIG device {text}: this host's MIG devices are "
                               "unknown")
    raise ReservationError(f"no MIG device {text} on this host")


def _describe(known: dict[int, str | None]) -> str:
    if not known:
        return "no GPUs"
    indexes = sorted(known)
    return f"GPUs {indexes[0]}-{indexes[-1]}" if len(indexes) > 1 else f"GPU {indexes[0]}"


# ---------------------------------------------------------------------------------------
# the directory and its lock


def ensure_directory(directory: str) -> None:
    """Create the store (mode 1777) or check that the existing one is safe to use."""
    parent = os.path.dirname(os.path.abspath(directory))
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755, exist_ok=True)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    else:
        # chmod after mkdir: the umask would strip the world-writable and sticky bits.
        os.chmod(directory, DIR_MODE)
    info = os.lstat(directory)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ReservationError(f"{directory}: not a directory (a symlink or a file); remove it")
    writable_by_others = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if writable_by_others and not info.st_mode & stat.S_ISVTX:
        # Without the sticky bit anyone could delete anyone's reservation.
        raise ReservationError(
            f"{directory}: writable by others but not sticky; run: chmod 1777 {directory}"
        )


@contextlib.contextmanager
def locked(directory: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the directory's advisory lock: all changes to the store are serialized."""
    path = os.path.join(directory, LOCK_NAME)
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        fd = _open_lock_file(path)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise ReservationError(
                            f"{path}: locked by another process for {timeout:.0f} s; try again"
                        ) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.02)
            # The owner of the lock file could have removed it while we waited: then we
            # hold a lock nobody else will see. Take the lock of the file that is there now.
            try:
                same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                yield
                return
        finally:
            os.close(fd)


def _open_lock_file(path: str) -> int:
    # O_NONBLOCK: a FIFO planted under the lock's name must not hang us.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444))
        fd = os.open(path, flags)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ReservationError(f"{path}: not a regular file; ask its owner or root to remove it")
    return fd


# ---------------------------------------------------------------------------------------
# reading the directory


def _scan(directory: str) -> _Scan:
    result = _Scan([], [], [])
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return result
    except OSError as exc:
        result.problems.append(f"{directory}: {_os_reason(exc)}")
        return result
    for name in sorted(names):
        path = os.path.join(directory, name)
        if name == LOCK_NAME:
            continue
        if name.startswith(QUEUE_PREFIX):
            continue
        if name.startswith(TMP_PREFIX):
            with contextlib.suppress(OSError):
                result.tmp_files.append((path, os.lstat(path).st_uid))
            continue
        match = _FILE_NAME.fullmatch(name)
        if not match:
            result.problems.append(f"{path}: not a reservation file; skipped")
            continue
        key, generation = match.group(1), int(match.group(2))
        result.generations.setdefault(key, set()).add(generation)
        entry = _read_entry(path, name, key, generation, result.problems)
        if entry is not None:
            result.entries.append(entry)
    return result


def _read_entry(
    path: str, name: str, key: str, generation: int, problems: list[str]
) -> _Entry | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None  # released while we listed
    except OSError as exc:
        problems.append(f"{path}: {_os_reason(exc)}; skipped")
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            problems.append(f"{path}: not a regular file; skipped")
            return None
        raw = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_FILE_BYTES:
        problems.append(f"{path}: larger than {MAX_FILE_BYTES} bytes; skipped")
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        problems.append(f"{path}: not valid JSON (corrupt); skipped")
        return None
    why = _content_problem(data, key, info.st_uid)
    if why:
        problems.append(f"{path}: {why}; skipped")
        return None
    return _Entry(name, path, key, generation, info.st_uid, user_name(info.st_uid), data)


def _content_problem(data: Any, key: str, owner_uid: int) -> str | None:
    if not isinstance(data, dict):
        return "not a JSON object"
    gpu = data.get("gpu")
    if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
        return "bad or missing 'gpu'"
    for name in ("since", "until"):
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"bad or missing {name!r}"
        if not math.isfinite(value):
            return f"bad {name!r}"
    uid = data.get("uid")
    if uid != owner_uid:
        # The file says one user, the OS says another: someone wrote it by hand.
        return f"claims uid {uid!r} but is owned by uid {owner_uid} (foreign)"
    uuid = data.get("uuid")
    mig = data.get("mig_device")
    if key.startswith("MIG-") != (mig is not None):
        return "'mig_device' must be given exactly for a MIG-... key"
    if mig is not None and (isinstance(mig, bool) or not isinstance(mig, int)
                            or not 0 <= mig < MAX_MIG_SLOTS):
        return "bad 'mig_device'"
    parent = data.get("parent_uuid")
    if parent is not None and not (isinstance(parent, str) and _UUID.fullmatch(parent)):
        return "bad 'parent_uuid'"
    if key.startswith("index-"):
        if key != f"index-{gpu}":
            return "file name does not match its 'gpu'"
    elif uuid != key:
        return "file name does not match its 'uuid'"
    note = data.get("note", "")
    try:
        check_note(note)
    except ReservationError as exc:
        return str(exc)
    user = data.get("user")
    if not isinstance(user, str):
        return "bad or missing 'user'"
    return _job_problem(data.get("job"))


def _job_problem(job: Any) -> str | None:
    if job is None:
        return None
    if not isinstance(job, dict) or not isinstance(job.get("id"), str) \
            or not re.fullmatch(r"[0-9a-f]{8}", job["id"]):
        return "bad 'job'"
    for key, high in (("pid", MAX_PID), ("pid_start", 2**63)):
        value = job.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= high:
            return f"bad 'job.{key}'"
    return None


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _active_by_slot(entries: list[_Entry], now: float) -> dict[str, list[_Entry]]:
    """Active entries per reservation key, lowest generation (the holder) first."""
    slots: dict[str, list[_Entry]] = {}
    for entry in sorted(entries, key=lambda e: (e.key, e.generation)):
        if entry.active(now):
            slots.setdefault(entry.key, []).append(entry)
    return slots


def _holders(entries: list[_Entry], now: float) -> list[_Entry]:
    slots = _active_by_slot(entries, now)
    return sorted((found[0] for found in slots.values()), key=lambda e: (e.data["gpu"], e.key))


def _slot(entries: list[_Entry], target: _Target) -> list[_Entry]:
    """Files that speak for this GPU, lowest generation first: its UUID key and its index
    key (written by a client that did not know the UUID); and when we do not know the
    UUID, any file that says it is this index."""
    if target.mig is not None:
        return sorted((e for e in entries if e.key == target.key), key=lambda e: e.generation)
    keys = {target.key, f"index-{target.index}"}
    return sorted(
        (
            e
            for e in entries
            if e.key in keys
            or (target.uuid is None and e.data["gpu"] == target.index and not _is_mig(e))
        ),
        key=lambda e: (e.key, e.generation),
    )


def _is_mig(entry: _Entry) -> bool:
    return entry.data.get("mig_device") is not None


def _related(entries: list[_Entry], target: _Target, now: float) -> list[_Entry]:
    """Issue 19: active reservations that overlap ``target`` without being its own: a
    card's MIG devices for the card, the card for one of its MIG devices."""
    if target.mig is None:
        found = [e for e in entries if _is_mig(e) and e.data["gpu"] == target.index]
    else:
        card = _Target(target.index, target.parent_uuid)
        found = [e for e in _slot(entries, card)]
    return [e for e in found if e.active(now)]


# ---------------------------------------------------------------------------------------
# changing the directory (always under the lock)


def _reserve_locked(
    directory: str, targets: list[_Target], until: float, note: str, now: float,
    job: dict[str, Any] | None = None,
) -> dict[str, Any]:
    found = _scan(directory)
    _clean(found, now)
    me = os.geteuid()
    plans: list[tuple[_Target, _Entry | None, _Entry | None, int]] = []
    for target in targets:
        slot = _slot(found.entries, target)
        active = [e for e in slot if e.active(now)]
        holder = active[0] if active else None
        if holder is not None and holder.owner_uid != me:
            return _lost(target, holder)
        # Reserving a card reserves its MIG devices: neither may be taken over the other
        # user's reservation (the lock makes the check and the write one step).
        for other in _related(found.entries, target, now):
            if other.owner_uid != me:
                return _lost(target, other)
        if holder is not None and target.uuid is None and holder.key != target.key:
            # We do not know the UUID but my file does: extend that one.
            target = _Target(target.index, holder.data.get("uuid"))
        mine = holder if holder is not None and holder.key == target.key else None
        # My reservation made under the index key is moved to the UUID key.
        moved = holder if holder is not None and mine is None else None
        top = max(found.generations.get(target.key, ()), default=0)
        plans.append((target, mine, moved, top + 1))

    host = socket.gethostname()
    user = user_name(me)
    created: list[str] = []
    results: list[dict[str, Any]] = []
    extended: list[int] = []
    try:
        for target, mine, _moved, generation in plans:
            record: dict[str, Any] = {
                "gpu": target.index,
                "uuid": target.uuid,
                **({"mig_device": target.mig, "parent_uuid": target.parent_uuid}
                   if target.mig is not None else {}),
                "user": user,
                "uid": me,
                "since": float(mine.data["since"]) if mine else now,
                "until": until,
                "note": note,
                "host": host,
            }
            if job is not None:
                record["job"] = job
            tmp = write_temp(directory, target.key, record)
            try:
                if mine is not None:
                    # Replace my own file: atomic, and the sticky bit stops anyone else.
                    os.rename(tmp, mine.path)
                    extended.append(target.index)
                else:
                    final = os.path.join(directory, f"{target.key}.{generation}.json")
                    try:
                        os.link(tmp, final)
                    except FileExistsError:
                        # Only a writer that bypasses the lock gets here; it was first.
                        return _lost_to_file(target, final)
                    created.append(final)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            results.append(_public(record, user))
        fsync_dir(directory)
        created.clear()  # committed: nothing to roll back
        for _target, _mine, moved, _generation in plans:
            if moved is not None:
                with contextlib.suppress(OSError):
                    os.unlink(moved.path)
    finally:
        for path in created:
            with contextlib.suppress(OSError):
                os.unlink(path)
    indexes = ", ".join(t.label()[4:] for t in targets)
    verb = "extended" if len(extended) == len(targets) else "reserved"
    return {
        "ok": True,
        "reservations": results,
        "message": f"{verb} GPU {indexes} until {_clock(until)}",
    }


def _release_locked(directory: str, targets: list[_Target] | None, now: float) -> dict[str, Any]:
    found = _scan(directory)
    _clean(found, now)
    me = os.geteuid()
    released: list[dict[str, Any]] = []
    refused: list[str] = []
    holder_name: str | None = None
    if targets is None:
        doomed = [e for e in found.entries if e.owner_uid == me]
    else:
        doomed = []
        for target in targets:
            slot = _slot(found.entries, target)
            active = [e for e in slot if e.active(now)]
            if active and active[0].owner_uid != me and me != 0:
                holder = active[0]
                holder_name = holder.owner
                refused.append(
                    f"{target.label()} is reserved by {holder.owner}: only they or root"
                    " can release it"
                )
                continue
            # root releases the whole slot; a user only their own files in it.
            doomed.extend(e for e in slot if me == 0 or e.owner_uid == me)
    for entry in doomed:
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            continue
        except PermissionError:
            refused.append(f"{entry.path}: the OS refused (owned by {entry.owner})")
            holder_name = holder_name or entry.owner
            continue
        if entry.active(now):
            released.append(entry.public())
    fsync_dir(directory)
    reply: dict[str, Any] = {"ok": not refused, "released": released}
    gpus = ", ".join(_label(r) for r in released)
    parts = [f"released GPU {gpus}" if released else "nothing to release", *refused]
    reply["message"] = "; ".join(parts)
    if holder_name is not None:
        reply["holder"] = holder_name
    return reply


def _clean(found: _Scan, now: float) -> None:
    """Remove what may be removed: my expired reservations, my leftover temp files
    (every writer holds the lock, so any temp file seen under it is a dead writer's).
    Root cleans everybody's."""
    me = os.geteuid()
    for entry in list(found.entries):
        if not entry.active(now) and (entry.owner_uid == me or me == 0):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                found.entries.remove(entry)
    for path, uid in found.tmp_files:
        if uid == me or me == 0:
            with contextlib.suppress(OSError):
                os.unlink(path)


def write_temp(directory: str, key: str, record: dict[str, Any]) -> str:
    payload = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
    for _ in range(10):
        path = os.path.join(directory, f"{TMP_PREFIX}{key}-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            fd = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE
            )
        except FileExistsError:
            continue
        try:
            os.fchmod(fd, FILE_MODE)  # the umask must not hide reservations from others
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        os.close(fd)
        return path
    raise ReservationError(f"{directory}: cannot create a temporary file")


def fsync_dir(directory: str) -> None:
    # Makes the new name durable across a power cut; harmless where unsupported.
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _public(record: dict[str, Any], user: str) -> dict[str, Any]:
    mig = record.get("mig_device")
    return {
        "gpu": record["gpu"],
        "gpu_uuid": record.get("parent_uuid") if mig is not None else record.get("uuid"),
        "user": user,
        "uid": record["uid"],
        "since": float(record["since"]),
        "until": float(record["until"]),
        "note": record.get("note", ""),
        "host": record.get("host"),
        "job": (record.get("job") or {}).get("id"),
        "mig_uuid": record.get("uuid") if mig is not None else None,
        "mig_device": mig,
    }


def _lost(target: _Target, holder: _Entry) -> dict[str, Any]:
    note = holder.data.get("note") or ""
    why = f" ({note})" if note else ""
    return {
        "ok": False,
        "holder": holder.owner,
        "reservations": [holder.public()],
        "message": f"{target.label()} is reserved by {holder.owner} until "
        f"{_clock(holder.until)}{why}",
    }


def _lost_to_file(target: _Target, path: str) -> dict[str, Any]:
    try:
        owner = user_name(os.lstat(path).st_uid)
    except OSError:
        owner = "someone else"
    return {
        "ok": False,
        "holder": owner,
        "reservations": [],
        "message": f"{target.label()} was just reserved by {owner}",
    }


def _label(public: dict[str, Any]) -> str:
    mig = public.get("mig_device")
    return f"{public['gpu']}:{mig}" if mig is not None else str(public["gpu"])


def _clock(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch))


def _os_reason(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    return exc.strerror or str(exc)
