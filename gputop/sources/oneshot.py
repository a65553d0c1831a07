"""Feeds held open for one command: the first snapshot of every host, then requests.

``Session`` runs the feeds ``gputop.sources.opener.open_feeds(one_shot=True)`` made
until every host has answered (or the timeout passes), and keeps them open so that the
acting commands (reserve, release) send their requests over the same connections, through
the feeds' own request path.  ``first_round`` is the read-only case.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from gputop import model
from gputop.model import HostSnapshot
from gputop.records import replace
from gputop.sources.feed import Capabilities, Feed
from gputop.sources.identity import Identity

# A snapshot in one of these states is a host's answer; others (connecting, or a
# transient failure a retrying feed would retry) may still be followed by a better one.
ANSWERS = frozenset({
    model.HOST_OK, model.HOST_FALLBACK, model.HOST_NO_GPU, model.HOST_AUTH_FAILED,
    model.HOST_KEY_UNKNOWN, model.HOST_KEY_CHANGED, model.HOST_UNREACHABLE,
    model.HOST_TIMEOUT, model.HOST_ERROR,
})


class Session:
    """``async with Session(feeds, timeout) as session:`` then ``session.snapshots``,
    ``await session.request(host, request)``; the feeds are closed on exit."""

    def __init__(self, feeds: Sequence[Feed], timeout: float) -> None:
        self.feeds = list(feeds)
        self.timeout = timeout
        self._feed_of = {host: feed for feed in self.feeds for host in feed.hosts}
        self._latest: dict[str, HostSnapshot] = {}
        self._answered: dict[str, HostSnapshot] = {}
        self._all_in = asyncio.Event()
        self._runners: list[asyncio.Task[None]] = []

    @property
    def hosts(self) -> list[str]:
        return list(self._feed_of)

    def _emit(self, snapshot: HostSnapshot) -> None:
        host = snapshot.host
        self._latest[host] = snapshot
        if host not in self._answered and snapshot.state in ANSWERS:
            # The first answer is kept: the command decides on one consistent picture.
            self._answered[host] = snapshot
            if len(self._answered) == len(self._feed_of):
                self._all_in.set()

    async def __aenter__(self) -> Session:
        for feed in self.feeds:
            # The interval only paces later snapshots, which a command does not wait for.
            self._runners.append(asyncio.create_task(feed.run(1.0, self._emit)))
        if self._feed_of:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._all_in.wait(), self.timeout)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        for feed in self.feeds:
            with contextlib.suppress(Exception):
                await feed.close()
        for task in self._runners:
            task.cancel()
        await asyncio.gather(*self._runners, return_exceptions=True)

    @property
    def snapshots(self) -> list[HostSnapshot]:
        """Each host's first answer, in the feeds' order; a host that never answered is
        a 'timed out' snapshot (keeping what its feed said of it, labels included)."""
        now = time.time()
        out = []
        for host in self._feed_of:
            snap = self._answered.get(host)
            if snap is None:
                error = f"no answer within {self.timeout:g} s"
                latest = self._latest.get(host)
                snap = (replace(latest, state=model.HOST_TIMEOUT, error=error)
                        if latest is not None
                        else model.error_snapshot(host, now, model.HOST_TIMEOUT, error))
            out.append(snap)
        return out

    def identity(self, host: str) -> Identity:
        return self._feed_of[host].identity(host)

    def capabilities(self, host: str) -> Capabilities:
        return self._feed_of[host].capabilities(host)

    async def request(self, host: str, request: dict[str, Any]) -> dict[str, Any]:
        feed = self._feed_of.get(host)
        if feed is None:
            return {"ok": False, "message": f"unknown host {host!r}"}
        return await feed.request(host, request)


async def first_round(
    feeds: Sequence[Feed], timeout: float
) -> tuple[list[HostSnapshot], dict[str, Identity]]:
    """Every host's first answer and who acts there; the feeds are closed after."""
    async with Session(feeds, timeout) as session:
        return session.snapshots, {host: session.identity(host) for host in session.hosts}
