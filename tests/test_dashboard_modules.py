"""Modules the dashboard loads only when it needs them (issue 27, RSS): every module's
code stays in memory for the life of the process, and the dashboard ran at 1.8 times
nvitop's RSS.  Counted in modules, in a fresh interpreter each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gputop.ledger.paths import SYSTEM_PATH


def loaded_after(code: str, env: dict[str, str]) -> set[str]:
    """The module names a fresh interpreter holds after running ``code``."""
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(*sys.modules)"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


START = (
    "from gputop.config import Config, analysis_settings\n"
    "from gputop.ui import launch\n"
    "import gputop.ui.app\n"
    "history = launch._history(analysis_settings(Config()))\n"
    "series = launch._ledger_series()\n"
    "assert series is None and history.recorded_idle is None, (series, history)\n"
)


def test_without_a_ledger_the_dashboard_loads_no_sqlite(tmp_path: Path) -> None:
    if Path(SYSTEM_PATH).exists():
        pytest.skip(f"this machine has a system ledger ({SYSTEM_PATH})")
    env = {"XDG_STATE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    loaded = loaded_after(START, env)
    assert "gputop.ui.app" in loaded and "gputop.ledger.paths" in loaded  # it ran
    assert not {"sqlite3", "gputop.ledger.store", "gputop.ledger.query"} & loaded


def test_with_a_ledger_the_dashboard_opens_it(tmp_path: Path) -> None:
    ledger = tmp_path / "gputop" / "ledger.sqlite"
    ledger.parent.mkdir()
    ledger.touch()
    env = {"XDG_STATE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    code = START.replace("series is None and history.recorded_idle is None",
                         "series is not None and history.recorded_idle is not None")
    assert "gputop.ledger.query" in loaded_after(code, env)
