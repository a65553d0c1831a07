"""`make test` leaves nothing in the temp folder (issue 24): neither its own folders nor
gputop's (the demo's reservation store, `gputop-demo-UID`).  A short pytest run of tests
that make both, in a temp folder of its own, must leave that folder empty."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_a_run_of_tests_leaves_its_temp_folder_empty(tmp_path: Path) -> None:
    outer = tmp_path / "tmp"
    outer.mkdir()
    env = {**os.environ, "TMPDIR": str(outer)}
    for name in ("CI", "PYTEST_ADDOPTS", "PYTEST_DEBUG_TEMPROOT"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         # a `--demo` subprocess (its reservation store) and UI tests with their own folder
         "tests/test_cli_order.py::test_demo_before_check_is_the_same_check",
         "tests/test_mig_ui.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(os.listdir(outer)) == []
