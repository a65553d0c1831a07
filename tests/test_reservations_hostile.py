"""Attacks on the reservation store by a hostile local user, each reproduced for real.

Two real accounts are created for the module (gt12a plays alice, gt12b plays mallory)
and drive the store from their own processes (test_reservations.Worker); mallory also
writes files by hand, as anyone with a shell could.  Every directory is private to the
test: the machine's real /var/tmp/gputop-reservations is never touched.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.users import ensure_users
from test_reservations import SYSTEM_PYTHON, UUIDS, Worker

from gputop.actions import reservations as store

ALICE, MALLORY = "gt12a", "gt12b"


@pytest.fixture(scope="module")
def users() -> Iterator[tuple[int, int]]:
    if not os.path.exists(SYSTEM_PYTHON):
        pytest.skip(f"{SYSTEM_PYTHON} missing")
    with ensure_users([ALICE, MALLORY]) as (alice, mallory):
        yield alice.pw_uid, mallory.pw_uid


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gputop-hostile-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def shared(base: Path) -> Path:
    """The shared store as an admin makes it: root's, mode 1777."""
    directory = base / "store"
    store.ensure_directory(str(directory))
    return directory


class People:
    def __init__(self, directory: Path, users: tuple[int, int]) -> None:
        self.alice = Worker(str(directory), users[0])
        self.mallory = Worker(str(directory), users[1])

    def close(self) -> None:
        self.alice.close()
        self.mallory.close()


@pytest.fixture
def people(shared: Path, users: tuple[int, int]) -> Iterator[People]:
    both = People(shared, users)
    yield both
    both.close()


def _plant(directory: Path, name: str, uid: int, **fields: object) -> Path:
    """A file written by hand, owned by `uid`, as that user could write it."""
    now = time.time()
    record = {"gpu": 0, "uuid": UUIDS[0], "user": pwd.getpwuid(uid).pw_name, "uid": uid,
              "since": now, "until": now + 3600, "note": "", "host": "x", **fields}
    path = directory / name
    path.write_text(json.dumps(record))
    path.chmod(0o644)
    os.chown(path, uid, uid)
    return path


def test_a_planted_low_generation_does_not_steal_a_card(shared: Path, people: People) -> None:
    now = time.time()
    alice_uid = people.alice.uid
    held = people.alice.call("reserve", gpus=[0], until=now + 600, note="alice's",
                             gpu_uuids=UUIDS)
    assert held["ok"], held
    # Generation 0, leading zeros, and the next canonical generation, all valid records.
    for name in (f"{UUIDS[0]}.0.json", f"{UUIDS[0]}.01.json", f"{UUIDS[0]}.2.json"):
        _plant(shared, name, people.mallory.uid, until=now + 9000, note="mine now")
    found = store.scan(str(shared), now)
    assert [(r["gpu"], r["uid"]) for r in found["reservations"]] == [(0, alice_uid)]
    problems = "\n".join(found["problems"])
    assert f"{UUIDS[0]}.0.json: not a reservation file" in problems
    assert f"{UUIDS[0]}.01.json: not a reservation file" in problems
    assert f"{UUIDS[0]}.2.json: conflicts with {UUIDS[0]}.1.json (held by {ALICE})" in problems
    # mallory cannot take it; alice can still extend and release it
    out = people.mallory.call("reserve", gpus=[0], until=now + 60, note="", gpu_uuids=UUIDS)
    assert out["ok"] is False and out["holder"] == ALICE
    out = people.alice.call("reserve", gpus=[0], until=now + 1200, note="more", gpu_uuids=UUIDS)
    assert out["ok"] and "extended" in out["message"], out
    (holder,) = store.list_active(str(shared), now)
    assert holder["uid"] == alice_uid and holder["until"] == pytest.approx(now + 1200)
    out = people.alice.call("release", gpus=[0], gpu_uuids=UUIDS)
    assert out["ok"] and [r["uid"] for r in out["released"]] == [alice_uid]


def test_an_extension_planted_by_another_user_counts_for_nothing(
    shared: Path, people: People
) -> None:
    now = time.time()
    assert people.alice.call("reserve", gpus=[0], until=now + 600, note="",
                             gpu_uuids=UUIDS)["ok"]
    # mallory's "extension" of alice's claim, cutting it short
    _plant(shared, f"{UUIDS[0]}.1.ext.json", people.mallory.uid, until=now + 1)
    (holder,) = store.list_active(str(shared), now + 5)
    assert holder["uid"] == people.alice.uid and holder["until"] == pytest.approx(now + 600)


def test_a_store_owned_by_a_user_is_refused_for_writing_and_warned_for_reading(
    base: Path, users: tuple[int, int]
) -> None:
    now = time.time()
    planted = base / "store"
    planted.mkdir()
    planted.chmod(0o1777)
    os.chown(planted, users[1], users[1])  # mallory got there first
    alice = Worker(str(planted), users[0])
    try:
        out = alice.call("reserve", gpus=[0], until=now + 600, note="", gpu_uuids=UUIDS)
    finally:
        alice.close()
    assert out["ok"] is False
    assert f"owned by {MALLORY}, who could delete or plant any reservation" in out["message"]
    assert f"install -d -m 1777 -o root -g root {planted}" in out["message"]
    assert os.listdir(planted) == []
    problems = store.scan(str(planted), now)["problems"]
    assert problems == [f"{planted}: owned by {MALLORY}, who could delete or plant any "
                        "reservation in it (read anyway)"]


def test_a_normal_user_never_creates_the_shared_store(base: Path, users: tuple[int, int]) -> None:
    now = time.time()
    parent = base / "vartmp"
    parent.mkdir()
    parent.chmod(0o1777)  # like /var/tmp
    missing = parent / "gputop-reservations"
    mallory = Worker(str(missing), users[1])
    try:
        out = mallory.call("reserve", gpus=[0], until=now + 600, note="", gpu_uuids=UUIDS)
    finally:
        mallory.close()
    assert out["ok"] is False and "missing; an admin creates it once" in out["message"]
    assert not missing.exists()


def test_a_user_may_keep_a_private_store_in_a_directory_of_their_own(
    base: Path, users: tuple[int, int]
) -> None:
    home = base / "home"
    home.mkdir(mode=0o700)
    os.chown(home, users[1], users[1])
    private = home / "reservations"
    mallory = Worker(str(private), users[1])
    try:
        out = mallory.call("reserve", gpus=[0], until=time.time() + 600, note="",
                           gpu_uuids=UUIDS)
    finally:
        mallory.close()
    assert out["ok"], out
    info = private.stat()
    assert info.st_uid == users[1] and info.st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    ("until", "why"),
    [
        (1e18, "'until' more than 31 days after the file was written"),
        (1e300, "'until' more than 31 days after the file was written"),
        (10**400, "bad or missing 'until'"),
        (float("nan"), "bad or missing 'until'"),
        (float("inf"), "bad or missing 'until'"),
        ("tomorrow", "bad or missing 'until'"),
    ],
)
def test_a_planted_absurd_end_time_is_skipped_not_fatal(
    shared: Path, until: object, why: str
) -> None:
    now = time.time()
    assert store.reserve(str(shared), [1], now + 600, "", gpu_uuids=UUIDS, now=now)["ok"]
    _plant(shared, f"{UUIDS[0]}.1.json", 0, until=until)
    found = store.scan(str(shared), now)
    assert [r["gpu"] for r in found["reservations"]] == [1]
    assert found["problems"] == [f"{shared}/{UUIDS[0]}.1.json: {why}; skipped"]
    # and every change still works: the card of the bad file too
    out = store.reserve(str(shared), [0, 1], now + 900, "", gpu_uuids=UUIDS, now=now)
    assert out["ok"], out
    assert store.release(str(shared), None, now=now)["ok"]


def test_a_symlinked_store_is_not_followed_for_reading(base: Path) -> None:
    link = base / "store"
    link.symlink_to("/etc")
    found = store.scan(str(link))
    assert found["reservations"] == []
    assert found["problems"] == [f"{link}: not a directory (a symlink or a file); not read"]


def test_thousands_of_junk_files_make_one_line(shared: Path) -> None:
    for i in range(3000):
        (shared / f"junk-{i:05d}").touch()
    _plant(shared, f"{UUIDS[0]}.1.json", 0)
    found = store.scan(str(shared))
    assert [r["gpu"] for r in found["reservations"]] == [0]
    assert found["problems"] == [f"{shared}: 3000 files that are not reservation files"
                                 " (junk-00000, junk-00001, junk-00002, ...); skipped"]


HOLD_LOCK = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o444)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_lock_held_forever_stops_one_card_and_names_its_holder(
    shared: Path, people: People
) -> None:
    lock = shared / ".lock-gpu0"
    holder = subprocess.Popen([SYSTEM_PYTHON, "-c", HOLD_LOCK, str(lock)], user=people.mallory.uid,
                              group=people.mallory.uid, extra_groups=[], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        now = time.time()
        out = people.alice.call("reserve", gpus=[1], until=now + 600, note="", gpu_uuids=UUIDS)
        assert out["ok"], out
        with pytest.raises(store.ReservationError) as caught, store.locked(str(shared), [1, 0],
                                                                         timeout=0.1):
            pass
        assert str(caught.value) == (
            f"{lock}: locked by pid {holder.pid} ({MALLORY}) for 0 s; try again"
        )
    finally:
        holder.kill()
        holder.wait()
    with store.locked(str(shared), [0, 1], timeout=5):
        pass  # the kernel dropped the lock with its holder


@pytest.mark.parametrize("until", [1e18, 1e300])
def test_the_reservations_command_survives_a_planted_end_time(
    shared: Path, tmp_path: Path, until: float
) -> None:
    bad = _plant(shared, "index-0.1.json", 0, uuid=None, until=until)
    config = tmp_path / "config.yaml"
    config.write_text(f"reservations:\n  dir: {shared}\n")
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "reservations", "--config",
                           str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{bad}: 'until' more than 31 days after the file was written; skipped" in done.stderr


def test_a_quiet_directory_is_read_once_until_it_changes(shared: Path) -> None:
    now = time.time()
    assert store.reserve(str(shared), [0], now + 600, "first", gpu_uuids=UUIDS, now=now)["ok"]
    old = now - 60
    os.utime(shared, (old, old))  # quiet for a minute
    assert store.list_active(str(shared), now)[0]["note"] == "first"
    # An in-place edit does not change the directory: the cached scan answers.
    path = shared / f"{UUIDS[0]}.1.json"
    path.write_text(path.read_text().replace('"first"', '"edited"'))
    assert store.list_active(str(shared), now)[0]["note"] == "first"
    # A new file changes the directory's mtime: read again.
    (shared / "junk").touch()
    assert store.list_active(str(shared), now)[0]["note"] == "edited"
