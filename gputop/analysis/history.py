"""Time series of what gputop has observed: per GPU, per process, per host.

Pure and standard-library only: fed one HostSnapshot at a time (by the UI worker, by
tests), read by the dashboard's sparklines, the detail view, the orphan rules ("idle for
30 minutes") and the health rules ("throttling for 5 minutes").

Everything is counted in *observed samples*: a run of samples is unbroken only if the
process (or GPU) was present in every successive ok snapshot of its host.  A snapshot
whose host state is not ok (unreachable, stale...) carries no data and breaks nothing:
an SSH blip must not reset an idle timer, and must not extend one either (the next real
snapshot continues the run, with its own time).

GPU and host readings are kept by column (analysis/columnar.py: a field that never
changed costs nothing, a number 8 bytes a reading), so that ten minutes of 1,000 hosts x
8 GPUs take about 15 MB.  Process samples are stored run-length encoded (an idle kernel
holding memory for hours is one run), so the process window can be long enough for the
idle rule while the GPU window stays short.  Beyond the last
FINE_SAMPLES samples, a process's samples are merged a few at a time (lowest memory,
highest utilization: never more idle than observed), so a busy process is cheap too.

Thread safety: ``add`` may run in a worker thread while the UI reads, so one lock guards
every public method.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from itertools import chain
from typing import Any, NamedTuple

from gputop.analysis.columnar import Window, compact_due, layout
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


class _HostTimes:
    """Sequence number -> time of each ok snapshot of one host, within the window."""

    __slots__ = ("base", "head", "times")

    def __init__(self) -> None:
        self.base = 0  # sequence number of times[head]
        self.head = 0  # times[:head] are dropped, awaiting a shift
        self.times = array("d")

    def __bool__(self) -> bool:
        return len(self.times) > self.head

    @property
    def latest(self) -> int:
        return self.base + len(self.times) - self.head - 1

    @property
    def newest(self) -> float:
        return self.times[-1]

    def time_of(self, seq: int) -> float:
        return self.times[self.head + seq - self.base]

    def first_at(self, when: float) -> int:
        """The first sequence number whose time is ``when`` or later (latest + 1: none)."""
        return self.base + bisect_left(self.times, when, self.head) - self.head

    def of(self, seqs: array[int], low: int, high: int) -> list[float]:
        """The times of ``seqs[low:high]`` (all kept)."""
        if high <= low:
            return []
        first, last = seqs[low], seqs[high - 1]
        start = self.head - self.base
        if last - first == high - 1 - low:  # no gaps: one slice
            return self.times[start + first:start + last + 1].tolist()
        times = self.times
        return [times[start + seq] for seq in seqs[low:high]]

    def append(self, time: float) -> int:
        self.times.append(time)
        return self.latest

    def trim(self, oldest: float) -> None:
        # Keep the newest sample even when the clock jumped: a series is never empty
        # right after a sample was added.
        times = self.times
        cut = min(bisect_left(times, oldest, self.head), len(times) - 1)
        if cut > self.head:
            self.base += cut - self.head
            self.head = cut
        if compact_due(self.head, len(times)):
            del times[:self.head]
            self.head = 0


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
        self._hosts: dict[str, Window] = {}
        self._gpus: dict[str, dict[int, Window]] = {}  # host -> GPU index -> its window
        # per host, so that trimming one host's processes never walks the others'
        self._procs: dict[str, dict[ProcessKey, _Runs]] = {}
        self._first_seen: dict[ProcessKey, float] = {}
        # per host, TRIM_EVERY sets of process keys: each add tidies one of them
        self._buckets: dict[str, list[set[ProcessKey]]] = {}
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
        elif times and snap.time < times.newest:
            # An older snapshot delivered late adds nothing we can place in order.
            return
        seq = times.append(snap.time)
        # The host ring spans the longer of the two windows: process runs need it.
        times.trim(snap.time - max(self.seconds, self.process_seconds))
        first = max(times.first_at(snap.time - self.seconds), times.base)

        record = self._hosts.get(host)
        if record is None:
            record = self._hosts[host] = Window(_HOST_LAYOUT)
        record.add(snap, seq)
        record.trim(first)

        cards = self._gpus.setdefault(host, {})
        for gpu in snap.gpus:
            card = cards.get(gpu.index)
            if card is None:
                card = cards[gpu.index] = Window(_GPU_LAYOUT)
            card.add(gpu, seq)
        # Every card of the host, listed now or not: a card gone stays within the window.
        gone = []
        for index, card in cards.items():
            card.trim(first)
            if not card:
                gone.append(index)
        for index in gone:
            del cards[index]

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

    def host_series(self, host: str, field: str,
                    since: float | None = None) -> list[tuple[float, Any]]:
        """(time, value) of a HostSnapshot field (e.g. cpu_percent); None values left out;
        with ``since``, from that time on (as ``gpu_series``)."""
        with self._lock:
            return self._series(host, self._hosts.get(host), field, since)

    def gpu_series(
        self, host: str, gpu: int, field: str, since: float | None = None
    ) -> list[tuple[float, Any]]:
        """(time, value) of a Gpu field or property (e.g. util_gpu, mem_percent).

        Samples where the value is None (not supported, GPU lost) are left out.  With
        ``since``, only samples from that time on: the window is cut by bisection, so a
        view's per-tick cost follows what it draws, not how long gputop has run.  A
        property's values are computed once per sample (columnar.Window), so the same
        window asked for every refresh computes only the new samples.
        """
        with self._lock:
            return self._series(host, self._gpus.get(host, {}).get(gpu), field, since)

    def _series(self, host: str, window: Window | None, field: str,
                since: float | None) -> list[tuple[float, Any]]:
        """(time, value) of ``field`` over a window; call with the lock held."""
        times = self._times.get(host)
        if window is None or times is None or not window or not times:
            return []
        first = times.base
        if since is not None:
            first = max(first, times.first_at(since))
        low, high = window.first_at(first), len(window.seqs)
        return window.series(field, low, high, times.of(window.seqs, low, high))

    def gpu_streak(self, host: str, gpu: int, predicate: Callable[[Gpu], bool]) -> float | None:
        """Start time of the current unbroken run of GPU samples satisfying predicate.

        None if the latest snapshot of the host lacks the GPU or the predicate is false
        for it.  Bounded by ``seconds``.  The predicate gets each sample's Gpu, rebuilt
        from the columns.
        """
        with self._lock:
            window = self._gpus.get(host, {}).get(gpu)
            times = self._times.get(host)
            if not window or times is None or window.seqs[-1] != times.latest:
                return None
            start = None
            expect = times.latest
            seqs = window.seqs
            for at in range(len(seqs) - 1, window.first_at(times.base) - 1, -1):
                seq = seqs[at]
                if seq != expect or not predicate(window.record(at)):
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
            return times.newest if times else None


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


def _first_seq_after(times: _HostTimes, oldest: float) -> int:
    return min(times.first_at(oldest), times.latest)


_GPU_LAYOUT = layout(Gpu)
# Host series need only the host-level fields: the bulk is never kept (the newest
# snapshot, which the window refers to, is the one the views hold anyway).
_HOST_LAYOUT = layout(HostSnapshot, skip=("gpus", "processes", "topology", "device_holders"))
