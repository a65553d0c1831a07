"""Source options stand before or after a subcommand alike (--help lists them as top-level
options), and a check that reaches no host says so with exit 3 (README, exit codes)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import subprocess
import sys

import pytest

from gputop import cli, exitcodes
from gputop.cli import command_first
from gputop.clihelp import Command
from gputop.commands import COMMANDS


def gputop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})


@pytest.mark.parametrize(("typed", "parsed"), [
    ("--demo lab check", "check --demo lab"),
    ("--demo check", "check --demo=dgx-h100"),  # --demo's scenario is optional: not "check"
    ("--demo=lab check --json", "check --demo=lab --json"),
    ("-H h topo", "topo -H h"),
    ("-Hh topo", "topo -Hh"),
    ("--hosts F --local check", "check --hosts F --local"),
    ("--timeout 3 --config c.yaml pick --count 2", "pick --timeout 3 --config c.yaml --count 2"),
    ("--json check", "check --json"),
    ("--interval 2 serve", "serve --interval 2"),
    ("--help reserve", "reserve --help"),
    # a bare --demo never takes `queue cancel`'s `cancel` as its scenario
    ("--demo queue cancel 1a2b", "queue --demo=dgx-h100 cancel 1a2b"),
    # right behind the command: nothing moves into run's CMD, with `--` or without
    ("--demo lab run --gpus 1 -- sh -c x", "run --demo lab --gpus 1 -- sh -c x"),
    ("--demo lab run sh -c x", "run --demo lab sh -c x"),
    # no command: left as typed (the dashboard's)
    ("--demo lab --once", "--demo lab --once"),
    ("run -- --demo check", "run -- --demo check"),
    ("run sh --once", "run sh --once"),  # CMD's own option
])
def test_options_move_behind_the_command(typed: str, parsed: str) -> None:
    assert command_first(typed.split()) == parsed.split()


def codes(result: subprocess.CompletedProcess[str]) -> list[tuple[str, int | None]]:
    return [(w["code"], w["gpu"]) for w in json.loads(result.stdout)["warnings"]]


def _sample(action: argparse.Action) -> list[str]:
    """A value the option parses (what it means is the command's business)."""
    if action.nargs == 0:
        return []
    return ["2"] if action.type in (int, float) else ["x"]


def _outcome(argv: list[str]) -> tuple[object, ...]:
    """What the command line comes to: the command's arguments, a refusal, or argparse's
    exit (help, an error) with what it printed."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            typed = cli.parse_command(argv)
    except cli.Refused as refused:
        return ("refused", str(refused))
    except SystemExit as done:
        return ("exit", done.code, out.getvalue(), err.getvalue())
    assert typed is not None, argv  # a command was typed, so it is no dashboard
    command, args = typed
    return ("parsed", command.name, vars(args))


TOP = [(s, a) for a in cli.build_parser()._actions for s in a.option_strings]


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_every_top_level_option_before_or_after_every_command(command: Command) -> None:
    """Each option of `gputop --help` x each command: before the command or after its own
    words (its first example's), the same arguments or the same refusal, and which one
    it is follows the command's parser (what it declares), not a list kept here."""
    top = {option for option, _ in TOP}
    words = shlex.split(command.examples[0])[2:]  # what it needs to parse (reserve: --for)
    words = [] if top & set(words) else words  # `--demo x` twice would say so in two orders
    end = words.index("--") if "--" in words else len(words)
    takes = {s for a in cli.build_command_parser(command)._actions for s in a.option_strings}
    for option, action in TOP:
        given = [option, *_sample(action)]
        before = _outcome([*given, command.name, *words])
        after = _outcome([command.name, *words[:end], *given, *words[end:]])
        assert before == after, (option, command.name)
        if option in takes:
            assert before[0] == "parsed" or before[:2] == ("exit", 0), (option, before)
        else:
            assert before[0] == "refused", (option, command.name, before)
            assert f"{option} is a " in before[1] and f"`{command.name}` does not take" in (
                before[1]), before


@pytest.mark.parametrize(("typed", "option", "command"), [
    ("--once check", "--once", "check"), ("check --once", "--once", "check"),
    ("--readonly --demo lab reserve --count 1", "--readonly", "reserve"),
    ("--interval 2 check", "--interval", "check"), ("--watch 2 check", "--watch", "check"),
    ("--topology topo", "--topology", "topo"), ("--screenshot d check", "--screenshot", "check"),
    ("--demo lab config", "--demo", "config")])
def test_an_option_the_command_does_not_take_is_refused_with_why(
        typed: str, option: str, command: str) -> None:
    result = gputop(*typed.split())
    assert result.returncode == exitcodes.EXIT_USAGE, result
    assert result.stdout == ""
    what = "source" if option == "--demo" else "dashboard"
    assert result.stderr == (f"gputop: {option} is a {what} option; `{command}` does not "
                             f"take it (see gputop {command} --help)\n")


def test_json_before_check_is_the_same_check() -> None:
    before = gputop("--json", "--demo", "faulty", "check")
    after = gputop("check", "--demo", "faulty", "--json")
    assert before.returncode == after.returncode == 2, before.stderr
    assert codes(before) == codes(after) != []


def test_demo_before_check_is_the_same_check() -> None:
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
