"""The queue's files in the reservation store, as a hostile user would write them.

Every field is someone's input; the kernel's facts (owner, change time, /proc) decide.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from gputop.actions import liveness, queue, reservations
from gputop.actions.dispatch import ActionEnv, handle


def _record(**extra: object) -> dict[str, object]:
    me = os.getpid()
    record: dict[str, object] = {
        "id": "0123abcd", "uid": os.geteuid(), "user": "me", "pid": me,
        "pid_start": liveness.process_start(me), "priority": "normal", "gpus": 1,
        "gpu_ids": None, "min_free_mem": None, "max_util": None, "for_s": None,
        "note": "", "command": "python train.py",
    }
    record.update(extra)
    return record


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    path.mkdir()
    path.chmod(0o1777)
    return path


def _plant(store: Path, name: str, record: object) -> Path:
    path = store / name
    path.write_text(json.dumps(record))
    return path


def test_submit_lists_and_withdraws_my_job(store: Path) -> None:
    job = queue.submit(str(store), {"gpus": 2, "priority": "high", "note": "sweep",
                                    "command": "python a.py", "user": "me"})
    (listed,) = queue.list_jobs(str(store))["jobs"]
    assert listed["id"] == job.id and listed["gpus"] == 2 and listed["priority"] == "high"
    assert listed["pid"] == os.getpid() and listed["submitted"] == job.submitted
    assert queue.in_line(job)
    # The reservation scanner knows these files: they are not "foreign".
    assert reservations.scan(str(store))["problems"] == []
    queue.withdraw(job)
    assert not queue.in_line(job) and queue.list_jobs(str(store))["jobs"] == []


@pytest.mark.parametrize(("change", "problem"), [
    ({"uid": 12345}, "claims uid 12345"),
    ({"priority": "urgent"}, "'priority' must be one of"),
    ({"gpus": 0}, "'gpus' must be 1..64"),
    ({"gpus": None, "gpu_ids": [0, 0]}, "bad 'gpu_ids'"),
    ({"gpu_ids": [1]}, "exactly one of 'gpus' and 'gpu_ids'"),
    ({"min_free_mem": 1e300}, "bad 'min_free_mem'"),
    ({"max_util": float("nan")}, "bad 'max_util'"),
    ({"for_s": 1e18}, "bad 'for_s'"),
    ({"note": "a\u202eb"}, "the note has a control character"),
    ({"command": "x" * 5000}, "not a regular file of at most 4096 bytes"),
    ({"id": "ffffffff"}, "its 'id' does not match its name"),
])
def test_bad_job_files_are_skipped_with_a_reason(store: Path, change: dict, problem: str
                                                 ) -> None:
    _plant(store, "job.0123abcd.json", _record(**change))
    found = queue.list_jobs(str(store))
    assert found["jobs"] == []
    assert len(found["problems"]) == 1 and problem in found["problems"][0]


def test_junk_names_fifos_and_symlinks_do_not_hang_or_count(store: Path, tmp_path: Path
                                                            ) -> None:
    os.mkfifo(store / "job.00000001.json")
    (store / "job.00000002.json").symlink_to(tmp_path / "elsewhere.json")
    _plant(tmp_path, "elsewhere.json", _record(id="00000002"))
    (store / "job.NOTHEX.json").write_text("{}")
    (store / "job.00000003.json").write_text("not json")
    found = queue.list_jobs(str(store))
    assert found["jobs"] == [] and len(found["problems"]) == 4


def test_a_job_is_in_line_only_while_its_owners_process_lives(store: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        start = liveness.process_start(sleeper.pid)
        _plant(store, "job.0000000a.json", _record(id="0000000a", pid=sleeper.pid,
                                                   pid_start=start))
        # Same pid, wrong start time: a later process that reused the pid.
        _plant(store, "job.0000000b.json", _record(id="0000000b", pid=sleeper.pid,
                                                   pid_start=(start or 0) + 1))
        assert [j["id"] for j in queue.list_jobs(str(store))["jobs"]] == ["0000000a"]
    finally:
        sleeper.kill()
        sleeper.wait()
    assert queue.list_jobs(str(store))["jobs"] == []


def test_borrowing_another_users_process_does_not_keep_a_job_in_line() -> None:
    init_start = liveness.process_start(1)
    assert liveness.process_alive(1, init_start, 0) == (os.stat("/proc/1").st_uid == 0)
    assert not liveness.process_alive(1, init_start, 65534)  # pid 1 is not nobody's
    assert not liveness.process_alive(True, 0, 0) and not liveness.process_alive(2**30, 0, 0)


def test_arrival_is_the_kernels_change_time_not_a_field(store: Path) -> None:
    # The kernel's file times come from a coarse clock (a few ms): space the changes out.
    first = _plant(store, "job.000000f1.json", _record(id="000000f1", submitted=0))
    time.sleep(0.05)
    _plant(store, "job.000000f2.json", _record(id="000000f2", submitted=-1e9))
    time.sleep(0.05)
    os.utime(first, (1, 1))  # an old mtime says nothing: only ctime counts
    ids = [j["id"] for j in queue.list_jobs(str(store))["jobs"]]
    assert ids == ["000000f2", "000000f1"]  # utime moved f1's ctime to now: later, not earlier


def test_a_reservation_for_a_job_lasts_as_long_as_its_process(store: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        job = {"id": "0000abcd", "pid": sleeper.pid,
               "pid_start": liveness.process_start(sleeper.pid)}
        reply = reservations.reserve(str(store), [0], time.time() + 600, "run", job=job)
        assert reply["ok"], reply
        (active,) = reservations.list_active(str(store))
        assert active["job"] == "0000abcd"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert reservations.list_active(str(store)) == []
    # A forged job field is refused like any bad field.
    bad = _plant(store, "index-1.1.json", {"gpu": 1, "uuid": None, "user": "x",
                                          "uid": os.geteuid(), "since": 1.0,
                                          "until": time.time() + 60, "note": "",
                                          "job": {"id": "../../x", "pid": 1, "pid_start": 1}})
    assert any("bad 'job'" in p for p in reservations.scan(str(store))["problems"])
    bad.unlink()


def test_cancel_through_the_dispatcher(store: Path) -> None:
    job = queue.submit(str(store), {"gpus": 1, "priority": "low", "command": "x"})
    env = ActionEnv(reservations_dir=str(store))
    assert handle({"op": "queue_cancel", "id": "../etc"}, env)["message"].startswith(
        "not a job id")
    assert handle({"op": "queue"}, env)["jobs"][0]["id"] == job.id
    readonly = ActionEnv(reservations_dir=str(store), readonly=True)
    assert handle({"op": "queue_cancel", "id": job.id}, readonly)["ok"] is False
    assert handle({"op": "queue_cancel", "id": job.id}, env) == {
        "ok": True, "message": f"cancelled job {job.id}"}
    assert handle({"op": "queue_cancel", "id": job.id}, env)["message"] == (
        f"no job {job.id} in line")


def test_a_symlinked_store_is_not_listed(store: Path, tmp_path: Path) -> None:
    _plant(store, "job.0000000c.json", _record(id="0000000c"))
    link = tmp_path / "link"
    link.symlink_to(store)
    found = queue.list_jobs(str(link))
    assert found["jobs"] == [] and found["problems"] == [
        f"{link}: not a directory (a symlink or a file); not read"]


def test_a_quiet_store_is_read_once_per_change(store: Path) -> None:
    path = _plant(store, "job.0000000d.json", _record(id="0000000d"))
    quiet = time.time() - 10  # unchanged for longer than CACHE_QUIET_S
    os.utime(store, (quiet, quiet))
    assert [j["id"] for j in queue.list_jobs(str(store))["jobs"]] == ["0000000d"]
    # Edited in place, the directory untouched: the cached read stands (up to
    # CACHE_MAX_S), so a planted file costs one read, not one per refresh.
    path.write_text("not json")
    assert [j["id"] for j in queue.list_jobs(str(store))["jobs"]] == ["0000000d"]
    # Any change to the directory (a job joining or leaving) is read at once.
    _plant(store, "job.0000000e.json", _record(id="0000000e"))
    found = queue.list_jobs(str(store))
    assert [j["id"] for j in found["jobs"]] == ["0000000e"]
    assert any("0000000d.json: not valid JSON" in p for p in found["problems"])


def test_junk_job_names_and_a_flood_of_one_owner_never_hide_my_job(store: Path) -> None:
    # Issue 25.2: 2,101 empty files named like jobs (not job.<8 hex>.json) came before the
    # cap and a real job was never read.
    for n in range(1000, 3101):
        (store / f"job.{n:05d}").touch()
    job = queue.submit(str(store), {"gpus": 1, "priority": "normal", "command": "real",
                                    "user": "me"})
    # Then another owner's flood of well-named files: only their oldest 32 are read.
    flood = store / "flood"
    for n in range(100):
        path = _plant(store, f"job.{n:08x}.json", _record(id=f"{n:08x}", uid=65534))
        os.chown(path, 65534, 65534)
    found = queue.list_jobs(str(store))
    assert [j["id"] for j in found["jobs"]] == [job.id]
    junk = [p for p in found["problems"] if "not job files" in p]
    assert len(junk) == 1 and "2101 file(s) named job.*" in junk[0]
    assert any("has 100 job files; read the oldest 32" in p for p in found["problems"])
    # The flood's files were read (32 of them, skipped as foreign: they claim uid 65534
    # and are owned by it, but no process of nobody's lives): at most one line each.
    assert len(found["problems"]) <= 2 + 32
    assert not flood.exists()
