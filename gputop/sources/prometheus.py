"""A cluster read from a Prometheus server: `gputop --prometheus URL`.

One instant query per refresh (``POST /api/v1/query``, form-encoded, gzip) fetches every
GPU series of three exporters at once, and ``pivot`` turns the flat result into one
HostSnapshot per host, keyed by (Hostname or instance, GPU UUID):

- dcgm-exporter (``DCGM_FI_DEV_*``: MiB, MHz, %; labels gpu, UUID, modelName, Hostname),
- nvidia_gpu_exporter (``nvidia_smi_*``: bytes, Hz, ratios; lowercase ``uuid`` without
  ``GPU-``, identity on ``nvidia_smi_gpu_info``),
- ``gputop serve`` (DCGM names plus ``gputop_*``: processes, users, reservations).

What a host's exporter does not give stays None and is named in ``missing``; its
``source`` says which exporter(s) it came from.  ``up`` tells dead exporters, and a host
whose last scrape is older than ``stale_after_s`` is stale.  The feed is read-only:
killing and reserving need the host itself (SSH, or the probe).  Every field of the
answer is untrusted: sizes, counts and values are checked, never trusted.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import gc
import http.client
import io
import json
import math
import queue
import random
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable
from typing import Any

from gputop import model
from gputop.config import PrometheusConfig
from gputop.model import HostSnapshot, error_snapshot
from gputop.sources import networds, promql
from gputop.sources.feed import ReadOnlyFeed
from gputop.sources.prompivot import (
    SOURCE_DCGM,
    SOURCE_GPUTOP,
    SOURCE_SMI,
    Pivot,
    dead_instances,
    dead_names,
    pivot,
    samples,
)

__all__ = [
    "SOURCE_DCGM",
    "SOURCE_GPUTOP",
    "SOURCE_SMI",
    "PromClient",
    "PromError",
    "PrometheusFeed",
    "pivot",
]

MIB = 1024**2
# Decompressed, of all the answers of a refresh held at once (read, not yet pivoted):
# one field of 1,000 hosts x 8 GPUs is about 1 MiB.  A cap per query would allow eight
# times this with eight queries in flight.
MAX_BODY_BYTES = 64 * MIB
MAX_SERIES = 500_000
MAX_BACKOFF_S = 60.0
# Two scrape times of one target closer than this are jitter, not an interval.
MIN_SCRAPE_S = 0.5
PRESENT_EVERY_S = 300.0  # which optional limits the server has: asked this often
MAX_TEXTS = 200_000  # label texts kept for reuse: 8,000 cards have about 25,000
MAX_DEAD_ASKED = 2000  # dead targets asked about in one refresh (promql.dead_query)
# Queries of one refresh in flight at once: Prometheus evaluates them in parallel (its
# default --query.max-concurrency is 20) while this side parses the answers already in.
PARALLEL_QUERIES = 8

WHY_READ_ONLY = ("read through Prometheus: kill and reserve need SSH to the host "
                 "(--hosts) or its gputop serve")


HISTORY_POINTS = 120  # per series: the sparklines' width, not the scrape resolution
# Past card samples the backfill may make: the history keeps each as a whole Gpu record
# (about 1 KB with its numbers), and at 1,000 x 8 the full backfill was 104,000 snapshots,
# 2 GB and 70 s before the first live refresh.  Fewer points per card as a cluster grows;
# none below MIN_HISTORY_POINTS (a sparkline of three points says nothing).
BACKFILL_SAMPLES = 40_000
MIN_HISTORY_POINTS = 12


class PromError(Exception):
    """The query failed; ``state`` is the host state to show for the source."""

    def __init__(self, state: str, message: str) -> None:
        super().__init__(message)
        self.state = state


# -- the HTTP API ------------------------------------------------------------------------------


def _secret(env_name: str, file_name: str, environ: dict[str, str]) -> str | None:
    if env_name:
        value = environ.get(env_name)
        if not value:
            raise PromError(model.HOST_AUTH_FAILED, f"${env_name} is not set")
        return value.strip()
    if file_name:
        try:
            with open(file_name, encoding="utf-8") as fh:
                return fh.read(64 * 1024).strip()
        except OSError as err:
            raise PromError(model.HOST_AUTH_FAILED,
                            f"{file_name}: cannot read: {err.strerror}") from None
    return None


class PromClient:
    """Instant queries against one Prometheus server; errors are PromError.

    ``timeout`` bounds the whole exchange, slow headers and a slow body included (one
    byte every half second is a timeout, not a wait); the body is read in pieces and
    refused past MAX_BODY_BYTES, compressed or not, or past what the refresh's Budget
    has left.  Redirects are never followed: a redirect to
    another host would carry the credentials there, and a same-origin one would turn
    the POST into a GET without its query."""

    def __init__(self, url: str, config: PrometheusConfig, timeout: float,
                 environ: dict[str, str] | None = None) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"--prometheus {url!r}: expected http://HOST:PORT or https://...")
        try:
            port = parsed.port
        except ValueError:
            raise ValueError(f"--prometheus {url!r}: bad port") from None
        self.url = url.rstrip("/")
        self.scheme = parsed.scheme
        self.host = parsed.hostname or ""
        self.port = port
        self.path = parsed.path.rstrip("/")
        self.name = f"prometheus {parsed.netloc}"
        self.config = config
        self.timeout = timeout
        self.environ = dict(environ) if environ is not None else None
        self.context = None
        if parsed.scheme == "https":
            import ssl  # https only: ssl is a tenth of `gputop --once`'s start

            self.context = ssl.create_default_context(cafile=config.ca_file or None)
            if config.cert_file:  # a client certificate, for servers that ask for one
                try:
                    self.context.load_cert_chain(config.cert_file, config.key_file or None)
                except (OSError, ssl.SSLError) as err:
                    raise ValueError(f"prometheus: cert_file {config.cert_file}: cannot "
                                     f"load it: {getattr(err, 'strerror', None) or err}"
                                     ) from None

    def _headers(self) -> dict[str, str]:
        import os

        environ = self.environ if self.environ is not None else dict(os.environ)
        cfg = self.config
        headers = {**cfg.headers, "Accept": "application/json", "Accept-Encoding": "gzip",
                   "Content-Type": "application/x-www-form-urlencoded"}
        token = _secret(cfg.token_env, cfg.token_file, environ)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif cfg.username:
            password = _secret(cfg.password_env, cfg.password_file, environ) or ""
            pair = base64.b64encode(f"{cfg.username}:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {pair}"
        return headers

    def query(self, expr: str, budget: Share | None = None) -> tuple[list[Any], list[str]]:
        """The result vector and the server's warnings; ``budget``: the bytes its answer
        may take of what a refresh's answers hold at once (MAX_BODY_BYTES alone without)."""
        return self._post("query", {"query": expr}, "vector", budget)

    def query_range(self, expr: str, start: float, end: float,
                    step: float) -> tuple[list[Any], list[str]]:
        """The result matrix (``values`` per series) and the server's warnings."""
        form = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                "step": f"{step:.3f}"}
        return self._post("query_range", form, "matrix")

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self.context is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=self.context)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _post(self, endpoint: str, form: dict[str, str], kind: str,
              budget: Share | None = None) -> tuple[list[Any], list[str]]:
        body = urllib.parse.urlencode(form).encode()
        deadline = time.monotonic() + self.timeout
        conn = self._connection(self.timeout)
        try:
            conn.connect()
            # From here every read and write waits only until the deadline: headers sent
            # a byte at a time are a timeout too, not a wait without end.
            conn.sock = _Deadline(conn.sock, deadline)
            conn.request("POST", f"{self.path}/api/v1/{endpoint}", body=body,
                         headers=self._headers())
            response = conn.getresponse()
            status = response.status
            if 300 <= status < 400:
                where = str(response.getheader("Location") or "")[:200]
                raise PromError(model.HOST_ERROR,
                                f"HTTP {status} redirect to {where or '?'} not followed: "
                                "give --prometheus the URL Prometheus answers on")
            # No name holds the body here: _decode drops it once it is text.
            data = read_body(response, budget)
            if status != 200:
                raise _http_error(status, str(response.reason)[:100], data)
            return _decode(data, kind)
        except PromError:
            raise
        except (TimeoutError, OSError, http.client.HTTPException) as err:
            if isinstance(err, TimeoutError) or "timed out" in str(err):
                raise PromError(model.HOST_TIMEOUT,
                                f"no answer within {self.timeout:g} s") from None
            raise PromError(model.HOST_UNREACHABLE,
                            networds.url_problem(err, self.url, networds.PROMETHEUS)) from None
        finally:
            conn.close()


class _Deadline:
    """A connected socket (TLS or not) whose every wait ends at one deadline
    (time.monotonic): the whole exchange is bounded, the status line and headers too,
    whatever pace the server sends them at."""

    def __init__(self, sock: Any, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        # As a socket's own makefile: http.client closes the connection of a response
        # that ends with it while the body is still to be read from the file.
        self.readers = 0
        self.closing = False

    def _arm(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self.sock.settimeout(left)

    def sendall(self, data: bytes) -> None:
        self._arm()
        self.sock.sendall(data)

    def makefile(self, mode: str, *_args: Any, **_kwargs: Any) -> io.BufferedReader:
        self.readers += 1
        return io.BufferedReader(_DeadlineReader(self))  # http.client reads "rb" only

    def close(self) -> None:
        self.closing = True
        if not self.readers:
            self.sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


class _DeadlineReader(io.RawIOBase):
    def __init__(self, outer: _Deadline) -> None:
        self.outer = outer

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self.outer._arm()
        return int(self.outer.sock.recv_into(buffer))

    def close(self) -> None:
        if not self.closed:
            outer = self.outer
            outer.readers -= 1
            if outer.closing and not outer.readers:
                outer.sock.close()
        super().close()


class Budget:
    """The bytes of answers one refresh holds at once, shared by its queries: each
    answer takes its share as it is read and gives it back once pivoted."""

    def __init__(self, limit: int = MAX_BODY_BYTES) -> None:
        self.limit = limit
        self.used = 0
        self.lock = threading.Lock()

    def share(self) -> Share:
        return Share(self)

    def take(self, size: int) -> None:
        with self.lock:
            if self.used + size > self.limit:
                raise PromError(model.HOST_ERROR, f"answers larger than {self.limit // MIB} "
                                "MiB in all at once: narrow the selector")
            self.used += size

    def give(self, size: int) -> None:
        with self.lock:
            self.used -= size


class Share:
    """One answer's part of a Budget."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.held = 0

    def take(self, size: int) -> None:
        self.budget.take(size)
        self.held += size

    def give(self, size: int) -> None:
        self.budget.give(size)
        self.held -= size

    def release(self) -> None:
        self.give(self.held)


READ_PIECE = 256 * 1024


def read_body(response: Any, budget: Share | None = None) -> bytes:
    """The body, inflated, in pieces: over MAX_BODY_BYTES (compressed or not), or over
    what ``budget`` has left, is refused as soon as it is passed (the share taken is
    given back then; otherwise the caller releases it when done with the answer)."""
    gzipped = (response.getheader("Content-Encoding") or "").lower() == "gzip"
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
    parts: list[bytes] = []
    size = raw_size = 0
    too_big = PromError(model.HOST_ERROR, f"answer larger than {MAX_BODY_BYTES // MIB} MiB")
    try:
        while True:
            piece = response.read1(READ_PIECE)
            if not piece:
                break
            raw_size += len(piece)
            if raw_size > MAX_BODY_BYTES:
                raise too_big
            if inflater is not None:
                try:
                    piece = inflater.decompress(piece, MAX_BODY_BYTES + 1 - size)
                except zlib.error as err:
                    raise PromError(model.HOST_ERROR, f"bad gzip answer: {err}") from None
                if inflater.unconsumed_tail:
                    raise too_big
            if size + len(piece) > MAX_BODY_BYTES:
                raise too_big
            if budget is not None:
                budget.take(len(piece))
            size += len(piece)
            parts.append(piece)
    except BaseException:
        if budget is not None:
            budget.give(size)
        raise
    data = b"".join(parts)
    del parts
    return data


def _http_error(status: int, reason: str, body: bytes) -> PromError:
    if status in (401, 403):
        return PromError(model.HOST_AUTH_FAILED, f"HTTP {status} {reason}: check the "
                         "credentials named in the config's prometheus: section")
    detail = ""
    with contextlib.suppress(Exception):
        doc = json.loads(body)
        detail = f": {doc.get('errorType', '')} {str(doc.get('error', ''))[:200]}".rstrip()
        if doc.get("errorType") == "timeout":
            return PromError(model.HOST_TIMEOUT, f"query timed out{detail}")
    return PromError(model.HOST_ERROR, f"HTTP {status} {reason}{detail}")


def _decode(raw: bytes, kind: str = "vector") -> tuple[list[Any], list[str]]:
    try:
        doc = json.loads(raw)  # bytes: UTF-8 checked by the parser, no decoded copy
        del raw
    except (ValueError, UnicodeDecodeError) as err:
        raise PromError(model.HOST_ERROR, f"malformed JSON answer: {err}") from None
    if not isinstance(doc, dict):
        raise PromError(model.HOST_ERROR, "malformed answer: not a JSON object")
    if doc.get("status") != "success":
        raise PromError(model.HOST_ERROR, f"query failed: {str(doc.get('error'))[:200]}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != kind \
            or not isinstance(data.get("result"), list):
        raise PromError(model.HOST_ERROR, f"malformed answer: no result {kind}")
    result = data["result"]
    if len(result) > MAX_SERIES:
        raise PromError(model.HOST_ERROR, f"more than {MAX_SERIES} series: narrow the selector")
    found = doc.get("warnings")
    warnings = [str(w)[:300] for w in found] if isinstance(found, list) else []
    return result, warnings


# -- the feed ----------------------------------------------------------------------------------


class PrometheusFeed(ReadOnlyFeed):
    """Every host a Prometheus server knows, read-only.  ``hosts`` grows as hosts appear.

    ``view`` (promql.SUMMARY, OVERVIEW or FULL) is what a refresh asks for; ``focus(host)`` adds
    the full view of that one host (the dashboard's opened host) to each refresh."""

    why = WHY_READ_ONLY
    blocking_poll = True  # one-shots call poll() in their own thread (sources/opener.py)

    def __init__(self, url: str, config: PrometheusConfig, timeout: float,
                 environ: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.time, history_s: float = 0.0,
                 view: str = promql.FULL) -> None:
        super().__init__()
        self.client = PromClient(url, config, timeout, environ)
        self.history_s = history_s  # the dashboard's history window, backfilled at start
        self.config = config
        self.view = view
        self.focused: str | None = None
        self.hosts: list[str] = []
        self._known: set[str] = set()  # self.hosts as a set: every refresh asks of each host
        self.clock = clock
        self.failures = 0
        self._names: dict[str, str] = {}
        self._texts: dict[str, str] = {}  # labels' text reused across refreshes (prompivot)
        self._closed = False
        self._wake: Any = None  # run()'s asyncio.Event: asyncio is not loaded before
        self._sent: dict[str, tuple[Any, ...]] = {}  # host -> what run() last emitted
        # How often the data can change: the shortest time between two scrapes of one
        # target, read from the scrape timestamps of successive refreshes (None: not yet
        # seen). run() asks no more often than that.
        self.scrape_interval: float | None = None
        self._scraped: dict[str, float] = {}
        self._limits: tuple[float, frozenset[str]] | None = None  # (asked at, _present())

    def focus(self, host: str | None) -> None:
        """Read ``host`` in full from the next refresh on (None: the view only); a
        changed focus is read at once, not at the next scrape."""
        if host != self.focused and self._wake is not None:
            self._wake.set()
        self.focused = host

    def _ask(self, exprs: dict[str, str], take: Callable[[str, list[Any]], None]) -> list[str]:
        """Every query at once, ``take(name, result)`` called in this thread as each
        answer comes (no future keeps it: read, then dropped); the server's warnings.
        The first failure is raised, the queries not yet started are not asked."""
        answers: queue.SimpleQueue[tuple[str, Any, Share | None]] = queue.SimpleQueue()
        budget = Budget()  # the sum of the answers held at once, not each one's
        stop = False

        def ask(name: str, expr: str) -> None:
            nonlocal stop
            if stop:
                answers.put((name, None, None))  # not asked: every query answers once
                return
            share = budget.share()
            try:
                answers.put((name, self.client.query(expr, share), share))
                return
            except PromError as err:
                failed = err
            except Exception as err:  # a bug must not leave poll() waiting
                failed = PromError(model.HOST_ERROR, f"{type(err).__name__}")
            # Set here, before this worker takes the next query: one that starts after a
            # failure would wait out a whole timeout again for nothing.
            stop = True
            share.release()
            answers.put((name, failed, None))

        # Plain threads, each taking the next query: concurrent.futures would load
        # logging and traceback into every one-shot for nothing it needs here.
        todo = collections.deque(exprs.items())

        def work() -> None:
            while True:
                try:
                    name, expr = todo.popleft()
                except IndexError:
                    return
                ask(name, expr)

        workers = [threading.Thread(target=work, name=f"promql-{n}", daemon=True)
                   for n in range(min(PARALLEL_QUERIES, len(exprs)))]
        for worker in workers:
            worker.start()
        warnings: list[str] = []
        failure: PromError | None = None
        for _ in exprs:
            name, answer, share = answers.get()
            if isinstance(answer, PromError):
                if failure is None:
                    failure, stop = answer, True  # the rest would fail alike
                continue
            if failure is None and answer is not None:
                result, found = answer
                take(name, result)
                warnings += [w for w in found if w not in warnings]
                del result
            del answer
            if share is not None:
                share.release()  # pivoted: its bytes are free for the next answers
        for worker in workers:
            worker.join()
        if failure is not None:
            raise failure
        return warnings

    def poll(self) -> list[HostSnapshot]:
        """One refresh, never raising: a failed query is one snapshot naming the server."""
        # A refresh of 1,000 hosts makes half a million objects in a second, none of them
        # cyclic: the cycle collector walking them again and again is a sixth of its CPU.
        paused = gc.isenabled()
        gc.disable()
        try:
            return self._poll()
        finally:
            if paused:
                gc.enable()

    def _poll(self) -> list[HostSnapshot]:
        now = self.clock()
        selector = self.config.selector
        stale = self.config.stale_after_s
        focused = self.focused if self.view != promql.FULL else None
        if len(self._texts) > MAX_TEXTS:
            self._texts.clear()  # made-up labels by the million must not grow it forever
        brief = Pivot(self._names, self._texts, promql.complete(self.view))
        full = Pivot(self._names, self._texts)
        dead: list[str] = []

        def take(name: str, result: list[Any]) -> None:
            if name.endswith("@"):
                full.add(name[:-1], result)
                return
            brief.add(name, result)
            if name == "_up":
                dead.extend(dead_instances(result))

        dead_gpu: dict[str, str] = {}
        try:
            exprs = promql.queries(self.view, selector, present=self._present(now))
            if focused is not None:  # the opened host in full, in the same round
                exprs.update({f"{name}@": expr for name, expr in
                              promql.queries(promql.FULL, selector, focused).items()})
            warnings = self._ask(exprs, take)
            del dead[MAX_DEAD_ASKED:]  # a bounded query, however many targets are down
            if dead:  # which dead targets were GPU hosts, and their names then

                def named(_name: str, result: list[Any]) -> None:
                    dead_gpu.update(dead_names(result))

                found = self._ask({"_dead": promql.dead_query(dead, selector)}, named)
                warnings += [w for w in found if w not in warnings]
        except PromError as err:
            self.failures += 1
            return [self._remember(error_snapshot(self.client.name, now, err.state,
                                                  str(err), source="prometheus"))]
        self.failures = 0
        self._learn_interval(brief.scraped)
        snapshots = brief.snapshots(now, stale, dead_gpu)
        if focused is not None:
            opened = {s.host: s for s in full.snapshots(now, stale, dead_gpu)
                      if s.host == focused}
            snapshots = [opened.get(snap.host, snap) for snap in snapshots]
        if warnings:
            snapshots.append(error_snapshot(self.client.name, now, model.HOST_ERROR,
                                            "Prometheus warns: " + "; ".join(warnings),
                                            source="prometheus"))
        for snap in snapshots:
            self._remember(snap)
        return snapshots

    def _remember(self, snap: HostSnapshot) -> HostSnapshot:
        if snap.host not in self._known:
            self._known.add(snap.host)
            self.hosts.append(snap.host)
        return snap

    def _present(self, now: float) -> frozenset[str] | None:
        """The temperature and power limits the server has (promql.present_query), for
        a brief view's filters; asked again after PRESENT_EVERY_S (a site adding them to
        its counters), None for the full view (it asks for every field anyway)."""
        if self.view not in promql.BRIEF:
            return None
        if self._limits is None or now - self._limits[0] > PRESENT_EVERY_S:
            result, _warnings = self.client.query(promql.present_query(self.config.selector))
            names = {labels.get("__name__") for labels, _value in samples(result)}
            self._limits = (now, frozenset(n for n in names if isinstance(n, str)))
        return self._limits[1]

    def _learn_interval(self, scraped: dict[str, float]) -> None:
        """The scrape interval from the targets' last scrape times (``timestamp(up)``):
        a target scraped anew since the previous refresh moved by a whole number of
        intervals, so the smallest move seen in a refresh is the interval (of the
        fastest job, where jobs differ).  A refresh in which no target moved says
        nothing and keeps the estimate."""
        moves = [when - self._scraped[i] for i, when in scraped.items()
                 if i in self._scraped and when - self._scraped[i] > MIN_SCRAPE_S]
        self._scraped = scraped
        if moves:
            self.scrape_interval = min(min(moves), MAX_BACKOFF_S)

    def backoff(self, interval: float) -> float:
        """Seconds to the next query: the interval, or the scrape interval where that is
        longer (a refresh sooner reads the same samples again: Prometheus's CPU for
        nothing); doubling per failure up to a minute."""
        if not self.failures:
            return max(interval, self.scrape_interval or 0.0)
        delay = min(interval * 2 ** min(self.failures, 8), MAX_BACKOFF_S)
        return delay * random.uniform(0.8, 1.0)

    def backfill(self, seconds: float, budget: int = BACKFILL_SAMPLES) -> list[HostSnapshot]:
        """The last ``seconds`` of utilization and memory as past snapshots, oldest
        first, from one ``query_range`` per field: the dashboard's history starts full.
        At most ``budget`` card samples (fewer points per card in a big cluster, none
        when that leaves fewer than MIN_HISTORY_POINTS).  A failure gives nothing (the
        live query reports the server's state)."""
        if seconds <= 0:
            return []
        end = self.clock()
        at: dict[float, dict[str, list[dict[str, Any]]]] = {}
        try:
            counted, _warnings = self.client.query(
                f"count({promql.history_queries(self.config.selector)['util_gpu']})")
            found = samples(counted)
            cards = int(found[0][1]) if found else 0
            points = min(HISTORY_POINTS, budget // max(cards, 1))
            if points < MIN_HISTORY_POINTS:
                return []
            step = max(seconds / points, 1.0)
            for name, expr in promql.history_queries(self.config.selector).items():
                matrix, _warnings = self.client.query_range(expr, end - seconds, end, step)
                for series in matrix:
                    if not isinstance(series, dict) or not isinstance(series.get("values"),
                                                                      list):
                        continue
                    for point in series["values"][: HISTORY_POINTS * 2]:
                        if isinstance(point, list) and len(point) == 2 \
                                and isinstance(point[0], (int, float)):
                            at.setdefault(float(point[0]), {}).setdefault(name, []).append(
                                {"metric": series.get("metric"), "value": point})
        except PromError:
            return []
        out = []
        for when in sorted(at)[:-1]:  # the newest point is the live query's
            out += [snap for snap in pivot(at[when], when, math.inf, self._names,
                                           texts=self._texts) if snap.gpus]
        return out

    async def run(self, interval: float, emit: Callable[[HostSnapshot], None]) -> None:
        import asyncio  # the dashboard's stream only: a one-shot never loads it

        self._wake = asyncio.Event()
        if self.history_s:
            for snap in await asyncio.to_thread(self.backfill, self.history_s):
                emit(snap)
        while not self._closed:
            started = time.monotonic()
            snapshots = await asyncio.to_thread(self.poll)
            if self._closed:
                break
            for snap in self.news(snapshots):
                emit(snap)
            delay = max(0.0, self.backoff(interval) - (time.monotonic() - started))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            if not self._closed:
                self._wake.clear()  # woken by focus(): the next wait is a whole one

    def news(self, snapshots: list[HostSnapshot]) -> list[HostSnapshot]:
        """The snapshots that say something new: a host not scraped again since the last
        refresh (the dashboard refreshes every 2 s, Prometheus scrapes every 15 to 60) is
        the same reading, and counting it again would skew the history and cost the app
        a pass over every host."""
        out = []
        for snap in snapshots:
            key = (snap.time, snap.state, snap.error, snap.host == self.focused)
            if self._sent.get(snap.host) != key:
                self._sent[snap.host] = key
                out.append(snap)
        return out

    async def close(self) -> None:
        self._closed = True
        if self._wake is not None:
            self._wake.set()
