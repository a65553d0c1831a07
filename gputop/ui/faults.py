"""Worker faults: each one logged with its traceback, shown once, and the worker restarted.

A feed or the analysis thread that raises must not leave the dashboard frozen on old
data for good; the header's data age shows how stale the view is meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from pathlib import Path

MAX_DELAY_S = 30.0


def log_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "gputop" / "errors.log"


def restart_delay(failures: int, base: float) -> float:
    """Seconds before restart number `failures` (1, 2, ...): doubling, capped."""
    return min(base * 2 ** min(failures - 1, 16), MAX_DELAY_S)


class FaultLog:
    """Appends tracebacks to log_path(); says which faults are new (to be shown)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or log_path()
        self._seen: set[tuple[str, str, str]] = set()

    def record(self, worker: str, err: BaseException) -> bool:
        """Log `err`; True the first time this worker fails this way."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        # A log that cannot be written must not become the next fault.
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as fh:
                fh.write(f"{stamp} {worker}: restarting after\n{text}\n")
        key = (worker, type(err).__name__, str(err))
        new = key not in self._seen
        self._seen.add(key)
        return new
