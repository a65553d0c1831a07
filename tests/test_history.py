"""History: series, streaks and first-seen times over hand-built snapshots."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from gputop.analysis.history import History, ProcessSample
from gputop.model import HOST_UNREACHABLE, Gpu, GpuProcess, HostSnapshot, error_snapshot

GIB = 1 << 30


def snap(t: float, procs: list[GpuProcess] = (), util: int | None = 50, host: str = "h1",
         temp: int | None = 60) -> HostSnapshot:
    gpus = (Gpu(index=0, util_gpu=util, temp=temp, mem_used=GIB, mem_total=4 * GIB),
            Gpu(index=1, util_gpu=10, temp=40))
    return HostSnapshot(host=host, time=t, gpus=gpus, processes=tuple(procs), cpu_percent=t)


def proc(pid: int = 100, ticks: int = 7, gpu: int = 0, mem: int | None = 2 * GIB,
         sm: int | None = 0, state: str = "S") -> GpuProcess:
    return GpuProcess(pid=pid, gpu=gpu, start_ticks=ticks, gpu_mem=mem, sm_util=sm, state=state)


def idle(s: ProcessSample) -> bool:
    return s.sm_util == 0 and (s.gpu_mem or 0) >= GIB


def test_gpu_series_in_order_skips_none_and_trims_to_window() -> None:
    h = History(seconds=10)
    for t in range(20):
        h.add(snap(float(t), util=None if t == 15 else t))
    series = h.gpu_series("h1", 0, "util_gpu")
    assert [t for t, _ in series] == [9, 10, 11, 12, 13, 14, 16, 17, 18, 19]
    assert series[-1] == (19.0, 19)
    # properties work too
    assert h.gpu_series("h1", 0, "mem_percent")[-1] == (19.0, 25.0)
    assert h.gpu_series("h1", 1, "temp")[0] == (9.0, 40)
    assert h.gpu_series("other", 0, "util_gpu") == []
    # only the tail since a time: the same samples as filtering the whole series
    assert h.gpu_series("h1", 0, "util_gpu", since=14.5) == [(16.0, 16), (17.0, 17),
                                                             (18.0, 18), (19.0, 19)]
    assert h.gpu_series("h1", 0, "util_gpu", since=0.0) == series
    assert h.gpu_series("other", 0, "util_gpu", since=0.0) == []


def test_host_series_and_latest_time() -> None:
    h = History(seconds=5)
    for t in range(3):
        h.add(snap(float(t)))
    assert h.host_series("h1", "cpu_percent") == [(0.0, 0.0), (1.0, 1.0), (2.0, 2.0)]
    assert h.latest_time("h1") == 2.0
    assert h.hosts() == ["h1"]


def test_process_on_two_gpus_is_one_series_mem_summed_util_highest() -> None:
    h = History()
    h.add(snap(1.0, [proc(gpu=0, mem=GIB, sm=10), proc(gpu=1, mem=3 * GIB, sm=30)]))
    assert h.process_series("h1", 100, 7, "gpu_mem") == [(1.0, 4 * GIB)]
    assert h.process_series("h1", 100, 7, "sm_util") == [(1.0, 30)]
    with pytest.raises(ValueError):
        h.process_series("h1", 100, 7, "no_such_field")


def test_streak_starts_at_first_sample_of_unbroken_idle_run() -> None:
    h = History()
    h.add(snap(0.0, [proc(sm=50)]))
    for t in range(1, 6):
        h.add(snap(float(t), [proc(sm=0)]))
    assert h.process_streak("h1", 100, 7, idle) == 1.0
    # a busy sample ends the run; the next idle sample starts a new one
    h.add(snap(6.0, [proc(sm=5)]))
    assert h.process_streak("h1", 100, 7, idle) is None
    h.add(snap(7.0, [proc(sm=0)]))
    assert h.process_streak("h1", 100, 7, idle) == 7.0


def test_streak_broken_when_process_missing_from_an_ok_snapshot() -> None:
    h = History()
    h.add(snap(0.0, [proc()]))
    h.add(snap(1.0, []))  # NVML did not list it
    assert h.process_streak("h1", 100, 7, idle) is None  # absent in the latest
    h.add(snap(2.0, [proc()]))
    assert h.process_streak("h1", 100, 7, idle) == 2.0


def test_unreachable_snapshot_neither_breaks_nor_adds() -> None:
    h = History()
    h.add(snap(0.0, [proc()]))
    h.add(error_snapshot("h1", 1.0, HOST_UNREACHABLE, "no route"))
    h.add(snap(2.0, [proc()]))
    assert h.process_streak("h1", 100, 7, idle) == 0.0
    assert [t for t, _ in h.gpu_series("h1", 0, "util_gpu")] == [0.0, 2.0]


def test_pid_reuse_is_a_different_process() -> None:
    h = History()
    h.add(snap(0.0, [proc(ticks=7)]))
    h.add(snap(1.0, [proc(ticks=9)]))
    assert h.first_seen("h1", 100, 7) == 0.0
    assert h.first_seen("h1", 100, 9) == 1.0
    assert h.process_streak("h1", 100, 7, idle) is None
    assert h.process_streak("h1", 100, 9, idle) == 1.0


def test_long_idle_run_kept_in_process_window_beyond_gpu_window() -> None:
    h = History(seconds=60, process_seconds=3600)
    for t in range(0, 2000):
        h.add(snap(float(t), [proc()]))
    assert h.process_streak("h1", 100, 7, idle) == 0.0
    assert len(h.gpu_series("h1", 0, "util_gpu")) == 61
    # an idle run with identical values is stored as one run, yet the series is exact
    series = h.process_series("h1", 100, 7, "sm_util")
    assert len(series) == 2000 and series[0] == (0.0, 0) and series[-1] == (1999.0, 0)


def test_streak_never_claims_more_than_the_process_window() -> None:
    h = History(seconds=100)
    for t in range(300):
        h.add(snap(float(t), [proc()]))
    assert h.process_streak("h1", 100, 7, idle) == 199.0
    assert h.process_samples("h1", 100, 7)[0].time == 199.0


def test_process_forgotten_after_window_first_seen_none() -> None:
    h = History(seconds=10)
    h.add(snap(0.0, [proc()]))
    for t in range(1, 20):
        h.add(snap(float(t)))
    assert h.first_seen("h1", 100, 7) is None
    assert h.process_series("h1", 100, 7, "gpu_mem") == []


def test_late_older_snapshot_is_ignored() -> None:
    h = History()
    h.add(snap(5.0, [proc()]))
    h.add(snap(3.0, []))
    assert h.process_streak("h1", 100, 7, idle) == 5.0


def test_gpu_streak_for_health_rules() -> None:
    h = History()
    temps = [60, 90, 91, 92]
    for t, temp in enumerate(temps):
        h.add(snap(float(t), temp=temp))

    def hot(g: Gpu) -> bool:
        return (g.temp or 0) >= 85

    assert h.gpu_streak("h1", 0, hot) == 1.0
    assert h.gpu_streak("h1", 1, hot) is None
    assert h.gpu_streak("h1", 7, hot) is None


def test_hosts_are_independent() -> None:
    h = History()
    h.add(snap(0.0, [proc()], host="a"))
    for t in range(1, 4):
        h.add(snap(float(t), [], host="b"))
        h.add(snap(float(t), [proc()], host="a"))
    assert h.process_streak("a", 100, 7, idle) == 0.0
    assert h.process_streak("b", 100, 7, idle) is None


def test_concurrent_writer_thread_and_readers() -> None:
    h = History(seconds=50)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for t in range(400):
                h.add(snap(float(t), [proc(pid=p, sm=t % 3) for p in range(20)]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    w = threading.Thread(target=write)
    w.start()
    reads = 0
    while w.is_alive():
        h.gpu_series("h1", 0, "util_gpu")
        h.process_series("h1", 3, 7, "sm_util")
        h.process_streak("h1", 3, 7, idle)
        reads += 1
    w.join()
    assert not errors
    assert reads > 0
    assert len(h.process_series("h1", 3, 7, "sm_util")) == 51


def test_runs_left_over_between_trims_never_leak_out_of_the_window() -> None:
    h = History(seconds=10)
    # 21 samples: the last trim walk ran at sample 16, so old runs are still stored
    for t in range(21):
        h.add(snap(float(t), [proc(sm=t % 2)] if t < 9 else [proc(pid=200)]))
    assert h.process_series("h1", 100, 7, "sm_util") == []
    assert h.process_samples("h1", 100, 7) == []
    assert h.process_streak("h1", 100, 7, lambda s: True) is None
    assert h.first_seen("h1", 100, 7) is None
    assert h.process_streak("h1", 200, 7, lambda s: True) == 10.0


def test_busy_process_is_compacted_but_idle_streak_stays_exact() -> None:
    from gputop.analysis import history as hist

    h = History(seconds=60, process_seconds=3600)
    for t in range(1500):
        sm = 30 + t % 7 if t < 1000 else 0  # busy, always changing; then idle
        h.add(snap(float(t), [proc(sm=sm)]))
    runs = h._procs["h1"][("h1", 100, 7)]
    busy_runs = (1000 - 0) // hist.MERGE_SAMPLES + 1
    assert len(runs) <= busy_runs + hist.FINE_SAMPLES
    assert len(runs) < 400  # not one per sample
    assert h.process_streak("h1", 100, 7, idle) == 1000.0
    series = h.process_series("h1", 100, 7, "sm_util")
    assert len(series) == 1500  # still one point per observed sample
    # merged samples show the highest utilization of what they merged
    assert max(v for t, v in series if t < 1000) == 36
    assert all(v == 0 for t, v in series if t >= 1000)


def test_compaction_keeps_the_highest_memory_utilization() -> None:
    h = History(seconds=60, process_seconds=3600)
    for t in range(400):
        busy = dataclasses.replace(proc(sm=30 + t % 7), mem_util=10 + t % 5)
        h.add(snap(float(t), [busy]))
    series = h.process_series("h1", 100, 7, "mem_util")
    assert len(series) == 400
    old = [(t, v) for t, v in series if t < 200]  # long merged by now
    assert old and max(v for _, v in old) == 14
    # a merged sample is never below what was observed at its time, and merging happened
    assert all(v >= 10 + int(t) % 5 for t, v in old)
    assert sum(v != 10 + int(t) % 5 for t, v in old) > len(old) // 2


def test_compaction_never_makes_a_process_look_idler() -> None:
    h = History(seconds=60, process_seconds=3600)
    for t in range(400):
        # zero SM throughout, memory dips below the idle floor once, early on
        mem = GIB // 2 if t == 50 else 2 * GIB
        h.add(snap(float(t), [proc(sm=0, mem=mem)]))
    # the dip breaks the idle run; merging keeps the lowest memory, so it still does
    assert h.process_streak("h1", 100, 7, idle) is not None
    assert h.process_streak("h1", 100, 7, idle) > 50.0


def test_cpu_and_rss_are_kept_and_an_idle_kernel_stays_a_few_runs() -> None:
    from gputop.analysis import history as hist

    h = History(seconds=60, process_seconds=3600)
    for t in range(1500):
        # an idle kernel: GPU side still, CPU flickering between 0.0 and 0.4 % and its RSS
        # moving by a few KiB, as a real one's does
        p = dataclasses.replace(proc(sm=0), cpu_percent=0.4 * (t % 2),
                                rss=(900 << 20) + 4096 * (t % 3))
        h.add(snap(float(t), [p]))
    samples = h.process_samples("h1", 100, 7)
    assert len(samples) == 1500
    assert {s.cpu_percent for s in samples} == {0} and {s.rss for s in samples} == {900 << 20}
    assert len(h._procs["h1"][("h1", 100, 7)]) <= 2  # one run, not one per sample

    # a process whose CPU % really moves: kept per sample while fine, the highest when
    # merged, and the old merged runs no more than the GPU side alone would make
    h = History(seconds=60, process_seconds=3600)
    for t in range(1500):
        p = dataclasses.replace(proc(sm=0), cpu_percent=float(10 * (t % 4)), rss=1 << 30)
        h.add(snap(float(t), [p]))
    series = h.process_series("h1", 100, 7, "cpu_percent")
    assert len(series) == 1500
    assert [v for _, v in series[-8:]] == [10 * (t % 4) for t in range(1492, 1500)]
    assert all(v == 30 for t, v in series if t < 1000)  # merged: the highest, never less
    # (runs settle every TRIM_EVERY samples)
    assert len(h._procs["h1"][("h1", 100, 7)]) <= hist.FINE_SAMPLES + hist.TRIM_EVERY + 2
    assert h.process_series("h1", 100, 7, "rss")[-1] == (1499.0, 1 << 30)
