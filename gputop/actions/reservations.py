"""The on-disk reservation store: who holds which GPU of this host until when, and why.

Stdlib-only: the remote probe ships this file and runs it as the connected user.
The design (docs/reservations.md explains it at length):

- One directory per host, sticky and world-writable like /tmp (mode 1777): everybody
  can create files, only a file's owner (or root) can remove or replace it. That is
  what makes ownership an operating-system fact instead of a promise of this code.
  The directory, its locks, whole-file writes and careful reads are ``store.py``'s,
  shared with `gputop run`'s queue; this module holds the reservation records and rules.
- A reservation is one small JSON file named ``<key>.<generation>.json``, where key is
  the GPU UUID when known (stable across reboots) or ``index-N``. The file's owner uid is
  the holder: the user name shown is the owner's, never the text inside.
- Every change happens under the advisory ``flock`` of each card it touches, and new
  files appear with ``link()`` of a complete, fsync'd temp file, which fails if the name
  exists: two racers cannot both win, and a reader sees a whole file or none.
- An expired file of another user cannot be removed by us (sticky bit), so taking over
  an expired reservation creates the next generation beside it; the old one counts for
  nothing and its owner (or root) cleans it up later.
- The holder of a card is the active claim the kernel saw first: the lowest inode change
  time (``st_ctime``), which no user can set back, never a number chosen by the writer.
  So a claim is never rewritten: extending one writes ``<key>.<generation>.ext.json``
  beside it, which only the claim's owner can create.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import os
import re
import time
import unicodedata
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from gputop.actions.liveness import MAX_PID, cgroup_pids, process_alive, session_alive
from gputop.actions.store import (
    JOB_PREFIX,
    TMP_PREFIX,
    CardLocked,
    ScanCache,
    directory_problem,
    ensure_directory,
    fsync_dir,
    is_lock_file,
    link_new,
    locked,
    open_directory,
    os_reason,
    owner_problem,
    read_json,
    user_name,
    write_temp,
)
from gputop.actions.store import StoreError as ReservationError
from gputop.records import MutableRecord, Record, field, record
from gputop.storedir import RESERVATIONS_DIR
from gputop.vendors import UUID_PREFIXES, is_partition_uuid

if TYPE_CHECKING:
    from gputop.actions.env import ActionEnv

MAX_NOTE_CHARS = 200
MAX_RESERVATION_S = 31 * 86400
MAX_FILE_BYTES = 4096
MAX_GPUS = 64  # per request: a request may come from anyone over SSH
MAX_MIG_SLOTS = 7  # MIG devices per card (A100/H100/B200)
# A file's times come from this host's clock; `now` may be a little ahead of the kernel's.
CLOCK_SLACK_S = 3600.0
# A card whose lock could not be had is passed over by this process's choices (`run`'s
# plan) this long, then tried again: the holder may have let go.
LOCKED_AVOID_S = 30.0
_LOCKED: dict[str, dict[int, tuple[str, float]]] = {}  # directory -> card -> holder, when
MAX_USER_CHARS = 64
MAX_HOST_CHARS = 255
# A scan reads only the files named for this host's cards (``_Wanted``); of those, a user
# with more than this many under one card's name counts for nothing on it (a claim and
# its extension, and an old pair not yet cleaned up, are 4).
MAX_FILES_PER_OWNER = 8
MAX_PROBLEMS = 20  # problems of single files listed one by one; the rest are counted
MAX_NAMED = 3  # skipped names listed one by one; more are counted in one line

# The UUIDs of this host's cards: index -> UUID, or in index order.
GpuUuids = Sequence[str | None] | dict[int, str | None]
# MIG device UUID -> (card index, slot)
MigDevices = dict[str, tuple[int, int]]

# Canonical names only: one spelling per card and generation (no "007", no "0").
_FILE_NAME = re.compile(
    r"((?:GPU|MIG)-[0-9A-Za-z-]{1,80}|index-(?:0|[1-9]\d{0,3}))\.([1-9]\d{0,11})(\.ext)?\.json"
)
_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z-]{1,80}")
# A writer's temp file names its card (``_tmp_tag``): only a writer holding that card's
# lock cleans it up.
_TMP_FILE = re.compile(re.escape(TMP_PREFIX) + r"gpu(\d{1,4})-")
# Bidi overrides and isolates can make a note display as something else; they are
# format characters (Cf) but are refused like control characters.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


@record(frozen=True, slots=True)
class _Target(Record):
    index: int
    uuid: str | None
    mig: int | None = None  # one MIG device (its slot) of card ``index``
    parent_uuid: str | None = None  # a MIG target's card

    @property
    def key(self) -> str:
        return self.uuid if self.uuid else f"index-{self.index}"

    def label(self) -> str:
        return f"GPU {self.index}:{self.mig}" if self.mig is not None else f"GPU {self.index}"


@record(frozen=False, slots=True)
class _Entry(MutableRecord):
    name: str
    path: str
    key: str
    generation: int
    owner_uid: int
    owner: str
    data: dict[str, Any]
    # The kernel's inode change time: set when the claim was linked into place and
    # whenever the inode changes since; no user can set it back.  The first wins.
    ctime_ns: int = 0
    extension: dict[str, Any] | None = None  # the owner's <key>.<generation>.ext.json
    extension_path: str | None = None

    @property
    def until(self) -> float:
        record = self.extension or self.data
        return float(record["until"])

    def active(self, now: float) -> bool:
        # A `gputop run` job's cards are free the moment its process is gone (SIGKILL
        # included), not when the lease runs out.
        job = self.data.get("job")
        if job is None:
            return self.until > now
        if self.until > now and process_alive(job["pid"], job["pid_start"], self.owner_uid):
            return True
        # Its `gputop run` is gone (SIGKILL), but something CMD started may still run on
        # the card: the card stays held while any process of the job's session lives,
        # for at most as long as any reservation may last.
        if now >= float(self.data["since"]) + MAX_RESERVATION_S:
            return False
        return (session_alive(job.get("sid"), self.owner_uid)
                or bool(cgroup_pids(job.get("cgroup"), self.owner_uid)))

    def public(self) -> dict[str, Any]:
        """The dict the collector and the views use: model.Reservation's fields."""
        return {
            "gpu": self.data["gpu"],
            "gpu_uuid": self.data.get("uuid"),
            "user": self.owner,
            "uid": self.owner_uid,
            "since": float(self.data["since"]),
            "until": self.until,
            "note": (self.extension or self.data).get("note", ""),
            "host": self.data.get("host"),
            "job": (self.data.get("job") or {}).get("id"),
            **_mig_fields(self.data),
        }


@record(frozen=False, slots=True)
class _Scan(MutableRecord):
    entries: list[_Entry]
    problems: list[str]  # one line per file that was read and skipped
    # (path, owner uid, card): leftovers of killed writers, or writers busy right now
    tmp_files: list[tuple[str, int, int | None]]
    # Every generation in use per key, skipped files included: a new file must not
    # collide with a corrupt one that we cannot remove.
    generations: dict[str, set[int]] = field(default_factory=dict)
    # Extension files without a valid claim: (path, owner uid), removed by their owner.
    orphans: list[tuple[str, int]] = field(default_factory=list)
    # What was skipped unread, counted: never cut, whatever else went wrong.
    summary: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------
# public API


def list_active(
    directory: str,
    now: float | None = None,
    gpu_uuids: GpuUuids | None = None,
    mig_devices: MigDevices | None = None,
) -> list[dict[str, Any]]:
    """Active reservations, one per GPU, sorted by GPU index. Missing directory: [].

    ``gpu_uuids`` (and ``mig_devices``): this host's cards; only their claims are read.
    Without them every reservation-shaped file is read."""
    now = time.time() if now is None else now
    return scan(directory, now, gpu_uuids, mig_devices)["reservations"]


def scan(
    directory: str,
    now: float | None = None,
    gpu_uuids: GpuUuids | None = None,
    mig_devices: MigDevices | None = None,
) -> dict[str, Any]:
    """Active reservations plus one line per file that was skipped and why: first the
    files skipped unread (counted, never cut), then those read and refused."""
    now = time.time() if now is None else now
    found = _scan(directory, _wanted(gpu_uuids, mig_devices), cached=True)
    holders = _holders(found.entries, now)
    problems = list(found.problems)
    for entries in _active_by_slot(found.entries, now).values():
        for extra in entries[1:]:
            problems.append(
                f"{extra.path}: conflicts with {entries[0].name} (held by {entries[0].owner});"
                " ignored"
            )
    if len(problems) > 2 * MAX_PROBLEMS:
        # Thousands of planted files are one story, told once.
        more = len(problems) - 2 * MAX_PROBLEMS
        problems = [*problems[: 2 * MAX_PROBLEMS], f"{directory}: {more} more problems"]
    return {
        "ok": True,
        "reservations": [entry.public() for entry in holders],
        "problems": [*found.summary, *problems],
    }


def reserve(
    directory: str,
    gpus: Sequence[int | str],
    until: float,
    note: str = "",
    gpu_uuids: GpuUuids | None = None,
    now: float | None = None,
    must_hold: bool = False,
    job: dict[str, Any] | None = None,
    mig_devices: MigDevices | None = None,
) -> dict[str, Any]:
    """Reserve all of `gpus` until `until` (epoch s), or none of them.

    A GPU I already hold is extended (an extension file beside my claim, atomically
    replaced). A GPU held by someone else makes the whole request fail with ``holder``
    naming them.  With ``must_hold`` (see ``extend``), so does a GPU nobody holds.
    ``job`` ({id, pid, pid_start}): a `gputop run` job's claim, which ends with that
    process (an extension keeps the claim's job).
    """
    now = time.time() if now is None else now
    try:
        until = check_until(until, now)
        note = check_note(note)
        targets = resolve_gpus(gpus, gpu_uuids, mig_devices)
        if not targets:
            raise ReservationError("no GPU given")
        ensure_directory(directory)
        wanted = _wanted_for(targets, mig_devices)
        with locked(directory, (t.index for t in targets)):
            return _reserve_locked(directory, targets, until, note, now, must_hold, job,
                                   wanted)
    except CardLocked as exc:
        # Only this card is in the way: say which, so that a chooser takes another.
        _LOCKED.setdefault(directory, {})[exc.gpu] = (exc.holder, time.monotonic())
        return {"ok": False, "message": str(exc), "reservations": [], "locked": [exc.gpu],
                "lock_holder": exc.holder}
    except ReservationError as exc:
        return {"ok": False, "message": str(exc), "reservations": []}
    except OSError as exc:
        return {"ok": False, "message": f"{directory}: {os_reason(exc)}", "reservations": []}


def locked_cards(directory: str) -> dict[int, str]:
    """The cards whose locks this process could not have lately, and who held them."""
    now = time.monotonic()
    known = _LOCKED.get(directory, {})
    for gpu in [g for g, (_who, when) in known.items() if now - when > LOCKED_AVOID_S]:
        del known[gpu]
    return {gpu: f"lock held by {who}" for gpu, (who, _when) in known.items()}


def extend(
    directory: str,
    gpus: Sequence[int | str],
    until: float,
    note: str = "",
    gpu_uuids: GpuUuids | None = None,
    now: float | None = None,
    mig_devices: MigDevices | None = None,
) -> dict[str, Any]:
    """Move the end of my reservations of `gpus` (all of them, or none): like reserve,
    but a card I do not hold is an error rather than a new reservation."""
    return reserve(directory, gpus, until, note, gpu_uuids, now, must_hold=True,
                   mig_devices=mig_devices)


def release(
    directory: str,
    gpus: Sequence[int | str] | None = None,
    gpu_uuids: GpuUuids | None = None,
    now: float | None = None,
    mig_devices: MigDevices | None = None,
) -> dict[str, Any]:
    """Release my reservations (all, or those of `gpus`). Root may release anyone's."""
    now = time.time() if now is None else now
    try:
        targets = resolve_gpus(gpus, gpu_uuids, mig_devices) if gpus is not None else None
        if not os.path.isdir(directory):
            return {"ok": True, "released": [], "message": "no reservations"}
        ensure_directory(directory)
        if targets is not None:
            cards = [t.index for t in targets]
        else:
            # Mine wherever they are: only my files are read.
            cards = [e.data["gpu"] for e in _scan(directory, owner=os.geteuid()).entries]
        with locked(directory, cards):
            return _release_locked(directory, targets, now, set(cards),
                                   _wanted_for(targets or [], mig_devices))
    except ReservationError as exc:
        return {"ok": False, "message": str(exc), "released": []}
    except OSError as exc:
        return {"ok": False, "message": f"{directory}: {os_reason(exc)}", "released": []}


def handle(op: str, request: dict[str, Any], env: ActionEnv) -> dict[str, Any]:
    """Entry for gputop.actions.dispatch; `op` is request["op"], already checked to be
    one of ours."""
    directory = env.reservations_dir or RESERVATIONS_DIR
    return handle_request({**request, "op": op}, directory, env.gpu_uuids,
                          mig_devices=env.mig_devices)


def handle_request(
    request: dict[str, Any],
    directory: str,
    gpu_uuids: GpuUuids | None = None,
    now: float | None = None,
    mig_devices: MigDevices | None = None,
) -> dict[str, Any]:
    """The reservation ops of the action protocol (docs/architecture.md), never raising."""
    op = request.get("op")
    if op == "reservations":
        return scan(directory, now, gpu_uuids, mig_devices)
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


def check_until(until: Any, now: float) -> float:
    if isinstance(until, bool) or not isinstance(until, (int, float)) or not math.isfinite(until):
        raise ReservationError("the end time must be a number of epoch seconds")
    if until <= now:
        raise ReservationError("the end time is in the past")
    if until - now > MAX_RESERVATION_S:
        raise ReservationError(f"at most {MAX_RESERVATION_S // 86400} days, please")
    return float(until)


def resolve_gpus(
    gpus: Sequence[int | str] | None,
    gpu_uuids: GpuUuids | None,
    mig_devices: MigDevices | None = None,
) -> list[_Target]:
    """GPU indexes or UUIDs -> targets. With the host's GPU list, unknown ones are errors.

    A MIG device is named by its MIG-... UUID or as "card:slot" ("0:1");
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
    gpu_uuids: GpuUuids | None,
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
    gpu: Any, known: dict[int, str | None] | None, mig_devices: MigDevices | None
) -> _Target | None:
    """A target for a MIG device, None for anything that does not name one."""
    if not isinstance(gpu, str):
        return None
    text = gpu.strip()
    label = re.fullmatch(r"(\d{1,4}):(\d)", text)
    if not is_partition_uuid(text) and label is None:
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
# reading the directory

# Display scans of a quiet directory, read once per change of it.
_CACHE: ScanCache[_Scan] = ScanCache()


@record(frozen=True, slots=True)
class _Wanted(Record):
    """Which reservation files a scan reads: the names of this host's own cards.

    What decides "reserved" must not depend on how many other files exist or how they
    sort, so a card's claims are found by their names (derived from its UUID and index),
    never by a capped walk of the directory.  ``keys`` None: the cards are not known
    (a card without a UUID, a client that never read the GPUs), so every key is read."""

    keys: frozenset[str] | None = None
    any_mig: bool = False  # the MIG devices are not known: every MIG-... key is read

    def tag(self) -> str:
        """What the cache keys this reading by, beside the directory."""
        if self.keys is None:
            return "*"
        return ("M|" if self.any_mig else "|") + "|".join(sorted(self.keys))


_EVERYTHING = _Wanted()


def _wanted(gpu_uuids: GpuUuids | None, mig_devices: MigDevices | None = None) -> _Wanted:
    """The names of the claims of this host's cards and MIG devices."""
    known = _uuid_map(gpu_uuids)
    if not known:
        return _EVERYTHING
    keys: set[str] = set()
    for index, uuid in known.items():
        if not uuid or not _UUID.fullmatch(uuid):
            # Its claims may be under any GPU-... name that says this index (``_slot``).
            return _EVERYTHING
        keys.update((uuid, f"index-{index}"))
    for uuid in mig_devices or {}:
        if _UUID.fullmatch(uuid):
            keys.add(uuid)
    return _Wanted(frozenset(keys), any_mig=mig_devices is None)


def _wanted_for(targets: list[_Target], mig_devices: MigDevices | None) -> _Wanted:
    """The names a change of ``targets`` must read (``_slot`` and ``_related``): each
    card's UUID and index keys and its MIG devices' keys; a MIG device's own key and its
    card's.  A change pays for the files named for its cards, not for all of them."""
    keys: set[str] = set()
    any_mig = False
    for target in targets:
        card_uuid = target.uuid if target.mig is None else target.parent_uuid
        if card_uuid is None:
            return _EVERYTHING  # its claims may be under any name that says its index
        keys.update((card_uuid, f"index-{target.index}"))
        if target.mig is not None:
            keys.add(target.key)
        elif mig_devices is None:
            any_mig = True
        else:
            keys.update(uuid for uuid, (card, _slot) in mig_devices.items()
                        if card == target.index and _UUID.fullmatch(uuid))
    return _Wanted(frozenset(keys), any_mig)


def _scan(directory: str, wanted: _Wanted = _EVERYTHING, cached: bool = False,
          tmp_cards: Iterable[int] = (), owner: int | None = None) -> _Scan:
    """Read the claims ``wanted`` names.  ``cached``: a display scan, kept while the
    directory is unchanged; changes (under the locks) read afresh.  ``tmp_cards``: the
    cards whose writers' temp files are wanted (for cleaning, under those cards' locks).
    ``owner``: only that user's files."""
    result = _Scan([], [], [])
    with open_directory(directory, result.problems) as fd:
        if fd is None:
            return result
        info = os.fstat(fd)
        tag = f"{directory}\0{wanted.tag()}"
        hit = _CACHE.get(tag, info) if cached else None
        if hit is not None:
            return hit
        problem = directory_problem(directory, info)
        if problem and info.st_uid != os.geteuid():
            result.problems.append(f"{problem.split('; remove it')[0]} (read anyway)")
        _read_names(fd, directory, os.listdir(fd), wanted, set(tmp_cards), owner, result)
        if cached:
            _CACHE.put(tag, info, result)
        return result


def _read_names(fd: int, directory: str, names: list[str], wanted: _Wanted,
                tmp_cards: set[int], owner: int | None, out: _Scan) -> None:
    """Sort the names without reading them, then read only the wanted claims, each
    owner's at most MAX_FILES_PER_OWNER per key: what others planted costs a listing,
    and a user's own junk costs only that user's claim of that card."""
    foreign: list[str] = []  # no reservation file's name
    elsewhere: list[str] = []  # a claim's name, of a card this host does not have
    candidates: list[tuple[str, str, int, bool]] = []
    keys, any_mig = wanted.keys, wanted.any_mig
    for name in names:
        if name[0] == ".":
            if name.startswith(TMP_PREFIX):
                card = _TMP_FILE.match(name)
                if card and int(card.group(1)) in tmp_cards:
                    with contextlib.suppress(OSError):
                        out.tmp_files.append((os.path.join(directory, name),
                                              os.lstat(name, dir_fd=fd).st_uid,
                                              int(card.group(1))))
            elif not is_lock_file(name):
                foreign.append(name)
            continue
        if name.startswith(JOB_PREFIX):
            continue
        # No key holds a dot: the part before the first one is the key, found without a
        # regex, so 50,000 names of other cards cost a listing and a set lookup each.
        key = name.partition(".")[0]
        if keys is not None and key not in keys and not (any_mig and is_partition_uuid(key)):
            if name.endswith(".json") and key.startswith((*UUID_PREFIXES, "index-")):
                elsewhere.append(name)
            else:
                foreign.append(name)
            continue
        match = _FILE_NAME.fullmatch(name)
        if not match:
            foreign.append(name)
            continue
        generation = int(match.group(2))
        # Every generation with a file is taken, readable or not: a new claim must not
        # collide with a file we cannot remove.
        out.generations.setdefault(key, set()).add(generation)
        candidates.append((name, key, generation, bool(match.group(3))))
    _count(out, directory, foreign, "not a reservation file",
           "files that are not reservation files")
    _count(out, directory, elsewhere, "names no GPU of this host",
           "reservation files that name no GPU of this host")
    extensions: dict[tuple[str, int], tuple[str, dict[str, Any], os.stat_result]] = {}
    for name, key, generation, extension in _by_owner(fd, directory, candidates, owner, out):
        path = os.path.join(directory, name)
        loaded = read_json(fd, name, path, MAX_FILE_BYTES, out.problems)
        if loaded is None:
            continue
        data, info = loaded
        if extension:
            extensions[(key, generation)] = (path, data, info)
            continue
        why = _content_problem(data, key, info)
        if why:
            out.problems.append(f"{path}: {why}; skipped")
            continue
        out.entries.append(
            _Entry(name, path, key, generation, info.st_uid, user_name(info.st_uid), data,
                   info.st_ctime_ns)
        )
    _attach(out, extensions)


def _by_owner(
    fd: int, directory: str, candidates: list[tuple[str, str, int, bool]],
    owner: int | None, out: _Scan,
) -> list[tuple[str, str, int, bool]]:
    """The candidates worth reading, in name order: not those of a user who has more
    than MAX_FILES_PER_OWNER files under one key (nobody needs more than a claim and its
    extension, and an old pair not yet cleaned); the owner is the kernel's word."""
    per_key: dict[str, int] = {}
    for candidate in candidates:
        per_key[candidate[1]] = per_key.get(candidate[1], 0) + 1
    if owner is None and max(per_key.values(), default=0) <= MAX_FILES_PER_OWNER:
        return sorted(candidates)  # no owner can have too many: no need to ask whose
    groups: dict[tuple[str, int], list[tuple[str, str, int, bool]]] = {}
    for candidate in candidates:
        if owner is None and per_key[candidate[1]] <= MAX_FILES_PER_OWNER:
            groups.setdefault((candidate[1], -1), []).append(candidate)
            continue
        try:
            uid = os.lstat(candidate[0], dir_fd=fd).st_uid
        except FileNotFoundError:
            continue  # removed while we listed
        except OSError as exc:
            out.problems.append(f"{os.path.join(directory, candidate[0])}: "
                                f"{os_reason(exc)}; skipped")
            continue
        if owner is None or uid == owner:
            groups.setdefault((candidate[1], uid), []).append(candidate)
    keep: list[tuple[str, str, int, bool]] = []
    for (key, uid), files in sorted(groups.items()):
        if len(files) > MAX_FILES_PER_OWNER:
            out.summary.append(
                f"{directory}: {user_name(uid)} owns {len(files)} files named for {key}"
                f" ({min(f[0] for f in files)}, ...); none of them counts (at most"
                f" {MAX_FILES_PER_OWNER} per user and card)")
            continue
        keep.extend(files)
    keep.sort()
    return keep


def _count(out: _Scan, directory: str, names: list[str], one: str, many: str) -> None:
    """Skipped names: each named when they are few, else one line with their number and
    the first few (never cut: ``scan`` keeps these lines whole)."""
    if not names:
        return
    if len(names) <= MAX_NAMED:
        out.summary.extend(f"{os.path.join(directory, n)}: {one}; skipped"
                           for n in sorted(names))
        return
    first = ", ".join(heapq.nsmallest(MAX_NAMED, names))
    out.summary.append(f"{directory}: {len(names)} {many} ({first}, ...); skipped")


def _attach(
    out: _Scan, extensions: dict[tuple[str, int], tuple[str, dict[str, Any], os.stat_result]]
) -> None:
    """Give each claim its owner's extension; any other extension file counts for nothing."""
    claims = {(e.key, e.generation): e for e in out.entries}
    for slot, (path, data, info) in extensions.items():
        claim = claims.get(slot)
        if claim is None or claim.owner_uid != info.st_uid:
            out.orphans.append((path, info.st_uid))
            continue
        why = _times_problem(data, info) or owner_problem(data, info.st_uid)
        if why is None:
            why = _note_problem(data)
        if why:
            out.problems.append(f"{path}: {why}; skipped")
            continue
        claim.extension, claim.extension_path = data, path


def _number(data: dict[str, Any], name: str) -> float | None:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # a JSON integer of 400 digits
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _times_problem(data: dict[str, Any], info: os.stat_result) -> str | None:
    """`until` at most the documented maximum after the file was written (by the kernel's
    clock, not the file's word): 1e18 or 1e300 never reach a clock or a view."""
    until = _number(data, "until")
    if until is None:
        return "bad or missing 'until'"
    if until > info.st_ctime + MAX_RESERVATION_S + CLOCK_SLACK_S:
        return f"'until' more than {MAX_RESERVATION_S // 86400} days after the file was written"
    return None


def _note_problem(data: dict[str, Any]) -> str | None:
    try:
        check_note(data.get("note", ""))
    except ReservationError as exc:
        return str(exc)
    return None


def _content_problem(data: dict[str, Any], key: str, info: os.stat_result) -> str | None:
    gpu = data.get("gpu")
    if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu <= 9999:
        return "bad or missing 'gpu'"
    since = _number(data, "since")
    if since is None:
        return "bad or missing 'since'"
    why = _times_problem(data, info) or owner_problem(data, info.st_uid)
    if why:
        return why
    if since > float(data["until"]):
        return "'since' after 'until'"
    uuid = data.get("uuid")
    mig = data.get("mig_device")
    if is_partition_uuid(key) != (mig is not None):
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
    why = _note_problem(data)
    if why:
        return why
    for name, most in (("user", MAX_USER_CHARS), ("host", MAX_HOST_CHARS)):
        value = data.get(name)
        if name == "host" and value is None:
            continue
        if not isinstance(value, str) or len(value) > most:
            return f"bad or missing {name!r}"
    return _job_problem(data.get("job"))


def _job_problem(job: Any) -> str | None:
    if job is None:
        return None
    if not isinstance(job, dict) or not isinstance(job.get("id"), str) \
            or not re.fullmatch(r"[0-9a-f]{8}", job["id"]):
        return "bad 'job'"
    for key, high in (("pid", MAX_PID), ("pid_start", 2**63), ("sid", MAX_PID)):
        value = job.get(key)
        if key == "sid" and value is None:
            continue  # written by a gputop from before CMD had its own session
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= high:
            return f"bad 'job.{key}'"
    cgroup = job.get("cgroup")
    if cgroup is not None and (not isinstance(cgroup, str) or len(cgroup) > 4096):
        return "bad 'job.cgroup'"
    return None


def _first(entry: _Entry) -> tuple[int, int, str]:
    # The kernel's time first: a writer picks the generation, never the ctime.
    return (entry.ctime_ns, entry.generation, entry.name)


def _active_by_slot(entries: list[_Entry], now: float) -> dict[str, list[_Entry]]:
    """Active entries per reservation key, the holder (first linked) first."""
    slots: dict[str, list[_Entry]] = {}
    for entry in sorted(entries, key=_first):
        if entry.active(now):
            slots.setdefault(entry.key, []).append(entry)
    return slots


def _holders(entries: list[_Entry], now: float) -> list[_Entry]:
    slots = _active_by_slot(entries, now)
    return sorted((found[0] for found in slots.values()), key=lambda e: (e.data["gpu"], e.key))


def _slot(entries: list[_Entry], target: _Target) -> list[_Entry]:
    """Files that speak for this GPU, the first linked first: its UUID key and its index
    key (written by a client that did not know the UUID); and when we do not know the
    UUID, any file that says it is this index."""
    if target.mig is not None:
        return sorted((e for e in entries if e.key == target.key), key=_first)
    keys = {target.key, f"index-{target.index}"}
    return sorted(
        (
            e
            for e in entries
            if e.key in keys
            or (target.uuid is None and e.data["gpu"] == target.index and not _is_mig(e))
        ),
        key=_first,
    )


def _is_mig(entry: _Entry) -> bool:
    return entry.data.get("mig_device") is not None


def _related(entries: list[_Entry], target: _Target, now: float) -> list[_Entry]:
    """Active reservations that overlap ``target`` without being its own: a card's MIG
    devices for the card, the card for one of its MIG devices. (They share the card's
    lock, so checking them and writing is one step.)"""
    if target.mig is None:
        found = [e for e in entries if _is_mig(e) and e.data["gpu"] == target.index]
    else:
        found = _slot(entries, _Target(target.index, target.parent_uuid))
    return [e for e in found if e.active(now)]


# ---------------------------------------------------------------------------------------
# changing the directory (always under the lock)


def _tmp_tag(card: int) -> str:
    """What a temp file of this card is named by (``_TMP_FILE`` reads it back)."""
    return f"gpu{card}"


def _reserve_locked(
    directory: str, targets: list[_Target], until: float, note: str, now: float,
    must_hold: bool = False, job: dict[str, Any] | None = None,
    wanted: _Wanted = _EVERYTHING,
) -> dict[str, Any]:
    cards = {t.index for t in targets}
    found = _scan(directory, wanted, tmp_cards=cards)
    _clean(found, now, cards)
    me = os.geteuid()
    plans: list[tuple[_Target, _Entry | None, int]] = []
    for target in targets:
        slot = _slot(found.entries, target)
        active = [e for e in slot if e.active(now)]
        holder = active[0] if active else None
        if holder is not None and holder.owner_uid != me:
            return _lost(target, holder)
        # Reserving a card reserves its MIG devices: neither may be taken over the other
        # user's reservation.
        for other in _related(found.entries, target, now):
            if other.owner_uid != me:
                return _lost(target, other)
        if holder is None and must_hold:
            return {"ok": False, "reservations": [],
                    "message": f"{target.label()}: you hold no reservation of it to extend"}
        # My claim is extended where it is, under whichever key it was made: a claim
        # moved to another key would be linked anew and lose its place to any claim
        # planted meanwhile.
        plans.append((target, holder, _free_generation(found.generations.get(target.key))))

    import socket  # only when writing: reading the store is on `gputop --once`'s path

    host = socket.gethostname()
    user = user_name(me)
    created: list[tuple[_Target, str]] = []
    results: list[dict[str, Any]] = []
    extended: list[int] = []
    try:
        for target, mine, generation in plans:
            record: dict[str, Any] = {
                "gpu": target.index,
                "uuid": mine.data.get("uuid") if mine else target.uuid,
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
                record["job"] = mine.data.get("job") if mine else job
            if mine is not None:
                _extend(directory, mine,
                        {"gpu": target.index, "uid": me, "until": until, "note": note})
                extended.append(target.index)
            else:
                final = os.path.join(directory, f"{target.key}.{generation}.json")
                if not link_new(directory, final, record, _tmp_tag(record["gpu"])):
                    # Only a writer that bypasses the lock gets here; it was first.
                    return _lost_to_file(target, final)
                created.append((target, final))
            results.append(_public(record, user))
        fsync_dir(directory)
        # A writer that bypasses the lock may have linked a claim between our scan and
        # our link: the kernel's times decide, so look again before saying yes.
        after = _scan(directory, wanted)
        for target, _final in created:
            first = next((e for e in _slot(after.entries, target) if e.active(now)), None)
            if first is not None and first.owner_uid != me:
                return _lost(target, first)
        created.clear()  # committed: nothing to roll back
    finally:
        for _target, path in created:
            with contextlib.suppress(OSError):
                os.unlink(path)
    indexes = ", ".join(t.label()[4:] for t in targets)
    verb = "extended" if len(extended) == len(targets) else "reserved"
    return {
        "ok": True,
        "reservations": results,
        "message": f"{verb} GPU {indexes} until {_clock(until)}",
    }


def _free_generation(used: set[int] | None) -> int:
    """The lowest generation with no file of this key (claim or extension): the kernel's
    times order claims, so a gap costs nothing, and a planted 999999999999 cannot push a
    new claim to a name no reader accepts."""
    generation = 1
    while used and generation in used:
        generation += 1
    return generation


def _extend(directory: str, mine: _Entry, record: dict[str, Any]) -> None:
    """Write my claim's new end beside it: the claim itself is never rewritten, so its
    change time (its place in the queue) stays."""
    path = os.path.join(directory, f"{mine.key}.{mine.generation}.ext.json")
    tmp = write_temp(directory, record, _tmp_tag(record["gpu"]))
    try:
        # Replace my own file: atomic, and the sticky bit stops anyone else.
        os.rename(tmp, path)
    except PermissionError:
        owner = user_name(os.lstat(path).st_uid)
        raise ReservationError(
            f"{path}: planted by {owner}; only they or root can remove it"
        ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _remove(entry: _Entry) -> None:
    # The claim first: an extension left alone counts for nothing and is cleaned later.
    for path in (entry.path, entry.extension_path):
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _release_locked(
    directory: str, targets: list[_Target] | None, now: float, cards: set[int],
    wanted: _Wanted = _EVERYTHING,
) -> dict[str, Any]:
    """Release under the locks of `cards`: the targets', or the cards I held when the
    locks were taken (a reservation of mine made since waits for the next release)."""
    me = os.geteuid()
    if targets is None:
        found = _scan(directory, tmp_cards=cards, owner=me)
    else:
        found = _scan(directory, wanted, tmp_cards=cards)
    _clean(found, now, cards)
    released: list[dict[str, Any]] = []
    refused: list[str] = []
    holder_name: str | None = None
    if targets is None:
        doomed = [e for e in found.entries if e.owner_uid == me and e.data["gpu"] in cards]
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
        if entry.extension_path:
            with contextlib.suppress(OSError):
                os.unlink(entry.extension_path)
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


def _clean(found: _Scan, now: float, cards: set[int]) -> None:
    """Remove what may be removed: my expired reservations and leftover temp files of
    the cards whose locks I hold (every writer of a card holds its lock, so a temp file
    of that card seen under it is a dead writer's), my extensions without a claim.
    Root cleans everybody's."""
    me = os.geteuid()
    for entry in list(found.entries):
        mine = entry.owner_uid == me or me == 0
        if mine and not entry.active(now) and entry.data["gpu"] in cards:
            _remove(entry)
            found.entries.remove(entry)
    doomed = [(path, uid) for path, uid, card in found.tmp_files if card in cards]
    for path, uid in (*doomed, *found.orphans):
        if uid == me or me == 0:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _public(record: dict[str, Any], user: str) -> dict[str, Any]:
    return {
        "gpu": record["gpu"],
        "gpu_uuid": record["uuid"],
        "user": user,
        "uid": record["uid"],
        "since": record["since"],
        "until": record["until"],
        "note": record["note"],
        "host": record["host"],
        "job": (record.get("job") or {}).get("id"),
        **_mig_fields(record),
    }


def _mig_fields(record: dict[str, Any]) -> dict[str, Any]:
    """A MIG device's reservation names its card by index and UUID (``gpu``, and
    ``gpu_uuid`` overridden here), itself by ``mig_uuid`` and slot."""
    mig = record.get("mig_device")
    if mig is None:
        return {"mig_uuid": None, "mig_device": None}
    return {"gpu_uuid": record.get("parent_uuid"), "mig_uuid": record.get("uuid"),
            "mig_device": mig}


def _label(public: dict[str, Any]) -> str:
    mig = public.get("mig_device")
    return f"{public['gpu']}:{mig}" if mig is not None else str(public["gpu"])


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


def _clock(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch))
