"""The command line explains itself: `gputop --help` lists every subcommand, each
subcommand's options say their default and its examples parse, an unknown command gets
the nearest one; the shipped example files load, and the README's examples hold."""

from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
from pathlib import Path

import pytest

from gputop import cli, exitcodes, hosts
from gputop.clihelp import Command
from gputop.commands import COMMANDS, configfile, named
from gputop.config import Config, load_config

README = (Path(__file__).parent.parent / "README.md").read_text()
ALL = tuple(c.name for c in COMMANDS)


def declared(command: str) -> Command:
    found = named(command)
    assert found is not None, command
    return found


def parser_of(command: str) -> argparse.ArgumentParser:
    return cli.build_command_parser(declared(command))


def test_every_command_is_declared_once() -> None:
    assert len(set(ALL)) == len(ALL)


def test_main_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert re.search(rf"^  {command.name} +{re.escape(command.summary)}$", out, re.M), command
    assert "examples:\n  gputop " in out


@pytest.mark.parametrize(("word", "near"), [("foo", "topo"), ("reserv", "reserve"),
                                            ("chek", "check"), ("reprot", "report")])
def test_unknown_command_suggests_the_nearest(word: str, near: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([word]) == exitcodes.EXIT_USAGE
    err = capsys.readouterr().err
    assert err == (f"gputop: unknown command '{word}'; did you mean '{near}'? "
                   "(gputop --help lists the commands)\n")


def test_a_mistyped_command_after_the_options_is_named_too(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--demo", "lab", "chek"]) == exitcodes.EXIT_USAGE
    assert capsys.readouterr().err == ("gputop: unknown command 'chek'; did you mean "
                                       "'check'? (gputop --help lists the commands)\n")
    with pytest.raises(SystemExit) as done:  # an unknown option: argparse's words, as before
        cli.main(["--demo", "lab", "--bogus"])
    assert done.value.code == exitcodes.EXIT_USAGE
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_an_unknown_demo_lists_every_name_demo_takes(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--demo", "nosuch", "--once"]) == exitcodes.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("gputop: nosuch: no such scenario (built-in: ")
    for name in ("cluster", "dgx-h100", "faulty", "lab", "mig", "slurm"):
        assert name in err.split("built-in: ")[1], name


def test_unknown_command_without_a_near_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["xyzzy", "--once"]) == exitcodes.EXIT_USAGE
    assert "did you mean" not in capsys.readouterr().err


@pytest.mark.parametrize("command", ALL)
def test_subcommand_help_describes_every_option(command: str) -> None:
    parser = parser_of(command)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = "/".join(action.option_strings) or action.dest
        assert action.help, f"{command} {name}: no description"
        if action.nargs != 0 and action.option_strings:  # takes a value: say its default
            assert "default" in action.help or action.required, f"{command} {name}"
    assert parser.description, command
    help_text = parser.format_help()
    examples = declared(command).examples
    assert help_text.endswith("examples:\n" + "".join(f"  {e}\n" for e in examples))


@pytest.mark.parametrize("command", ALL)
def test_subcommand_examples_parse(command: str) -> None:
    for example in declared(command).examples:
        words = shlex.split(example)
        assert words[:2] == ["gputop", command], example
        parser_of(command).parse_args(words[2:])  # a bad example exits 2 here


def test_config_example_loads_with_the_real_loader(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["config", "--example"]) == 0
    path = tmp_path / "config.yaml"
    path.write_text(capsys.readouterr().out)
    config = load_config(path)
    # Complete: every section of the file format is shown.
    text = path.read_text()
    for section in (f.name for f in dataclasses.fields(Config) if f.name != "path"):
        assert re.search(rf"^{section}:", text, re.M), section
    assert config.keys["kill"] == "k,f9"


def test_hosts_example_loads_with_the_real_loader(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["config", "--hosts-example"]) == 0
    path = tmp_path / "hosts.yaml"
    path.write_text(capsys.readouterr().out)
    specs = hosts.load(path)
    assert {"gpu01", "gpu02", "dgx-1"} <= {s.name for s in specs}
    assert path.read_text() == configfile.example(configfile.HOSTS_EXAMPLE)


def test_config_says_where_the_files_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("GPUTOP_HOSTS", str(tmp_path / "lab.yaml"))
    assert cli.main(["config"]) == 0
    out = capsys.readouterr().out
    assert f"config file: {tmp_path}/gputop/config.yaml (absent" in out
    assert f"hosts file:  {tmp_path}/lab.yaml (from $GPUTOP_HOSTS)" in out


def test_readme_pick_example_works_on_its_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    lines = re.findall(r"^(gputop pick --demo [^#\n]*?)\s*# .*?(CUDA_VISIBLE_DEVICES=\S+)$",
                       README, re.M)
    assert lines, "the README names a demo scenario for pick"
    for command, expected in lines:
        assert cli.main(shlex.split(command)[1:]) == 0, command
        assert capsys.readouterr().out == expected + "\n"


def test_readme_exit_code_table_is_complete() -> None:
    table = {code for row in re.findall(r"^\| ([\d, ]+) \|", README, re.M)
             for code in row.split(", ")}
    codes = {str(code) for k, v in vars(exitcodes).items() if k.startswith("EXIT_")
             for code in (v if isinstance(v, tuple) else (v,))}
    assert table == codes


def test_readme_says_how_to_run_the_demo_after_make_demo(
        capsys: pytest.CaptureFixture[str]) -> None:
    """After `make demo` a newcomer wants the other scenarios: the README's commands run,
    and the scenarios it names are the ones `--demo list` prints."""
    lines = re.findall(r"^\.venv-demo/bin/gputop (--demo [^#\n]*?)\s*# (.*)$", README, re.M)
    assert len(lines) >= 3 and "pipx install ." in README
    from gputop.sources.sim import list_scenarios
    from gputop.sources.simcluster import CLUSTER

    for command, comment in lines:
        args = shlex.split(command)
        if args[-1] == "list":
            assert cli.main(args) == 0
            named = re.findall(r"[\w-]+", comment.split(":", 1)[1])
            assert named == [name for name, _ in list_scenarios()] + [CLUSTER]
        elif args[-1] == "check":
            assert cli.main(args) == 2  # the faulty node has criticals
        else:
            assert args[1] in [*dict(list_scenarios()), CLUSTER]
        capsys.readouterr()


@pytest.mark.parametrize("command", ["", *ALL])
def test_every_help_fits_80_columns(command: str, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`gputop --help` and each command's at COLUMNS=80: no line wider (issue 39.9), and
    a wrapped line keeps its words (nothing cut)."""
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"] if command else ["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    wide = [line for line in out.splitlines() if len(line) > 80]
    assert wide == [], wide
    if command:
        parser = parser_of(command)
        for words in (parser.description or "").split():
            assert words in out.split(), words
