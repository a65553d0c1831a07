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
from test_run_queue import Host, driver, host, portable, users  # noqa: F401 (fixtures)

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


def _ledger(path: Path) -> float:
    """gt18a on all four cards for the last three minutes; returns the GPU-hours of it
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
        procs = tuple(GpuProcess(pid=100 + i, gpu=i, gpu_mem=GIB, sm_util=50, user="gt18a",
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
