"""Is a recorded process still the same process? For queue jobs and `gputop run`'s
reservations, which live exactly as long as the process that made them.

Stdlib-only: shipped to remote hosts with the probe.
"""

from __future__ import annotations

import os
from typing import Any

MAX_PID = 2**22  # Linux's pid_max limit


def process_start(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (/proc/PID/stat field 22),
    which tells a process from a later one that got the same pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def process_alive(pid: Any, start: Any, uid: int) -> bool:
    """Is ``pid`` the process that was recorded (same start time), owned by ``uid``?

    A record can name any pid; the owner check keeps it from borrowing another user's
    long-lived process to stay in line, or to keep a card, forever."""
    if isinstance(pid, bool) or not isinstance(pid, int) or not 1 <= pid <= MAX_PID:
        return False
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return False
    return owner == uid and process_start(pid) == start
