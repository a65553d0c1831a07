"""Where the dashboard gets its feeds, plus a feed the tests and screenshots drive by hand.

The real feeds come from ``gputop.sources.select.make_feeds``; ``CollectorFeed`` is the
stand-in used while that module is absent (same contract: docs/architecture.md, Feeds).
"""

from __future__ import annotations

import argparse
import asyncio
import time
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


class CollectorFeed:
    """One host from a ``Collector`` (NVML or the simulator), collected in a thread."""

    def __init__(self, collector: Any, host: str, procs: Any = None) -> None:
        self.hosts = [host]
        self.collector = collector
        self.procs = procs

    async def run(self, interval: float, emit: Emit) -> None:
        while True:
            started = time.monotonic()
            # A hung NVML call stalls only this thread; the UI keeps drawing.
            data = await asyncio.to_thread(self.collector.collect)
            emit(HostSnapshot.from_dict(data))
            await asyncio.sleep(max(interval - (time.monotonic() - started), 0.05))

    async def request(self, host: str, request: dict) -> dict:
        try:
            from gputop.actions.dispatch import ActionEnv, handle  # type: ignore[attr-defined]
        except ImportError:
            return {"ok": False, "message": "actions are not available in this build"}
        env = ActionEnv(procs=self.procs)  # type: ignore[call-arg]
        return await asyncio.to_thread(handle, request, env)

    async def close(self) -> None:
        return None


def make_feeds(args: argparse.Namespace, config: Any) -> list[Any]:
    """The feeds for the dashboard: the sources layer's if present, else a local one."""
    try:
        from gputop.sources.select import make_feeds as real_make_feeds
    except ImportError:
        return [_fallback_feed(args)]
    return list(real_make_feeds(args, config))


def _fallback_feed(args: argparse.Namespace) -> CollectorFeed:
    from gputop.sources.nvml import Collector  # type: ignore[import-not-found]

    if args.demo:
        from gputop.sources import sim  # type: ignore[attr-defined]

        nvml = sim.SimNvml(sim.load_scenario(args.demo))
        procs = sim.SimProcs(nvml)
        return CollectorFeed(Collector(nvml, procs, demo=True), "localhost", procs)
    import pynvml

    from gputop.sources.procfs import ProcFs

    procs = ProcFs()
    return CollectorFeed(Collector(pynvml, procs), "localhost", procs)
