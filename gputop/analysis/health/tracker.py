"""Warnings as a person sees them over time: a warning keeps the time it was first seen,
lingers a little after it clears (so a flapping warning does not blink), and then goes to
the session log."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gputop.analysis.health.common import HOST_STATE, sort_warnings
from gputop.analysis.health.thresholds import Thresholds
from gputop.model import HealthWarning
from gputop.records import Record, record, replace


@record(frozen=True, slots=True)
class ClearedWarning(Record):
    warning: HealthWarning
    cleared: float  # epoch seconds when it stopped being reported


class WarningTracker:
    """Warnings as a person sees them over time, across hosts.

    ``update(host, fresh, now)`` takes one host's latest ``warnings(...)`` list.  A warning
    keeps the ``since`` of its first sighting; when a host stops reporting it, it stays
    for ``linger`` seconds (XIDs, which are one-off events, for ``xid_hold``) and then
    moves to ``log``.  A warning that comes back while lingering continues as before.
    """

    def __init__(
        self,
        linger: float = 30.0,
        xid_hold: float = 3600.0,
        log_limit: int = 1000,
    ) -> None:
        self.linger = linger
        self.xid_hold = xid_hold
        self.log_limit = log_limit
        self.log: list[ClearedWarning] = []
        self._active: dict[tuple[Any, ...], HealthWarning] = {}
        self._gone: dict[tuple[Any, ...], float] = {}  # key -> first update without it
        # Each host's keys, and the sorted list current() gives, kept until it changes: an
        # update of one host touches that host's warnings only (a 1,000-host refresh was
        # 1,000 passes over, and sorts of, every host's warnings).
        self._of_host: dict[str | None, set[tuple[Any, ...]]] = {}
        self._sorted: list[HealthWarning] | None = None

    @classmethod
    def from_thresholds(cls, th: Thresholds) -> WarningTracker:
        return cls(linger=th.linger_seconds, xid_hold=th.xid_hold_minutes * 60)

    def update(self, host: str, fresh: Iterable[HealthWarning], now: float) -> list[HealthWarning]:
        present = set()
        for w in fresh:
            key = w.key
            present.add(key)
            old = self._active.get(key)
            if old is not None and old.since is not None:
                since = old.since if w.since is None else min(old.since, w.since)
                if w.since != since:
                    w = replace(w, since=since)
            if old != w:
                self._active[key] = w
                self._of_host.setdefault(w.host, set()).add(key)
                self._sorted = None
            self._gone.pop(key, None)
        # A host we cannot see says nothing about its GPUs: keep their warnings (with
        # their first-seen time) until it answers again, instead of logging them as cleared.
        blind = any(key[3] == HOST_STATE for key in present)  # key: (host, gpu, pid, code)
        for key in self._of_host.get(host, ()):
            if key in present or key in self._gone:
                continue
            if blind and key[3] != HOST_STATE:
                continue
            self._gone[key] = now
        return self.expire(now)

    def expire(self, now: float) -> list[HealthWarning]:
        """Move what lingered long enough to the log; returns current()."""
        for key, gone in list(self._gone.items()):
            w = self._active[key]
            hold = self.xid_hold if w.code.startswith("xid-") else self.linger
            if now - gone >= hold:
                del self._active[key]
                del self._gone[key]
                self._of_host.get(w.host, set()).discard(key)
                self._sorted = None
                self.log.append(ClearedWarning(w, cleared=gone))
        if len(self.log) > self.log_limit:
            del self.log[: len(self.log) - self.log_limit]
        return self.current()

    def clearing(self, w: HealthWarning) -> bool:
        """True when ``w``'s host no longer reports it (it is lingering).  Never for an
        XID: an event does not clear, it stays current for ``xid_hold`` (the panel must
        not call "cleared" what the log lists as active)."""
        return w.key in self._gone and not w.code.startswith("xid-")

    def current(self, host: str | None = None) -> list[HealthWarning]:
        if host is not None:
            return sort_warnings(self._active[k] for k in self._of_host.get(host, ()))
        if self._sorted is None:
            self._sorted = sort_warnings(self._active.values())
        return list(self._sorted)

    def for_gpu(self, host: str, gpu: int) -> list[HealthWarning]:
        return [w for w in self.current(host) if w.gpu == gpu]
