"""process_streak with a key remembers its answer: asked every tick (with gaps), it gives
the streak an exact sample-by-sample walk of what was fed gives, however long it runs."""

from __future__ import annotations

import random

import pytest

from gputop.analysis.history import FINE_SAMPLES, MERGE_SAMPLES, History, ProcessSample
from gputop.model import HOST_UNREACHABLE, GpuProcess, HostSnapshot, error_snapshot

GIB = 1 << 30
WINDOW = 400.0


def idle(s: ProcessSample) -> bool:
    return s.sm_util == 0 and (s.gpu_mem or 0) >= GIB


def quiet(s: ProcessSample) -> bool:
    return s.sm_util is not None and s.sm_util <= 10


def exact_start(fed: list[tuple[float, tuple[int, int] | None]], now: float,
                predicate: object) -> float | None:
    """The streak's start from the test's own record: (time, (sm, mem) or None if absent)."""
    start = None
    for t, values in reversed(fed):
        if t < now - WINDOW:
            break
        if values is None:
            break
        sm, mem = values
        if not predicate(ProcessSample(t, mem, sm, 0, "S", None, None)):  # type: ignore[operator]
            break
        start = t
    return start


@pytest.mark.parametrize("seed", range(6))
def test_keyed_streak_equals_an_exact_walk_tick_by_tick(seed: int) -> None:
    rng = random.Random(seed)
    h = History(seconds=WINDOW)
    fed: list[tuple[float, tuple[int, int] | None]] = []
    sm, mem, present = 0, 2 * GIB, True
    t = 0.0
    asked = 0
    for tick in range(1600):
        t += rng.choice((0.25, 0.5, 1.0))
        if rng.random() < 0.02:
            # An unreachable host: neither breaks nor extends a streak.
            h.add(error_snapshot("h1", t, HOST_UNREACHABLE, "no route"))
            continue
        # Long stretches of the same shape, with memory wobbling around the idle floor.
        if rng.random() < 0.03:
            sm = rng.choice((0, 0, 0, 5, 40))
        if rng.random() < 0.3:
            mem = rng.choice((GIB - 1, GIB, 2 * GIB, 3 * GIB, 2 * GIB + 7))
        if rng.random() < 0.01:
            present = not present
        procs = (GpuProcess(pid=100, gpu=0, start_ticks=7, gpu_mem=mem, sm_util=sm,
                            mem_util=tick % 3, state="S"),) if present else ()
        h.add(HostSnapshot(host="h1", time=t, processes=procs))
        fed.append((t, (sm, mem) if present else None))
        if rng.random() < 0.3:
            continue  # a tick where the rule did not ask (the process held too little)
        asked += 1
        for key, predicate in (("idle", idle), ("quiet", quiet)):
            got = h.process_streak("h1", 100, 7, predicate, key=key)
            assert got == exact_start(fed, t, predicate), (seed, tick, key)
            walked = h.process_streak("h1", 100, 7, predicate)
            # The walk of merged runs never starts earlier, and at most one merge later.
            if got is None or walked is None:
                assert walked is None or got is not None
            else:
                assert got <= walked
    assert asked > 1000 and len(fed) > FINE_SAMPLES + 10 * MERGE_SAMPLES


def test_the_memo_leaves_with_the_process() -> None:
    h = History(seconds=10)
    h.add(HostSnapshot(host="h1", time=0.0, processes=(
        GpuProcess(pid=1, gpu=0, start_ticks=7, gpu_mem=2 * GIB, sm_util=0),)))
    assert h.process_streak("h1", 1, 7, idle, key="idle") == 0.0
    for i in range(1, 60):
        h.add(HostSnapshot(host="h1", time=float(i)))
    assert h.process_streak("h1", 1, 7, idle, key="idle") is None
    # The same pid and start again later is a new streak, not the remembered one.
    h.add(HostSnapshot(host="h1", time=60.0, processes=(
        GpuProcess(pid=1, gpu=0, start_ticks=7, gpu_mem=2 * GIB, sm_util=0),)))
    assert h.process_streak("h1", 1, 7, idle, key="idle") == 60.0
