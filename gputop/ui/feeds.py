"""Where the dashboard gets its feeds, plus a feed the tests drive by hand.

The real feeds come from ``gputop.sources.select.make_feeds`` (contract:
docs/architecture.md, Feeds).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from typing import Any

from gputop.model import HostSnapshot

Emit = Callable[[HostSnapshot], None]


class QueueFeed:
    """A feed that emits the snapshots handed to ``put``: for tests and replays."""

    def __init__(self, hosts: list[str]) -> None:
        self.hosts = list(hosts)
        self.requests: list[tuple[str, dict]] = []
        self._queue: asyncio.Queue[HostSnapshot] = asyncio.Queue()

    def put(self, snapshot: HostSnapshot) -> None:
        self._queue.put_nowait(snapshot)

    async def run(self, interval: float, emit: Emit) -> None:
        while True:
            emit(await self._queue.get())

    async def request(self, host: str, request: dict) -> dict:
        self.requests.append((host, request))
        return {"ok": False, "message": "this feed replays snapshots; it cannot act"}

    async def close(self) -> None:
        return None


def make_feeds(args: argparse.Namespace, config: dict[str, Any] | None) -> list[Any]:
    """The dashboard's feeds (gputop.sources.select decides: demo, local, SSH)."""
    from gputop.sources.select import make_feeds as select_feeds

    return list(select_feeds(args, config))
