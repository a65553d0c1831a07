"""SSH numbers: first complete view, steady-state client cost, remote cost per poll.

    .venv/bin/python bench/bench_ssh.py [--hosts 32,64] [--steady 20] [--polls 30]

Runs real OpenSSH sshd daemons on loopback (tests/sshd.py; one sshd per 10 addresses,
MaxStartups raised), each "host" serving the dgx-h100 sim scenario (8 GPUs) through the
real probe.  Everything the "remote hosts" do runs on this same machine, so the
first-view time includes 64 python start-ups sharing these cores; the client numbers
(CPU, RSS) are this process only.  Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from sshd import HostConf, SshdCluster

from gputop import model
from gputop.model import HostSnapshot
from gputop.sources import smi
from gputop.sources.ssh import SshFeed

TICK = os.sysconf("SC_CLK_TCK")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process, its reaped children, and its live descendants."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


async def first_view(cluster: SshdCluster, n: int) -> tuple[float, float]:
    """(seconds until every SSH handshake is done, seconds until every host shows data)."""
    specs = cluster.specs([h.name for h in cluster.hosts[:n]])
    seen_ok: set[str] = set()
    done = asyncio.Event()
    t0 = time.monotonic()
    marks: dict[str, float] = {}

    def emit(snap: HostSnapshot) -> None:
        if snap.state == model.HOST_OK:
            seen_ok.add(snap.host)
            if len(seen_ok) == n and "ok" not in marks:
                marks["ok"] = time.monotonic() - t0
                done.set()

    feed = SshFeed(specs)
    task = asyncio.create_task(feed.run(1.0, emit))

    async def handshakes() -> None:
        while not all(feed.connected(s.name) for s in specs):
            await asyncio.sleep(0.01)
        marks["connected"] = time.monotonic() - t0

    await asyncio.wait_for(asyncio.gather(done.wait(), handshakes()), 120)
    await feed.close()
    await task
    return marks["connected"], marks["ok"]


async def steady(cluster: SshdCluster, n: int, seconds: float) -> tuple[float, float, int]:
    """Client CPU % of one core and RSS MB with n hosts at 1 s, over `seconds`."""
    specs = cluster.specs([h.name for h in cluster.hosts[:n]])
    ok: set[str] = set()
    count = 0
    ready = asyncio.Event()

    def emit(snap: HostSnapshot) -> None:
        nonlocal count
        count += 1
        if snap.state == model.HOST_OK:
            ok.add(snap.host)
            if len(ok) == n:
                ready.set()

    feed = SshFeed(specs)
    task = asyncio.create_task(feed.run(1.0, emit))
    await asyncio.wait_for(ready.wait(), 120)
    await asyncio.sleep(2.0)  # let the start-up burst pass
    c0, t0, n0 = cpu_self(), time.monotonic(), count
    await asyncio.sleep(seconds)
    c1, t1, n1 = cpu_self(), time.monotonic(), count
    rss = rss_mb()
    await feed.close()
    await task
    return 100.0 * (c1 - c0) / (t1 - t0), rss, n1 - n0


async def remote_cost(cluster: SshdCluster, polls: int) -> tuple[float, float]:
    """ms of remote CPU per snapshot: the long-lived probe vs one-shot commands per poll."""
    import asyncssh

    probe_host = cluster.host("cost-probe")
    oneshot_host = cluster.host("cost-oneshot")
    probe_daemon = cluster.daemons[probe_host.daemon].proc
    oneshot_daemon = cluster.daemons[oneshot_host.daemon].proc
    assert probe_daemon is not None and oneshot_daemon is not None

    # Probe: `polls` snapshots at 0.2 s, then close and let sshd reap the session.
    spec = cluster.specs(["cost-probe"])[0]
    got = 0
    enough = asyncio.Event()

    def emit(snap: HostSnapshot) -> None:
        nonlocal got
        if snap.state == model.HOST_OK:
            got += 1
            if got >= polls:
                enough.set()

    before = tree_cpu(probe_daemon.pid)
    feed = SshFeed([spec])
    task = asyncio.create_task(feed.run(0.2, emit))
    await asyncio.wait_for(enough.wait(), 120)
    await feed.close()
    await task
    await asyncio.sleep(1.0)
    probe_ms = 1000 * (tree_cpu(probe_daemon.pid) - before) / got

    # One-shot: the nvidia-smi + ps command per poll (what a probe-less tool does).
    spec = cluster.specs(["cost-oneshot"])[0]
    before = tree_cpu(oneshot_daemon.pid)
    async with asyncssh.connect(
        spec.hostname, port=spec.port, username=spec.user, client_keys=[spec.identity_file],
        known_hosts=list(spec.known_hosts or ()),
    ) as conn:
        for _ in range(polls):
            await conn.run(smi.FALLBACK_COMMAND, check=False)
    await asyncio.sleep(1.0)
    oneshot_ms = 1000 * (tree_cpu(oneshot_daemon.pid) - before) / polls
    return probe_ms, oneshot_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", default="32,64")
    parser.add_argument("--steady", type=float, default=20.0, help="seconds of steady state")
    parser.add_argument("--polls", type=int, default=30)
    args = parser.parse_args()
    sizes = [int(x) for x in args.hosts.split(",")]
    biggest = max(sizes)
    with tempfile.TemporaryDirectory(prefix="gputop-bench-ssh-") as tmp:
        confs_main = [HostConf(f"h{i:03d}") for i in range(biggest)]
        cost = [HostConf("cost-probe"), HostConf("cost-oneshot", python=None)]
        main_dir = Path(tmp) / "main"
        cost_dir = Path(tmp) / "cost"
        main_dir.mkdir()
        cost_dir.mkdir()
        with SshdCluster(main_dir, confs_main, per_daemon=10) as cluster, SshdCluster(
            cost_dir, cost, per_daemon=1, first_address=2 + biggest + 2
        ) as cost_cluster:
            print(f"{'hosts':>6} {'all SSH connected (s)':>22} {'first complete view (s)':>24}")
            for n in sizes:
                connected, seconds = asyncio.run(first_view(cluster, n))
                print(f"{n:>6} {connected:>22.2f} {seconds:>24.2f}")
            print(f"{'':>6} {'':>22} {'target < 3 s for 64':>24}")
            cpu, rss, lines = asyncio.run(steady(cluster, biggest, args.steady))
            print()
            print(f"steady state, {biggest} hosts x 8 GPUs, 1 s interval, {args.steady:g} s:")
            print(f"{'client CPU (% of one core)':>32} {cpu:>8.1f}  target < 15")
            print(f"{'client RSS (MB)':>32} {rss:>8.1f}  target < 150")
            print(f"{'snapshots received':>32} {lines:>8d}")
            probe_ms, oneshot_ms = asyncio.run(remote_cost(cost_cluster, args.polls))
            print()
            print(f"remote CPU per snapshot (sshd + shell + collector), {args.polls} polls:")
            print(f"{'long-lived probe (ms)':>32} {probe_ms:>8.1f}")
            print(f"{'one-shot nvidia-smi+ps (ms)':>32} {oneshot_ms:>8.1f}  (fake nvidia-smi: cat)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
