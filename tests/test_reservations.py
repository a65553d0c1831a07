"""The reservation store against real files, real processes and real users.

Other users are real: the test runs as root and starts its workers with
``subprocess.Popen(user=UID)`` (no account needed for a bare uid), running the system
python3 on the stdlib-only store module, as the remote probe does.  Each worker reads
JSON commands on stdin and answers one JSON line per command.
"""

from __future__ import annotations

import json
import os
import pwd
import random
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gputop.actions import reservations as store

REPO = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = "/usr/bin/python3"
NOBODY = 65534
UUIDS = ["GPU-0000aaaa-1111", "GPU-0000bbbb-2222", "GPU-0000cccc-3333", "GPU-0000dddd-4444"]

# The worker: a real process, as another user, driving the store through its public API.
WORKER = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from gputop.actions import reservations as store
directory = sys.argv[2]
print(json.dumps({"ready": os.geteuid()}), flush=True)
for line in sys.stdin:
    cmd = json.loads(line)
    op = cmd.pop("op")
    try:
        if op == "reserve":
            out = store.reserve(directory, **cmd)
        elif op == "release":
            out = store.release(directory, **cmd)
        elif op == "scan":
            out = store.scan(directory, cmd.get("now"))
        elif op == "unlink":
            os.unlink(os.path.join(directory, cmd["name"]))
            out = {"ok": True}
        elif op == "replace":
            # What a hostile user could try by hand: put their own file over mine.
            tmp = os.path.join(directory, "evil-" + str(os.getpid()))
            with open(tmp, "w") as fh:
                fh.write("{}")
            try:
                os.rename(tmp, os.path.join(directory, cmd["name"]))
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            out = {"ok": True}
        elif op == "overwrite":
            with open(os.path.join(directory, cmd["name"]), "w") as fh:
                fh.write("{}")
            out = {"ok": True}
        elif op == "churn":
            # Reserve, extend, release in a loop until killed; until = base + step.
            base, step = cmd["base"], 0
            while True:
                for action in ("reserve", "extend", "release"):
                    step += 1
                    if action == "release":
                        store.release(directory, [cmd["gpu"]])
                    else:
                        store.reserve(directory, [cmd["gpu"]], base + step, "churn")
        else:
            out = {"ok": False, "message": "unknown op"}
    except OSError as exc:
        out = {"ok": False, "errno": exc.errno, "message": str(exc)}
    print(json.dumps(out), flush=True)
"""


class Worker:
    """One real process running as `uid`, speaking JSON lines."""

    def __init__(self, directory: str, uid: int) -> None:
        self.uid = uid
        self.proc = subprocess.Popen(
            [SYSTEM_PYTHON, "-c", WORKER, str(REPO), directory],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            user=uid,
            group=uid,
            extra_groups=[],
            cwd="/",
        )
        ready = self.read()
        assert ready == {"ready": uid}

    def send(self, op: str, **args: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"worker uid {self.uid} died"
        return json.loads(line)

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        self.send(op, **args)
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def base() -> Iterator[str]:
    """A directory other uids can traverse (pytest's tmp_path is root-only)."""
    if not os.path.exists(SYSTEM_PYTHON):
        pytest.skip(f"{SYSTEM_PYTHON} missing")
    path = tempfile.mkdtemp(prefix="gputop-res-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def directory(base: str) -> str:
    return os.path.join(base, "store")


class WorkerPool(dict):
    """uid -> its worker, started on first use."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self.directory = directory

    def __missing__(self, uid: int) -> Worker:
        worker = self[uid] = Worker(self.directory, uid)
        return worker


@pytest.fixture
def workers(directory: str) -> Iterator[WorkerPool]:
    if os.geteuid() != 0:
        pytest.skip("needs root to run workers as other users")
    store.ensure_directory(directory)
    pool = WorkerPool(directory)
    yield pool
    for worker in pool.values():
        worker.close()


# ---------------------------------------------------------------------------------------
# one user, one process


def test_reserve_writes_a_readable_file_and_lists_it(directory: str) -> None:
    now = time.time()
    out = store.reserve(directory, [0, 2], now + 3600, "sweep", gpu_uuids=UUIDS, now=now)
    assert out["ok"], out
    assert [r["gpu"] for r in out["reservations"]] == [0, 2]
    info = os.stat(directory)
    assert stat.S_IMODE(info.st_mode) == 0o1777
    names = sorted(n for n in os.listdir(directory) if not n.startswith("."))
    assert names == [f"{UUIDS[0]}.1.json", f"{UUIDS[2]}.1.json"]
    for name in names:
        assert stat.S_IMODE(os.stat(os.path.join(directory, name)).st_mode) == 0o644
    active = store.list_active(directory, now)
    assert [(r["gpu"], r["gpu_uuid"], r["note"]) for r in active] == [
        (0, UUIDS[0], "sweep"),
        (2, UUIDS[2], "sweep"),
    ]
    assert active[0]["user"] == "root" and active[0]["uid"] == 0
    assert active[0]["until"] == pytest.approx(now + 3600)


def test_list_active_keys_build_model_reservations(directory: str) -> None:
    from gputop.model import Reservation

    now = time.time()
    store.reserve(directory, [1], now + 60, "x", gpu_uuids=UUIDS, now=now)
    (found,) = store.list_active(directory, now)
    reservation = Reservation.from_dict(found)
    assert reservation.gpu == 1 and reservation.gpu_uuid == UUIDS[1]
    assert reservation.active(now) and not reservation.active(now + 61)


def test_extension_is_written_beside_my_claim_and_keeps_since(directory: str) -> None:
    now = time.time()
    store.reserve(directory, [1], now + 600, "first", gpu_uuids=UUIDS, now=now)
    out = store.reserve(directory, [1], now + 7200, "longer", gpu_uuids=UUIDS, now=now + 5)
    assert out["ok"] and "extended" in out["message"]
    (found,) = store.list_active(directory, now + 5)
    assert found["until"] == pytest.approx(now + 7200)
    assert found["since"] == pytest.approx(now)
    assert found["note"] == "longer"
    # The claim is never rewritten: its change time is its place in the queue.
    names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    assert names == [f"{UUIDS[1]}.1.ext.json", f"{UUIDS[1]}.1.json"]


def test_expired_reservation_counts_for_nothing(directory: str) -> None:
    now = time.time()
    store.reserve(directory, [0], now + 60, "", gpu_uuids=UUIDS, now=now)
    assert store.list_active(directory, now + 59)
    assert store.list_active(directory, now + 61) == []


def test_release_all_mine_and_nothing_left(directory: str) -> None:
    now = time.time()
    store.reserve(directory, [0, 1, 3], now + 60, "", gpu_uuids=UUIDS, now=now)
    out = store.release(directory, [1], gpu_uuids=UUIDS, now=now)
    assert out["ok"] and [r["gpu"] for r in out["released"]] == [1]
    assert [r["gpu"] for r in store.list_active(directory, now)] == [0, 3]
    out = store.release(directory, None, now=now)
    assert out["ok"] and sorted(r["gpu"] for r in out["released"]) == [0, 3]
    assert store.list_active(directory, now) == []
    assert store.release(directory, [2], gpu_uuids=UUIDS, now=now)["message"] == (
        "nothing to release"
    )


def test_reserve_is_all_or_nothing(directory: str, workers: WorkerPool) -> None:
    now = time.time()
    held = workers[NOBODY].call(
        "reserve", gpus=[2], until=now + 600, note="mine", gpu_uuids=UUIDS, now=now
    )
    assert held["ok"], held
    out = store.reserve(directory, [0, 1, 2], now + 600, "", gpu_uuids=UUIDS, now=now)
    assert not out["ok"] and out["holder"] == "nobody"
    assert "GPU 2 is reserved by nobody" in out["message"] and "(mine)" in out["message"]
    assert [r["gpu"] for r in store.list_active(directory, now)] == [2]


def test_index_keys_without_uuids(directory: str) -> None:
    now = time.time()
    out = store.reserve(directory, [3], now + 60, "", now=now)
    assert out["ok"]
    assert "index-3.1.json" in os.listdir(directory)
    # A client that knows the UUIDs sees the index-keyed reservation as the same card
    # and extends it where it is: a claim linked anew would lose its place in the queue.
    out = store.reserve(directory, [3], now + 120, "", gpu_uuids=UUIDS, now=now)
    assert out["ok"] and "extended" in out["message"]
    (held,) = store.list_active(directory, now)
    assert held["gpu"] == 3 and held["until"] == pytest.approx(now + 120)
    assert sorted(n for n in os.listdir(directory) if n.endswith(".json")) == [
        "index-3.1.ext.json", "index-3.1.json"]


def test_a_client_without_uuids_still_sees_and_releases_the_card(directory: str) -> None:
    now = time.time()
    assert store.reserve(directory, [2], now + 60, "", gpu_uuids=UUIDS, now=now)["ok"]
    # e.g. `gputop release --gpus 2` on a machine whose driver is gone: no UUID list
    out = store.reserve(directory, [2], now + 120, "again", now=now)
    assert out["ok"] and "extended" in out["message"]
    (held,) = store.list_active(directory, now)
    assert held["gpu_uuid"] == UUIDS[2] and held["note"] == "again"
    out = store.release(directory, [2], now=now)
    assert [r["gpu"] for r in out["released"]] == [2]
    assert store.list_active(directory, now) == []


# ---------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize(
    ("gpus", "until", "note", "expected"),
    [
        ([7], 3600, "", "no GPU 7 on this host (it has GPUs 0-3)"),
        (["GPU-ffff"], 3600, "", "no GPU GPU-ffff on this host"),
        (["bogus"], 3600, "", "bad GPU 'bogus'"),
        ([-1], 3600, "", "bad GPU index -1"),
        ([True], 3600, "", "bad GPU True"),
        ([], 3600, "", "no GPU given"),
        ([0], -5, "", "the end time is in the past"),
        ([0], 40 * 86400, "", "at most 31 days"),
        ([0], float("nan"), "", "the end time must be a number"),
        ([0], 3600, "evil\x1b[2Jnote", "control character ('\\x1b' at position 5)"),
        ([0], 3600, "line\nbreak", "control character"),
        ([0], 3600, "abc\u202etxt.exe", "control character"),
        ([0], 3600, "x" * 201, "the note is too long"),
        (list(range(65)), 3600, "", "at most 64 GPUs at once"),
    ],
)
def test_validation_errors(directory: str, gpus: list, until: float, note: str, expected: str):
    now = time.time()
    out = store.reserve(directory, gpus, now + until, note, gpu_uuids=UUIDS, now=now)
    assert out["ok"] is False
    assert expected in out["message"]
    assert "\n" not in out["message"]
    assert store.list_active(directory, now) == []


def test_uuid_names_the_card(directory: str) -> None:
    now = time.time()
    out = store.reserve(directory, [UUIDS[2], "1"], now + 60, "", gpu_uuids=UUIDS, now=now)
    assert out["ok"]
    assert [r["gpu"] for r in out["reservations"]] == [2, 1]


def test_handle_request_checks_types(directory: str) -> None:
    now = time.time()
    bad = [
        {"op": "reserve", "gpus": "0", "until": now + 60},
        {"op": "reserve", "gpus": [0], "until": "tomorrow"},
        {"op": "reserve", "gpus": [0], "until": now + 60, "note": 5},
        {"op": "release", "gpus": 0},
        {"op": "frobnicate"},
    ]
    for request in bad:
        out = store.handle_request(request, directory, UUIDS)
        assert out["ok"] is False and out["message"], request
    ok = store.handle_request({"op": "reserve", "gpus": [1], "until": now + 60}, directory, UUIDS)
    assert ok["ok"]
    listed = store.handle_request({"op": "reservations"}, directory, UUIDS)
    assert [r["gpu"] for r in listed["reservations"]] == [1]


def test_dispatch_reaches_the_store(directory: str) -> None:
    from gputop.actions import dispatch

    now = time.time()
    env = dispatch.ActionEnv(reservations_dir=directory, gpu_uuids=UUIDS)
    out = dispatch.handle({"op": "reserve", "gpus": [0], "until": now + 60, "note": "d"}, env)
    assert out["ok"], out
    listed = dispatch.handle({"op": "reservations"}, env)
    assert [r["user"] for r in listed["reservations"]] == ["root"]
    readonly = dispatch.ActionEnv(reservations_dir=directory, gpu_uuids=UUIDS, readonly=True)
    assert dispatch.handle({"op": "release", "gpus": None}, readonly)["ok"] is False
    assert dispatch.handle({"op": "release", "gpus": None}, env)["ok"]
    assert store.list_active(directory) == []


# ---------------------------------------------------------------------------------------
# a hostile or broken directory


def test_corrupt_and_foreign_files_are_reported_and_skipped(directory: str) -> None:
    now = time.time()
    store.reserve(directory, [0], now + 600, "good", gpu_uuids=UUIDS, now=now)
    d = Path(directory)
    (d / f"{UUIDS[1]}.1.json").write_text('{"gpu": 1, "unterminated')
    foreign = {"gpu": 2, "uuid": UUIDS[2], "user": "alice", "uid": 1000, "since": now,
               "until": now + 600, "note": "", "host": "x"}
    (d / f"{UUIDS[2]}.1.json").write_text(json.dumps(foreign))  # says alice, owned by root
    (d / "notes.txt").write_text("hello")
    os.mkfifo(d / "index-3.1.json")
    (d / "index-2.1.json").symlink_to("/etc/passwd")
    (d / f"{UUIDS[3]}.1.json").write_bytes(b"[" * 5000)

    found = store.scan(directory, now)
    assert [r["gpu"] for r in found["reservations"]] == [0]
    problems = "\n".join(found["problems"])
    assert f"{UUIDS[1]}.1.json: not valid JSON (corrupt); skipped" in problems
    assert "claims uid 1000 but is owned by uid 0 (foreign)" in problems
    assert "notes.txt: not a reservation file" in problems
    assert "index-3.1.json: not a regular file" in problems
    assert "index-2.1.json:" in problems  # a symlink is refused (O_NOFOLLOW)
    assert "larger than 4096 bytes" in problems
    assert len(found["problems"]) == 6

    # The corrupt file's generation is not reused, and the card can still be reserved.
    out = store.reserve(directory, [1], now + 600, "", gpu_uuids=UUIDS, now=now)
    assert out["ok"], out
    assert f"{UUIDS[1]}.2.json" in os.listdir(directory)


def test_a_file_whose_name_and_content_disagree_is_skipped(directory: str) -> None:
    now = time.time()
    store.ensure_directory(directory)
    me = pwd.getpwuid(os.getuid()).pw_name
    record = {"user": me, "uid": os.getuid(), "since": now, "until": now + 600,
              "note": "", "host": "x"}
    d = Path(directory)
    # Well-formed records by our own uid, but each under another card's name.
    (d / "index-1.1.json").write_text(json.dumps({**record, "gpu": 3, "uuid": None}))
    (d / f"{UUIDS[0]}.1.json").write_text(json.dumps({**record, "gpu": 0, "uuid": UUIDS[2]}))
    found = store.scan(directory, now)
    assert found["reservations"] == []
    problems = "\n".join(found["problems"])
    assert "index-1.1.json: " in problems and "does not match its 'gpu'" in problems
    assert f"{UUIDS[0]}.1.json: " in problems and "does not match its 'uuid'" in problems
    assert len(found["problems"]) == 2


def test_a_file_that_jumps_ahead_does_not_take_an_active_card(
    directory: str, workers: WorkerPool
) -> None:
    now = time.time()
    assert workers[10001].call("reserve", gpus=[0], until=now + 600, note="first")["ok"]
    # root plays a user who writes a later generation by hand, around the lock
    record = {"gpu": 0, "uuid": None, "user": "root", "uid": 0, "since": now,
              "until": now + 9000, "note": "cut in line", "host": "x"}
    Path(directory, "index-0.7.json").write_text(json.dumps(record))
    found = store.scan(directory, now)
    assert [(r["gpu"], r["uid"]) for r in found["reservations"]] == [(0, 10001)]
    assert any("index-0.7.json: conflicts with index-0.1.json" in p for p in found["problems"])
    out = workers[NOBODY].call("reserve", gpus=[0], until=now + 60, note="")
    assert out["ok"] is False and out["holder"] == "uid 10001"


def test_existing_directory_must_be_safe(base: str) -> None:
    now = time.time()
    loose = os.path.join(base, "loose")
    os.mkdir(loose)
    os.chmod(loose, 0o777)  # world-writable without the sticky bit
    out = store.reserve(loose, [0], now + 60, "", now=now)
    assert not out["ok"] and "not sticky" in out["message"]
    link = os.path.join(base, "link")
    os.symlink(loose, link)
    out = store.reserve(link, [0], now + 60, "", now=now)
    assert not out["ok"] and "not a directory" in out["message"]


def test_missing_directory_lists_nothing(base: str) -> None:
    assert store.list_active(os.path.join(base, "nowhere")) == []
    assert store.release(os.path.join(base, "nowhere"))["ok"]


# ---------------------------------------------------------------------------------------
# two real users


def test_another_user_cannot_release_or_replace_my_reservation(
    directory: str, workers: WorkerPool
) -> None:
    now = time.time()
    alice, bob = workers[10001], workers[NOBODY]
    held = alice.call("reserve", gpus=[0], until=now + 600, note="alice's", gpu_uuids=UUIDS)
    assert held["ok"], held
    name = f"{UUIDS[0]}.1.json"
    assert os.stat(os.path.join(directory, name)).st_uid == 10001

    out = bob.call("release", gpus=[0], gpu_uuids=UUIDS)
    assert out["ok"] is False and out["holder"] == "uid 10001"
    out = bob.call("reserve", gpus=[0], until=now + 900, note="", gpu_uuids=UUIDS)
    assert out["ok"] is False and out["holder"] == "uid 10001"
    assert "GPU 0 is reserved by uid 10001" in out["message"]
    # The operating system, not this code, is what stops a user who goes around it.
    for op in ("unlink", "replace", "overwrite"):
        out = bob.call(op, name=name)
        assert out["ok"] is False and out["errno"] in (1, 13), (op, out)
    (still,) = store.list_active(directory, now)
    assert still["uid"] == 10001 and still["note"] == "alice's"

    # bob's own release of "everything" does not touch alice's card
    assert bob.call("release")["released"] == []
    # root can
    out = store.release(directory, [0], gpu_uuids=UUIDS, now=now)
    assert out["ok"] and out["released"][0]["uid"] == 10001
    assert store.list_active(directory, now) == []


def test_expired_reservation_of_another_user_is_taken_over(
    directory: str, workers: WorkerPool
) -> None:
    now = time.time()
    alice, bob = workers[10001], workers[NOBODY]
    assert alice.call("reserve", gpus=[1], until=now + 30, note="", gpu_uuids=UUIDS, now=now)["ok"]
    later = now + 60
    out = bob.call("reserve", gpus=[1], until=later + 600, note="", gpu_uuids=UUIDS, now=later)
    assert out["ok"], out
    names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    # bob may not delete alice's expired file (sticky), so his is the next generation.
    assert names == [f"{UUIDS[1]}.1.json", f"{UUIDS[1]}.2.json"]
    (holder,) = store.list_active(directory, later)
    assert holder["user"] == "nobody"
    # alice coming back cannot get it, but her next call cleans her expired file
    out = alice.call("reserve", gpus=[1], until=later + 60, note="", gpu_uuids=UUIDS, now=later)
    assert out["ok"] is False and out["holder"] == "nobody"
    names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    assert names == [f"{UUIDS[1]}.2.json"]


# ---------------------------------------------------------------------------------------
# stress: real processes racing


@pytest.mark.slow
def test_sixteen_users_race_for_one_card_fifty_rounds(
    directory: str, workers: WorkerPool
) -> None:
    racers = [workers[20000 + i] for i in range(16)]
    until = time.time() + 3600
    for round_no in range(50):
        for racer in racers:  # all wake up at once: each is blocked on stdin
            racer.send("reserve", gpus=[round_no], until=until, note=f"r{round_no}")
        answers = [racer.read() for racer in racers]
        winners = [r.uid for r, a in zip(racers, answers, strict=True) if a["ok"]]
        assert len(winners) == 1, (round_no, answers)
        winner = f"uid {winners[0]}"
        losers = [a for a in answers if not a["ok"]]
        assert all(a["holder"] == winner for a in losers), losers
        held = [r for r in store.list_active(directory) if r["gpu"] == round_no]
        assert [r["uid"] for r in held] == winners
    assert len(store.list_active(directory)) == 50
    assert store.scan(directory)["problems"] == []


@pytest.mark.slow
def test_thousand_reserve_release_cycles_lose_nothing(
    directory: str, workers: WorkerPool
) -> None:
    now = time.time()
    # a long reservation of someone else must survive all the churn around it
    keeper = workers[NOBODY]
    assert keeper.call("reserve", gpus=[9], until=now + 3600, note="keep")["ok"]
    cyclers = [workers[30000 + i] for i in range(4)]
    for cycle in range(250):
        for i, worker in enumerate(cyclers):
            worker.send("reserve", gpus=[i], until=now + 600 + cycle, note=str(cycle))
        for worker in cyclers:
            assert worker.read()["ok"]
        active = {r["gpu"]: r for r in store.list_active(directory)}
        assert sorted(active) == [0, 1, 2, 3, 9]
        assert all(active[i]["note"] == str(cycle) for i in range(4))
        for i, worker in enumerate(cyclers):
            worker.send("release", gpus=[i])
        for worker in cyclers:
            out = worker.read()
            assert out["ok"] and len(out["released"]) == 1
        assert [r["gpu"] for r in store.list_active(directory)] == [9]
    assert sorted(n for n in os.listdir(directory) if not n.startswith(".")) == ["index-9.1.json"]


@pytest.mark.slow
def test_sigkill_at_random_points_leaves_old_or_new_state(
    directory: str, workers: WorkerPool
) -> None:
    rng = random.Random(6)
    base_until = time.time() + 3600
    uid = 40000
    for round_no in range(40):
        writer = Worker(directory, uid)
        writer.send("churn", gpu=5, base=base_until)
        time.sleep(rng.uniform(0.0, 0.03))
        os.kill(writer.proc.pid, signal.SIGKILL)
        writer.proc.wait()
        found = store.scan(directory)
        assert found["problems"] == [], (round_no, found["problems"])
        held = [r for r in found["reservations"] if r["gpu"] == 5]
        assert len(held) <= 1
        if held:
            # a value the writer meant to write, whole: never a torn or mixed file
            step = held[0]["until"] - base_until
            assert step == int(step) and 1 <= step < 10**6 and held[0]["note"] == "churn"
        # whatever the kill left (a temp file, the lock) does not stop the next writer
        nxt = workers[NOBODY].call("reserve", gpus=[6 + round_no], until=base_until, note="")
        assert nxt["ok"], nxt
    leftovers = [n for n in os.listdir(directory) if n.startswith(store.TMP_PREFIX)]
    assert all(os.stat(os.path.join(directory, n)).st_uid == uid for n in leftovers)
    # root's next change cleans a dead writer's temp files
    store.release(directory, [5])
    assert not [n for n in os.listdir(directory) if n.startswith(store.TMP_PREFIX)]


def test_extend_moves_only_what_i_hold(directory: str) -> None:
    now = time.time()
    out = store.extend(directory, [0], now + 600, "", gpu_uuids=UUIDS, now=now)
    assert out["ok"] is False and "you hold no reservation of it" in out["message"]
    assert store.list_active(directory, now) == []
    assert store.reserve(directory, [0], now + 600, "a", gpu_uuids=UUIDS, now=now)["ok"]
    out = store.extend(directory, [0], now + 900, "b", gpu_uuids=UUIDS, now=now)
    assert out["ok"] and "extended" in out["message"]
    (held,) = store.list_active(directory, now)
    assert held["until"] == pytest.approx(now + 900) and held["note"] == "b"
