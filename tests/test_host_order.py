"""Hosts are shown in the hosts file's order (issue 39.9), not in the order they
answered or by kind (SSH, then `url:` hosts): in --once, --json, check's host list and
every --watch frame."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.commands import watch
from gputop.options import SourceOptions

# Nothing listens on 127.0.0.9:1: each host fails at once, SSH or HTTP alike.
HOSTS = """\
hosts:
  - name: zz-ssh
    hostname: 127.0.0.9
    port: 1
  - name: bb-url
    url: http://127.0.0.9:1
  - name: aa-ssh
    hostname: 127.0.0.9
    port: 1
"""
ORDER = ["zz-ssh", "bb-url", "aa-ssh"]


@pytest.fixture
def hosts_file(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    return path


def gputop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})


def shown(text: str) -> list[str]:
    """The hosts of the detail, in order: each one's heading names its state in capitals
    (the summary block above it, one line per host, ranks problems first, issue 43.6)."""
    return [name for name in re.findall(r"^(\S+)\s.*UNREACHABLE", text, re.M)
            if name in ORDER]


def test_once_and_json_follow_the_file(hosts_file: Path) -> None:
    table = gputop("--hosts", str(hosts_file), "--once", "--timeout", "20")
    assert shown(table.stdout) == ORDER, table.stdout + table.stderr
    document = gputop("--hosts", str(hosts_file), "--json", "--timeout", "20")
    assert [h["host"] for h in json.loads(document.stdout)["hosts"]] == ORDER


def test_watch_frames_follow_the_file(hosts_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    options = SourceOptions(hosts_file=str(hosts_file), timeout=20)
    assert watch.run(options, 0.1, frames=1) == 0
    assert shown(out.getvalue()) == ORDER, out.getvalue()
