"""A newcomer's first minute (issue 24): `gputop --hosts hosts.example.yaml --once` names
every host's problem once, in words, with what to do; a hosts-file entry takes the same
`[user@]host[:port]` as -H; file-level problems name no line.

Nothing here leaves loopback: the example's names are swapped for 127.0.0.9 port 1, where
nothing listens and the connection is refused at once.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from gputop import model
from gputop.analysis.health import warnings as health_warnings
from gputop.commands import once
from gputop.hosts import parse_host_list, parse_text
from gputop.sources import networds
from tests.test_once import sim_snapshot

REPO = Path(__file__).resolve().parent.parent
REFUSED = "127.0.0.9:1"  # loopback, nothing listens: refused at once
# What no host line may say: the socket's texts, NVML's, or a state twice.
RAW = ("Errno", "Connect call failed", "unreachable", "Name or service", "GPU is lost",
       "nvmlDevice", ":0:")


def gputop(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "HOME": str(home), "COLUMNS": "1000"}
    env.pop("GPUTOP_HOSTS", None)
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def blocks(stdout: str) -> dict[str, list[str]]:
    """Host name -> the lines of its block (after the first block of several hosts, one
    line per host: tests/test_once_cluster.py's)."""
    out = {}
    for block in stdout.strip().split("\n\n"):
        lines = block.splitlines()
        if re.match(r"\d+ hosts: ", lines[0]):
            continue
        out[lines[0].split()[0]] = lines
    return out


def test_the_example_hosts_file_names_each_hosts_problem_in_one_line(tmp_path: Path) -> None:
    text = (REPO / "hosts.example.yaml").read_text()
    swaps = [("  - gpu01\n", f"  - {REFUSED}\n"), ("hostname: 10.0.0.12", "hostname: 127.0.0.9"),
             ("port: 2222", "port: 1"), ("jump: alice@login.example.org:22", f"jump: {REFUSED}"),
             ("url: http://gpu07:9400", f"url: http://{REFUSED}")]
    for old, new in swaps:
        assert old in text, old  # the example still has this host: the test still tests it
        text = text.replace(old, new)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(text)
    result = gputop("--hosts", str(hosts), "--once", "--timeout", "30", home=tmp_path)
    assert result.returncode == 3, (result.stdout, result.stderr)  # no host could be read
    assert result.stderr == ""
    found = blocks(result.stdout)
    assert set(found) == {REFUSED, "gpu02", "dgx-1", "gpu07"}
    for lines in found.values():
        # The header says the state; one line says why, and no warning repeats it.
        assert len(lines) == 2, lines
        assert "UNREACHABLE" in lines[0]
        assert not any(raw in lines[1] for raw in RAW), lines[1]
    assert found[REFUSED][1] == (f"  connection refused by {REFUSED}: no SSH server listens "
                                 f"there; check the port and that the SSH server runs")
    assert found["gpu02"][1].startswith(f"  connection refused by {REFUSED}: ")
    assert found["dgx-1"][1].startswith(f"  jump host {REFUSED}: connection refused by "
                                        f"{REFUSED}: ")
    assert found["gpu07"][1].startswith(f"  connection refused by {REFUSED}: no gputop serve "
                                        f"listens there")


def test_a_missing_key_file_says_what_to_do(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"defaults: {{identity_file: ~/.ssh/id_ed25519}}\nhosts: [{REFUSED}]\n")
    result = gputop("--hosts", str(hosts), "--once", home=tmp_path)
    assert result.returncode == 3, result.stderr
    (lines,) = blocks(result.stdout).values()
    assert lines[1:] == [f"  no key file {tmp_path}/.ssh/id_ed25519 (identity_file): create it "
                         f"with ssh-keygen, or drop identity_file to use ssh-agent and "
                         f"~/.ssh/config"]


def test_name_lookup_failures_in_words() -> None:
    # The resolver's own error, as getaddrinfo raises it for a name nobody knows (the test
    # asks no DNS server).
    unknown = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert networds.problem(unknown, "gpu01:22") == (
        "the name gpu01 is not known (no DNS entry): check its spelling, or give its address")
    down = socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    assert "no DNS server answered" in networds.problem(down, "gpu01:22")
    assert networds.host_of("http://alice@[::1]:9400/x") == "::1"


def test_a_hosts_file_entry_takes_the_syntax_of_dash_h() -> None:
    typed = ["127.0.0.9:1", "alice@gpu01:2222", "bob@[::1]:22", "gpu03"]
    from_file = parse_text("".join(f"- {t!r}\n" for t in typed))
    assert from_file == parse_host_list(",".join(typed))
    assert [(s.user, s.target, s.port) for s in from_file] == [
        (None, "127.0.0.9", 1), ("alice", "gpu01", 2222), ("bob", "::1", 22),
        (None, "gpu03", None)]
    # The entry's own user beats the defaults', and its keys beat its name's parts.
    (spec,) = parse_text("defaults: {user: carol, port: 22}\nhosts:\n"
                         "  - {name: 'alice@gpu01:2222', port: 2200}\n")
    assert (spec.user, spec.target, spec.port) == ("alice", "gpu01", 2200)


def test_a_missing_hosts_file_names_no_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = gputop("--hosts", str(missing), "--once", home=tmp_path)
    assert result.returncode == 2
    assert result.stderr == f"gputop: {missing}: no such file; check the path\n"


def test_a_lost_gpu_is_said_once_in_words() -> None:
    snap = sim_snapshot("faulty")  # GPU 6 is lost after 20 s; the snapshot is at 30 s
    (lost,) = [g for g in snap.gpus if g.state == model.GPU_LOST]
    line = next(x for x in once.render_text([snap]).splitlines() if x.startswith("  6 "))
    assert line.endswith("LOST: fallen off the bus; needs a reset or reboot"), line
    (warning,) = [w for w in health_warnings(snap) if w.code == "gpu-lost"]
    assert warning.message == "GPU lost: fallen off the bus; needs a reset or reboot"
    for text in (line, warning.message, lost.error or ""):
        assert not any(raw in text for raw in RAW), text


def test_once_shows_the_xids_that_check_shows(tmp_path: Path) -> None:
    """--once and check read a card's XID events alike (issue 24: 3 vs 5 criticals)."""
    from helpers import fakenvml

    scenario = fakenvml.template("faulty")
    scenario["xid_events"] = [{"device": 1, "xid": 48}, {"device": 2, "xid": 63}]
    with fakenvml.processes(scenario) as ready:
        path = fakenvml.write_scenario(tmp_path / "faulty.scenario", ready)
        env = {**fakenvml.environment(path), "NO_COLOR": "1", "COLUMNS": "200",
               "HOME": str(tmp_path)}
        env.pop("GPUTOP_HOSTS", None)

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "gputop.cli", *args], env=env,
                                  capture_output=True, text=True, timeout=120)

        check, once_text = run("check", "--json"), run("--once")
    xids = sorted((w["code"], w["gpu"]) for w in json.loads(check.stdout)["warnings"]
                  if w["code"].startswith("xid-"))
    assert xids == [("xid-48", 1), ("xid-63", 2)], check.stdout
    critical = [w for w in json.loads(check.stdout)["warnings"] if w["severity"] == "critical"]
    shown = [line for line in once_text.stdout.splitlines() if line.startswith("CRITICAL")]
    assert len(shown) == len(critical), once_text.stdout
    assert any("GPU 1" in line and "48" in line for line in shown), shown
