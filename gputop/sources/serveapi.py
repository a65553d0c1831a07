"""Hosts read from `gputop serve`'s snapshot API (hosts-file entries with ``url:``).

``GET URL/api/v1/snapshot`` answers the ``--json`` document of that host (schema 1), so
another gputop reads it without SSH.  Read-only: the API carries no actions (an
unauthenticated HTTP port must not kill processes), so kill and reserve there need SSH.
The document is untrusted: size-capped, schema-checked, and any field that does not fit
the model makes the host an error state, not a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

from gputop import model
from gputop.hosts import HostSpec
from gputop.model import HostSnapshot, error_snapshot
from gputop.sources import networds
from gputop.sources.feed import ReadOnlyFeed
from gputop.sources.prometheus import PromError, read_body

WHY_READ_ONLY = ("read from gputop serve's snapshot API: kill and reserve need SSH to "
                 "the host")


def fetch(spec: HostSpec, timeout: float) -> HostSnapshot:
    """The host's snapshot, named as the hosts file names it; never raising."""
    now = time.time()
    try:
        request = urllib.request.Request(f"{spec.url}/api/v1/snapshot",
                                         headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = read_body(response)
        except urllib.error.HTTPError as err:
            raise PromError(model.HOST_ERROR, f"HTTP {err.code} {err.reason}") from None
        except (TimeoutError, OSError) as err:
            reason = getattr(err, "reason", err)
            if isinstance(reason, TimeoutError) or "timed out" in str(reason):
                raise PromError(model.HOST_TIMEOUT, f"no answer within {timeout:g} s") from None
            raise PromError(model.HOST_UNREACHABLE,
                            networds.url_problem(err, spec.url or "", networds.SERVE)) from None
        return _snapshot(spec, raw)
    except PromError as err:
        # A network problem names its host and port already (networds); the rest do not.
        unreachable = err.state == model.HOST_UNREACHABLE
        return error_snapshot(spec.name, now, err.state,
                              str(err) if unreachable else f"{spec.url}: {err}",
                              source="gputop serve", labels=spec.labels)


def _snapshot(spec: HostSpec, raw: bytes) -> HostSnapshot:
    try:
        doc = json.loads(raw)
        hosts = doc["hosts"] if isinstance(doc, dict) and doc.get("schema") == 1 else None
        if not isinstance(hosts, list) or len(hosts) != 1 or not isinstance(hosts[0], dict):
            raise PromError(model.HOST_ERROR, "not a gputop snapshot (schema 1, one host)")
        data = {**hosts[0], "host": spec.name, "labels": list(spec.labels),
                "source": "gputop serve"}
        return HostSnapshot.from_dict(data)
    except PromError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise PromError(model.HOST_ERROR, f"bad snapshot: {type(err).__name__}") from None


class ServeFeed(ReadOnlyFeed):
    """Hosts with ``url:`` in the hosts file, each polled on its own thread."""

    why = WHY_READ_ONLY
    blocking_poll = True  # one-shots call poll() in their own thread (sources/opener.py)

    def __init__(self, specs: Sequence[HostSpec], timeout: float) -> None:
        super().__init__()
        self.specs = list(specs)
        self.hosts = [spec.name for spec in self.specs]
        self.timeout = timeout
        self._closed = asyncio.Event()

    def poll(self) -> list[HostSnapshot]:
        return [fetch(spec, self.timeout) for spec in self.specs]

    async def run(self, interval: float, emit: Callable[[HostSnapshot], None]) -> None:
        async def one(spec: HostSpec) -> None:
            while not self._closed.is_set():
                started = time.monotonic()
                snap = await asyncio.to_thread(fetch, spec, min(self.timeout, interval * 5))
                if self._closed.is_set():
                    return
                emit(snap)
                delay = max(0.0, interval - (time.monotonic() - started))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._closed.wait(), timeout=delay)

        await asyncio.gather(*(one(spec) for spec in self.specs))

    async def close(self) -> None:
        self._closed.set()
