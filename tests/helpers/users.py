"""Real users, and a copy of gputop they can run.

Our virtualenv's interpreter and (in CI) the clone itself live under /root (mode 700), so
another user cannot run them. ``portable_gputop`` copies the package and the libraries a
command-line gputop needs (no Textual) into a world-readable directory, to be run by the
system's python3 with PYTHONPATH pointing there.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import gputop

SYSTEM_PYTHON = "/usr/bin/python3"
LIBRARIES = ("pynvml", "psutil", "yaml", "_yaml")


def ensure_users(names: list[str]) -> Iterator[list[pwd.struct_passwd]]:
    """Create the users that do not exist (removed afterwards); yields their entries."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd to create test users")
    created = []
    for name in names:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh",
                            name], check=True, capture_output=True)
            created.append(name)
    try:
        yield [pwd.getpwnam(name) for name in names]
    finally:
        for name in created:
            subprocess.run(["userdel", name], check=False, capture_output=True)


def portable_gputop(target: Path) -> Path:
    """A world-readable copy of gputop and its command-line libraries under ``target``."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"needs {SYSTEM_PYTHON} to run gputop as another user")
    target.mkdir(mode=0o755, exist_ok=True)
    shutil.copytree(Path(gputop.__file__).parent, target / "gputop",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in LIBRARIES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        if origin.name == "__init__.py":
            shutil.copytree(origin.parent, target / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, target / origin.name)
    for root, dirs, files in os.walk(target):
        for entry in dirs:
            os.chmod(os.path.join(root, entry), 0o755)
        for entry in files:
            os.chmod(os.path.join(root, entry), 0o644)
    return target
