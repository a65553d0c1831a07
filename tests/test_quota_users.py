"""GPU-hour quotas with real users and a real Unix group (issue 28.5): `gputop quota` shows
a user their own standing and root everyone's; `gputop run` beyond a quota is refused or
waits at low priority, as the root-owned policy says."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_run_queue import _UUIDS, Host, driver, host, portable, users, wait_for  # noqa: F401

from gputop.actions import reservations
from gputop.analysis import quota
from gputop.ledger import store
from gputop.ledger.writer import Recorder
from gputop.model import Gpu, GpuProcess, HostSnapshot

GIB = 1024**3
GROUP = "gt28lab"
STEP = 10.0
SAMPLES = 18
GPUS = 4


@pytest.fixture(scope="module")
def group(users: dict[str, Any]) -> Iterator[str]:  # noqa: F811
    subprocess.run(["groupdel", GROUP], check=False, capture_output=True)
    subprocess.run(["groupadd", "--system", GROUP], check=True, capture_output=True)
    try:
        for name in ("gt18a", "gt18b"):
            subprocess.run(["usermod", "-aG", GROUP, name], check=True, capture_output=True)
        yield GROUP
    finally:
        subprocess.run(["groupdel", GROUP], check=False, capture_output=True)


def _ledger(path: Path, user: str = "gt18a") -> float:
    """``user`` on all four cards for the last three minutes; returns the GPU-hours of it
    that fall in this month (all of it, unless the month began a minute ago)."""
    path.parent.mkdir(mode=0o755, exist_ok=True)  # a ledger's directory: only root writes
    path.parent.chmod(0o755)
    recorder = Recorder(store.open_writer(str(path)), STEP, GIB)
    now = time.time()
    start, _reset = quota.period_bounds(now, "month")
    counted = 0.0
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", name="NVIDIA H100", util_gpu=50,
                     mem_used=GIB, mem_total=80 * GIB) for i in range(GPUS))
    for n in range(SAMPLES):
        t = now - (SAMPLES - n) * STEP
        procs = tuple(GpuProcess(pid=100 + i, gpu=i, gpu_mem=GIB, sm_util=50, user=user,
                                 start_time=now - 3600) for i in range(GPUS))
        assert recorder.record(HostSnapshot(host="h", time=t, gpus=gpus, processes=procs))
        if int(t // 3600) * 3600 >= start:  # the ledger's hours are whole
            counted += GPUS * STEP / 3600
    recorder.conn.close()
    path.chmod(0o644)
    return counted


def _policy(host: Host, ledger: Path, over: str, users_q: str, groups_q: str = "{}") -> None:  # noqa: F811
    host.policy(f"quotas: {{users: {users_q}, groups: {groups_q}, period: month, over: {over},"
                f" ledger: {ledger}}}\n")


def test_quota_shows_mine_and_root_sees_all(host: Host, group: str) -> None:  # noqa: F811
    ledger = host.root / "var" / "ledger.sqlite"
    used = _ledger(ledger)
    assert used > 0
    _policy(host, ledger, "refuse", "{gt18a: 0.1, gt18b: 5, gt18c: 5}", f"{{{group}: 100}}")
    mine = host.run("gt18a", "quota")
    assert mine.returncode == 0, mine.stderr
    lines = mine.stdout.splitlines()
    assert lines[0].startswith("GPU-hour quotas this month, resets 1 ")
    assert any(line.split()[:2] == ["user", "gt18a"] and "over" in line for line in lines)
    assert any(line.split()[:2] == ["group", group] for line in lines)
    assert not any("gt18b" in line or "gt18c" in line for line in lines)
    other = host.run("gt18c", "quota")
    assert [line.split()[:2] for line in other.stdout.splitlines()[1:]] == [["user", "gt18c"]]
    everyone = host.run(None, "quota", "--json")
    doc = json.loads(everyone.stdout)
    rows = {(q["kind"], q["who"]): q for q in doc["quotas"]}
    assert set(rows) == {("user", "gt18a"), ("user", "gt18b"), ("user", "gt18c"),
                         ("group", group)}
    assert rows[("user", "gt18a")]["used_gpu_hours"] == pytest.approx(used, abs=1e-3)
    assert rows[("group", group)]["used_gpu_hours"] == pytest.approx(used, abs=1e-3)
    assert rows[("user", "gt18b")]["used_gpu_hours"] == 0.0


def test_run_beyond_the_quota_is_refused_or_waits_low(host: Host, group: str) -> None:  # noqa: F811
    ledger = host.root / "var" / "ledger.sqlite"
    used = _ledger(ledger)
    reset = quota.reset_words(quota.period_bounds(time.time(), "month")[1], "month")
    _policy(host, ledger, "refuse", "{gt18a: 0.1}")
    refused = host.run("gt18a", "run", "--", "true")
    assert refused.returncode == 4
    assert (f"refused: gt18a used {quota.hours(used)} of 0.1 GPU-hours this month"
            f" (resets {reset})") in refused.stderr
    assert host.run("gt18b", "run", "--", "true").returncode == 0  # no quota of his is spent
    _policy(host, ledger, "refuse", "{}", f"{{{group}: 0.1}}")
    by_group = host.run("gt18b", "run", "--", "true")
    assert by_group.returncode == 4
    assert f"refused: group {group} used {quota.hours(used)} of 0.1" in by_group.stderr
    assert host.run("gt18c", "run", "--", "true").returncode == 0  # not in the group
    _policy(host, ledger, "wait", "{gt18a: 0.1}")
    waits = host.run("gt18a", "run", "--", "true")
    assert waits.returncode == 0, waits.stderr
    assert "GPU-hours this month" in waits.stderr and "waiting at low priority" in waits.stderr
    fine = host.run("gt18b", "run", "--", "true")
    assert fine.returncode == 0 and "quota" not in fine.stderr.lower()


def test_a_missing_ledger_checks_nothing_and_says_so(host: Host) -> None:  # noqa: F811
    _policy(host, host.root / "none.sqlite", "refuse", "{gt18a: 0.1}")
    out = host.run("gt18a", "run", "--", "true")
    assert out.returncode == 0
    assert "quotas not checked:" in out.stderr and "none.sqlite" in out.stderr


def test_reserve_and_its_extension_are_held_to_the_quota(host: Host, group: str) -> None:  # noqa: F811
    # Issue 38.2: over quota, `gputop run` was refused and `gputop reserve` succeeded.
    ledger = host.root / "var" / "ledger.sqlite"
    used = _ledger(ledger)
    reset = quota.reset_words(quota.period_bounds(time.time(), "month")[1], "month")
    _policy(host, ledger, "refuse", "{gt18a: 0.1, gt18b: 0.5}")
    over = host.run("gt18a", "reserve", "--count", "1", "--for", "1h")
    assert over.returncode == 4, over.stderr
    assert (f"refused: gt18a used {quota.hours(used)} of 0.1 GPU-hours this month"
            f" (resets {reset})") in over.stderr
    # Within the quota, but a reservation counts ahead: 1 card for 1 h is 1 GPU-hour.
    big = host.run("gt18b", "reserve", "--gpus", "0", "--for", "1h")
    assert big.returncode == 4
    assert "gt18b used 0 of 0.5 GPU-hours this month" in big.stderr
    assert "this reservation is 1 GPU-hours" in big.stderr
    small = host.run("gt18b", "reserve", "--gpus", "0", "--for", "10m")
    assert small.returncode == 0, small.stderr
    # An extension is a reservation of the same card to a later time: held the same way.
    longer = host.run("gt18b", "reserve", "--gpus", "0", "--for", "2h")
    assert longer.returncode == 4 and "this reservation is 2 GPU-hours" in longer.stderr
    mine = [r for r in reservations.list_active(str(host.store)) if r["user"] == "gt18b"]
    assert len(mine) == 1 and mine[0]["until"] < time.time() + 11 * 60
    assert host.run("gt18c", "reserve", "--count", "2", "--for", "8h").returncode == 0
    # `over: wait` cannot make a reservation wait: refused too, and says what still works.
    _policy(host, ledger, "wait", "{gt18a: 0.1}")
    waits = host.run("gt18a", "reserve", "--count", "1", "--for", "1h")
    assert waits.returncode == 4
    assert "`gputop run` still waits at low priority" in waits.stderr


def test_a_job_whose_user_goes_over_while_it_waits_is_held(host: Host, group: str) -> None:  # noqa: F811
    ledger = host.root / "var" / "ledger.sqlite"
    _ledger(ledger, user="gt18d")  # gt18a has used nothing yet: the job is accepted
    _policy(host, ledger, "refuse", "{gt18a: 0.1}")
    assert reservations.reserve(str(host.store), [0, 1, 2, 3], time.time() + 3600,
                                "all cards", gpu_uuids=_UUIDS)["ok"]
    held = host.job("gt18a", "ja")
    (job,) = wait_for(host.jobs_in_line, "gt18a's job in line", held)
    used = _ledger(ledger)  # the recorder now counts gt18a's other work: over the quota
    listed = host.run(None, "queue", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row["id"] == job.id
    assert f"held by the quota: gt18a used {quota.hours(used)} of 0.1" in row["why"]
    assert row["quota"].startswith("gt18a used ")
    later = host.job("gt18b", "jb")
    wait_for(lambda: len(host.jobs_in_line()) == 2, "gt18b's job in line", later)
    for card in range(4):
        reservations.release(str(host.store), [card], gpu_uuids=_UUIDS)
    # First in line with free cards, gt18a's job does not start; gt18b's, behind it, does.
    assert later.wait(timeout=120) == 0
    assert [j.id for j in host.jobs_in_line()] == [job.id]
    assert not host.held()
    assert held.poll() is None
    cancel = host.run("gt18a", "queue", "cancel", job.id)
    assert cancel.returncode == 0, cancel.stderr
    assert held.wait(timeout=120) != 0
    assert "ja" not in {line[0] for line in host.log()}
