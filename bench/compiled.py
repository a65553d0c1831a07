"""A byte-compiled copy of a checkout's gputop package, for the benches' child processes.

A user's gputop is byte-compiled when pip installs it, and so is nvitop's virtualenv; a
checkout is not, and with PYTHONDONTWRITEBYTECODE set (as on the shared machines these
benches ran on) every run of a child compiled all of gputop's modules again: 0.1 s of a
0.25 s `--once`.  A copy, so that measuring another checkout writes nothing into it.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


@functools.cache
def compiled_copy(tree: Path) -> str:
    """A folder holding ``tree``'s gputop package with its bytecode written: put it first
    on PYTHONPATH (or run from it) to run that tree as installed."""
    out = Path(tempfile.mkdtemp(prefix="bench-gputop-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    shutil.copytree(tree / "gputop", out / "gputop",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(out / "gputop")],
                   check=True)
    return str(out)
