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

import asyncio
import base64
import contextlib
import json
import math
import random
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gputop import model
from gputop.config import PrometheusConfig
from gputop.model import (
    GPU_LOST,
    GPU_OK,
    Gpu,
    GpuProcess,
    HostSnapshot,
    Reservation,
    error_snapshot,
)
from gputop.sources import networds
from gputop.sources.feed import ReadOnlyFeed

MIB = 1024**2
MAX_BODY_BYTES = 512 * MIB  # decompressed; 1,000 hosts x 8 GPUs is about 30 MiB
MAX_SERIES = 2_000_000
MAX_LABEL_CHARS = 1024
MAX_BACKOFF_S = 60.0

SERIES = "DCGM_FI_DEV_.+|DCGM_FI_PROF_GR_ENGINE_ACTIVE|nvidia_smi_.+|gputop_.+"
_UP_TS = "gputop_up_timestamp"  # a label marking `timestamp(up)` in the one answer

SOURCE_DCGM = "dcgm-exporter"
SOURCE_SMI = "nvidia_gpu_exporter"
SOURCE_GPUTOP = "gputop serve"

WHY_READ_ONLY = ("read through Prometheus: kill and reserve need SSH to the host "
                 "(--hosts) or its gputop serve")

# (gpu field, multiplier) per series name.
_DCGM_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu", 1),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("util_mem", 1),
    "DCGM_FI_DEV_ENC_UTIL": ("util_enc", 1),
    "DCGM_FI_DEV_DEC_UTIL": ("util_dec", 1),
    "DCGM_FI_DEV_FB_USED": ("mem_used", MIB),
    "DCGM_FI_DEV_FB_FREE": ("_mem_free", MIB),
    "DCGM_FI_DEV_FB_RESERVED": ("mem_reserved", MIB),
    "DCGM_FI_DEV_GPU_TEMP": ("temp", 1),
    "DCGM_FI_DEV_POWER_USAGE": ("power_draw", 1),
    "DCGM_FI_DEV_SM_CLOCK": ("clock_sm", 1),
    "DCGM_FI_DEV_MEM_CLOCK": ("clock_mem", 1),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("remapped_correctable", 1),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("remapped_uncorrectable", 1),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("remap_failure", 1),
    "gputop_gpu_memory_total_bytes": ("mem_total", 1),
}
_SMI_FIELDS: dict[str, tuple[str, float]] = {
    "nvidia_smi_utilization_gpu_ratio": ("util_gpu", 100),
    "nvidia_smi_utilization_memory_ratio": ("util_mem", 100),
    "nvidia_smi_encoder_stats_average_fps": ("", 0),  # not a utilization: ignored
    "nvidia_smi_memory_used_bytes": ("mem_used", 1),
    "nvidia_smi_memory_total_bytes": ("mem_total", 1),
    "nvidia_smi_memory_reserved_bytes": ("mem_reserved", 1),
    "nvidia_smi_temperature_gpu": ("temp", 1),
    "nvidia_smi_power_draw_watts": ("power_draw", 1),
    "nvidia_smi_enforced_power_limit_watts": ("power_limit", 1),
    "nvidia_smi_clocks_current_sm_clock_hz": ("clock_sm", 1e-6),
    "nvidia_smi_clocks_current_memory_clock_hz": ("clock_mem", 1e-6),
    "nvidia_smi_fan_speed_ratio": ("fan", 100),
    "nvidia_smi_pstate": ("pstate", 1),
}
_FLOAT_FIELDS = frozenset({"power_draw", "power_limit"})
_BOOL_FIELDS = frozenset({"remap_failure"})
# What the overview shows; a field none of a host's GPUs has is named in `missing`.
_CORE_FIELDS = ("util_gpu", "util_mem", "mem_used", "mem_total", "temp", "power_draw",
                "clock_sm", "clock_mem", "fan")


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
    """Instant queries against one Prometheus server; errors are PromError."""

    def __init__(self, url: str, config: PrometheusConfig, timeout: float,
                 environ: dict[str, str] | None = None) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"--prometheus {url!r}: expected http://HOST:PORT or https://...")
        self.url = url.rstrip("/")
        self.name = f"prometheus {parsed.netloc}"
        self.config = config
        self.timeout = timeout
        self.environ = dict(environ) if environ is not None else None
        self.context = ssl.create_default_context(cafile=config.ca_file or None) \
            if parsed.scheme == "https" else None

    def _headers(self) -> dict[str, str]:
        import os

        environ = self.environ if self.environ is not None else dict(os.environ)
        headers = {"Accept": "application/json", "Accept-Encoding": "gzip",
                   "Content-Type": "application/x-www-form-urlencoded"}
        cfg = self.config
        token = _secret(cfg.token_env, cfg.token_file, environ)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        elif cfg.username:
            password = _secret(cfg.password_env, cfg.password_file, environ) or ""
            pair = base64.b64encode(f"{cfg.username}:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {pair}"
        return headers

    def query(self, expr: str) -> tuple[list[Any], list[str]]:
        """The result vector and the server's warnings."""
        return self._post("query", {"query": expr}, "vector")

    def query_range(self, expr: str, start: float, end: float,
                    step: float) -> tuple[list[Any], list[str]]:
        """The result matrix (``values`` per series) and the server's warnings."""
        form = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                "step": f"{step:.3f}"}
        return self._post("query_range", form, "matrix")

    def _post(self, endpoint: str, form: dict[str, str],
              kind: str) -> tuple[list[Any], list[str]]:
        body = urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/{endpoint}", data=body,
                                         headers=self._headers(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout,
                                        context=self.context) as response:
                # No name holds the body here: _decode drops it once it is text, which
                # at 1,000 hosts is 22 MiB less at the peak.
                return _decode(read_body(response), kind)
        except urllib.error.HTTPError as err:
            raise _http_error(err) from None
        except (TimeoutError, OSError) as err:
            reason = getattr(err, "reason", err)
            if isinstance(reason, TimeoutError) or "timed out" in str(reason):
                raise PromError(model.HOST_TIMEOUT,
                                f"no answer within {self.timeout:g} s") from None
            raise PromError(model.HOST_UNREACHABLE,
                            networds.url_problem(err, self.url, networds.PROMETHEUS)) from None


def read_body(response: Any) -> bytes:
    data = response.read(MAX_BODY_BYTES + 1)
    if len(data) > MAX_BODY_BYTES:
        raise PromError(model.HOST_ERROR, f"answer larger than {MAX_BODY_BYTES // MIB} MiB")
    if (response.headers.get("Content-Encoding") or "").lower() == "gzip":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = inflater.decompress(data, MAX_BODY_BYTES + 1)
        except zlib.error as err:
            raise PromError(model.HOST_ERROR, f"bad gzip answer: {err}") from None
        if len(data) > MAX_BODY_BYTES or inflater.unconsumed_tail:
            raise PromError(model.HOST_ERROR,
                            f"answer larger than {MAX_BODY_BYTES // MIB} MiB")
    return data


def _http_error(err: urllib.error.HTTPError) -> PromError:
    if err.code in (401, 403):
        return PromError(model.HOST_AUTH_FAILED, f"HTTP {err.code} {err.reason}: check the "
                         "credentials named in the config's prometheus: section")
    detail = ""
    with contextlib.suppress(Exception):
        doc = json.loads(read_body(err))
        detail = f": {doc.get('errorType', '')} {str(doc.get('error', ''))[:200]}".rstrip()
        if doc.get("errorType") == "timeout":
            return PromError(model.HOST_TIMEOUT, f"query timed out{detail}")
    return PromError(model.HOST_ERROR, f"HTTP {err.code} {err.reason}{detail}")


def _decode(raw: bytes, kind: str = "vector") -> tuple[list[Any], list[str]]:
    try:
        text = raw.decode("utf-8")
        del raw
        doc = json.loads(text)
        del text
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


# What the sparklines draw: utilization and memory, from each exporter.
HISTORY_SERIES = ("DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE|"
                  "DCGM_FI_DEV_FB_RESERVED|gputop_gpu_memory_total_bytes|"
                  "nvidia_smi_utilization_gpu_ratio|nvidia_smi_memory_used_bytes|"
                  "nvidia_smi_memory_total_bytes")
HISTORY_POINTS = 120  # per series: the sparklines' width, not the scrape resolution


def history_query(selector: str) -> str:
    inner = f", {selector}" if selector else ""
    return f'{{__name__=~"{HISTORY_SERIES}"{inner}}}'


def cluster_query(selector: str) -> str:
    """The one query of a refresh: every GPU series, ``up``, and when ``up`` was scraped."""
    inner = f", {selector}" if selector else ""
    up = f"up{{{selector}}}" if selector else "up"
    return (f'{{__name__=~"{SERIES}"{inner}}}'
            f' or label_replace(timestamp({up}), "{_UP_TS}", "1", "", "") or {up}')


# -- the pivot (pure) --------------------------------------------------------------------------


@dataclass
class _Host:
    name: str
    instances: set[str] = field(default_factory=set)
    sources: set[str] = field(default_factory=set)
    gpus: dict[str, dict[str, Any]] = field(default_factory=dict)  # uuid -> fields
    processes: list[dict[str, Any]] = field(default_factory=list)
    reservations: dict[tuple[int, str], dict[str, Any]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    gputop_up: float | None = None


def _sample(item: Any) -> tuple[dict[str, str], float] | None:
    """Labels and a finite value.  Label values are checked where they are used: a
    non-string drops its sample (see ``pivot``), text is cut to MAX_LABEL_CHARS where it
    enters a snapshot."""
    if not isinstance(item, dict):
        return None
    labels, value = item.get("metric"), item.get("value")
    if not isinstance(labels, dict) or not isinstance(value, list) or len(value) != 2:
        return None
    try:
        number = float(value[1])
    except (TypeError, ValueError):
        return None
    return (labels, number) if math.isfinite(number) else None


def _uuid(labels: dict[str, str]) -> str:
    found = labels.get("UUID", "")
    if found:
        return found
    lower = labels.get("uuid", "")  # nvidia_gpu_exporter: no "GPU-" prefix
    if lower and not lower.upper().startswith("GPU-"):
        return f"GPU-{lower}"
    return lower


def _index(text: str, digits: int = 5) -> int | None:
    return int(text) if text.isdigit() and len(text) <= digits else None


def pivot(result: list[Any], now: float, stale_after_s: float,
          known_names: dict[str, str] | None = None) -> list[HostSnapshot]:
    """One HostSnapshot per host from a ``cluster_query`` answer.  ``known_names``
    (instance -> host) remembers names across refreshes, so a dead exporter keeps its
    host's name; it is updated in place."""
    names = known_names if known_names is not None else {}
    samples = [s for s in map(_sample, result) if s is not None]
    for labels, _value in samples:
        host = labels.get("Hostname", "") or labels.get("hostname", "")
        instance = labels.get("instance", "")
        if host and instance:
            names[instance] = host
    hosts: dict[str, _Host] = {}
    up: dict[str, float] = {}
    scraped: dict[str, float] = {}

    def host_of(labels: dict[str, Any]) -> _Host:
        instance = labels.get("instance", "")
        name = (labels.get("Hostname", "") or labels.get("hostname", "")
                or names.get(instance) or instance or "unknown")[:MAX_LABEL_CHARS]
        entry = hosts.get(name)
        if entry is None:
            entry = hosts[name] = _Host(name)
        if instance:
            entry.instances.add(instance)
        return entry

    for labels, value in samples:
        metric = labels.get("__name__", "")
        if not metric:
            if labels.get(_UP_TS) == "1":
                scraped[labels.get("instance", "")] = value
            continue
        if metric == "up":
            up[labels.get("instance", "")] = value
            continue
        try:
            _take(host_of(labels), metric, labels, value)
        except (TypeError, AttributeError):
            continue  # a label that is not a string: the series is not trusted
    for instance, value in up.items():
        if value == 0 and instance not in {i for h in hosts.values() for i in h.instances}:
            host_of({"instance": instance})  # a dead exporter: its series are gone
    return [_snapshot(h, up, scraped, now, stale_after_s) for h in sorted(
        hosts.values(), key=lambda h: h.name)]


def _gpu(host: _Host, labels: dict[str, Any]) -> dict[str, Any] | None:
    uuid = _uuid(labels)[:MAX_LABEL_CHARS]
    if not uuid:
        return None
    gpu = host.gpus.get(uuid)
    if gpu is not None and "index" in gpu and "name" in gpu:
        return gpu  # identity known: the common case, once per series
    if gpu is None:
        gpu = host.gpus[uuid] = {"uuid": uuid}
    index = _index(labels.get("gpu", "")) if "gpu" in labels else _index(labels.get("index", ""))
    if index is not None:
        gpu.setdefault("index", index)
    for key, label in (("name", "modelName"), ("name", "name"), ("pci_bus_id", "pci_bus_id")):
        if label in labels and key not in gpu and labels.get(label, ""):
            gpu[key] = labels[label][:MAX_LABEL_CHARS]
    return gpu


def _take(host: _Host, metric: str, labels: dict[str, Any], value: float) -> None:
    if metric.startswith("gputop_"):
        host.sources.add(SOURCE_GPUTOP)
        _take_gputop(host, metric, labels, value)
        return
    if metric.startswith("DCGM_"):
        host.sources.add(SOURCE_DCGM)
        table = _DCGM_FIELDS
    else:
        host.sources.add(SOURCE_SMI)
        table = _SMI_FIELDS
        if metric == "nvidia_smi_gpu_info":
            _gpu(host, labels)  # its identity labels: index, name, PCI bus id
            if labels.get("driver_version", ""):
                host.facts["driver_version"] = labels["driver_version"][:MAX_LABEL_CHARS]
            return
    target = table.get(metric)
    if target is None or not target[0]:
        return
    gpu = _gpu(host, labels)
    if gpu is not None:
        gpu[target[0]] = value * target[1]


def _take_gputop(host: _Host, metric: str, labels: dict[str, Any], value: float) -> None:
    if metric == "gputop_up":
        host.gputop_up = value
    elif metric == "gputop_host_info":
        for key in ("driver_version", "cuda_version"):
            if labels.get(key, ""):
                host.facts[key] = labels[key][:MAX_LABEL_CHARS]
    elif metric == "gputop_gpu_memory_total_bytes":
        gpu = _gpu(host, labels)
        if gpu is not None:
            gpu["mem_total"] = value
    elif metric == "gputop_gpu_ok":
        gpu = _gpu(host, labels)
        if gpu is not None and value == 0:
            gpu["state"] = GPU_LOST
    elif metric in ("gputop_process_gpu_memory_bytes", "gputop_process_sm_util"):
        pid, gpu_index = _index(labels.get("pid", ""), 10), _index(labels.get("gpu", ""))
        if pid is None or gpu_index is None:
            return
        key = "gpu_mem" if metric.endswith("bytes") else "sm_util"
        for proc in host.processes:
            if proc["pid"] == pid and proc["gpu"] == gpu_index:
                proc[key] = int(value)
                return
        host.processes.append({"pid": pid, "gpu": gpu_index, key: int(value),
                               "user": labels.get("user", "")[:MAX_LABEL_CHARS] or None,
                               "command": labels.get("command", "")[:MAX_LABEL_CHARS] or None})
    elif metric in ("gputop_gpu_reserved", "gputop_gpu_reserved_until_timestamp_seconds"):
        gpu_index = _index(labels.get("gpu", ""))
        owner = labels.get("owner", "")[:MAX_LABEL_CHARS]
        if gpu_index is None or not owner:
            return
        entry = host.reservations.setdefault((gpu_index, owner), {
            "gpu": gpu_index, "user": owner, "until": 0.0, "since": 0.0,
            "gpu_uuid": labels.get("UUID", "") or None, "host": host.name})
        if metric.endswith("seconds"):
            entry["until"] = value


def _finish_gpu(raw: dict[str, Any], fallback_index: int) -> dict[str, Any]:
    gpu: dict[str, Any] = {"index": raw.get("index", fallback_index)}
    for key, value in raw.items():
        if key in ("index", "_mem_free"):
            continue
        if isinstance(value, float):
            if key in _BOOL_FIELDS:
                value = value != 0
            elif key not in _FLOAT_FIELDS:
                value = round(value)
        gpu[key] = value
    free = raw.get("_mem_free")
    if gpu.get("mem_total") is None and free is not None and gpu.get("mem_used") is not None:
        # DCGM gives used, free and reserved; together they are the card's memory.
        gpu["mem_total"] = int(gpu["mem_used"] + free + (gpu.get("mem_reserved") or 0))
    gpu.setdefault("state", GPU_OK)
    return gpu


def _snapshot(host: _Host, up: dict[str, float], scraped: dict[str, float], now: float,
              stale_after_s: float) -> HostSnapshot:
    if SOURCE_GPUTOP in host.sources:
        host.sources.discard(SOURCE_DCGM)  # gputop serve speaks DCGM's names too
    sources = sorted(host.sources) or ["up"]
    source = "prometheus: " + " + ".join(sources)
    times = [scraped[i] for i in host.instances if i in scraped]
    taken = max(times) if times else now
    dead = sorted(i for i in host.instances if up.get(i) == 0)
    if dead and not host.gpus:
        return error_snapshot(host.name, taken, model.HOST_UNREACHABLE,
                              f"exporter down (up == 0): {', '.join(dead)}", source=source)
    gpus = sorted((_finish_gpu(raw, n) for n, raw in enumerate(host.gpus.values())),
                  key=lambda g: (g["index"], g["uuid"]))
    missing = [f for f in _CORE_FIELDS if all(g.get(f) is None for g in gpus)]
    if SOURCE_GPUTOP not in host.sources:
        missing += ["processes", "reservations"]
    state, error = model.HOST_OK, None
    if dead:
        state, error = model.HOST_UNREACHABLE, f"exporter down (up == 0): {', '.join(dead)}"
    elif now - taken > stale_after_s:
        state, error = model.HOST_STALE, f"last scraped {now - taken:.0f} s ago"
    elif host.gputop_up == 0:
        state, error = model.HOST_ERROR, "gputop serve there cannot collect"
    # Built directly (every key is a field name): at 8,000 GPUs from_dict's generic
    # filtering is a third of the refresh.
    return HostSnapshot(
        host=host.name, time=taken, state=state, error=error, source=source,
        hostname=host.name, gpus=tuple(Gpu(**g) for g in gpus), missing=tuple(missing),
        processes=tuple(GpuProcess(**p) for p in host.processes),
        reservations=tuple(Reservation(**r) for r in host.reservations.values()),
        **host.facts)


# -- the feed ----------------------------------------------------------------------------------


class PrometheusFeed(ReadOnlyFeed):
    """Every host a Prometheus server knows, read-only.  ``hosts`` grows as hosts appear."""

    why = WHY_READ_ONLY

    def __init__(self, url: str, config: PrometheusConfig, timeout: float,
                 environ: dict[str, str] | None = None,
                 clock: Callable[[], float] = time.time, history_s: float = 0.0) -> None:
        super().__init__()
        self.client = PromClient(url, config, timeout, environ)
        self.history_s = history_s  # the dashboard's history window, backfilled at start
        self.config = config
        self.hosts: list[str] = []
        self.clock = clock
        self.failures = 0
        self._names: dict[str, str] = {}
        self._closed = asyncio.Event()

    def poll(self) -> list[HostSnapshot]:
        """One refresh, never raising: a failed query is one snapshot naming the server."""
        now = self.clock()
        try:
            result, warnings = self.client.query(cluster_query(self.config.selector))
        except PromError as err:
            self.failures += 1
            return [self._remember(error_snapshot(self.client.name, now, err.state,
                                                  str(err), source="prometheus"))]
        self.failures = 0
        snapshots = pivot(result, now, self.config.stale_after_s, self._names)
        if warnings:
            snapshots.append(error_snapshot(self.client.name, now, model.HOST_ERROR,
                                            "Prometheus warns: " + "; ".join(warnings),
                                            source="prometheus"))
        for snap in snapshots:
            self._remember(snap)
        return snapshots

    def _remember(self, snap: HostSnapshot) -> HostSnapshot:
        if snap.host not in self.hosts:
            self.hosts.append(snap.host)
        return snap

    def backoff(self, interval: float) -> float:
        """Seconds to the next query: the interval, doubling per failure up to a minute."""
        if not self.failures:
            return interval
        delay = min(interval * 2 ** min(self.failures, 8), MAX_BACKOFF_S)
        return delay * random.uniform(0.8, 1.0)

    def backfill(self, seconds: float) -> list[HostSnapshot]:
        """The last ``seconds`` of utilization and memory as past snapshots, oldest
        first, from one ``query_range``: the dashboard's history starts full.  A failure
        gives nothing (the live query reports the server's state)."""
        if seconds <= 0:
            return []
        end = self.clock()
        step = max(seconds / HISTORY_POINTS, 1.0)
        try:
            matrix, _warnings = self.client.query_range(
                history_query(self.config.selector), end - seconds, end, step)
        except PromError:
            return []
        at: dict[float, list[dict[str, Any]]] = {}
        for series in matrix:
            if not isinstance(series, dict) or not isinstance(series.get("values"), list):
                continue
            for point in series["values"][: HISTORY_POINTS * 2]:
                if isinstance(point, list) and len(point) == 2 \
                        and isinstance(point[0], (int, float)):
                    at.setdefault(float(point[0]), []).append(
                        {"metric": series.get("metric"), "value": point})
        out = []
        for when in sorted(at)[:-1]:  # the newest point is the live query's
            out += [snap for snap in pivot(at[when], when, math.inf, self._names)
                    if snap.gpus]
        return out

    async def run(self, interval: float, emit: Callable[[HostSnapshot], None]) -> None:
        if self.history_s:
            for snap in await asyncio.to_thread(self.backfill, self.history_s):
                emit(snap)
        while not self._closed.is_set():
            started = time.monotonic()
            snapshots = await asyncio.to_thread(self.poll)
            if self._closed.is_set():
                break
            for snap in snapshots:
                emit(snap)
            delay = max(0.0, self.backoff(interval) - (time.monotonic() - started))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closed.wait(), timeout=delay)

    async def close(self) -> None:
        self._closed.set()
