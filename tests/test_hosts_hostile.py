"""Hosts files, -H and YAML inputs as a hostile colleague or a careless admin writes them.

Nothing in a hosts file may reach a shell: a ProxyCommand in the user's ssh_config gets
%h, %p, %r substituted and then split, so a name with a space or a quote would smuggle
options into it.  The real ssh client (asyncssh) runs a real ProxyCommand here that
records its argv and relays to a real sshd.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from sshd import SshdCluster, collect_round

from gputop import model
from gputop.config import ConfigError, load_config
from gputop.hosts import HostsFileError, HostSpec, load, parse_host_list, parse_text
from gputop.sources.sim.scenario import ScenarioError, load_scenario
from gputop.yamlnodes import MAX_DEPTH

HOSTILE_NAMES = [
    "x:1 '-oProxyCommand=touch pwned' y",
    "-oProxyCommand=touch pwned",
    "a;id",
    "$(id)",
    "a`id`",
    "a|b",
    "a\tb",
    "a\x1bb",
    'a"b',
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_are_refused_in_a_hosts_file(name: str) -> None:
    quoted = name.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t").replace(
        "\x1b", "\\e")
    for text, line, key in (
        (f'hosts:\n  - "{quoted}"\n', 2, "name"),
        (f'hosts:\n  - name: a\n    hostname: "{quoted}"\n', 3, "hostname"),
        (f'hosts:\n  - name: a\n    user: "{quoted}"\n', 3, "user"),
        (f'hosts:\n  - name: a\n    jump: "{quoted}"\n', 3, "jump"),
    ):
        with pytest.raises(HostsFileError, match=rf"^hosts.yaml:{line}: key '{key}': "):
            parse_text(text, "hosts.yaml")


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_are_refused_on_the_command_line(name: str) -> None:
    with pytest.raises(HostsFileError, match=r"^-H: "):
        parse_host_list(name)
    with pytest.raises(HostsFileError, match=r"^-H: "):
        parse_host_list(f"{name}@gpu01")


def test_host_list_edge_cases() -> None:
    with pytest.raises(HostsFileError, match="no hosts given"):
        parse_host_list("")
    (v6,) = parse_host_list("alice@[::1]:2222")
    assert (v6.user, v6.hostname, v6.port) == ("alice", "::1", 2222)
    (bare,) = parse_host_list("fe80::1")
    assert (bare.target, bare.port) == ("fe80::1", None)
    for bad in ("[::1", "[gpu01]:22", "[::1]x", "@gpu01", "gpu01:0", "[::1]:99999"):
        with pytest.raises(HostsFileError, match=r"^-H: "):
            parse_host_list(bad)
    with pytest.raises(HostsFileError, match=r"^<hosts>:3: key 'jump': empty user name"):
        parse_text('hosts:\n  - name: a\n    jump: "@"\n')
    with pytest.raises(HostsFileError, match=r"^<hosts>:3: key 'keepalive': expected 1 to"):
        parse_text("hosts:\n  - name: a\n    keepalive: 0.000001\n")


def test_an_ssh_config_others_can_change_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n    ProxyCommand true\n")
    config.chmod(0o664)
    text = f"hosts:\n  - name: a\n    ssh_config: {config}\n"
    with pytest.raises(HostsFileError, match=r"^<hosts>:3: key 'ssh_config': .*writable by"):
        parse_text(text)
    config.chmod(0o644)
    if os.geteuid() == 0:
        os.chown(config, 65534, 65534)
        with pytest.raises(HostsFileError, match=r"key 'ssh_config': .*owned by uid 65534"):
            parse_text(text)
        os.chown(config, 0, 0)
    (spec,) = parse_text(text)
    assert spec.ssh_config == str(config)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(HostsFileError, match=r"key 'ssh_config': .*not a regular file"):
        parse_text(f"hosts:\n  - name: a\n    ssh_config: {fifo}\n")


# ---------------------------------------------------------------------------------------
# files that would hang, exhaust or crash a YAML reader

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n"
    for i in range(8)
)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (f"hosts: [gpu01]\n{BOMB}", "aliases expand to more than"),
        ("hosts: " + "[" * 1500 + "]" * 1500 + "\n", f"nested deeper than {MAX_DEPTH} levels"),
    ],
    ids=["alias-bomb", "deep"],
)
def test_yaml_bombs_are_refused_with_a_line(tmp_path: Path, text: str, problem: str) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(text)
    with pytest.raises(HostsFileError, match=rf"^{hosts}:\d+: {problem}"):
        load(hosts)
    config = tmp_path / "config.yaml"
    config.write_text(text.replace("hosts:", "interval:"))
    with pytest.raises(ConfigError, match=rf"^{config}:\d+: {problem}"):
        load_config(config)
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(text.replace("hosts:", "gpus:"))
    with pytest.raises(ScenarioError, match=rf"^{scenario}:\d+: "):
        load_scenario(str(scenario))


def test_huge_files_and_fifos_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("w") as fh:
        fh.truncate(50 * 1024 * 1024)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    # A problem of the whole file names no line (no "FILE:0:").
    for path, problem in ((big, "larger than 1024 KiB; "), (fifo, "not a regular file; ")):
        with pytest.raises(HostsFileError, match=rf"^{path}: {problem}"):
            load(path)
        with pytest.raises(ConfigError, match=rf"^{path}: {problem}"):
            load_config(path)


@pytest.mark.parametrize("option", ["--hosts", "--config", "--demo"])
def test_the_command_line_refuses_a_fifo_in_one_line(tmp_path: Path, option: str) -> None:
    fifo = tmp_path / "input.yaml"
    os.mkfifo(fifo)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    # The timeout is the hang this guards against, not a speed requirement.
    done = subprocess.run([sys.executable, "-m", "gputop.cli", option, str(fifo), "--once"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and str(fifo) in done.stderr


# ---------------------------------------------------------------------------------------
# the real ssh client and a ProxyCommand that records its argv

RECORDER = r"""
import socket, sys, threading, os
with open(sys.argv[1], "a") as fh:
    fh.write(repr(sys.argv[2:]) + "\n")
conn = socket.create_connection((sys.argv[2], int(sys.argv[3])))
def pump():
    while data := os.read(0, 65536):
        conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)
threading.Thread(target=pump, daemon=True).start()
while data := conn.recv(65536):
    os.write(1, data)
"""


@pytest.mark.sshd
async def test_proxycommand_gets_each_name_as_one_argument(
    sshd_hosts: SshdCluster, tmp_path: Path
) -> None:
    recorder = tmp_path / "record.py"
    recorder.write_text(RECORDER)
    log = tmp_path / "argv.log"
    host = sshd_hosts.hosts[0]
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host {host.name}\n    HostName {host.address}\n    Port {host.port}\n"
        f"    User {sshd_hosts.user}\n    IdentityFile {sshd_hosts.key}\n"
        f"    ProxyCommand {sys.executable} {recorder} {log} %h %p\n"
    )
    config.chmod(0o600)
    text = (f"hosts:\n  - name: {host.name}\n    ssh_config: {config}\n"
            f"    known_hosts: [{sshd_hosts.known_hosts}]\n")
    (spec,) = parse_text(text)
    assert isinstance(spec, HostSpec)
    (snap,) = await collect_round([spec], timeout=20)
    assert snap.state == model.HOST_OK, snap.error
    assert log.read_text().splitlines() == [repr([host.address, str(host.port)])]
    hostile = text.replace(f"name: {host.name}", f"name: \"{host.name} '-oX=y' z\"")
    with pytest.raises(HostsFileError, match=r"^<hosts>:2: key 'name': .* may not contain ' '"):
        parse_text(hostile)
