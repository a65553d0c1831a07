"""SshFeed against a real OpenSSH sshd on loopback (tests/sshd.py): no mocks of SSH."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from sshd import Blackhole, HostConf, SshdCluster, collect_round

from gputop import model
from gputop.hosts import HostSpec
from gputop.model import HostSnapshot
from gputop.sources.oneshot import Session
from gputop.sources.ssh import SshFeed, _describe

pytestmark = pytest.mark.sshd

REPO = Path(__file__).resolve().parent.parent


class Recorder:
    """Collects what a feed emits, in order, and waits for conditions on it."""

    def __init__(self) -> None:
        self.events: list[HostSnapshot] = []

    def __call__(self, snapshot: HostSnapshot) -> None:
        self.events.append(snapshot)

    def states(self, host: str) -> list[str]:
        return [s.state for s in self.events if s.host == host]

    def last(self, host: str) -> HostSnapshot | None:
        for snap in reversed(self.events):
            if snap.host == host:
                return snap
        return None

    async def wait(self, condition: Callable[[], bool], timeout: float = 40.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"condition not met; events: {[(s.host, s.state) for s in self.events][-20:]}"
                )
            await asyncio.sleep(0.05)


async def _running(feed: SshFeed, interval: float = 0.3) -> tuple[Recorder, asyncio.Task[None]]:
    rec = Recorder()
    task = asyncio.create_task(feed.run(interval, rec))
    return rec, task


async def _stop(feed: SshFeed, task: asyncio.Task[None]) -> None:
    await feed.close()
    await asyncio.wait_for(task, 10)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    """Hosts this module may break: one sshd each so that one can be stopped."""
    confs = [
        HostConf("ok-1", labels=("lab",)),
        HostConf("ok-2"),
        HostConf("nopython", python=None),
        HostConf("olddriver", python=None, smi_xml="xml-rtx-3080-536.xml"),
        HostConf("untrusted", trusted=False),
        HostConf("rekeyed", changed_key=True),
        HostConf("py310", python="/root/.pyenv/versions/3.10.13/bin/python3"),
        HostConf("py39", python="/root/.pyenv/versions/3.9.18/bin/python3"),
    ]
    confs = [c for c in confs if c.python is None or os.path.exists(c.python)]
    with SshdCluster(tmp_path_factory.mktemp("lab"), confs) as cluster:
        yield cluster


async def test_several_hosts_once(sshd_hosts: SshdCluster) -> None:
    specs = sshd_hosts.specs()
    snaps = await collect_round(specs, timeout=20)
    assert [s.host for s in snaps] == [h.name for h in sshd_hosts.hosts]
    for snap, host in zip(snaps, sshd_hosts.hosts, strict=True):
        assert snap.state == model.HOST_OK, snap.error
        assert snap.gpus, snap
        assert snap.labels == host.conf.labels
        assert snap.source == "sim"
    # Each loopback host serves its own scenario (Match LocalAddress + SetEnv).
    assert len({(len(s.gpus), s.gpus[0].name) for s in snaps}) == len(snaps)


async def test_feed_streams_and_carries_requests(sshd_hosts: SshdCluster) -> None:
    specs = sshd_hosts.specs()
    feed = SshFeed(specs)
    rec, task = await _running(feed, 0.2)
    try:
        await rec.wait(lambda: all(rec.states(s.name).count("ok") >= 3 for s in specs))
        answer = await feed.request(specs[0].name, {"op": "reservations"})
        assert answer["ok"] is True and "reservations" in answer
        bad = await feed.request(specs[1].name, {"op": "no-such-op"})
        assert bad["ok"] is False and "no-such-op" in bad["message"]
        unknown = await feed.request("nobody-knows", {"op": "reservations"})
        assert unknown["ok"] is False
        assert "nobody-knows" in unknown["message"]  # refused for the right reason
    finally:
        await _stop(feed, task)
    # Snapshots of one host arrive in time order.
    times = [s.time for s in rec.events if s.host == specs[0].name and s.state == "ok"]
    assert times == sorted(times)


async def test_restarted_sshd_reconnects(lab: SshdCluster) -> None:
    specs = lab.specs(["ok-1", "ok-2"])
    feed = SshFeed(specs, backoff=(0.2, 1.0))
    rec, task = await _running(feed)
    daemon = lab.daemon_of("ok-1")
    try:
        await rec.wait(lambda: "ok" in rec.states("ok-1") and "ok" in rec.states("ok-2"))
        lab.stop(daemon)  # the host goes down: sshd and every session it had
        await rec.wait(lambda: rec.last("ok-1").state in ("unreachable", "error", "stale"))
        down = len(rec.events)
        lab.start(daemon)
        await rec.wait(lambda: any(
            s.host == "ok-1" and s.state == "ok" for s in rec.events[down:]
        ))
        # The other host never noticed.
        assert "unreachable" not in rec.states("ok-2")
        assert feed.connect_attempts("ok-1") >= 2
    finally:
        await _stop(feed, task)
        lab.start(daemon)


async def test_black_hole_times_out_without_delaying_others(lab: SshdCluster) -> None:
    with Blackhole() as hole:
        good = lab.specs(["ok-2"])[0]
        hung = dataclasses.replace(
            # Long enough that the good host's first data (a login and a python start-up on
            # this shared machine) comes first even under load.
            good, name="hung", hostname=hole.address, port=hole.port, connect_timeout=4.0
        )
        feed = SshFeed([hung, good], retry=False)
        rec, task = await _running(feed)
        try:
            await rec.wait(lambda: "timed out" in rec.states("hung"))
            order = [(s.host, s.state) for s in rec.events if s.state != "connecting"]
            # The good host delivered data before the hung one even gave up.
            assert order.index(("ok-2", "ok")) < order.index(("hung", "timed out"))
            assert "handshake" in rec.last("hung").error
            assert hole.accepted, "the black hole should have accepted the TCP connection"
        finally:
            await _stop(feed, task)


async def test_wrong_user_fails_once_without_retry_storm(lab: SshdCluster) -> None:
    host = lab.host("ok-2")
    spec = lab.specs(["ok-2"], user="nosuchuser-gputop")[0]
    before = lab.log_text(host.daemon).count("Invalid user nosuchuser-gputop")
    feed = SshFeed([spec], backoff=(0.05, 0.1))
    rec, task = await _running(feed, 0.1)
    try:
        await rec.wait(lambda: "auth failed" in rec.states("ok-2"))
        await asyncio.sleep(1.0)  # ten backoff periods: a retrying client would try again
    finally:
        await _stop(feed, task)
    assert feed.connect_attempts("ok-2") == 1
    assert rec.states("ok-2") == ["connecting", "auth failed"]
    assert "nosuchuser-gputop" in rec.last("ok-2").error
    # sshd saw exactly one login attempt by that user.
    assert lab.log_text(host.daemon).count("Invalid user nosuchuser-gputop") - before == 1


def _fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True)
    return out.stdout.split()[1]


async def test_unknown_host_key_refused_with_fingerprint(lab: SshdCluster) -> None:
    spec = lab.specs(["untrusted"])[0]
    feed = SshFeed([spec], backoff=(0.05, 0.1))
    rec, task = await _running(feed, 0.1)
    try:
        await rec.wait(lambda: "host key unknown" in rec.states("untrusted"))
        await asyncio.sleep(0.5)
    finally:
        await _stop(feed, task)
    snap = rec.last("untrusted")
    assert snap.state == model.HOST_KEY_UNKNOWN
    assert _fingerprint(Path(f"{lab.host_key}.pub")) in snap.error
    host = lab.host("untrusted")
    assert f"ssh-keyscan -p {host.port} {host.address} >> ~/.ssh/known_hosts" in snap.error
    assert feed.connect_attempts("untrusted") == 1  # never retried on its own
    assert lab.probe_processes("untrusted") == []  # and nothing ran there
    assert "Accepted" not in lab.log_text(host.daemon)  # nor did anyone log in


async def test_changed_host_key_is_its_own_state(lab: SshdCluster) -> None:
    (snap,) = await collect_round(lab.specs(["rekeyed"]), timeout=15)
    assert snap.state == model.HOST_KEY_CHANGED
    assert not snap.gpus  # no data from a host that may be an impostor
    # The client hung up before authenticating: no key was offered to the impostor.
    # sshd writes its line once it has seen the client go: wait for it.
    deadline = time.monotonic() + 10
    while "[preauth]" not in (log := lab.log_text(lab.daemon_of("rekeyed"))):
        assert time.monotonic() < deadline, log
        await asyncio.sleep(0.05)
    assert "Accepted" not in log, log
    assert "ssh-keygen -R" in snap.error
    assert _fingerprint(Path(f"{lab.host_key}.pub")) in snap.error


async def test_host_without_python_falls_back_to_nvidia_smi(lab: SshdCluster) -> None:
    spec = lab.specs(["nopython"])[0]
    feed = SshFeed([spec])
    rec, task = await _running(feed, 0.3)
    try:
        await rec.wait(lambda: rec.states("nopython").count("fallback") >= 2)
        answer = await feed.request("nopython", {"op": "reservations"})
    finally:
        await _stop(feed, task)
    snap = rec.last("nopython")
    assert snap.state == model.HOST_FALLBACK and snap.ok
    assert snap.source == "smi"
    assert snap.gpus[0].name == "NVIDIA H100 80GB HBM3"  # from the recorded capture
    assert "processes.start_ticks" in snap.missing
    assert {p.pid for p in snap.processes} == {11327, 11328, 11345}
    assert answer["ok"] is False and "fallback" in answer["message"]


async def test_python_310_host(lab: SshdCluster) -> None:
    if "py310" not in [h.name for h in lab.hosts]:
        pytest.skip("no python 3.10 here")
    (snap,) = await collect_round(lab.specs(["py310"]), timeout=15)
    assert snap.state == model.HOST_OK, snap.error


async def test_probe_killed_on_the_host_is_restarted(lab: SshdCluster) -> None:
    spec = lab.specs(["ok-1"])[0]
    feed = SshFeed([spec], backoff=(0.1, 0.5))
    rec, task = await _running(feed, 0.2)
    try:
        await rec.wait(lambda: "ok" in rec.states("ok-1"))
        probes = lab.probe_processes("ok-1")
        assert len(probes) == 1
        old_pid = probes[0].pid
        os.kill(old_pid, signal.SIGKILL)
        await rec.wait(lambda: rec.last("ok-1").state == "error")
        assert "probe stopped" in rec.last("ok-1").error
        mark = len(rec.events)
        await rec.wait(lambda: any(s.state == "ok" for s in rec.events[mark:]))
        new = [p.pid for p in lab.probe_processes("ok-1")]
        assert new and old_pid not in new
    finally:
        await _stop(feed, task)


async def test_shell_metacharacters_are_never_interpreted(
    lab: SshdCluster, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    evil = f"x;touch {marker};$(touch {marker})`touch {marker}`"
    good = lab.specs(["ok-2"])[0]
    named = dataclasses.replace(good, name=evil, labels=(evil, "|&>"))
    user = dataclasses.replace(good, name="bad-user", user=f"root;touch {marker}")
    snaps = await collect_round([named, user], timeout=15)
    assert snaps[0].state == model.HOST_OK and snaps[0].host == evil
    assert snaps[0].labels == (evil, "|&>")
    assert snaps[1].state == model.HOST_AUTH_FAILED
    assert not marker.exists()


def test_shell_metacharacters_in_cli_host_list(lab: SshdCluster, tmp_path: Path) -> None:
    marker = tmp_path / "pwned-cli"
    host = lab.host("ok-2")
    env = lab.env()
    arg = f"root;touch {marker}@{host.address}:{host.port},$(touch {marker})"
    proc = subprocess.run(
        [sys.executable, "-m", "gputop.cli", "-H", arg, "--json", "--timeout", "8"],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert not marker.exists()
    assert "Traceback" not in proc.stderr
    # Refused before any connection: a ProxyCommand would have split these (issue 12).
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("gputop: -H: ") and "may not contain ';'" in (
        proc.stderr)


async def test_no_probe_left_behind_after_close(lab: SshdCluster) -> None:
    specs = lab.specs(["ok-1", "ok-2"])
    feed = SshFeed(specs)
    rec, task = await _running(feed, 0.2)
    await rec.wait(lambda: all("ok" in rec.states(s.name) for s in specs))
    assert lab.probe_processes("ok-1") and lab.probe_processes("ok-2")
    await _stop(feed, task)
    deadline = time.monotonic() + 10
    while (lab.probe_processes("ok-1") or lab.probe_processes("ok-2")) and (
        time.monotonic() < deadline
    ):
        await asyncio.sleep(0.1)
    assert lab.probe_processes("ok-1") == [] and lab.probe_processes("ok-2") == []


def test_no_probe_left_behind_when_the_client_dies(lab: SshdCluster, tmp_path: Path) -> None:
    """SIGKILL the client: the TCP connection drops, the probe must notice and exit."""
    hosts_file = lab.hosts_yaml(tmp_path / "hosts.yaml", ["ok-1"])
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from gputop.hosts import load
        from gputop.sources.ssh import SshFeed
        async def main():
            feed = SshFeed(load({str(hosts_file)!r}))
            def emit(s):
                if s.state == "ok":
                    print("ok", flush=True)
            await feed.run(0.2, emit)
        asyncio.run(main())
        """
    )
    client = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=REPO, env=lab.env()
    )
    try:
        assert client.stdout is not None
        assert client.stdout.readline().strip() == b"ok"
        assert lab.probe_processes("ok-1")
    finally:
        client.kill()
        client.wait()
    deadline = time.monotonic() + 15
    while lab.probe_processes("ok-1") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lab.probe_processes("ok-1") == []


def _remote_ports(procs: list[psutil.Process]) -> set[int]:
    ports: set[int] = set()
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            ports |= {c.raddr.port for c in proc.net_connections(kind="tcp") if c.raddr}
    return ports


async def test_shared_jump_host(lab: SshdCluster) -> None:
    jump = lab.host("ok-1")
    behind = lab.specs(["ok-2", "py310"] if "py310" in [h.name for h in lab.hosts] else ["ok-2"])
    via = [
        dataclasses.replace(s, jump=f"{lab.user}@{jump.address}:{jump.port}") for s in behind
    ]
    feed = SshFeed(via)
    rec, task = await _running(feed, 0.3)
    try:
        await rec.wait(lambda: all("ok" in rec.states(s.name) for s in via))
        assert len(feed._jumps) == 1  # one connection to the jump host, shared
        # The hosts behind it are reached through it: the jump host's sshd (not this
        # client) holds the TCP connections to their ports.
        forwarded = _remote_ports(lab.processes(jump.daemon))
        assert {lab.host(s.name).port for s in behind} <= forwarded, forwarded
        ours = _remote_ports([psutil.Process()])
        assert not {lab.host(s.name).port for s in behind} & ours, ours
    finally:
        await _stop(feed, task)


def test_cli_json_and_once_over_ssh(lab: SshdCluster, tmp_path: Path) -> None:
    hosts_file = lab.hosts_yaml(tmp_path / "hosts.yaml", ["ok-1", "nopython", "untrusted"])
    proc = subprocess.run(
        [sys.executable, "-m", "gputop.cli", "--hosts", str(hosts_file), "--json"],
        capture_output=True, text=True, env=lab.env(), timeout=60,
    )
    assert proc.returncode == 3, proc.stderr  # "untrusted" could not be read (README)
    import json

    doc = json.loads(proc.stdout)
    states = {h["host"]: h["state"] for h in doc["hosts"]}
    assert states == {"ok-1": "ok", "nopython": "fallback", "untrusted": "host key unknown"}
    by_name = {h["host"]: h for h in doc["hosts"]}
    assert by_name["ok-1"]["labels"] == ["lab"]
    assert "actions" in by_name["nopython"]["missing"]

    # A name resolved through ~/.ssh/config (HOME is the cluster's: Host ok-1 -> 127.0.0.x).
    proc = subprocess.run(
        [sys.executable, "-m", "gputop.cli", "-H", "ok-1", "--once"],
        capture_output=True, text=True, env=lab.env(), timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ok-1" in proc.stdout and "H100" in proc.stdout


async def test_missing_identity_file_is_a_clear_error(lab: SshdCluster, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-key"
    spec = lab.specs(["ok-2"], identity_file=str(missing))[0]
    (snap,) = await collect_round([spec], timeout=10)
    assert snap.state == model.HOST_ERROR
    assert str(missing) in snap.error


async def test_one_shot_session_requests_through_the_feed(sshd_hosts: SshdCluster) -> None:
    """What the acting commands do: first snapshots, then requests over the same probe."""
    spec = sshd_hosts.specs()[0]
    async with Session([SshFeed([spec], retry=False)], timeout=20) as session:
        (snap,) = session.snapshots
        assert snap.state == model.HOST_OK
        reply = await session.request(spec.name, {"op": "reservations"})
        assert reply["ok"] is True
        assert session.identity(spec.name).user == sshd_hosts.user
    bad = dataclasses.replace(spec, user="nosuchuser-gputop")
    async with Session([SshFeed([bad], retry=False)], timeout=20) as session:
        (snap,) = session.snapshots
        assert snap.state == model.HOST_AUTH_FAILED
        reply = await session.request(bad.name, {"op": "reservations"})
        assert reply["ok"] is False and "auth failed" in reply["message"]


async def test_silent_probe_goes_stale_then_recovers(lab: SshdCluster) -> None:
    spec = lab.specs(["ok-2"])[0]
    feed = SshFeed([spec])
    rec, task = await _running(feed, 0.2)
    try:
        await rec.wait(lambda: "ok" in rec.states("ok-2"))
        (probe,) = lab.probe_processes("ok-2")
        probe.suspend()  # SIGSTOP: the connection lives, the lines stop
        try:
            await rec.wait(lambda: rec.last("ok-2").state == model.HOST_STALE)
            stale = rec.last("ok-2")
            assert stale.error.startswith("no update for ")
            assert stale.gpus  # the last data is still shown, marked stale
        finally:
            probe.resume()
        mark = len(rec.events)
        await rec.wait(lambda: any(s.state == "ok" for s in rec.events[mark:]))
    finally:
        await _stop(feed, task)


async def test_identity_is_the_logged_in_user(sshd_hosts: SshdCluster) -> None:
    # No user in the spec: ~/.ssh/config or the local name decides; identity tells which.
    spec = dataclasses.replace(sshd_hosts.specs()[0], user=None)
    feed = SshFeed([spec])
    rec, task = await _running(feed, 0.3)
    try:
        await rec.wait(lambda: "ok" in rec.states(spec.name))
        assert feed.identity(spec.name).user == sshd_hosts.user
    finally:
        await _stop(feed, task)


async def test_handshakes_in_flight_are_capped(sshd_factory: Callable[..., SshdCluster]) -> None:
    many = sshd_factory([HostConf(f"m{i}") for i in range(6)], per_daemon=6)
    specs = many.specs()
    feed = SshFeed(specs, max_inflight=2, max_inflight_per_target=10, stagger=0)
    rec, task = await _running(feed, 0.5)
    try:
        await rec.wait(lambda: all("ok" in rec.states(s.name) for s in specs))
    finally:
        await _stop(feed, task)
    assert feed.peak_inflight == 2  # the cap was reached and never passed


def test_backoff_grows_with_jitter_and_a_cap() -> None:
    from gputop.hosts import HostSpec

    feed = SshFeed([HostSpec(name="x")], backoff=(1.0, 60.0))
    for failures, full in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0), (7, 60.0), (20, 60.0)]:
        delays = {feed._backoff_delay(failures) for _ in range(50)}
        assert all(full * 0.5 <= d <= full for d in delays), (failures, delays)
        assert len(delays) > 1  # jittered: a rack of hosts does not retry in lockstep


async def test_concurrent_requests_are_matched_by_id(sshd_hosts: SshdCluster) -> None:
    spec = sshd_hosts.specs()[1]
    feed = SshFeed([spec])
    rec, task = await _running(feed, 0.3)
    try:
        await rec.wait(lambda: "ok" in rec.states(spec.name))
        ops = [f"op-{i}" for i in range(8)]
        replies = await asyncio.gather(
            *(feed.request(spec.name, {"op": op}) for op in ops),
            feed.request(spec.name, {"op": "reservations"}),
        )
    finally:
        await _stop(feed, task)
    for op, reply in zip(ops, replies[:-1], strict=True):
        assert reply["ok"] is False and op in reply["message"]  # its own answer, no other's
    assert replies[-1]["ok"] is True


async def test_too_old_python_falls_back_to_nvidia_smi(lab: SshdCluster) -> None:
    if "py39" not in [h.name for h in lab.hosts]:
        pytest.skip("no python 3.9 here")
    (snap,) = await collect_round(lab.specs(["py39"]), timeout=15)
    # No nvidia-smi on that host either: the fallback says so, naming the old python.
    assert snap.state == model.HOST_NO_GPU, snap
    assert "older than 3.10" in snap.error


async def test_alias_resolved_through_an_ssh_config(sshd_hosts: SshdCluster) -> None:
    from gputop.hosts import HostSpec

    # Only the alias: HostName, Port, User and IdentityFile all come from the config file.
    name = sshd_hosts.hosts[2].name
    spec = HostSpec(name=name, ssh_config=str(sshd_hosts.ssh_config),
                    known_hosts=(str(sshd_hosts.known_hosts),))
    (snap,) = await collect_round([spec], timeout=20)
    assert snap.state == model.HOST_OK, snap.error


async def test_old_driver_fallback_reads_xml(lab: SshdCluster) -> None:
    (snap,) = await collect_round(lab.specs(["olddriver"]), timeout=20)
    assert snap.state == model.HOST_FALLBACK, snap.error
    assert snap.gpus[0].name == "NVIDIA GeForce RTX 3080"  # from the XML capture
    assert len(snap.processes) == 5


def test_connection_error_names_an_ipv6_host_in_brackets() -> None:
    refused = ConnectionRefusedError(111, "Connect call failed ('::1', 2222)")
    text = _describe(refused, HostSpec(name="::1", port=2222))
    assert "[::1]:2222" in text and "::1:2222" not in text.replace("[::1]:2222", ""), text
    gone = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert "the name ::1 is not known" in _describe(gone, HostSpec(name="::1")), "host_of"
