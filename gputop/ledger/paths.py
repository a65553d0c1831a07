"""Where the ledger files are, without opening one: the dashboard asks whether a ledger
exists at every start, and store.py (sqlite3 with it) is loaded only when one does."""

from __future__ import annotations

import os


def default_path() -> str:
    """A user's ledger: $XDG_STATE_HOME/gputop/ledger.sqlite (~/.local/state/...)."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(state, "gputop", "ledger.sqlite")


# The systemd unit's (docs/ledger.md); $GPUTOP_SYSTEM_LEDGER names another (a test run,
# which must never read or write the machine's own).
SYSTEM_DEFAULT = "/var/lib/gputop/ledger.sqlite"
SYSTEM_PATH = os.environ.get("GPUTOP_SYSTEM_LEDGER") or SYSTEM_DEFAULT


def live_dir(path: str) -> str:
    """The private directory (0700) of the writer's live files of the ledger ``path``:
    ``path`` itself is the copy readers open (gputop/ledger/publish.py, issue 41.5)."""
    parent, name = os.path.split(os.path.abspath(path))
    return os.path.join(parent, f".{name}.live")


def live_path(path: str) -> str:
    """The database the recorder writes (with its -wal, -shm and .lock beside it)."""
    return os.path.join(live_dir(path), os.path.basename(path))


def existing_path() -> str | None:
    """The ledger the dashboard reads: the user's, else the system's, if either exists."""
    for path in (default_path(), SYSTEM_PATH):
        if os.path.isfile(path):
            return path
    return None
