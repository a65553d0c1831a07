"""Warnings as a person sees them over time: a warning keeps the time it was first seen,
lingers a little after it clears (so a flapping warning does not blink), and then goes to
the session log."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gputop.analysis.health.common import HOST_STATE, sort_warnings
from gputop.analysis.health.thresholds import Thresholds
from gputop.model import HealthWarning


@dataclass(frozen=True, slots=True)
class ClearedWarning:
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
                w = dataclasses.replace(w, since=since)
            self._active[key] = w
            self._gone.pop(key, None)
        # A host we cannot see says nothing about its GPUs: keep their warnings (with
        # their first-seen time) until it answers again, instead of logging them as cleared.
        blind = any(w.code == HOST_STATE for w in self._active.values()
                    if w.host == host and w.key in present)
        for key, w in self._active.items():
            if w.host != host or key in present or key in self._gone:
                continue
            if blind and w.code != HOST_STATE:
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
        items: Iterable[HealthWarning] = self._active.values()
        if host is not None:
            items = [w for w in items if w.host == host]
        return sort_warnings(items)

    def for_gpu(self, host: str, gpu: int) -> list[HealthWarning]:
        return [w for w in self.current(host) if w.gpu == gpu]
