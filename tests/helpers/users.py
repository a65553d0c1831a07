"""Real users, and a copy of gputop they can run.

Our virtualenv's interpreter and (in CI) the clone itself live under /root (mode 700), so
another user cannot run them. ``portable_gputop`` copies the package and the libraries a
command-line gputop needs (no Textual) into a world-readable directory, to be run by the
system's python3 with PYTHONPATH pointing there.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

import gputop

SYSTEM_PYTHON = "/usr/bin/python3"
LIBRARIES = ("pynvml", "psutil", "yaml", "_yaml")


# Accounts below this uid are system accounts, as useradd --system makes them (login.defs).
UID_MIN = 1000
# Names to remove when the interpreter exits, for a block whose `finally` never ran.
_PENDING: set[str] = set()


def _remove(name: str) -> None:
    subprocess.run(["userdel", name], check=False, capture_output=True)
    _PENDING.discard(name)


@atexit.register
def _remove_pending() -> None:
    for name in sorted(_PENDING):
        _remove(name)


@contextmanager
def ensure_users(names: Sequence[str]) -> Iterator[list[pwd.struct_passwd]]:
    """System users for the block (login shell /bin/sh, password "*"); yields their entries.

    They are removed when the block ends, also on Ctrl+C or a failure, and at interpreter
    exit when the block was never closed. A run killed outright leaves them behind: a
    leftover system account of the same name is reused here and removed at the end. An
    ordinary account (uid >= UID_MIN) of that name is someone's: used, never removed.
    """
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd to create test users")
    owned: list[str] = []
    try:
        for name in names:
            try:
                leftover = pwd.getpwnam(name).pw_uid < UID_MIN
            except KeyError:
                leftover = None
            if leftover is False:
                continue
            # Recorded before useradd, so that an interrupt during it still cleans up.
            owned.append(name)
            _PENDING.add(name)
            if leftover is None:
                # "*": no password, but not locked (sshd without PAM refuses locked accounts).
                subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                                "/bin/sh", "-p", "*", name], check=True, capture_output=True)
        yield [pwd.getpwnam(name) for name in names]
    finally:
        for name in owned:
            _remove(name)


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


@contextmanager
def portable_gputop_dir(prefix: str) -> Iterator[Path]:
    """``portable_gputop`` in a fresh world-readable temporary folder, removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(base, 0o755)
    try:
        yield portable_gputop(base / "lib")
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)
