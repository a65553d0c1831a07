"""A feed the tests drive by hand: it emits the snapshots handed to ``put``."""

from __future__ import annotations

import asyncio
from typing import Any

from gputop.sources.feed import Capabilities, Emit, ProcessDetails
from gputop.sources.identity import Identity, named_identity


class QueueFeed:
    """Replays snapshots; acts on nothing (a request is recorded and refused)."""

    def __init__(self, hosts: list[str], user: str = "alice") -> None:
        self.hosts = list(hosts)
        self.user = user
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(self, snapshot: Any) -> None:
        self._queue.put_nowait(snapshot)

    def capabilities(self, host: str) -> Capabilities:
        return Capabilities(why_not="a replay cannot act")

    def identity(self, host: str) -> Identity:
        return named_identity(self.user)

    def process_details(self, host: str, pid: int, start_ticks: int | None) -> ProcessDetails:
        return ProcessDetails(None, None)

    async def run(self, interval: float, emit: Emit) -> None:
        while True:
            emit(await self._queue.get())

    async def request(self, host: str, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append((host, request))
        return {"ok": False, "message": "this feed replays snapshots; it cannot act"}

    async def close(self) -> None:
        return None
