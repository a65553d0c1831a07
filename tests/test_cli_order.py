"""Source options stand before or after a subcommand alike (--help lists them as top-level
options), and a check that reaches no host says so with exit 3 (README, exit codes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gputop.cli import command_first


def gputop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})


@pytest.mark.parametrize(("typed", "parsed"), [
    ("--demo lab check", "check --demo lab"),
    ("--demo check", "check --demo"),  # --demo's scenario is optional: not "check"
    ("--demo=lab check --json", "check --json --demo=lab"),
    ("-H h topo", "topo -H h"),
    ("-Hh topo", "topo -Hh"),
    ("--hosts F --local check", "check --hosts F --local"),
    ("--timeout 3 --config c.yaml pick --count 2", "pick --count 2 --timeout 3 --config c.yaml"),
    # a bare --demo after `cancel ID`, never in front of it as cancel's scenario
    ("--demo queue cancel 1a2b", "queue cancel 1a2b --demo"),
    # before run's `--`: nothing moves into CMD
    ("--demo lab run --gpus 1 -- sh -c x", "run --gpus 1 --demo lab -- sh -c x"),
    # no subcommand, or other options first: left as typed
    ("--demo lab --once", "--demo lab --once"),
    ("--once check", "--once check"),
    ("run -- --demo check", "run -- --demo check"),
])
def test_source_options_move_behind_the_subcommand(typed: str, parsed: str) -> None:
    assert command_first(typed.split()) == parsed.split()


def test_demo_before_check_is_the_same_check() -> None:
    def codes(result: subprocess.CompletedProcess[str]) -> list[tuple[str, int | None]]:
        return [(w["code"], w["gpu"]) for w in json.loads(result.stdout)["warnings"]]

    before = gputop("--demo", "faulty", "check", "--json")
    after = gputop("check", "--demo", "faulty", "--json")
    assert before.returncode == after.returncode == 2, before.stderr
    assert codes(before) == codes(after) != []
    default = gputop("--demo", "check", "--json")  # the default scenario, not "check"
    named = gputop("check", "--demo", "dgx-h100", "--json")
    assert default.returncode == named.returncode, default.stderr
    assert json.loads(default.stdout)["hosts"] == json.loads(named.stdout)["hosts"]


def test_check_that_reaches_no_host_exits_3() -> None:
    # 127.0.0.9:1 on loopback: nothing listens, the connection is refused at once.
    result = gputop("-H", "127.0.0.9:1", "check", "--timeout", "20")
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert "127.0.0.9" in result.stdout
