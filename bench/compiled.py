"""gputop as a user has it, for the benches' child processes: byte-compiled, and for the
one-shots next to nvitop, pip-installed into a virtualenv of its own.

A user's gputop is byte-compiled when pip installs it, and so is nvitop's virtualenv; a
checkout is not, and with PYTHONDONTWRITEBYTECODE set (as on the shared machines these
benches ran on) every run of a child compiled all of gputop's modules again: 0.1 s of a
0.25 s `--once`.  And `make test`'s .venv holds gputop as an editable install, whose
import hook (a .pth file that loads pathlib, urllib.parse and more at every start) costs
a one-shot about 8 ms that `pip install .` and `pipx install .` never pay.  Copies, so that
measuring another checkout writes nothing into it.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# The benches' own virtualenv for an installed gputop (never `make test`'s .venv).
INSTALL_VENV = Path(__file__).resolve().parent.parent / "build" / "bench-gputop-venv"


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


def installed(tree: Path) -> Path:
    """The ``gputop`` command of ``tree`` installed by pip (not editable) into
    INSTALL_VENV, as `pip install .` gives a user: its dependencies the first time (from
    the package index), then only gputop, afresh each call.  Needs no PYTHONPATH."""
    python = INSTALL_VENV / "bin" / "python"
    first = not python.exists()
    if first:
        subprocess.run([sys.executable, "-m", "venv", str(INSTALL_VENV)], check=True)
    with tempfile.TemporaryDirectory(prefix="bench-gputop-src-") as tmp:
        src = Path(tmp) / "src"  # pip builds inside the source folder: a copy, not the tree
        shutil.copytree(tree, src, ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "__pycache__", "*.egg-info", "tests", "bench"))
        extra = [] if first else ["--no-deps", "--force-reinstall"]
        subprocess.run([str(python), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", *extra, str(src)], check=True)
    return INSTALL_VENV / "bin" / "gputop"
