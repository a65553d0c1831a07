"""The shared on-disk store: one directory per host that every user of it writes into.

Stdlib-only: the remote probe ships this file and runs it as the connected user.
Reservations (``reservations.py``) and `gputop run`'s line (``queue.py``) are records in
the same directory; this module is what they share, and each keeps only its own file
names, record format and rules (docs/reservations.md explains the design):

- trust: a shared store is owned by root (or ``$GPUTOP_RESERVATIONS_OWNER``) and sticky
  when others may write; a private one is writable by its owner only
  (``directory_problem``, ``ensure_directory``). A normal user never creates the
  shared store: they would own it, and a directory's owner may remove any file in it;
- per-card advisory locks, taken in order, naming a stuck holder (``locked``);
- write-then-link: a record appears whole or not at all (``write_temp``, ``link_new``,
  ``fsync_dir``);
- reading a file anyone may have planted: never through a link, never blocking on a
  FIFO, capped in size, readable by everyone (``read_json``), owned by the user the
  record names (``owner_problem``); the directory itself never through a link
  (``open_directory``), and a quiet directory read once per change (``ScanCache``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pwd
import re
import stat
import time
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

from gputop.storedir import RESERVATIONS_DIR

# Names the store for every gputop that reads or writes it on this host: local commands,
# the dashboard, `gputop run`, and the remote probe over SSH.
DIRECTORY_ENV = "GPUTOP_RESERVATIONS_DIR"
DIR_MODE = 0o1777
FILE_MODE = 0o644
OWNER_ENV = "GPUTOP_RESERVATIONS_OWNER"  # a service user trusted like root to own the store
LOCK_TIMEOUT_S = 10.0
CACHE_QUIET_S = 2.0  # a directory unchanged this long is trusted to its mtime...
CACHE_MAX_S = 60.0  # ...for this long: a file edited in place by hand shows up in time

# The names in the directory that are not reservations: the locks, the writers' temp
# files, `gputop run`'s jobs.  Everything else is read as a reservation (or reported).
LOCK_NAME = ".lock"
TMP_PREFIX = ".tmp-"
JOB_PREFIX = "job."
_LOCK_FILE = re.compile(r"\.lock-gpu(?:0|[1-9]\d{0,3})")


class StoreError(ValueError):
    """Bad input or an unusable directory; the message is one line for the user."""


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def os_reason(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    return exc.strerror or str(exc)


# ---------------------------------------------------------------------------------------
# the directory: whom to trust, creating it


def store_directory(
    configured: str | None = None, default: str = RESERVATIONS_DIR, configured_from: str = "config"
) -> tuple[str, str]:
    """The store directory and where that choice came from, one rule everywhere:
    ``$GPUTOP_RESERVATIONS_DIR`` (made absolute), else the config's ``reservations: dir:``
    (``configured``; the remote probe has no config), else ``default`` (the shared store,
    or a simulation's private one)."""
    named = os.environ.get(DIRECTORY_ENV, "").strip()
    if named:
        return os.path.abspath(os.path.expanduser(named)), f"${DIRECTORY_ENV}"
    if configured:
        return configured, configured_from
    return default, "default"


def trusted_owners() -> set[int]:
    """The uids whose store is shared: root, and the service user named by $OWNER_ENV."""
    owners = {0}
    name = os.environ.get(OWNER_ENV, "").strip()
    if name:
        with contextlib.suppress(KeyError, ValueError, OverflowError):
            owners.add(int(name) if name.isdigit() else pwd.getpwnam(name).pw_uid)
    return owners


def install_hint(directory: str) -> str:
    return f"an admin creates it once: install -d -m 1777 -o root -g root {directory}"


def directory_problem(directory: str, info: os.stat_result, me: int | None = None) -> str | None:
    """Why a store directory (its lstat) may not be written by `me`; None when it may.

    A shared store is owned by root (or the service user): a directory's owner may
    remove any file in it, sticky or not.  A store of my own counts only while nobody
    else can write to it: a private store, whose records only I see.
    """
    me = os.geteuid() if me is None else me
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return f"{directory}: not a directory (a symlink or a file); remove it"
    others_write = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if info.st_uid in trusted_owners():
        if others_write and not info.st_mode & stat.S_ISVTX:
            # Without the sticky bit anyone could delete anyone's reservation.
            return f"{directory}: writable by others but not sticky; run: chmod 1777 {directory}"
        return None
    if info.st_uid == me and not others_write:
        return None
    return (
        f"{directory}: owned by {user_name(info.st_uid)}, who could delete or plant any "
        f"reservation in it; remove it, then {install_hint(directory)}"
    )


def ensure_directory(directory: str) -> None:
    """Check that the store may be written by this user; create it where that is safe.

    Root creates the shared store (mode 1777).  A normal user never does: that user
    would own it.  A normal user may create a private store (mode 0700) inside a
    directory that only they can write, as ``--demo`` does.
    """
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        _create(directory)
        info = os.lstat(directory)
    problem = directory_problem(directory, info)
    if problem:
        raise StoreError(problem)


def _create(directory: str) -> None:
    me = os.geteuid()
    parent = os.path.dirname(os.path.abspath(directory))
    if me != 0:
        try:
            up = os.stat(parent)
        except FileNotFoundError:
            up = None
        if up is not None and (up.st_uid != me or up.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            raise StoreError(f"{directory}: missing; {install_hint(directory)}")
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755 if me == 0 else 0o700, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
        if me == 0:
            # chmod after mkdir: the umask would strip the world-writable and sticky bits.
            os.chmod(directory, DIR_MODE)


# ---------------------------------------------------------------------------------------
# the locks


def is_lock_file(name: str) -> bool:
    return name == LOCK_NAME or _LOCK_FILE.fullmatch(name) is not None


class CardLocked(StoreError):
    """One card's lock could not be had (held too long, unreadable, not a file): the
    card, and who is in the way, so that a caller choosing cards can take another."""

    def __init__(self, message: str, gpu: int, holder: str) -> None:
        super().__init__(message)
        self.gpu, self.holder = gpu, holder


@contextlib.contextmanager
def locked(directory: str, gpus: Iterable[int], timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the advisory locks of these cards (``.lock-gpuN``), taken in index order so
    that two writers never wait for each other: a lock held forever by one user stops
    only the cards it names, and ``CardLocked`` names the card and the holder."""
    deadline = time.monotonic() + timeout
    with contextlib.ExitStack() as stack:
        for index in sorted(set(gpus)):
            path = os.path.join(directory, f"{LOCK_NAME}-gpu{index}")
            stack.enter_context(_locked_file(path, index, deadline, timeout))
        yield


@contextlib.contextmanager
def _locked_file(path: str, index: int, deadline: float, timeout: float) -> Iterator[None]:
    delay = 0.001
    while True:
        fd = _open_lock_file(path, index)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        holder = lock_holder(os.fstat(fd))
                        raise CardLocked(
                            f"{path}: locked by {holder} for {timeout:.0f} s; try again",
                            index, holder) from None
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


def lock_holder(info: os.stat_result, locks_file: str = "/proc/locks") -> str:
    """Who holds a flock on the file `info` describes, from the kernel's list of locks:
    "pid 123 (alice)", or "another process" where the list does not say."""
    want = (os.major(info.st_dev), os.minor(info.st_dev), info.st_ino)
    try:
        with open(locks_file, encoding="ascii", errors="replace") as fh:
            lines = fh.readlines()
    except OSError:
        return "another process"
    for line in lines:
        # "3: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; "3: -> FLOCK ..." waits
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->" or fields[1] != "FLOCK":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            where = (int(major, 16), int(minor, 16), int(inode))
            pid = int(fields[4])
        except ValueError:
            continue
        if where == want:
            try:
                owner = user_name(os.stat(f"/proc/{pid}").st_uid)
            except OSError:
                return f"pid {pid}"
            return f"pid {pid} ({owner})"
    return "another process"


def _open_lock_file(path: str, index: int) -> int:
    # O_NONBLOCK: a FIFO planted under the lock's name must not hang us.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444))
        fd = os.open(path, flags)
    except OSError as exc:  # unreadable (mode 000), a symlink (ELOOP)
        owner = user_name(os.lstat(path).st_uid)
        why = "made it unreadable" if isinstance(exc, PermissionError) else "planted it"
        raise CardLocked(f"{path}: {owner} {why}; ask them or root to remove it",
                         index, owner) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        owner = user_name(info.st_uid)
        raise CardLocked(f"{path}: not a regular file ({owner}'s); ask them or root to"
                         " remove it", index, owner)
    return fd


# ---------------------------------------------------------------------------------------
# writing: whole files only


def write_temp(directory: str, record: dict[str, Any], tag: str) -> str:
    """A complete, fsync'd, world-readable temp file holding `record` as JSON, named
    ``.tmp-<tag>-...``: the record's own module decides what the tag says (and so who
    may clean up a dead writer's leftover)."""
    import json  # here and in read_json: an empty store is read without it

    payload = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
    for _ in range(10):
        import secrets  # only when writing: reading the store is on `gputop --once`'s path

        name = f"{TMP_PREFIX}{tag}-{os.getpid()}-{secrets.token_hex(4)}"
        path = os.path.join(directory, name)
        try:
            fd = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE
            )
        except FileExistsError:
            continue
        try:
            os.fchmod(fd, FILE_MODE)  # the umask must not hide records from others
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
    raise StoreError(f"{directory}: cannot create a temporary file")


def link_new(directory: str, path: str, record: dict[str, Any], tag: str) -> bool:
    """Link a complete file holding `record` under `path`, which must not exist (False
    when it does): ``link()`` fails on a taken name, so two racers cannot both win, and
    a reader sees all of the file or nothing."""
    tmp = write_temp(directory, record, tag)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        # A temp file left behind counts for nothing; readers skip it.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return True


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


# ---------------------------------------------------------------------------------------
# reading: every file is someone's input


@contextlib.contextmanager
def open_directory(directory: str, problems: list[str]) -> Iterator[int | None]:
    """The directory opened for listing, or None: missing (nothing to say), or not
    readable (one line in `problems`).  Never through a symlink: a store replaced by a
    link to /etc is never listed."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        yield None
        return
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            problems.append(f"{directory}: not a directory (a symlink or a file); not read")
        else:
            problems.append(f"{directory}: {os_reason(exc)}")
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def read_json(
    dir_fd: int, name: str, path: str, max_bytes: int, problems: list[str]
) -> tuple[dict[str, Any], os.stat_result] | None:
    """The JSON object in file `name` of the directory open as `dir_fd`, and the file's
    fstat (its owner and times are the kernel's word, unlike its content).  None, with
    one line in `problems` saying why, for anything that must not count: a link, a FIFO,
    over `max_bytes`, not readable by everyone, not a JSON object.  Removed while we
    listed: None, nothing said."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        problems.append(f"{path}: {os_reason(exc)}; skipped")
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            problems.append(f"{path}: not a regular file; skipped")
            return None
        if info.st_mode & 0o444 != 0o444:
            # What one user cannot read must not count for anyone (root reads it all).
            problems.append(f"{path}: not readable by everyone; skipped")
            return None
        raw = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        problems.append(f"{path}: not a regular file of at most {max_bytes} bytes "
                        f"(larger than {max_bytes} bytes); skipped")
        return None
    import json

    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        problems.append(f"{path}: not valid JSON (corrupt); skipped")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path}: not a JSON object; skipped")
        return None
    return data, info


def owner_problem(record: dict[str, Any], owner_uid: int) -> str | None:
    """Why a record is not its file owner's (None when it is)."""
    uid = record.get("uid")
    if uid != owner_uid or isinstance(uid, bool):
        # The file says one user, the OS says another: someone wrote it by hand.
        return f"claims uid {uid!r} but is owned by uid {owner_uid} (foreign)"
    return None


Read = TypeVar("Read")


class ScanCache(Generic[Read]):
    """What was last read from each directory, good while the directory's stamp (device,
    inode, mtime, ctime) is unchanged and for at most CACHE_MAX_S: the dashboard reads
    the store every refresh, and thousands of planted files must not cost every user a
    core.  A file edited in place leaves the directory's times alone; it shows up within
    CACHE_MAX_S."""

    def __init__(self) -> None:
        self._read: dict[str, tuple[tuple[int, int, int, int], float, Read]] = {}

    def get(self, directory: str, info: os.stat_result) -> Read | None:
        """The cached reading of `directory`, whose fstat is `info`; None: read it."""
        cached = self._read.get(directory)
        if (cached is not None and cached[0] == _stamp(info)
                and time.monotonic() - cached[1] < CACHE_MAX_S):
            return cached[2]
        return None

    def put(self, directory: str, info: os.stat_result, read: Read) -> None:
        # A directory changed a moment ago may change again within one tick of the file
        # system's clock, unseen by its mtime: only a quiet one is cached.
        if time.time() - info.st_mtime > CACHE_QUIET_S:
            self._read[directory] = (_stamp(info), time.monotonic(), read)

    def clear(self) -> None:
        self._read.clear()


def _stamp(info: os.stat_result) -> tuple[int, int, int, int]:
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
