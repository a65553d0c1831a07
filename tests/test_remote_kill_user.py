"""Remote kills run as the connected user: an ordinary user created for the test logs in
through the real sshd; its probe may signal its own process and is refused another's.

The host's "driver" is the simulator behind a pynvml module on the host's PYTHONPATH
(see test_remote_kill.py), so the probe takes its real path: /proc and real signals.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.procs import alive, snapshot_of, start_sleeper, start_ticks
from helpers.users import ensure_users
from sshd import HostConf, SshdCluster
from test_remote_kill import FAKE_PYNVML, LocalView, notes_of, wait_until

from gputop.config import Config, ReclaimConfig
from gputop.model import HostSnapshot
from gputop.sources.ssh import SshFeed
from gputop.ui.app import GputopApp
from gputop.ui.screens.kill import KillScreen
from gputop.ui.state import row_key

pytestmark = pytest.mark.sshd

USER = "gputop-kt"
GIB = 1024**3


@pytest.fixture(scope="module")
def user() -> Iterator[pwd.struct_passwd]:
    with ensure_users([USER]) as (entry,):
        yield entry


@pytest.fixture(scope="module")
def cluster(user: pwd.struct_passwd) -> Iterator[SshdCluster]:
    # sshd reads authorized_keys as the user, and the probe imports the fake driver as
    # that user: the directory must be readable by everyone (pytest's tmp is not).
    tmp = Path(tempfile.mkdtemp(prefix="gputop-kill-user-"))
    os.chmod(tmp, 0o755)
    driver = tmp / "driver"
    driver.mkdir(mode=0o755)
    (driver / "pynvml.py").write_text(FAKE_PYNVML)
    (driver / "pynvml.py").chmod(0o644)
    conf = HostConf("gpu-user", scenario=None, env={"PYTHONPATH": str(driver)})
    try:
        with SshdCluster(tmp, [conf], user=user.pw_name) as c:
            yield c
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def test_remote_probe_acts_as_the_connected_user(cluster, user, reaper):
    feed = SshFeed(cluster.specs())
    latest: dict[str, HostSnapshot] = {}
    task = asyncio.create_task(feed.run(0.2, lambda s: latest.__setitem__(s.host, s)))
    try:
        deadline = time.monotonic() + 30
        while feed.state("gpu-user") != "ok":
            assert time.monotonic() < deadline, latest.get("gpu-user")
            await asyncio.sleep(0.05)
        assert feed.identity("gpu-user").user == USER

        roots = start_sleeper(reaper)
        answer = await feed.request("gpu-user", {
            "op": "kill", "pid": roots.pid, "start_ticks": start_ticks(roots.pid),
            "signal": "KILL", "grace": 0.2,
        })
        assert answer["outcome"] == "permission denied"
        assert answer["owner"] == "root"
        assert answer["message"] == f"permission denied: pid {roots.pid} belongs to root"
        assert alive(roots.pid)

        mine = start_sleeper(reaper, user=user.pw_uid)
        answer = await feed.request("gpu-user", {
            "op": "kill", "pid": mine.pid, "start_ticks": start_ticks(mine.pid),
            "signal": "TERM", "grace": 2.0,
        })
        assert answer["outcome"] == "exited" and answer["owner"] == USER
        assert mine.wait(5) == -15
    finally:
        await feed.close()
        await asyncio.wait_for(task, 10)


async def test_dashboard_offers_only_the_connected_users_processes(cluster, user, reaper):
    """Connected as an ordinary user: root's process is not offered, the user's own is,
    and its kill runs on the host as that user."""
    feed = SshFeed(cluster.specs())
    config = Config(reclaim=ReclaimConfig(kill_grace_s=2.0))
    view = LocalView(feed)
    app = GputopApp([view], config, interval=0.2, me="root")
    roots = start_sleeper(reaper)
    mine = start_sleeper(reaper, user=user.pw_uid)
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_until(pilot, lambda: feed.state("gpu-user") == "ok")
        # The remote host is this machine: its /proc facts are the ones the probe sees.
        app.ingest(snapshot_of({roots.pid: GIB, mine.pid: 2 * GIB}, host="gpu-user"))
        rows = {p.pid: p for p in app.state.snapshots["gpu-user"].processes}
        assert rows[mine.pid].user == USER and rows[roots.pid].user == "root"
        app.state.tagged = {row_key("gpu-user", rows[pid]) for pid in (roots.pid, mine.pid)}
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, KillScreen)
        assert [t.pid for t in app.screen.targets] == [mine.pid]
        assert any(f"pid {roots.pid} belongs to root, not you" in n for n in notes_of(app))
        await pilot.press("y")
        await wait_until(pilot, lambda: any(f"pid {mine.pid} exited" in n for n in notes_of(app)))
        assert mine.wait(5) == -15
        assert alive(roots.pid)
        # Only the user's own process went to the host, and the host signalled it.
        kills = [r for _h, r in view.sent if r.get("op") == "kill"]
        assert [r["pid"] for r in kills] == [mine.pid]
