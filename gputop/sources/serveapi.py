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
import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from gputop import model
from gputop.hosts import HostSpec
from gputop.model import HostSnapshot, error_snapshot
from gputop.sources import networds, untrusted
from gputop.sources.feed import ReadOnlyFeed
from gputop.sources.prometheus import PromError, _Deadline, read_body

WHY_READ_ONLY = ("read from gputop serve's snapshot API: kill and reserve need SSH to "
                 "the host")
# Same-origin redirects followed (a proxy's trailing-slash answer); another origin's never.
MAX_REDIRECTS = 3


def fetch(spec: HostSpec, timeout: float) -> HostSnapshot:
    """The host's snapshot, named as the hosts file names it; never raising."""
    now = time.time()
    try:
        return _snapshot(spec, _get(f"{spec.url}/api/v1/snapshot", timeout), now)
    except PromError as err:
        # A network problem names its host and port already (networds); the rest do not.
        unreachable = err.state == model.HOST_UNREACHABLE
        return error_snapshot(spec.name, now, err.state,
                              str(err) if unreachable else f"{spec.url}: {err}",
                              source="gputop serve", labels=spec.labels)


def _get(url: str, timeout: float) -> bytes:
    """GET ``url``'s body within one deadline for the whole exchange: connecting, the
    TLS handshake, headers sent a byte at a time and the body (a server that drips
    bytes is a timeout, not a wait without end).  A redirect to another origin is
    refused, as the Prometheus client refuses them: the hosts file names the host whose
    numbers these are, and another must not answer for it."""
    deadline = time.monotonic() + timeout
    for _ in range(MAX_REDIRECTS + 1):
        parts = urllib.parse.urlsplit(url)
        try:
            conn = _connect(parts, deadline)
            try:
                conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""),
                             headers={"Accept": "application/json"})
                response = conn.getresponse()
                if 300 <= response.status < 400:
                    url = _redirect(url, response.status, response.getheader("Location"))
                    continue
                if response.status != 200:
                    raise PromError(model.HOST_ERROR,
                                    f"HTTP {response.status} {str(response.reason)[:100]}")
                return read_body(response)
            finally:
                conn.close()
        except PromError:
            raise
        except (TimeoutError, OSError, http.client.HTTPException, ValueError) as err:
            if isinstance(err, TimeoutError) or "timed out" in str(err):
                raise PromError(model.HOST_TIMEOUT, f"no answer within {timeout:g} s") from None
            if isinstance(err, (http.client.HTTPException, ValueError)):
                raise PromError(model.HOST_ERROR,
                                f"not an HTTP answer ({type(err).__name__})") from None
            raise PromError(model.HOST_UNREACHABLE,
                            networds.url_problem(err, url, networds.SERVE)) from None
    raise PromError(model.HOST_ERROR, f"more than {MAX_REDIRECTS} redirects")


def _connect(parts: urllib.parse.SplitResult, deadline: float) -> http.client.HTTPConnection:
    """A connection whose socket (connect and handshake included) waits only until
    ``deadline``."""
    host, port = parts.hostname or "", parts.port
    https = parts.scheme == "https"
    conn = (http.client.HTTPSConnection(host, port) if https
            else http.client.HTTPConnection(host, port))
    sock = socket.create_connection((host, conn.port), timeout=_left(deadline))
    try:
        if https:
            import ssl  # https only: ssl is a tenth of `gputop --once`'s start

            sock.settimeout(_left(deadline))  # the handshake's whole wait, not each read's
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise
    conn.sock = _Deadline(sock, deadline)
    return conn


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.hostname or "", parts.port


def _redirect(url: str, status: int, location: Any) -> str:
    where = str(location or "")[:200]
    target = urllib.parse.urljoin(url, where)
    if not where or _origin(target) != _origin(url):
        raise PromError(model.HOST_ERROR, f"HTTP {status} redirect to {where or '?'} not "
                        "followed: another host must not answer for this one (give url: "
                        "the address gputop serve answers on)")
    return target


def _snapshot(spec: HostSpec, raw: bytes, now: float) -> HostSnapshot:
    try:
        doc = json.loads(raw, parse_constant=untrusted.json_constant)
        hosts = doc["hosts"] if isinstance(doc, dict) and doc.get("schema") == 1 else None
        if not isinstance(hosts, list) or len(hosts) != 1 or not isinstance(hosts[0], dict):
            raise PromError(model.HOST_ERROR, "not a gputop snapshot (schema 1, one host)")
        # Every field checked as the SSH probe's are (sources/untrusted.py).
        data, notes = untrusted.clean_snapshot(hosts[0])
        data.update(host=spec.name, labels=list(spec.labels), source="gputop serve")
        data.setdefault("time", now)
        return HostSnapshot.from_dict(untrusted.say_notes(data, notes, "snapshot"))
    except PromError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as err:
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
