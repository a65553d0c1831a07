"""The test run touches nothing of the machine's own (house rules): its system ledger,
host policy, shared reservation store, and the state and config of whoever runs the
tests.  ``redirect`` points every one of them into the run's temporary root (through the
variables gputop itself reads, so subprocesses follow); ``Guard`` is an audit hook that
notes any open, sqlite connect or file change under the real places, and the conftest
fails the test that made it."""

from __future__ import annotations

import os
import sys
from typing import Any

from gputop.policy import DEFAULT_PATH as POLICY_DEFAULT
from gputop.storedir import RESERVATIONS_DIR

# The machine's places as gputop names them.  The ledger's is spelled here: importing
# gputop.ledger.paths now would fix its SYSTEM_PATH before ``redirect`` is in force;
# tests/test_hermetic.py checks this equals paths.SYSTEM_DEFAULT's folder.
SYSTEM_LEDGER_DIR = "/var/lib/gputop"
POLICY_DIR = os.path.dirname(POLICY_DEFAULT)


def redirect(root: str) -> dict[str, str]:
    """The environment a test run gets: each machine path gputop knows, under ``root``.
    Not $GPUTOP_RESERVATIONS_DIR: it wins over a simulation's private store, so every
    demo of the run would share one; each test that uses a real store names its own, and
    the guard fails one that reaches the shared default."""
    return {
        "XDG_STATE_HOME": os.path.join(root, "state"),
        "XDG_CONFIG_HOME": os.path.join(root, "config"),
        "GPUTOP_SYSTEM_LEDGER": os.path.join(root, "system", "ledger.sqlite"),
        "GPUTOP_POLICY": os.path.join(root, "system", "policy.yaml"),
    }


def forbidden_places(home: str) -> tuple[str, ...]:
    """Where the machine's own gputop files are (``home``: the real one, taken before a
    test may change $HOME)."""
    return (SYSTEM_LEDGER_DIR, POLICY_DIR, RESERVATIONS_DIR,
            os.path.join(home, ".local", "state", "gputop"),
            os.path.join(home, ".config", "gputop"))


# The audit events that name a path gputop could read or change (docs.python.org's audit
# events table); their first argument is the path.
_PATH_EVENTS = frozenset({
    "open", "sqlite3.connect", "os.listdir", "os.scandir", "os.mkdir", "os.remove",
    "os.rmdir", "os.rename", "os.chmod", "os.chown", "os.truncate", "os.utime",
    "os.symlink", "os.link", "shutil.rmtree", "shutil.copyfile", "shutil.move",
})


class Guard:
    """Records every touch of a forbidden place; ``take()`` returns and clears them.  An
    audit hook cannot be removed, so it is installed once and stays cheap for other
    events."""

    def __init__(self, places: tuple[str, ...]) -> None:
        self.places = tuple(os.path.normpath(p) for p in places)
        self.touched: list[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in _PATH_EVENTS or not args:
            return
        path = args[0]
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str) or not path:
            return  # a file descriptor
        if event == "sqlite3.connect" and path.startswith("file:"):
            path = path[5:].split("?", 1)[0]  # a URI: sqlite opens the file in C, unseen
        full = os.path.normpath(os.path.abspath(path))
        for place in self.places:
            if full == place or full.startswith(place + os.sep):
                self.touched.append(f"{event} {full}")
                return

    def take(self) -> list[str]:
        touched, self.touched = self.touched, []
        return touched
