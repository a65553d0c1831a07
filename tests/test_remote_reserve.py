"""Reserve and release on remote hosts, through a real OpenSSH sshd on loopback.

Two fake hosts, each with its own simulated GPUs (the faulty scenario: GPUs 3, 4, 7
free) and its own reservation store (GPUTOP_RESERVATIONS_DIR set by sshd's SetEnv):
the store that changes is the one of the host the cards are in, written by the remote
probe as the connected user.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import HostConf, SshdCluster

from gputop.actions import reservations as store

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.sshd


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SshdCluster, dict]]:
    stores_base = tempfile.mkdtemp(prefix="gputop-remote-res-")
    os.chmod(stores_base, 0o755)
    stores = {name: os.path.join(stores_base, name) for name in ("box-a", "box-b")}
    confs = [
        HostConf(name, scenario="faulty", env={"GPUTOP_RESERVATIONS_DIR": stores[name]})
        for name in stores
    ]
    with SshdCluster(tmp_path_factory.mktemp("reserve-sshd"), confs) as cluster:
        yield cluster, stores
    shutil.rmtree(stores_base, ignore_errors=True)


def gputop(cluster: SshdCluster, *args: str) -> subprocess.CompletedProcess[str]:
    hosts = cluster.hosts_yaml()
    return subprocess.run(
        [sys.executable, "-m", "gputop.cli", *args, "--hosts", str(hosts), "--timeout", "20"],
        env=cluster.env(),
        capture_output=True,
        text=True,
        timeout=90,
        cwd=str(REPO),
    )


def test_remote_reserve_list_release(lab: tuple[SshdCluster, dict]) -> None:
    cluster, stores = lab
    out = gputop(cluster, "reserve", "--host", "box-a", "--gpus", "3", "--for", "1h",
                 "--note", "remote run")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "CUDA_VISIBLE_DEVICES=3\n"
    assert "box-a: reserved GPU 3 until" in out.stderr
    # written on that host's store, by the probe, as the connected user
    held = store.list_active(stores["box-a"])
    assert [(r["gpu"], r["note"], r["user"]) for r in held] == [(3, "remote run", cluster.user)]
    assert held[0]["gpu_uuid"] and held[0]["gpu_uuid"].startswith("GPU-")
    assert store.list_active(stores["box-b"]) == []

    # another user of box-a holds GPU 7 (the probe is only ever another process)
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1]);"
        "from gputop.actions import reservations as s;"
        "sys.exit(0 if s.reserve(sys.argv[2], [7], time.time() + 3600, 'x')['ok'] else 1)"
    )
    subprocess.run(["/usr/bin/python3", "-c", code, str(REPO), stores["box-a"]],
                   user=65534, group=65534, extra_groups=[], cwd="/", check=True)
    lost = gputop(cluster, "reserve", "--host", "box-a", "--gpus", "7", "--for", "1h")
    assert lost.returncode == 4, (lost.stdout, lost.stderr)
    assert "box-a: GPU 7 is reserved by nobody" in lost.stderr and lost.stdout == ""

    # every host's reservations, from their snapshots
    listed = gputop(cluster, "reservations", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert sorted((r["host"], r["gpu"], r["user"]) for r in rows) == [
        ("box-a", 3, cluster.user),
        ("box-a", 7, "nobody"),
    ]

    # --count on box-a: my GPU 3 and the free GPU 4, never nobody's 7
    more = gputop(cluster, "reserve", "--host", "box-a", "--count", "2", "--for", "2h")
    assert more.returncode == 0, more.stderr
    assert more.stdout == "CUDA_VISIBLE_DEVICES=3,4\n"

    rel = gputop(cluster, "release", "--host", "box-a")
    assert rel.returncode == 0, rel.stderr
    assert "box-a: released GPU 3, 4" in rel.stderr
    assert [(r["gpu"], r["user"]) for r in store.list_active(stores["box-a"])] == [(7, "nobody")]


def test_several_hosts_need_host(lab: tuple[SshdCluster, dict]) -> None:
    cluster, _stores = lab
    out = gputop(cluster, "reserve", "--gpus", "3", "--for", "1h")
    assert out.returncode == 2
    assert "several hosts (box-a, box-b): choose one with --host" in out.stderr
    out = gputop(cluster, "release", "--host", "nowhere")
    assert out.returncode == 2 and "no host 'nowhere' (hosts: box-a, box-b)" in out.stderr


def test_unreachable_host_is_one_line_and_exit_4(lab: tuple[SshdCluster, dict]) -> None:
    cluster, _stores = lab
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    hosts = cluster.tmp / "dead.yaml"
    hosts.write_text(f"hosts:\n  - name: dead\n    hostname: 127.0.0.1\n    port: {port}\n")
    for args in (["reserve", "--gpus", "0", "--for", "1h"], ["reservations"]):
        out = subprocess.run(
            [sys.executable, "-m", "gputop.cli", *args, "--hosts", str(hosts), "--timeout", "20"],
            env=cluster.env(), capture_output=True, text=True, timeout=60, cwd=str(REPO),
        )
        assert out.returncode == 4, (args, out.stderr)
        assert "dead: unreachable" in out.stderr and out.stderr.count("\n") == 1


def test_hosts_from_the_environment_are_where_reserve_acts(
    lab: tuple[SshdCluster, dict], tmp_path: Path
) -> None:
    """$GPUTOP_HOSTS names the hosts for reserve as for --once and pick: the reservation
    is written on that host, never on this machine (it once said "box-b: reserved GPU 2"
    and wrote the local store)."""
    cluster, stores = lab
    hosts = cluster.hosts_yaml(tmp_path / "env-hosts.yaml", names=["box-b"])
    local_store = tmp_path / "local-store"
    config = tmp_path / "config.yaml"
    config.write_text(f"reservations:\n  dir: {local_store}\n")
    env = {**cluster.env(), "GPUTOP_HOSTS": str(hosts)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gputop.cli", *args, "--config", str(config),
             "--timeout", "20"],
            env=env, capture_output=True, text=True, timeout=90, cwd=str(REPO),
        )

    out = run("reserve", "--gpus", "4", "--for", "1h", "--note", "from env")
    assert out.returncode == 0, out.stderr
    assert "box-b: reserved GPU 4" in out.stderr
    assert [(r["gpu"], r["note"]) for r in store.list_active(stores["box-b"])] == [
        (4, "from env")
    ]
    assert not local_store.exists() or store.list_active(str(local_store)) == []
    # ~/.config/gputop/hosts.yaml is the same decision when $GPUTOP_HOSTS is not set.
    default = Path(env["HOME"]) / ".config" / "gputop" / "hosts.yaml"
    default.parent.mkdir(parents=True, exist_ok=True)
    default.write_text(hosts.read_text())
    del env["GPUTOP_HOSTS"]
    rel = run("release", "--gpus", "4")
    default.unlink()
    assert rel.returncode == 0, rel.stderr
    assert "box-b: released GPU 4" in rel.stderr
    assert store.list_active(stores["box-b"]) == []
