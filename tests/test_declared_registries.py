"""docs/architecture.md's "Where does X go" rows for a command and a column, proved: a
throwaway one added as the row says, in a copy of the package, shows up everywhere it
should (help, typo suggestion, dispatch; config validation, the dashboard's table), and a
command module that is not declared cannot be reached."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.ui import demo_snapshots

from gputop import commands
from gputop.columns import COLUMNS
from gputop.exitcodes import EXIT_USAGE
from gputop.ui import table_model
from gputop.ui.cells import process_cell

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent

THROWAWAY_COMMAND = '''
"""A throwaway command: what a new command module is."""

from __future__ import annotations

import argparse

from gputop.options import SourceOptions


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Say a word and the scenario."
    p.add_argument("--word", default="hello", help="what to say (default %(default)s)")


def run(options: SourceOptions, args: argparse.Namespace) -> int:
    print(f"throwaway says {args.word} on {options.demo}")
    return 3
'''

DECLARATION = '''COMMANDS: tuple[Command, ...] = (
    Command("throwaway", "a command made by a test",
            ("gputop throwaway", "gputop throwaway --word hi"),
            run="throwaway:run", arguments="throwaway:add_arguments"),
'''


def _copy(tmp_path: Path) -> Path:
    """gputop/ copied under tmp_path (its own import root), without bytecode."""
    shutil.copytree(ROOT / "gputop", tmp_path / "gputop",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "gputop"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: {old!r} is no longer there once"
    path.write_text(text.replace(old, new))


def _gputop(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(root), HOME=str(root), COLUMNS="100",
               XDG_CONFIG_HOME=str(root / "config"))
    env.pop("GPUTOP_HOSTS", None)
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def with_command(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cmd")
    package = _copy(root)
    (package / "commands" / "throwaway.py").write_text(THROWAWAY_COMMAND)
    # A second module with a run() of its own, declared nowhere.
    (package / "commands" / "undeclared.py").write_text(THROWAWAY_COMMAND)
    _edit(package / "commands" / "__init__.py", "COMMANDS: tuple[Command, ...] = (\n",
          DECLARATION)
    return root


def test_the_copy_is_what_runs(with_command: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(with_command))
    done = subprocess.run([sys.executable, "-c", "import gputop; print(gputop.__file__)"],
                          cwd=TESTS, env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == str(with_command / "gputop" / "__init__.py")


def test_a_declared_command_is_in_the_help(with_command: Path) -> None:
    done = _gputop(with_command, "--help")
    assert done.returncode == 0, done.stderr
    assert "\n  throwaway     a command made by a test\n" in done.stdout
    own = _gputop(with_command, "throwaway", "--help")
    assert own.returncode == 0, own.stderr
    assert own.stdout.startswith("usage: gputop throwaway [-h] [--demo [SCENARIO]]")
    assert "Say a word and the scenario." in own.stdout
    assert "--word WORD" in own.stdout and "--hosts FILE" in own.stdout  # its own + sources
    assert own.stdout.endswith(
        "examples:\n  gputop throwaway\n  gputop throwaway --word hi\n")


def test_a_declared_command_is_suggested_for_a_typo(with_command: Path) -> None:
    done = _gputop(with_command, "throwawy")
    assert (done.returncode, done.stdout) == (EXIT_USAGE, "")
    assert done.stderr == ("gputop: unknown command 'throwawy'; did you mean 'throwaway'? "
                           "(gputop --help lists the commands)\n")


@pytest.mark.parametrize("args", [["throwaway", "--demo", "lab", "--word", "hi"],
                                  ["--demo", "lab", "throwaway", "--word", "hi"]])
def test_a_declared_command_runs_its_own_code(with_command: Path, args: list[str]) -> None:
    done = _gputop(with_command, *args)
    assert (done.returncode, done.stdout, done.stderr) == (3, "throwaway says hi on lab\n", "")


def test_the_other_commands_still_reach_their_own_code(with_command: Path) -> None:
    done = _gputop(with_command, "reservations", "--demo", "lab", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.lstrip().startswith(("[", "{"))


@pytest.mark.parametrize("args", [["undeclared", "--demo", "lab"],
                                  ["--demo", "lab", "undeclared"]])
def test_an_undeclared_command_module_cannot_be_reached(with_command: Path,
                                                        args: list[str]) -> None:
    done = _gputop(with_command, *args)
    assert (done.returncode, done.stdout) == (EXIT_USAGE, "")
    assert done.stderr.startswith("gputop: unknown command 'undeclared'")
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_every_declared_command_names_functions_that_exist() -> None:
    for command in commands.COMMANDS:
        assert callable(commands.function(command.run)), command.run
        assert callable(commands.function(command.arguments)), command.arguments


# -- a column --------------------------------------------------------------------------

THROWAWAY_COLUMN = 'Column("throwaway", "THROWAWAY", 9, False, 0),\n        Column("command",'

APP_RUN = '''
import asyncio
from helpers.ui import SIZE, demo_app, feed_all
from gputop.config import ConfigError, parse_config
from gputop.ui.widgets.process_table import TableHeader

print("CONFIG", parse_config("columns: [pid, throwaway]\\n", "c.yaml").columns)
try:
    parse_config("columns: [thrwaway]\\n", "c.yaml")
except ConfigError as err:
    print("REFUSED", err)


async def main() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=(160, 40)) as pilot:
        feed_all(app)
        await pilot.pause()
        print("HEADER", app.query_one(TableHeader).render_line(0).text)
        print("ROW", app.dashboard.table.render_line(0).text)
        app.dashboard.action_sort("throwaway")
        await pilot.pause()
        print("SORTED", app.dashboard.sort_column)

asyncio.run(main())
'''


@pytest.fixture(scope="module")
def with_column(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("col")
    package = _copy(root)
    # As the row says: the registry, a process's cell, its sort key and a folded job's cell.
    _edit(package / "columns.py", 'Column("command",', THROWAWAY_COLUMN)
    _edit(package / "ui" / "cells.py", '    if column == "job":\n',
          '    if column == "throwaway":\n        return "tw" + str(p.pid)\n'
          '    if column == "job":\n')
    _edit(package / "ui" / "table_model.py", '    "job": lambda r, now:',
          '    "throwaway": lambda r, now: r.proc.pid,\n    "job": lambda r, now:')
    _edit(package / "ui" / "table_model.py", '    if column == "job":\n',
          '    if column == "throwaway":\n        return ""\n    if column == "job":\n')
    return root


def test_a_declared_column_is_checked_by_the_config_and_drawn(with_column: Path) -> None:
    env = dict(os.environ, PYTHONPATH=f"{with_column}:{TESTS}", HOME=str(with_column),
               XDG_CONFIG_HOME=str(with_column / "config"))
    done = subprocess.run([sys.executable, "-c", APP_RUN], cwd=with_column, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["CONFIG"] == "('pid', 'throwaway')"
    assert lines["REFUSED"].startswith("c.yaml:1: key 'columns': unknown column 'thrwaway'")
    assert "throwaway" in lines["REFUSED"].split("known: ")[1]
    header = lines["HEADER"].split()
    assert header.index("THROWAWAY") == header.index("COMMAND") - 1  # shown by default
    pid = demo_snapshots("lab", 1)[0].processes
    assert any(f"tw{p.pid}" in lines["ROW"].split() for p in pid), lines["ROW"]
    assert lines["SORTED"] == "throwaway"


def test_every_column_has_its_cells_and_sort_key() -> None:
    # What the UI adds to a declared column; a column missing one fails here, not on screen.
    snap = demo_snapshots("lab", 1)[0]
    proc = snap.processes[0]
    row = table_model.build_rows(snap.host, [proc])[0]
    for column in COLUMNS:
        assert isinstance(process_cell(column, proc, snap.time), str), column
        assert isinstance(table_model.cell(column, row, snap.time), str), column
        assert column in table_model.SORT_KEYS, column
