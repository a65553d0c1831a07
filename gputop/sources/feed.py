"""Feeds: where the dashboard and the commands get their snapshots, and how they act.

A feed yields HostSnapshots of one or more hosts and carries action requests to them
(docs/architecture.md).  Each feed declares what it can do (``capabilities``), who acts
on each host (``identity``) and whether it can read a process's details, so that views
never probe a feed's internals.  ``LocalFeed`` is this machine (or the simulator in
--demo); ``SshFeed`` in sources/ssh.py is the remote one.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gputop.model import HOST_ERROR, HOST_NO_GPU, HostSnapshot, error_snapshot, mig_map
from gputop.records import Record, record
from gputop.sources.backend import NoDriverError
from gputop.sources.identity import Identity

if TYPE_CHECKING:
    import asyncio

    from gputop.actions.dispatch import ActionEnv

Emit = Callable[[HostSnapshot], None]


@record(frozen=True, slots=True)
class Capabilities(Record):
    """What a feed can do for one host."""

    kill: bool = False  # signal processes (with the pid-reuse guard)
    reserve: bool = False  # reserve and release cards in the host's store
    process_details: bool = False  # read one process's facts and parent chain
    simulated: bool = False  # --demo: every action changes only the simulation
    why_not: str = ""  # one phrase for a user whose action is refused

    @property
    def acts(self) -> bool:
        return self.kill or self.reserve


# Snapshots handed to the app directly (screenshots, tests): dialogs open as they would on
# a simulated host, and a request gets a polite refusal from the app.
REPLAY = Capabilities(kill=True, reserve=True, simulated=True)
READONLY_WHY = "read-only mode (--readonly)"
# A seed catches up with the clock in two or three calls (each emits the time the one
# before took); the bound only keeps a seed that never catches up from holding the feed.
SEED_CALLS = 5


class ReadOnlyFeed:
    """What a feed that can only read (Prometheus, `gputop serve`'s API) answers: no
    action, no process details, the local user as "me". ``why`` says why, for dialogs."""

    why = ""

    def __init__(self) -> None:
        from gputop.sources.identity import local_identity

        self._identity = local_identity()

    def capabilities(self, host: str) -> Capabilities:
        return Capabilities(why_not=self.why)

    def identity(self, host: str) -> Identity:
        return self._identity

    def process_details(self, host: str, pid: int, start_ticks: int | None) -> ProcessDetails:
        return ProcessDetails(None, None)

    async def request(self, host: str, request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": False, "message": self.why}


@record(frozen=True, slots=True)
class ProcessDetails(Record):
    facts: dict[str, Any] | None  # procfs' process() dict, or {"error": ...}
    parents: list[dict[str, Any]] | None


class Feed(Protocol):
    hosts: list[str]

    def capabilities(self, host: str) -> Capabilities: ...

    def identity(self, host: str) -> Identity: ...

    def process_details(self, host: str, pid: int, start_ticks: int | None) -> ProcessDetails:
        """Facts and parent chain of one process; blocking (call it in a thread)."""
        ...

    async def run(self, interval: float, emit: Emit) -> None: ...

    async def request(self, host: str, request: dict[str, Any]) -> dict[str, Any]: ...

    async def close(self) -> None: ...


@runtime_checkable
class Focuses(Protocol):
    """A feed that reads a view of many hosts (Prometheus) declares this: told which host
    the dashboard opened (None: the overview), it reads that one in full, the rest in
    brief.  Feeds that read each host whole do not."""

    def focus(self, host: str | None) -> None: ...


@runtime_checkable
class _Details(Protocol):
    """The part of a ProcessReader (sources/backend.py) the detail view reads."""

    def process(self, pid: int) -> dict[str, Any] | None: ...

    def parent_chain(self, pid: int) -> list[dict[str, Any]]: ...


@runtime_checkable
class Collects(Protocol):
    """What a LocalFeed reads: ``sources/assembler.HostAssembler`` (or a wrapper of one)."""

    def collect(self) -> dict[str, Any]: ...


class LocalFeed:
    """One host read by a collector in a worker thread.

    ``collector`` is a ``Collects`` (a HostAssembler from sources/hostsource.py), or a
    zero-argument factory that makes one (called in the worker thread on the first poll, so
    a slow or failing nvmlInit never blocks the UI).  ``dispatch_env`` is the
    ``gputop.actions.dispatch.ActionEnv`` for requests; None makes the feed a viewer only.
    ``seed`` returns the snapshots (dicts, oldest first) the host had before the feed
    started, emitted before the first poll: the history --demo would have had.  It is
    called again until it returns nothing (at most SEED_CALLS times), so the time spent
    emitting the past is seeded too.
    """

    def __init__(
        self,
        collector: Collects | Callable[[], Collects],
        host: str,
        identity: Identity,
        dispatch_env: ActionEnv | None = None,
        seed: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        self._collector: Collects | None
        self._factory: Callable[[], Collects] | None
        if isinstance(collector, Collects):
            self._collector = collector
            self._factory = None
        else:
            self._collector = None
            self._factory = collector
        self.host = host
        self.hosts = [host]
        self._identity = identity
        self._env = dispatch_env
        self._seed = seed
        self._first_at: float | None = None  # when first_snapshot() polled (monotonic)
        # A first_snapshot() poll that outlasted its wait: (done, [snapshot]), for run().
        self._first_pending: tuple[threading.Event, list[HostSnapshot]] | None = None
        # Made on first use: asyncio costs a one-shot command (which never runs a feed)
        # tens of ms to import.
        self._closed_event: asyncio.Event | None = None
        # In --demo the collector and the actions share one simulation, which is not
        # thread-safe: a poll and a kill must not interleave.  Real NVML and /proc need no
        # lock, and a kill's grace wait must not stall polling there.
        simulated = dispatch_env is not None and dispatch_env.sim is not None
        self._sim_lock = threading.Lock() if simulated else None
        acts = dispatch_env is not None and not dispatch_env.readonly
        why = "" if acts else (READONLY_WHY if dispatch_env is not None else "a viewer only")
        self._capabilities = Capabilities(
            kill=acts,
            reserve=acts,
            process_details=dispatch_env is not None and dispatch_env.procs is not None,
            simulated=simulated,
            why_not=why,
        )

    # -- what it declares ---------------------------------------------------------------

    def capabilities(self, host: str) -> Capabilities:
        return self._capabilities

    def identity(self, host: str) -> Identity:
        return self._identity

    def process_details(self, host: str, pid: int, start_ticks: int | None) -> ProcessDetails:
        procs = self._env.procs if self._env is not None else None
        if host != self.host or not isinstance(procs, _Details):
            return ProcessDetails(None, None)
        try:
            with self._simulation():
                info = procs.process(pid)
                # A pid reused since the row was drawn is another process: show nothing.
                if info is None or info.get("start_ticks") != start_ticks:
                    return ProcessDetails(None, None)
                return ProcessDetails(info, procs.parent_chain(pid))
        except Exception as err:  # a vanished pid or an unreadable /proc entry
            return ProcessDetails({"error": f"{type(err).__name__}: {err}"}, None)

    # -- snapshots ----------------------------------------------------------------------

    def poll(self) -> HostSnapshot:
        """One snapshot, never raising: failures become an error snapshot of this host."""
        try:
            if self._collector is None:
                assert self._factory is not None
                self._collector = self._factory()
            with self._simulation():
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

    def first_snapshot(self, wait: float) -> HostSnapshot | None:
        """Poll once before the feed runs: the dashboard draws this snapshot before its UI
        has loaded (gputop/ui/launch.py) and applies it itself, so ``run`` does not emit
        it and polls next an interval later.  The poll runs in a thread: a card that
        takes seconds to answer must not hold the UI back, so after ``wait`` seconds this
        returns None and ``run`` emits the snapshot when the poll ends (no second poll
        meanwhile).  None for a feed with a seed (--demo): its past must come first."""
        if self._seed is not None or self._first_at is not None or self._first_pending:
            return None
        done, box = threading.Event(), []

        def first_poll() -> None:
            box.append(self.poll())  # poll() never raises
            done.set()

        threading.Thread(target=first_poll, name="first poll", daemon=True).start()
        if not done.wait(wait):
            self._first_pending = (done, box)
            return None
        self._first_at = time.monotonic()
        return box[0]

    def _learn_gpu_uuids(self, snapshot: HostSnapshot) -> None:
        # Reservations name cards by UUID where known; the action env learns them from the
        # first snapshot that has them, since the feed is built before any GPU was read.
        env = self._env
        if env is not None:
            env.mig_devices = mig_map(snapshot.gpus)
        if env is not None and env.gpu_uuids is None:
            uuids: dict[int, str | None] = {g.index: g.uuid for g in snapshot.gpus if g.uuid}
            if uuids:
                env.gpu_uuids = uuids

    @property
    def _closed(self) -> asyncio.Event:
        if self._closed_event is None:
            import asyncio

            self._closed_event = asyncio.Event()
        return self._closed_event

    async def run(self, interval: float, emit: Emit) -> None:
        import asyncio

        if self._seed is not None:
            for _ in range(SEED_CALLS):
                batch = await asyncio.to_thread(self._seed)
                if not batch:
                    break
                for data in batch:
                    emit(HostSnapshot.from_dict(data))
        if self._first_pending is not None:  # first_snapshot() stopped waiting for it
            done, box = self._first_pending
            await asyncio.to_thread(done.wait)
            self._first_pending = None
            self._first_at = time.monotonic()
            emit(box[0])
        if self._first_at is not None:  # first_snapshot() took the first poll
            delay = max(0.0, interval - (time.monotonic() - self._first_at))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closed.wait(), timeout=delay)
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

    # -- actions ------------------------------------------------------------------------

    async def request(self, host: str, request: dict[str, Any]) -> dict[str, Any]:
        import asyncio

        return await asyncio.to_thread(self.handle, host, request)

    def handle(self, host: str, request: dict[str, Any]) -> dict[str, Any]:
        """``request`` without an event loop (one-shot commands on this machine)."""
        if host != self.host:
            return {"ok": False, "message": f"unknown host {host!r}"}
        if self._env is None:
            return {"ok": False, "message": "actions are not available for this source"}
        # Imported here: the dispatcher pulls in the action modules, which a pure viewer
        # never needs.
        from gputop.actions.dispatch import handle

        with self._simulation():
            return handle(request, self._env)

    def _simulation(self) -> contextlib.AbstractContextManager[Any]:
        return self._sim_lock if self._sim_lock is not None else contextlib.nullcontext()

    async def close(self) -> None:
        self._closed.set()
