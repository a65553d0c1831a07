"""Kill on a remote host, through a real OpenSSH sshd on loopback and the remote probe.

Two fake hosts:
- ``gpu-real``: a host with a "driver": a ``pynvml`` module on its PYTHONPATH that is
  gputop's simulator (there is no GPU here).  The probe therefore runs its non-demo path:
  /proc for processes and real signals, as the connected user, with every check done on
  the host.  The loopback host is this machine, so the target is a process we start.
- ``gpu-lab``: a probe serving the lab scenario (GPUTOP_PROBE_SIM): kills change only
  the simulation, with its own permission rules (the scenario's user is alice).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.procs import (
    alive,
    snapshot_of,
    start_sleeper,
    start_term_ignorer,
    start_ticks,
    start_zombie,
)
from sshd import HostConf, SshdCluster

from gputop.config import Config, ReclaimConfig
from gputop.model import HostSnapshot
from gputop.sources.ssh import SshFeed
from gputop.ui.app import GputopApp
from gputop.ui.screens.kill import KillScreen
from gputop.ui.state import row_key

pytestmark = pytest.mark.sshd

REPO = Path(__file__).resolve().parent.parent
GIB = 1024**3
# A host "driver" made of the simulator: imported by the probe as the host's own pynvml,
# after the probe's bundle is installed, so gputop.sources.sim resolves to the shipped copy.
FAKE_PYNVML = f'''
from gputop.sources import sim as _sim

_nvml = _sim.SimNvml(_sim.load_scenario({str(REPO / "gputop" / "scenarios" / "lab.yaml")!r}))


def __getattr__(name):
    return getattr(_nvml, name)
'''


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    tmp = tmp_path_factory.mktemp("kill-sshd")
    driver = tmp / "driver"
    driver.mkdir()
    (driver / "pynvml.py").write_text(FAKE_PYNVML)
    pylib = tmp / "pylib"  # where SshdCluster puts pyyaml for the hosts
    confs = [
        HostConf("gpu-real", scenario=None, env={"PYTHONPATH": f"{pylib}:{driver}"}),
        HostConf("gpu-lab", scenario="lab"),
    ]
    with SshdCluster(tmp, confs) as c:
        yield c


class Snapshots:
    def __init__(self) -> None:
        self.latest: dict[str, HostSnapshot] = {}

    def __call__(self, snap: HostSnapshot) -> None:
        self.latest[snap.host] = snap

    async def wait(self, check: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                states = {h: (s.state, s.error) for h, s in self.latest.items()}
                raise AssertionError(f"timed out; host states: {states}")
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _feed(
    cluster: SshdCluster, name: str, **kwargs: Any
) -> AsyncIterator[tuple[SshFeed, Snapshots]]:
    feed = SshFeed(cluster.specs([name]), **kwargs)
    seen = Snapshots()
    task = asyncio.create_task(feed.run(0.2, seen))
    try:
        await seen.wait(lambda: name in seen.latest and seen.latest[name].state == "ok")
        yield feed, seen
    finally:
        await feed.close()
        await asyncio.wait_for(task, 10)


def _kill(pid: int, ticks: int, sig: str = "TERM", grace: float = 0.3) -> dict:
    return {"op": "kill", "pid": pid, "start_ticks": ticks, "signal": sig, "grace": grace}


async def test_remote_kill_of_a_real_process_escalates(cluster, reaper):
    async with _feed(cluster, "gpu-real") as (feed, _seen):
        proc = start_term_ignorer(reaper)
        answer = await feed.request("gpu-real", _kill(proc.pid, start_ticks(proc.pid)))
        assert answer["outcome"] == "killed", answer
        assert "ignored SIGTERM" in answer["message"]
        assert answer.get("simulated") is None  # a real signal, sent by the remote probe
        assert proc.wait(5) == -9


async def test_remote_guards_reused_pid_and_zombie(cluster, reaper):
    async with _feed(cluster, "gpu-real") as (feed, _seen):
        sleeper = start_sleeper(reaper)
        ticks = start_ticks(sleeper.pid)
        answer = await feed.request("gpu-real", _kill(sleeper.pid, ticks + 3, "KILL"))
        assert answer["outcome"] == "pid reused"
        zombie = start_zombie(reaper)
        answer = await feed.request("gpu-real", _kill(zombie.pid, start_ticks(zombie.pid)))
        assert answer["outcome"] == "zombie"
        assert answer["message"].startswith(f"zombie: its parent {os.getpid()} must reap it")
        bad = await feed.request("gpu-real", {"op": "kill", "pid": "1; rm -rf /"})
        assert bad["ok"] is False and "pid must be an integer" in bad["message"]
        assert alive(sleeper.pid)


async def test_remote_readonly_probe_refuses(cluster, reaper):
    async with _feed(cluster, "gpu-real", readonly=True) as (feed, _seen):
        sleeper = start_sleeper(reaper)
        answer = await feed.request("gpu-real", _kill(sleeper.pid, start_ticks(sleeper.pid)))
        assert answer["outcome"] == "readonly"
        await asyncio.sleep(0.3)
        assert alive(sleeper.pid)


async def test_remote_demo_kill_changes_only_the_simulation(cluster):
    async with _feed(cluster, "gpu-lab") as (feed, seen):
        procs = {p.pid: p for p in seen.latest["gpu-lab"].processes}
        kernel, carol = procs[5100034], procs[5100021]
        denied = await feed.request("gpu-lab", _kill(carol.pid, carol.start_ticks or 0))
        assert denied["outcome"] == "permission denied" and denied["owner"] == "carol"
        answer = await feed.request("gpu-lab", _kill(kernel.pid, kernel.start_ticks or 0))
        assert answer["outcome"] == "exited" and answer["simulated"] is True
        before = seen.latest["gpu-lab"].time
        await seen.wait(lambda: seen.latest["gpu-lab"].time > before + 0.3)
        pids = {p.pid for p in seen.latest["gpu-lab"].processes}
        assert 5100034 not in pids and 5100021 in pids


# -- the same through the dashboard ---------------------------------------------------------


class LocalView:
    """An SshFeed whose snapshots the test replaces with its own (a real local process
    shown as if on the remote host); requests still travel to the remote probe."""

    def __init__(self, inner: SshFeed) -> None:
        self.inner = inner
        self.hosts = inner.hosts
        self.sent: list[tuple[str, dict]] = []  # what went to the remote probe
        # What the dashboard asks of the source is the SSH feed's answer.
        self.capabilities = inner.capabilities
        self.identity = inner.identity
        self.process_details = inner.process_details

    async def run(self, interval: float, emit: Callable[[HostSnapshot], None]) -> None:
        await self.inner.run(interval, lambda _snap: None)

    async def request(self, host: str, request: dict) -> dict:
        self.sent.append((host, request))
        return await self.inner.request(host, request)

    async def close(self) -> None:
        await self.inner.close()


def notes_of(app: GputopApp) -> list[str]:
    return [f"{n.title} | {n.message}" for n in app._notifications]


async def wait_until(pilot: Any, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await pilot.pause(0.05)


async def test_dashboard_kill_over_ssh_real_process(cluster, reaper):
    feed = SshFeed(cluster.specs(["gpu-real"]))
    config = Config(reclaim=ReclaimConfig(kill_grace_s=0.3))
    view = LocalView(feed)
    app = GputopApp([view], config, interval=0.2, me="root")
    proc = start_term_ignorer(reaper)
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_until(pilot, lambda: feed.state("gpu-real") == "ok")
        ticks = start_ticks(proc.pid)
        app.ingest(snapshot_of({proc.pid: 3 * GIB}, host="gpu-real"))
        snap = app.state.snapshots["gpu-real"]
        app.state.tagged = {row_key("gpu-real", snap.processes[0])}
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, KillScreen)
        assert app.screen.targets[0].host == "gpu-real"
        assert alive(proc.pid)
        await pilot.press("y")
        await wait_until(pilot, lambda: any("killed" in n for n in notes_of(app)))
        assert proc.wait(5) == -9
        # The signal was the remote probe's: the request crossed SSH with the pid's identity.
        kills = [r for h, r in view.sent if r.get("op") == "kill"]
        assert [(r["pid"], r["start_ticks"]) for r in kills] == [
            (proc.pid, ticks)
        ]
        assert {h for h, _ in view.sent} == {"gpu-real"}


async def test_dashboard_remote_denial_names_the_owner(cluster):
    feed = SshFeed(cluster.specs(["gpu-lab"]))
    app = GputopApp([feed], Config(), interval=0.2, me="root")
    async with app.run_test(size=(150, 45)) as pilot:
        await wait_until(pilot, lambda: "gpu-lab" in app.state.snapshots
                     and app.state.snapshots["gpu-lab"].ok)
        rows = {p.pid: p for p in app.state.snapshots["gpu-lab"].processes}
        # Connected as root: both offered; the host (here its simulation, whose user is
        # alice) refuses carol's and says whose it is.
        app.state.tagged = {row_key("gpu-lab", rows[pid]) for pid in (5100021, 5100034)}
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, KillScreen)
        assert sorted(t.pid for t in app.screen.targets) == [5100021, 5100034]
        await pilot.press("y")
        await wait_until(pilot, lambda: len([n for n in notes_of(app) if "gpu-lab: pid" in n]) == 2)
        notes = "\n".join(notes_of(app))
        assert "gpu-lab: pid 5100021 permission denied | pid 5100021 belongs to carol" in notes
        assert "gpu-lab: pid 5100034 exited" in notes
