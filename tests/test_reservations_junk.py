"""Junk in the shared store must cost its planter, never the reader (issue 25, point 1).

Real users on a root-owned sticky store, gputop's fake NVIDIA driver (4 idle cards) read
through the real pynvml, and every command run as a real process: alice reserves card
0, mallory plants files, bob asks.  What decides "reserved" is read by the cards' own
names, so how many other files exist, or how they sort, changes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import fakenvml
from helpers.users import SYSTEM_PYTHON, ensure_users, portable_gputop_dir

from gputop.actions import reservations as store

ALICE, MALLORY, BOB = "gt25a", "gt25b", "gt25c"
# The fake driver's UUIDs: "GPU-fa6e..." sorts after every planted "GPU-0000-N".
UUIDS = [f"GPU-fa6e0000-0000-4000-8000-{i:012d}" for i in range(4)]
LIMIT_S = 120


@dataclass
class Host:
    root: Path
    store: Path
    env: dict[str, str]
    users: dict[str, Any]

    def gputop(self, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        entry = self.users[user]
        command = [SYSTEM_PYTHON, "-m", "gputop.cli", *args[:1],
                   "--config", str(self.root / "config.yaml"), *args[1:]]
        return subprocess.run(command, env=self.env, text=True, capture_output=True,
                              user=entry.pw_uid, group=entry.pw_gid, extra_groups=[],
                              cwd="/", timeout=LIMIT_S, check=False)

    def plant(self, user: str, names: list[str], content: bytes = b"{}") -> None:
        """Files as ``user`` could write them by hand: theirs, as the kernel records it."""
        uid = self.users[user].pw_uid
        for name in names:
            fd = os.open(self.store / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, content)
            os.fchown(fd, uid, uid)
            os.close(fd)


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, Any]]:
    with ensure_users([ALICE, MALLORY, BOB]) as entries:
        yield {e.pw_name: e for e in entries}


@pytest.fixture(scope="module")
def portable() -> Iterator[Path]:
    with portable_gputop_dir("gputop-junk-code-") as lib:
        yield lib


@pytest.fixture
def host(users: dict[str, Any], portable: Path) -> Iterator[Host]:
    root = Path(tempfile.mkdtemp(prefix="gputop-junk-"))
    try:
        os.chmod(root, 0o755)
        driver = fakenvml.install_library(root / "nvml")
        directory = root / "store"
        store.ensure_directory(str(directory))  # as an admin makes it: root's, 1777
        assert directory.stat().st_mode & 0o7777 == 0o1777
        scenario = fakenvml.write_scenario(root / "scenario", fakenvml.idle_cards(4))
        (root / "config.yaml").write_text(f"reservations: {{dir: {directory}}}\n")
        (root / "config.yaml").chmod(0o644)
        env = fakenvml.environment(scenario, driver)
        env.update(PYTHONPATH=str(portable), HOME=str(root), NO_COLOR="1")
        for name in ("GPUTOP_HOSTS", "GPUTOP_RESERVATIONS_DIR"):
            env.pop(name, None)
        yield Host(root, directory, env, users)
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _alice_holds_card_0(host: Host) -> None:
    done = host.gputop(ALICE, "reserve", "--gpus", "0", "--for", "2h", "--note", "real")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "CUDA_VISIBLE_DEVICES=0\n"


def _everyone_sees_alice(host: Host) -> None:
    listed = host.gputop(BOB, "reservations", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(r["gpu"], r["user"], r["note"]) for r in json.loads(listed.stdout)] == [
        (0, ALICE, "real")]
    once = host.gputop(BOB, "--once")
    assert once.returncode == 0, once.stderr
    assert f"GPU 0 reserved by {ALICE} until" in once.stdout
    # Plain pick refuses card 0, and so does every stricter pick.
    for extra in ((), ("--min-free-mem", "1G"), ("--max-util", "50")):
        four = host.gputop(BOB, "pick", "--count", "4", *extra)
        assert four.returncode == 4, (extra, four.stdout, four.stderr)
        assert f"GPU 0: reserved by {ALICE}" in four.stderr
        three = host.gputop(BOB, "pick", "--count", "3", "--json", *extra)
        assert three.returncode == 0, three.stderr
        assert sorted(row["index"] for row in json.loads(three.stdout)) == [1, 2, 3]
    taken = host.gputop(BOB, "reserve", "--gpus", "0", "--for", "1h")
    assert taken.returncode == 4 and f"GPU 0 is reserved by {ALICE}" in taken.stderr
    some = host.gputop(BOB, "reserve", "--count", "4", "--for", "1h")
    assert some.returncode == 4 and f"GPU 0: reserved by {ALICE}" in some.stderr


def test_eleven_hundred_planted_names_that_sort_first_hide_nothing(host: Host) -> None:
    _alice_holds_card_0(host)
    host.plant(MALLORY, [f"GPU-0000-{n}.1.json" for n in range(1, 1101)])
    _everyone_sees_alice(host)
    listed = host.gputop(BOB, "reservations")
    lines = listed.stderr.splitlines()
    # Counted and named once, first: never lost behind a cut of per-file lines.
    assert lines[0].startswith(
        f"gputop reservations: {host.store}: 1100 reservation files that name no GPU of this"
        " host (GPU-0000-1.1.json, GPU-0000-10.1.json, GPU-0000-100.1.json, ...); skipped")
    assert len(lines) == 1, lines
    # Bob's reservation of a free card is made and seen, junk or not.
    mine = host.gputop(BOB, "reserve", "--count", "1", "--for", "1h")
    assert mine.returncode == 0, mine.stderr
    again = host.gputop(ALICE, "reservations", "--json")
    assert sorted(r["user"] for r in json.loads(again.stdout)) == [ALICE, BOB]


def test_junk_under_a_real_cards_name_costs_only_its_planter(host: Host) -> None:
    _alice_holds_card_0(host)
    # Junk named for card 0 itself, and a "claim" of mallory's among it.
    host.plant(MALLORY, [f"{UUIDS[0]}.{n}.json" for n in range(2, 60)])
    now = time.time()
    record = {"gpu": 1, "uuid": UUIDS[1], "user": MALLORY, "uid": host.users[MALLORY].pw_uid,
              "since": now, "until": now + 3600, "note": "", "host": "x"}
    host.plant(MALLORY, [f"{UUIDS[1]}.{n}.json" for n in range(1, 12)],
               json.dumps(record).encode())
    _everyone_sees_alice(host)
    listed = host.gputop(BOB, "reservations")
    assert (f"{host.store}: {MALLORY} owns 58 files named for {UUIDS[0]}"
            f" ({UUIDS[0]}.10.json, ...); none of them counts") in listed.stderr
    # Eleven claims of card 1 by one user: none counts, the card is free.
    assert f"{MALLORY} owns 11 files named for {UUIDS[1]}" in listed.stderr
    taken = host.gputop(BOB, "reserve", "--gpus", "1", "--for", "1h")
    assert taken.returncode == 0, taken.stderr


def test_a_planted_last_generation_does_not_make_a_new_claim_invisible(host: Host) -> None:
    # The highest generation a reader accepts: "next after it" would be a name nobody reads.
    host.plant(MALLORY, [f"{UUIDS[2]}.999999999999.json"])
    done = host.gputop(BOB, "reserve", "--gpus", "2", "--for", "1h")
    assert done.returncode == 0, done.stderr
    assert (host.store / f"{UUIDS[2]}.1.json").exists()
    seen = host.gputop(ALICE, "reservations", "--json")
    assert [(r["gpu"], r["user"]) for r in json.loads(seen.stdout)] == [(2, BOB)]


def test_skipped_counts_come_before_the_cut_of_per_file_lines(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to plant files of other uids")
    directory = tmp_path / "store"
    store.ensure_directory(str(directory))
    now = time.time()
    assert store.reserve(str(directory), [0], now + 600, "real", gpu_uuids=UUIDS, now=now)["ok"]
    for n in range(1, 2001):
        (directory / f"GPU-0000-{n}.1.json").write_text("{}")
    # Fifty unreadable claims of card 3 by ten uids, five each: fifty per-file lines.
    for uid in range(20001, 20011):
        for n in range(5):
            path = directory / f"{UUIDS[3]}.{uid * 10 + n}.json"
            path.write_text("{")
            os.chown(path, uid, uid)
    found = store.scan(str(directory), now, gpu_uuids=UUIDS)
    assert [(r["gpu"], r["note"]) for r in found["reservations"]] == [(0, "real")]
    problems = found["problems"]
    assert problems[0].startswith(f"{directory}: 2000 reservation files that name no GPU")
    assert problems[-1] == f"{directory}: 10 more problems"
    assert len(problems) == 1 + 2 * store.MAX_PROBLEMS + 1
