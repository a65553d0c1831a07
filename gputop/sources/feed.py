"""Feeds: where the dashboard and the one-shot commands get their snapshots.

A feed yields HostSnapshots of one or more hosts and carries action requests to them
(docs/architecture.md).  ``LocalFeed`` is this machine (or the simulator in --demo);
``SshFeed`` in sources/ssh.py is the remote one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from gputop.model import HOST_ERROR, HOST_NO_GPU, HostSnapshot, error_snapshot
from gputop.sources.nvml import Collector, NoDriverError


class Feed(Protocol):
    hosts: list[str]

    def _learn_gpu_uuids(self, snapshot: HostSnapshot) -> None:
        # Reservations name cards by UUID where known; the action env learns them from the
        # first snapshot that has them, since the feed is built before any GPU was read.
        env = self.dispatch_env
        if env is not None and getattr(env, "gpu_uuids", False) is None:
            uuids = {g.index: g.uuid for g in snapshot.gpus if g.uuid}
            if uuids:
                env.gpu_uuids = uuids

    async def run(self, interval: float, emit: Callable[[HostSnapshot], None]) -> None: ...

    async def request(self, host: str, request: dict) -> dict: ...

    async def close(self) -> None: ...


class LocalFeed:
    """One host read by a Collector in a worker thread.

    ``collector`` is a Collector, or a zero-argument factory that makes one (called in the
    worker thread on the first poll, so a slow or failing nvmlInit never blocks the UI).
    ``dispatch_env`` is the ``gputop.actions.dispatch.ActionEnv`` for requests; None makes
    every request fail with a message (e.g. a read-only source).
    """

    def __init__(
        self,
        collector: Collector | Callable[[], Collector],
        host: str = "localhost",
        dispatch_env: Any = None,
    ) -> None:
        if hasattr(collector, "collect"):
            self._collector: Collector | None = collector  # type: ignore[assignment]
            self._factory: Callable[[], Collector] | None = None
        else:
            self._collector = None
            self._factory = collector  # type: ignore[assignment]
        self.host = host
        self.hosts = [host]
        self.dispatch_env = dispatch_env
        self._closed = asyncio.Event()
        # In --demo the collector and the actions share one simulation, which is not
        # thread-safe: a poll and a kill must not interleave.  Real NVML and /proc need no
        # lock, and a kill's grace wait must not stall polling there.
        self._sim_lock = threading.Lock() if getattr(dispatch_env, "sim", None) else None

    def poll(self) -> HostSnapshot:
        """One snapshot, never raising: failures become an error snapshot of this host."""
        try:
            if self._collector is None:
                assert self._factory is not None
                self._collector = self._factory()
            if self._sim_lock is not None:
                with self._sim_lock:
                    data = self._collector.collect()
            else:
                data = self._collector.collect()
            snapshot = HostSnapshot.from_dict(data)
            self._learn_gpu_uuids(snapshot)
            return snapshot
        except NoDriverError as err:
            return error_snapshot(self.host, time.time(), HOST_NO_GPU, str(err))
        except Exception as err:
            # One bad poll (a driver hiccup, a bug on an odd card) must not end the feed:
            # it shows as this host's state and the next poll tries again.
            message = f"collection failed: {type(err).__name__}: {err}"
            return error_snapshot(self.host, time.time(), HOST_ERROR, message)

    def _learn_gpu_uuids(self, snapshot: HostSnapshot) -> None:
        # Reservations name cards by UUID where known; the action env learns them from the
        # first snapshot that has them, since the feed is built before any GPU was read.
        env = self.dispatch_env
        if env is not None and getattr(env, "gpu_uuids", False) is None:
            uuids = {g.index: g.uuid for g in snapshot.gpus if g.uuid}
            if uuids:
                env.gpu_uuids = uuids

    async def run(self, interval: float, emit: Callable[[HostSnapshot], None]) -> None:
        # Each poll is awaited before the next is scheduled, so polls never overlap even
        # when one takes longer than the interval.
        while not self._closed.is_set():
            started = time.monotonic()
            snapshot = await asyncio.to_thread(self.poll)
            if self._closed.is_set():
                break
            emit(snapshot)
            delay = max(0.0, interval - (time.monotonic() - started))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closed.wait(), timeout=delay)

    async def request(self, host: str, request: dict) -> dict:
        if host != self.host:
            return {"ok": False, "message": f"unknown host {host!r}"}
        if self.dispatch_env is None:
            return {"ok": False, "message": "actions are not available for this source"}
        return await asyncio.to_thread(self._handle, request)

    def _handle(self, request: dict) -> dict:
        # Imported here: the dispatcher pulls in the action modules, which a pure viewer
        # never needs.
        from gputop.actions.dispatch import handle

        if self._sim_lock is not None:
            with self._sim_lock:
                return handle(request, self.dispatch_env)
        return handle(request, self.dispatch_env)

    async def close(self) -> None:
        self._closed.set()
