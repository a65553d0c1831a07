"""The hosts file: shapes, defaults, groups, and errors that name file, line and key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gputop.config import Config
from gputop.hosts import (
    HostsFileError,
    HostSpec,
    load,
    parse_host_list,
    parse_text,
)
from gputop.options import SourceOptions, find_hosts_file
from gputop.sources.opener import SourceError, narrow_to_one, open_feeds, plan_sources

REPO = Path(__file__).resolve().parent.parent


def test_simple_list_of_names() -> None:
    specs = parse_text("- gpu01\n- gpu02\n")
    assert [s.name for s in specs] == ["gpu01", "gpu02"]
    assert specs[0].hostname is None  # resolved through ~/.ssh/config
    assert specs[0].target == "gpu01"
    assert specs[0].known_hosts is None


def test_full_form_with_defaults_and_groups() -> None:
    text = """
defaults:
  user: alice
  port: 2200
  labels: [lab]
  connect_timeout: 5
hosts:
  - gpu01
  - name: gpu02
    hostname: 10.0.0.12
    user: bob
    port: 2222
    labels: [a100, train]
    jump: login.example.org
groups:
  nightly: [gpu01, gpu02]
"""
    a, b = parse_text(text)
    assert a == HostSpec(
        name="gpu01", user="alice", port=2200, labels=("lab", "nightly"), connect_timeout=5.0
    )
    assert b.hostname == "10.0.0.12" and b.user == "bob" and b.port == 2222
    assert b.labels == ("lab", "a100", "train", "nightly")
    assert b.jump == "login.example.org"
    assert b.connect_timeout == 5.0


def test_mapping_of_hosts() -> None:
    specs = parse_text("hosts:\n  gpu01:\n  gpu02: {port: 22, labels: x}\n")
    assert specs[0] == HostSpec(name="gpu01")
    assert specs[1].port == 22 and specs[1].labels == ("x",)


def test_paths_are_expanded() -> None:
    text = "hosts:\n  - name: a\n    identity_file: ~/.ssh/k\n    known_hosts: ~/kh\n"
    (spec,) = parse_text(text)
    assert not spec.identity_file.startswith("~")
    assert spec.known_hosts and not spec.known_hosts[0].startswith("~")
    assert spec.identity_file == os.path.expanduser("~/.ssh/k")
    assert tuple(spec.known_hosts) == (os.path.expanduser("~/kh"),)


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("", 1, "empty"),
        ("# only a comment\n", 1, "empty"),
        ("hosts:\n  - name: a\n    colour: red\n", 3, "key 'colour': unknown key"),
        ("defaults:\n  hostname: x\nhosts: [a]\n", 2, "key 'defaults.hostname': unknown key"),
        ("hosts:\n  - name: a\n    port: '22'\n", 3, "key 'port': expected a port number"),
        ("hosts:\n  - name: a\n    port: 70000\n", 3, "key 'port': port 70000 out of range"),
        ("hosts:\n  - name: a\n    port: true\n", 3, "key 'port'"),
        ("hosts:\n  - a\n  - b\n  - a\n", 4, "duplicate host 'a' (first on line 2)"),
        ("hosts:\n  - name: a\n    user: x\n    user: y\n", 4, "key 'user': duplicate key"),
        ("hosts:\n  - port: 22\n", 2, "key 'name': missing"),
        ("hosts:\n  - [a, b]\n", 2, "key 'hosts'"),
        ("hosts: []\n", 1, "no hosts listed"),
        ("defaults: {user: a}\n", 1, "key 'hosts': missing"),
        ("server: x\nhosts: [a]\n", 1, "key 'server': unknown key"),
        ("hosts:\n  - name: a\n    labels: [1, 2]\n", 3, "key 'labels': expected text"),
        ("hosts:\n  - name: a\n    connect_timeout: -1\n", 3, "key 'connect_timeout'"),
        ("hosts: [a]\ngroups:\n  g: [a, zz]\n", 3, "unknown host 'zz'"),
        ("hosts:\n  - name: a\n  bad: [\n", 3, "not valid YAML"),
        ("42\n", 1, "expected a list of hosts"),
    ],
)
def test_errors_name_file_line_and_key(text: str, line: int, needle: str) -> None:
    with pytest.raises(HostsFileError) as info:
        parse_text(text, "lab.yaml")
    message = str(info.value)
    assert message.startswith(f"lab.yaml:{line}: "), message
    assert needle in message
    assert "\n" not in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(HostsFileError, match=r": no such file; check the path$"):
        load(tmp_path / "nope.yaml")


def test_labels_are_plain_data_but_names_reach_ssh_and_are_refused() -> None:
    (spec,) = parse_text('hosts:\n  - name: a\n    labels: ["`x`|y"]\n')
    assert spec.labels == ("`x`|y",)
    with pytest.raises(HostsFileError, match=r"^<hosts>:2: key 'name': .* may not contain ';'"):
        parse_text('hosts:\n  - name: "a;touch /tmp/pwned"\n')
    with pytest.raises(HostsFileError, match=r"^<hosts>:3: key 'user': .* may not contain '\$'"):
        parse_text('hosts:\n  - name: a\n    user: "$(id)"\n')


def test_host_list() -> None:
    specs = parse_host_list("alice@gpu01, gpu02:2222,gpu03")
    assert specs[0] == HostSpec(name="alice@gpu01", hostname="gpu01", user="alice")
    assert specs[1].hostname == "gpu02" and specs[1].port == 2222
    assert specs[2].name == "gpu03"
    with pytest.raises(HostsFileError, match="port"):
        parse_host_list("gpu01:abc")
    with pytest.raises(HostsFileError, match="no hosts"):
        parse_host_list(" , ")


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    env: dict[str, str] = {}
    assert find_hosts_file(None, env) == (None, "")
    default = home / ".config" / "gputop" / "hosts.yaml"
    default.parent.mkdir(parents=True)
    default.write_text("- d1\n")
    assert find_hosts_file(None, env) == (str(default), "default")
    env_file = tmp_path / "env.yaml"
    env_file.write_text("- e1\n")
    env["GPUTOP_HOSTS"] = str(env_file)
    assert find_hosts_file(None, env) == (str(env_file), "$GPUTOP_HOSTS")
    explicit = tmp_path / "x.yaml"
    explicit.write_text("- x1\n")
    assert find_hosts_file(str(explicit), env)[0] == str(explicit)

    # The one decision every command and the dashboard follow (sources/opener.py).
    def planned(environ: dict[str, str], **options: Any) -> list[str]:
        monkeypatch.delenv("GPUTOP_HOSTS", raising=False)
        for key, value in environ.items():
            monkeypatch.setenv(key, value)
        return [s.name for s in plan_sources(SourceOptions(**options)).ssh_hosts]

    assert planned(env) == ["e1"]
    assert planned(env, hosts_file=str(explicit)) == ["x1"]
    assert planned(env, hosts_file=str(explicit), host_list="h1,h2") == ["h1", "h2"]
    assert planned({}) == ["d1"]
    assert not plan_sources(SourceOptions()).local  # hosts configured: SSH only
    assert plan_sources(SourceOptions(local=True)).local


def test_example_file_parses() -> None:
    specs = load(REPO / "hosts.example.yaml")
    assert len(specs) >= 3
    assert any(s.jump for s in specs)
    assert any(s.labels for s in specs)


def test_cli_bad_hosts_file_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts:\n  - name: a\n    prot: 22\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gputop.cli", "--hosts", str(bad), "--once"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, proc.stderr
    assert f"{bad}:3: key 'prot': unknown key" in lines[0]


def test_plan_uses_env_and_default_hosts_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("GPUTOP_HOSTS", raising=False)
    plan = plan_sources(SourceOptions())
    assert plan.local and not plan.ssh_hosts
    hosts = tmp_path / "lab.yaml"
    hosts.write_text("- gpu01\n")
    monkeypatch.setenv("GPUTOP_HOSTS", str(hosts))
    plan = plan_sources(SourceOptions())
    assert [s.name for s in plan.ssh_hosts] == ["gpu01"]
    assert not plan.local  # --local adds this machine
    monkeypatch.delenv("GPUTOP_HOSTS")
    default = tmp_path / ".config" / "gputop" / "hosts.yaml"
    default.parent.mkdir(parents=True)
    default.write_text("- gpu01\n")
    assert [s.name for s in plan_sources(SourceOptions()).ssh_hosts] == ["gpu01"]


def test_narrowing_to_the_host_a_command_acts_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = tmp_path / "lab.yaml"
    hosts.write_text("- gpu01\n- gpu02\n")
    monkeypatch.setenv("GPUTOP_HOSTS", str(hosts))
    plan = plan_sources(SourceOptions())
    with pytest.raises(SourceError, match=r"several hosts \(gpu01, gpu02\): choose one"):
        narrow_to_one(plan, None)
    assert [s.name for s in narrow_to_one(plan, "gpu02").ssh_hosts] == ["gpu02"]
    with pytest.raises(SourceError, match=r"no host 'gpu9' \(hosts: gpu01, gpu02\)"):
        narrow_to_one(plan, "gpu9")
    both = plan_sources(SourceOptions(local=True))
    assert narrow_to_one(both, None).local and not narrow_to_one(both, None).ssh_hosts
    assert narrow_to_one(both, "localhost").local


def test_bad_hosts_file_is_a_source_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts:\n  - name: a\n    port: x\n")
    with pytest.raises(SourceError, match=r"bad.yaml:3: key 'port'"):
        open_feeds(SourceOptions(hosts_file=str(bad), timeout=1.0), Config())


def test_the_root_example_is_the_packaged_one() -> None:
    # The root copy is what a newcomer finds in a clone; the packaged one is what
    # `gputop config --hosts-example` prints after `pip install`: one text, two places.
    packaged = REPO / "gputop" / "examples" / "hosts.example.yaml"
    assert (REPO / "hosts.example.yaml").read_text() == packaged.read_text()
