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
import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
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


async def first_view(cluster: SshdCluster, n: int) -> tuple[float, float, float]:
    """Seconds until every SSH handshake is done and until every host shows data, and the
    CPU seconds the 'remote' side (sshd, shells, probes) spent getting there."""
    daemons = [d.proc.pid for d in cluster.daemons if d.proc is not None]
    cpu_before = sum(tree_cpu(pid) for pid in daemons)
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
    # Read while the sessions live: their processes' own times are still there to read.
    remote = sum(tree_cpu(pid) for pid in daemons) - cpu_before
    await feed.close()
    await task
    return marks["connected"], marks["ok"], remote


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


async def remote_cost(cluster: SshdCluster, polls: int) -> tuple[float, float, float]:
    """Remote CPU: probe start-up (s), ms per snapshot of the running probe, and ms per poll
    of one-shot commands on an open connection (what a probe-less tool pays)."""
    import asyncssh

    probe_host = cluster.host("cost-probe")
    oneshot_host = cluster.host("cost-oneshot")
    probe_daemon = cluster.daemons[probe_host.daemon].proc
    oneshot_daemon = cluster.daemons[oneshot_host.daemon].proc
    assert probe_daemon is not None and oneshot_daemon is not None

    # Probe at 0.2 s: start-up until its first snapshot, then `polls` more snapshots.
    spec = cluster.specs(["cost-probe"])[0]
    got = 0
    marks: dict[int, float] = {}
    enough = asyncio.Event()

    def emit(snap: HostSnapshot) -> None:
        nonlocal got
        if snap.state == model.HOST_OK:
            got += 1
            if got in (1, 1 + polls):
                # Read while the session lives: its processes' own times are there to read.
                marks[got] = tree_cpu(probe_daemon.pid)
            if got >= 1 + polls:
                enough.set()

    before = tree_cpu(probe_daemon.pid)
    feed = SshFeed([spec])
    task = asyncio.create_task(feed.run(0.2, emit))
    await asyncio.wait_for(enough.wait(), 120)
    await feed.close()
    await task
    startup = marks[1] - before
    probe_ms = 1000 * (marks[1 + polls] - marks[1]) / polls

    # One-shot: the nvidia-smi + ps command per poll, on an already open connection.
    spec = cluster.specs(["cost-oneshot"])[0]
    async with asyncssh.connect(
        spec.hostname, port=spec.port, username=spec.user, client_keys=[spec.identity_file],
        known_hosts=list(spec.known_hosts or ()),
    ) as conn:
        await conn.run(smi.FALLBACK_COMMAND, check=False)
        before = tree_cpu(oneshot_daemon.pid)
        for _ in range(polls):
            await conn.run(smi.FALLBACK_COMMAND, check=False)
        oneshot_ms = 1000 * (tree_cpu(oneshot_daemon.pid) - before) / polls
    return startup, probe_ms, oneshot_ms


@contextlib.contextmanager
def sh_user(name: str) -> Iterator[str]:
    """A throw-away system user whose login shell is /bin/sh: no rc files at login."""
    import pwd

    created = False
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", "-p", "*", name],
            check=True, capture_output=True,
        )
        created = True
    try:
        yield name
    finally:
        if created:
            subprocess.run(["userdel", name], check=False, capture_output=True)


def first_view_table(cluster: SshdCluster, sizes: list[int], title: str) -> None:
    print(title)
    print(f"{'hosts':>6} {'all SSH connected (s)':>22} {'first complete view (s)':>24}"
          f" {'remote CPU used (s)':>20}")
    for n in [1, *sizes]:
        connected, seconds, used = asyncio.run(first_view(cluster, n))
        print(f"{n:>6} {connected:>22.2f} {seconds:>24.2f} {used:>20.2f}")
    print(f"{'':>6} {'':>22} {'target < 3 s for 64':>24}")
    print(f"(this machine: {os.cpu_count()} cores for the client and every 'remote' host;"
          f" load average {os.getloadavg()[0]:.1f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", default="32,64")
    parser.add_argument("--steady", type=float, default=20.0, help="seconds of steady state")
    parser.add_argument("--polls", type=int, default=30)
    parser.add_argument(
        "--sh-user", metavar="NAME",
        help="also measure the first view logging in as NAME, a system user created for the "
        "run with /bin/sh as its shell (root's .bashrc here starts pyenv: ~0.1 s a login)",
    )
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
            first_view_table(cluster, sizes, f"login as {cluster.user} (its shell rc files run):")
            cpu, rss, lines = asyncio.run(steady(cluster, biggest, args.steady))
            print()
            print(f"steady state, {biggest} hosts x 8 GPUs, 1 s interval, {args.steady:g} s:")
            print(f"{'client CPU (% of one core)':>32} {cpu:>8.1f}  target < 15")
            print(f"{'client RSS (MB)':>32} {rss:>8.1f}  target < 150")
            print(f"{'snapshots received':>32} {lines:>8d}")
            startup, probe_ms, oneshot_ms = asyncio.run(remote_cost(cost_cluster, args.polls))
            print()
            print(f"remote CPU (sshd + login shell + collector), {args.polls} polls:")
            print(f"{'probe start-up, once (ms)':>36} {1000 * startup:>8.1f}")
            print(f"{'probe, per snapshot (ms)':>36} {probe_ms:>8.1f}")
            print(f"{'one-shot nvidia-smi + ps, per poll (ms)':>36} {oneshot_ms:>8.1f}"
                  "  (nvidia-smi faked by cat: a real one costs more)")
        if args.sh_user and os.geteuid() == 0 and shutil.which("useradd"):
            # The hosts' files must be readable by that user: sshd reads authorized_keys
            # and the probe runs as the user.
            plain = Path(tmp) / "plain"
            plain.mkdir()
            for path in (Path(tmp), plain):
                path.chmod(0o755)
            with sh_user(args.sh_user) as user, SshdCluster(
                plain, confs_main, per_daemon=10, user=user
            ) as cluster:
                # os.walk does not follow links; chmod of a link would change its target
                # (/usr/bin/python3...), so links are skipped too.
                for root, dirs, files in os.walk(plain, followlinks=False):
                    for name in dirs:
                        if not os.path.islink(os.path.join(root, name)):
                            os.chmod(os.path.join(root, name), 0o755)
                    for name in files:
                        path = os.path.join(root, name)
                        if not os.path.islink(path) and name.endswith(
                            (".pub", "authorized_keys", ".csv", "known_hosts")
                        ):
                            os.chmod(path, 0o644)
                print()
                first_view_table(cluster, sizes, f"login as {user} (shell /bin/sh, no rc files):")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
