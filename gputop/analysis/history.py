"""Time series of what gputop has observed: per GPU, per process, per host.

Pure and standard-library only: fed one HostSnapshot at a time (by the UI worker, by
tests), read by the dashboard's sparklines, the detail view, the orphan rules ("idle for
30 minutes") and the health rules ("throttling for 5 minutes").

Everything is counted in *observed samples*: a run of samples is unbroken only if the
process (or GPU) was present in every successive ok snapshot of its host.  A snapshot
whose host state is not ok (unreachable, stale...) carries no data and breaks nothing:
an SSH blip must not reset an idle timer, and must not extend one either (the next real
snapshot continues the run, with its own time).

Process samples are stored run-length encoded (an idle kernel holding memory for hours
is one run), so the process window can be long enough for the idle rule while the GPU
window, which keeps whole Gpu records for any field, stays short.  Beyond the last
FINE_SAMPLES samples, a process's samples are merged a few at a time (lowest memory,
highest utilization: never more idle than observed), so a busy process is cheap too.

Thread safety: ``add`` may run in a worker thread while the UI reads, so one lock guards
every public method.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from itertools import chain
from typing import Any, NamedTuple

from gputop.model import SOURCE_SIMULATED_PAST, Gpu, GpuProcess, HostSnapshot

ProcessKey = tuple[str, int, "int | None"]  # (host, pid, start_ticks)

# The process fields kept per sample; the names match GpuProcess so that a predicate
# written for a GpuProcess works on a sample too.
PROCESS_FIELDS = ("gpu_mem", "sm_util", "mem_util", "state", "cpu_percent", "rss")
_GPU_SIDE = 4  # the first four: what the idle rule and the merges' shape are about

TRIM_EVERY = 16  # samples between two tidyings of one process (drop old runs, merge)
# Process samples older than FINE_SAMPLES are merged into runs of up to MERGE_SAMPLES with
# the same coarse shape (SM zero or not, same state): a busy process then costs tens of
# runs per hour instead of thousands, and the idle rule still sees every zero-SM stretch.
FINE_SAMPLES = 120
MERGE_SAMPLES = 10


class ProcessSample(NamedTuple):
    """One observed sample of a process, merged over the GPUs it uses."""

    time: float
    gpu_mem: int | None  # bytes, summed over its GPUs
    sm_util: int | None  # percent, the highest over its GPUs
    mem_util: int | None  # the process's share of memory bandwidth, percent
    state: str | None
    cpu_percent: int | None  # whole percent (kept coarse: see _host_side)
    rss: int | None  # bytes, to the MiB


# A run of consecutive samples (by host sequence number) with identical values:
# (first seq, last seq, values).  A plain tuple of plain values, not an object: the
# garbage collector stops tracking such tuples, and with 2,000 processes of history a
# full collection over objects took 100-200 ms, in every thread, every few seconds.
_Run = tuple[int, int, tuple[Any, ...]]


class _Runs:
    """One process's runs: ``old`` ones already merged, ``fine`` ones exact.

    Runs move from ``fine`` to ``old`` once they are FINE_SAMPLES behind, merging as
    they go, so each run is merged once and a trim never rebuilds anything.
    """

    __slots__ = ("fine", "old", "streaks")

    def __init__(self) -> None:
        self.old: deque[_Run] = deque()
        self.fine: deque[_Run] = deque()
        # process_streak's answers by the caller's key: (latest seq then, start seq or
        # None); they go with the process when it leaves the window.
        self.streaks: dict[Hashable, tuple[int, int | None]] | None = None

    def __iter__(self) -> Iterator[_Run]:
        return chain(self.old, self.fine)

    def __reversed__(self) -> Iterator[_Run]:
        return chain(reversed(self.fine), reversed(self.old))

    def __bool__(self) -> bool:
        return bool(self.old) or bool(self.fine)

    def __len__(self) -> int:
        return len(self.old) + len(self.fine)

    def last(self) -> _Run:
        return self.fine[-1] if self.fine else self.old[-1]

    def add(self, seq: int, values: tuple[Any, ...]) -> None:
        ring = self.fine or self.old
        if ring:
            first, last, old_values = ring[-1]
            if last == seq - 1 and old_values == values:
                ring[-1] = (first, seq, old_values)
                return
        self.fine.append((seq, seq, values))

    def settle(self, fine_seq: int) -> None:
        """Move runs that ended before ``fine_seq`` to ``old``, merging neighbours."""
        fine, old = self.fine, self.old
        while len(fine) > 1 and fine[0][1] < fine_seq:
            run = fine.popleft()
            prev = old[-1] if old else None
            if prev is not None and _mergeable(prev, run):
                a, b = prev[2], run[2]
                merged = (_lowest(a[0], b[0]), _highest(a[1], b[1]), _highest(a[2], b[2]), a[3],
                          _highest(a[4], b[4]), _highest(a[5], b[5]))
                old[-1] = (prev[0], run[1], merged)
            else:
                old.append(run)

    def trim(self, oldest_seq: int) -> None:
        for ring in (self.old, self.fine):
            while ring and ring[0][1] < oldest_seq:
                ring.popleft()
            if ring:
                first, last, values = ring[0]
                if first < oldest_seq:
                    ring[0] = (oldest_seq, last, values)
                return


class _SeriesMemo:
    """One series as last read: its samples, the newest record's sequence number, and
    the earliest time it covers."""

    __slots__ = ("items", "low", "seq")

    def __init__(self, items: deque[tuple[float, Any]], seq: int, low: float) -> None:
        self.items, self.seq, self.low = items, seq, low


class _HostTimes:
    """Sequence number -> time of each ok snapshot of one host, within the window."""

    __slots__ = ("base", "times")

    def __init__(self) -> None:
        self.base = 0  # sequence number of times[0]
        self.times: deque[float] = deque()

    @property
    def latest(self) -> int:
        return self.base + len(self.times) - 1

    def time_of(self, seq: int) -> float:
        return self.times[seq - self.base]

    def append(self, time: float) -> int:
        self.times.append(time)
        return self.latest

    def trim(self, oldest: float) -> None:
        # Keep the newest sample even when the clock jumped: a series is never empty
        # right after a sample was added.
        while len(self.times) > 1 and self.times[0] < oldest:
            self.times.popleft()
            self.base += 1


def _merge(rows: list[GpuProcess]) -> tuple[Any, ...]:
    mems = [r.gpu_mem for r in rows if r.gpu_mem is not None]
    sms = [r.sm_util for r in rows if r.sm_util is not None]
    mus = [r.mem_util for r in rows if r.mem_util is not None]
    state = next((r.state for r in rows if r.state is not None), None)
    # CPU and RSS are the process's own, the same on every GPU row: any row says them.
    return (
        sum(mems) if mems else None,
        max(sms) if sms else None,
        max(mus) if mus else None,
        state,
        *_host_side(rows[0]),
    )


def _host_side(p: GpuProcess) -> tuple[int | None, int | None]:
    """CPU % and RSS as stored: whole percent and whole MiB, so that an idle kernel whose
    CPU reads 0.1 then 0.0 stays one run (run-length encoding is what keeps hours of an
    idle process cheap); a chart cannot show finer than that anyway."""
    cpu = None if p.cpu_percent is None else round(p.cpu_percent)
    rss = None if p.rss is None else p.rss >> 20 << 20
    return cpu, rss


class History:
    """Ring buffers of observed samples.

    ``seconds`` bounds the GPU and host series; ``process_seconds`` (default: the same)
    bounds the process samples, and so the longest streak ``process_streak`` can see.
    """

    def __init__(self, seconds: float = 600, process_seconds: float | None = None) -> None:
        self.seconds = float(seconds)
        self.process_seconds = float(process_seconds if process_seconds is not None else seconds)
        self._lock = threading.Lock()
        self._times: dict[str, _HostTimes] = {}
        self._hosts: dict[str, deque[tuple[int, HostSnapshot]]] = {}
        self._gpus: dict[tuple[str, int], deque[tuple[int, Gpu]]] = {}
        # per host, so that trimming one host's processes never walks the others'
        self._procs: dict[str, dict[ProcessKey, _Runs]] = {}
        self._first_seen: dict[ProcessKey, float] = {}
        # per host, TRIM_EVERY sets of process keys: each add tidies one of them
        self._buckets: dict[str, list[set[ProcessKey]]] = {}
        # The series read last, by (host, gpu or None, field): extended by the new samples
        # on the next read (see _memo_series).
        self._memo: dict[tuple[str, int | None, str], _SeriesMemo] = {}
        # A longer record than this window (the usage ledger, docs/ledger.md): (host, pid,
        # start_time) -> when the process's current run at 0 % SM began, or None.
        self.recorded_idle: Callable[[str, int, float | None], float | None] | None = None
        # host -> the time of its last made-up sample (--demo's seeded past): anything up
        # to then was simulated, not observed.
        self.simulated_until: dict[str, float] = {}

    # -- feeding -------------------------------------------------------------------

    def add(self, snapshot: HostSnapshot) -> None:
        if not snapshot.ok:
            return
        with self._lock:
            if snapshot.source == SOURCE_SIMULATED_PAST:
                until = self.simulated_until.get(snapshot.host, snapshot.time)
                self.simulated_until[snapshot.host] = max(until, snapshot.time)
            self._add(snapshot)

    def simulated(self, host: str, when: float) -> bool:
        """``when`` lies in the demo's made-up past of ``host``, before it was observed."""
        until = self.simulated_until.get(host)
        return until is not None and when <= until

    def _add(self, snap: HostSnapshot) -> None:
        host = snap.host
        times = self._times.get(host)
        if times is None:
            times = self._times[host] = _HostTimes()
        elif times.times and snap.time < times.times[-1]:
            # An older snapshot delivered late adds nothing we can place in order.
            return
        seq = times.append(snap.time)
        # The host ring spans the longer of the two windows: process runs need it.
        times.trim(snap.time - max(self.seconds, self.process_seconds))

        hs = self._hosts.setdefault(host, deque())
        hs.append((seq, _without_bulk(snap)))
        _trim_records(hs, times, snap.time - self.seconds)

        for gpu in snap.gpus:
            ring = self._gpus.setdefault((host, gpu.index), deque())
            ring.append((seq, gpu))
            _trim_records(ring, times, snap.time - self.seconds)

        procs_of_host = self._procs.setdefault(host, {})
        buckets = self._buckets.setdefault(host, [set() for _ in range(TRIM_EVERY)])
        rows: dict[ProcessKey, list[GpuProcess]] = {}
        for proc in snap.processes:
            rows.setdefault((host, proc.pid, proc.start_ticks), []).append(proc)
        for key, procs in rows.items():
            if len(procs) == 1:  # the common case: one GPU, nothing to merge
                p = procs[0]
                values: tuple[Any, ...] = (p.gpu_mem, p.sm_util, p.mem_util, p.state,
                                           *_host_side(p))
            else:
                values = _merge(procs)
            runs = procs_of_host.get(key)
            if runs is None:
                runs = procs_of_host[key] = _Runs()
                buckets[len(procs_of_host) % TRIM_EVERY].add(key)
                self._first_seen[key] = snap.time
            runs.add(seq, values)
        # Every run is clamped to the window when read, so tidying can wait a few
        # samples; each add tidies one TRIM_EVERY-th of the processes, so that no add
        # pays for all of them at once.
        self._trim_processes(procs_of_host, buckets[seq % TRIM_EVERY], times, snap.time)

    def _trim_processes(
        self,
        procs: dict[ProcessKey, _Runs],
        bucket: set[ProcessKey],
        times: _HostTimes,
        now: float,
    ) -> None:
        oldest_seq = _first_seq_after(times, now - self.process_seconds)
        fine_seq = times.latest - FINE_SAMPLES
        gone = []
        for key in bucket:
            runs = procs[key]
            runs.trim(oldest_seq)
            if runs:
                runs.settle(fine_seq)
            else:
                gone.append(key)
        for key in gone:
            bucket.discard(key)
            del procs[key]
            del self._first_seen[key]

    # -- reading -------------------------------------------------------------------

    def hosts(self) -> list[str]:
        with self._lock:
            return list(self._times)

    def host_series(self, host: str, field: str) -> list[tuple[float, Any]]:
        """(time, value) of a HostSnapshot field (e.g. cpu_percent); None values left out."""
        with self._lock:
            return self._memo_series((host, None, field), self._hosts.get(host, ()), None)

    def gpu_series(
        self, host: str, gpu: int, field: str, since: float | None = None
    ) -> list[tuple[float, Any]]:
        """(time, value) of a Gpu field or property (e.g. util_gpu, mem_percent).

        Samples where the value is None (not supported, GPU lost) are left out.  With
        ``since``, only samples from that time on: the ring is walked from the newest end
        and the walk stops there, so a view's per-tick cost follows what it draws, not how
        long gputop has run.
        """
        with self._lock:
            return self._memo_series((host, gpu, field), self._gpus.get((host, gpu), ()),
                                     since)

    def _memo_series(
        self, key: tuple[str, int | None, str], ring: Sequence[tuple[int, Any]],
        since: float | None,
    ) -> list[tuple[float, Any]]:
        """``_series``, read from the newest end only as far as the last read of the same
        series went: the dashboard asks for the same windows every refresh, and walking
        them whole grew its tick with the refresh rate (720 samples a series at 0.25 s).
        A read reaching further back than the last one walks the ring; call with the lock
        held."""
        host, _, field = key
        times = self._times.get(host)
        if times is None or not ring or not times.times:
            return []
        # The oldest sample the walk could return: the ring and the host's times are
        # trimmed on their own schedules.
        oldest = ring[0][0]
        first = times.time_of(oldest) if oldest >= times.base else times.times[0]
        low = max(since if since is not None else -math.inf, first)
        memo = self._memo.get(key)
        newest = ring[-1][0]
        if memo is None or low < memo.low:
            memo = self._memo[key] = _SeriesMemo(
                deque(self._series(host, ring, field, low)), newest, low)
            return list(memo.items)
        fresh = []
        for seq, record in reversed(ring):
            if seq <= memo.seq:
                break
            value = getattr(record, field)
            if value is not None:
                fresh.append((times.time_of(seq), value))
        fresh.reverse()
        items = memo.items
        items.extend(fresh)
        while items and items[0][0] < low:
            items.popleft()
        memo.seq, memo.low = newest, low
        return list(items)

    def _series(
        self,
        host: str,
        ring: Sequence[tuple[int, Any]],
        field: str,
        since: float | None = None,
    ) -> list[tuple[float, Any]]:
        """(time, value) of ``field`` over a ring of (seq, record); call with the lock held."""
        times = self._times.get(host)
        if times is None:
            return []
        out = []
        if since is not None:
            for seq, record in reversed(ring):
                if seq < times.base:
                    break
                t = times.time_of(seq)
                if t < since:
                    break
                value = getattr(record, field)
                if value is not None:
                    out.append((t, value))
            out.reverse()
            return out
        for seq, record in ring:
            if seq >= times.base:
                value = getattr(record, field)
                if value is not None:
                    out.append((times.time_of(seq), value))
        return out

    def gpu_streak(self, host: str, gpu: int, predicate: Callable[[Gpu], bool]) -> float | None:
        """Start time of the current unbroken run of GPU samples satisfying predicate.

        None if the latest snapshot of the host lacks the GPU or the predicate is false
        for it.  Bounded by ``seconds``.
        """
        with self._lock:
            ring = self._gpus.get((host, gpu))
            times = self._times.get(host)
            if not ring or times is None or ring[-1][0] != times.latest:
                return None
            start = None
            expect = times.latest
            for seq, record in reversed(ring):
                if seq != expect or not predicate(record):
                    break
                start = times.time_of(seq)
                expect = seq - 1
            return start

    def process_series(
        self, host: str, pid: int, start_ticks: int | None, field: str
    ) -> list[tuple[float, Any]]:
        """(time, value) of one of PROCESS_FIELDS for a process; None values left out.

        A process on several GPUs is one series: gpu_mem summed, utilizations the highest.
        """
        index = PROCESS_FIELDS.index(field)  # ValueError names an unknown field
        with self._lock:
            runs = self._procs.get(host, {}).get((host, pid, start_ticks), ())
            times = self._times.get(host)
            out = []
            for first, last, values in runs:
                value = values[index]
                if value is None or times is None:
                    continue
                for seq in range(max(first, times.base), last + 1):
                    out.append((times.time_of(seq), value))
            return out

    def process_samples(
        self, host: str, pid: int, start_ticks: int | None
    ) -> list[ProcessSample]:
        """Every retained sample of a process, oldest first."""
        with self._lock:
            runs = self._procs.get(host, {}).get((host, pid, start_ticks), ())
            times = self._times.get(host)
            if times is None:
                return []
            return [
                ProcessSample(times.time_of(seq), *values)
                for first, last, values in runs
                for seq in range(max(first, times.base), last + 1)
            ]

    def process_streak(
        self,
        host: str,
        pid: int,
        start_ticks: int | None,
        predicate: Callable[[ProcessSample], bool],
        key: Hashable | None = None,
    ) -> float | None:
        """Start time of the current unbroken observed run of samples satisfying predicate.

        ``predicate`` gets a ProcessSample (fields named as on GpuProcess).  None when the
        latest ok snapshot of the host does not list the process, or the predicate is
        false for its latest sample.  The run is bounded by ``process_seconds``: what
        happened before the window (or before gputop started) is not claimed.

        With ``key`` (naming the predicate: the same key must mean the same predicate),
        the answer is remembered per process and the next call with that key walks only
        the samples added since: the rules ask every tick, and walking an hour-long idle
        streak each time grew the tick with the uptime.  A remembered start is the one
        seen sample by sample, before older runs were merged (merging keeps the lowest
        memory and highest utilization, so a walk of merged runs may place the start up
        to MERGE_SAMPLES later, never earlier).
        """
        with self._lock:
            runs = self._procs.get(host, {}).get((host, pid, start_ticks))
            times = self._times.get(host)
            if not runs or times is None or runs.last()[1] != times.latest:
                return None
            memo = runs.streaks.get(key) if runs.streaks is not None and key is not None \
                else None
            start_seq = None
            expect = times.latest
            for first, last, values in reversed(runs):
                if last != expect or last < times.base:
                    break
                if memo is not None and first <= memo[0]:
                    # This run reaches what the last call saw: from here back, its answer.
                    known = memo[1]
                    if last == memo[0]:
                        start_seq = known if known is not None else start_seq
                        break
                    # The run grew past the last call's newest sample: same values.
                    if not predicate(ProcessSample(times.time_of(last), *values)):
                        break
                    start_seq = known if known is not None else max(memo[0] + 1, first)
                    break
                if not predicate(ProcessSample(times.time_of(last), *values)):
                    break
                start_seq = first
                expect = first - 1
            if key is not None:
                if runs.streaks is None:
                    runs.streaks = {}
                runs.streaks[key] = (times.latest, start_seq)
            return None if start_seq is None else times.time_of(max(start_seq, times.base))

    def first_seen(self, host: str, pid: int, start_ticks: int | None) -> float | None:
        """When gputop first observed this process; None once unseen for the process window."""
        with self._lock:
            runs = self._procs.get(host, {}).get((host, pid, start_ticks))
            times = self._times.get(host)
            if not runs or times is None or runs.last()[1] < times.base:
                return None  # not seen within the window (its runs await the next trim)
            return self._first_seen.get((host, pid, start_ticks))

    def latest_time(self, host: str) -> float | None:
        with self._lock:
            times = self._times.get(host)
            return times.times[-1] if times and times.times else None


def _coarse(values: tuple[Any, ...]) -> tuple[Any, ...]:
    sm = values[1]
    return (sm is None, sm == 0, values[3])


def _lowest(a: Any, b: Any) -> Any:
    return None if a is None or b is None else min(a, b)


def _highest(a: Any, b: Any) -> Any:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _mergeable(prev: _Run, run: _Run) -> bool:
    """Neighbours of the same coarse shape, merged into at most MERGE_SAMPLES samples.

    The merged values are the cautious ones for a rule asking "idle while holding
    memory": the lowest memory and the highest utilization of the merged samples (and
    the highest CPU % and RSS).  Runs whose GPU side is the same merge whatever their
    length: only CPU % or RSS told them apart, and an idle kernel must stay a few runs.
    """
    return (
        prev[1] + 1 == run[0]
        and _coarse(prev[2]) == _coarse(run[2])
        and (run[1] - prev[0] < MERGE_SAMPLES or prev[2][:_GPU_SIDE] == run[2][:_GPU_SIDE])
    )


def _without_bulk(snap: HostSnapshot) -> HostSnapshot:
    """Host series need only the host-level fields; do not keep every process alive."""
    return dataclasses.replace(snap, gpus=(), processes=(), topology=(), device_holders=())


def _first_seq_after(times: _HostTimes, oldest: float) -> int:
    seq = times.base
    for t in times.times:
        if t >= oldest:
            return seq
        seq += 1
    return times.latest


def _trim_records(ring: deque[tuple[int, Any]], times: _HostTimes, oldest: float) -> None:
    while ring and (ring[0][0] < times.base or times.time_of(ring[0][0]) < oldest):
        ring.popleft()
