"""`python -m gputop` is the `gputop` command (issue 39, point 6)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_python_dash_m_gputop_runs_the_command() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-m", "gputop", "--demo", "lab", "--once"],
                          env=env, text=True, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("lab-gpu-03  DEMO  driver")
    bad = subprocess.run([sys.executable, "-m", "gputop", "chek"], env=env, text=True,
                         capture_output=True, timeout=120)
    assert bad.returncode == 2 and "did you mean 'check'" in bad.stderr, bad.stderr
