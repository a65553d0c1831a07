"""LocalFeed and the opener: the poll loop, error snapshots, requests, capabilities, and
one-shot collection."""

from __future__ import annotations

import asyncio
import threading

import pytest
from helpers import fakenvml

from gputop import model
from gputop.actions.dispatch import ActionEnv
from gputop.config import Config
from gputop.options import SourceOptions
from gputop.sources import opener, sim
from gputop.sources.assembler import HostAssembler
from gputop.sources.backend import NoDriverError
from gputop.sources.feed import LocalFeed
from gputop.sources.hostsource import nvml_collector
from gputop.sources.identity import local_identity, named_identity

ME = named_identity("alice")


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def demo_parts(name: str = "lab"):
    nvml = sim.SimNvml(sim.load_scenario(name))
    procs = sim.SimProcs(nvml)
    return nvml, procs, nvml_collector(nvml, procs, host=name, demo=True)


class Watched:
    """A real collector whose collect() records overlap and can fail on chosen calls."""

    def __init__(self, inner: HostAssembler, fail_on: set[int] = frozenset()) -> None:
        self.inner = inner
        self.fail_on = fail_on
        self.calls = 0
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()

    def collect(self) -> dict:
        with self.lock:
            self.calls += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            call = self.calls
        try:
            if call in self.fail_on:
                raise RuntimeError("driver hiccup")
            # Slower than the feed's interval: a naive timer would start overlapping polls.
            threading.Event().wait(0.03)
            return self.inner.collect()
        finally:
            with self.lock:
                self.active -= 1


async def _run_until(feed: LocalFeed, count: int, interval: float) -> list[model.HostSnapshot]:
    got: list[model.HostSnapshot] = []
    done = asyncio.Event()

    def emit(snap: model.HostSnapshot) -> None:
        got.append(snap)
        if len(got) >= count:
            done.set()

    task = asyncio.create_task(feed.run(interval, emit))
    await asyncio.wait_for(done.wait(), timeout=30)
    await feed.close()
    await asyncio.wait_for(task, timeout=10)
    return got


async def test_polls_never_overlap_and_errors_become_snapshots() -> None:
    _, _, collector = demo_parts()
    watched = Watched(collector, fail_on={2})
    feed = LocalFeed(watched, host="lab", identity=ME)
    snaps = await _run_until(feed, 4, interval=0.001)
    assert watched.max_active == 1
    assert [s.state for s in snaps[:3]] == [model.HOST_OK, model.HOST_ERROR, model.HOST_OK]
    assert "driver hiccup" in (snaps[1].error or "")
    assert snaps[1].host == "lab"
    assert all(s.gpus for s in snaps if s.state == model.HOST_OK)


async def test_factory_without_driver_gives_a_no_gpu_snapshot() -> None:
    def factory() -> HostAssembler:
        raise NoDriverError("gputop: no NVIDIA driver found on this machine.")

    snaps = await _run_until(LocalFeed(factory, host="localhost", identity=ME), 2, interval=0.001)
    assert {s.state for s in snaps} == {model.HOST_NO_GPU}
    assert snaps[0].error.startswith("gputop: no NVIDIA driver")


async def test_kill_request_changes_only_the_simulation() -> None:
    nvml, procs, collector = demo_parts()
    env = ActionEnv(sim=nvml, procs=procs, reservations_dir="/nonexistent")
    feed = LocalFeed(collector, host="lab", identity=ME, dispatch_env=env)
    before = feed.poll()
    # The env learned the cards' UUIDs, so reservations can name them.
    assert env.gpu_uuids == {g.index: g.uuid for g in before.gpus}
    assert len(env.gpu_uuids) == 4
    target = next(p for p in before.processes if p.user == nvml.scenario.me and p.visible)
    reply = await feed.request(
        "lab", {"op": "kill", "pid": target.pid, "start_ticks": target.start_ticks,
                "signal": "KILL"}
    )
    assert reply["ok"] is True, reply
    assert target.pid not in {p.pid for p in feed.poll().processes}
    other = await feed.request("elsewhere", {"op": "reservations"})
    assert other["ok"] is False


async def test_requests_without_an_env_are_refused() -> None:
    _, _, collector = demo_parts()
    feed = LocalFeed(collector, host="lab", identity=ME)
    reply = await feed.request("lab", {"op": "reservations"})
    assert reply == {"ok": False, "message": "actions are not available for this source"}


def test_capabilities_follow_the_env() -> None:
    nvml, procs, collector = demo_parts()
    viewer = LocalFeed(collector, host="lab", identity=ME)
    assert not viewer.capabilities("lab").acts
    demo = LocalFeed(collector, host="lab", identity=ME,
                     dispatch_env=ActionEnv(sim=nvml, procs=procs))
    caps = demo.capabilities("lab")
    assert caps.kill and caps.reserve and caps.simulated and caps.process_details
    readonly = LocalFeed(collector, host="lab", identity=ME,
                         dispatch_env=ActionEnv(sim=nvml, procs=procs, readonly=True))
    assert not readonly.capabilities("lab").kill
    assert "read-only" in readonly.capabilities("lab").why_not
    # Details of a simulated process: its facts and parent chain, and nothing for a pid
    # whose start time does not match (reused).
    proc = next(p for p in demo.poll().processes if p.visible)
    details = demo.process_details("lab", proc.pid, proc.start_ticks)
    assert details.facts is not None and details.facts["start_ticks"] == proc.start_ticks
    assert details.parents is not None
    assert demo.process_details("lab", proc.pid, (proc.start_ticks or 0) + 1).facts is None


def test_collect_once_demo_has_rates() -> None:
    found = opener.collect_once(SourceOptions(demo="dgx-h100"), Config())
    (snap,) = found.snapshots
    assert snap.demo and snap.host == "dgx-h100-07"
    assert snap.processes and all(p.sm_util is not None for p in snap.processes)
    assert any(p.sm_util > 0 for p in snap.processes)
    # Who acts there: the scenario's user on the simulated processes; the private
    # reservation store's files are the real user's.
    assert found.identities[snap.host].user == sim.load_scenario("dgx-h100").me
    assert found.me(snap.host) == local_identity().user


def test_bad_scenario_is_a_source_error(tmp_path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\ngpus: 3\n")
    with pytest.raises(opener.SourceError) as err:
        opener.collect_once(SourceOptions(demo=str(broken)), Config())
    assert "broken.yaml" in str(err.value)
    assert "\n" not in str(err.value)


def test_open_feeds_demo_is_one_local_feed_with_actions() -> None:
    (feed,) = opener.open_feeds(SourceOptions(demo="faulty", readonly=True), Config())
    assert isinstance(feed, LocalFeed)
    assert feed.hosts == ["a100-node-12"]
    caps = feed.capabilities("a100-node-12")
    assert caps.simulated and not caps.kill and not caps.reserve
    assert feed.identity("a100-node-12").user == sim.load_scenario("faulty").me
    assert opener.reservations_dir(SourceOptions(demo="faulty"), Config()) == \
        opener.demo_reservations_dir("faulty")


@pytest.mark.skipif(fakenvml.driver_present(), reason="a real NVIDIA driver is present")
def test_open_feeds_without_driver_raises_early(monkeypatch) -> None:
    monkeypatch.delenv("GPUTOP_HOSTS", raising=False)
    # --local: this machine is asked first even if the user has a default hosts file.
    with pytest.raises(NoDriverError):
        opener.open_feeds(SourceOptions(local=True), Config())
    with pytest.raises(NoDriverError):
        opener.collect_once(SourceOptions(local=True), Config())
