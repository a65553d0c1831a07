"""History's series read from where the last read of the same series ended (issue 27):
every read equals a walk over the whole ring, while samples are added, trimmed, missing
and asked for with windows that move, grow and shrink."""

from __future__ import annotations

import random

from gputop.analysis.history import History
from gputop.model import Gpu, HostSnapshot


def _snap(t: float, rng: random.Random) -> HostSnapshot:
    gpus = tuple(Gpu(index=i, util_gpu=rng.choice([None, rng.randrange(101)]),
                     mem_used=rng.randrange(1, 80) << 30, mem_total=80 << 30)
                 for i in range(2) if rng.random() > 0.1)  # a card missing now and then
    return HostSnapshot(host="h", time=t, gpus=gpus, cpu_percent=rng.random() * 100)


def test_remembered_series_equal_a_walk_over_the_ring() -> None:
    rng = random.Random(27)
    history = History(seconds=60, process_seconds=120)
    fresh = History(seconds=60, process_seconds=120)  # read once per series: no memory
    t = 1_000.0
    for n in range(600):
        t += rng.choice([0.25, 1.0, 2.0, 7.0])
        snap = _snap(t, rng)
        history.add(snap)
        fresh.add(snap)
        reach = rng.choice([30.0, 60.0, 90.0, 180.0])
        for gpu in (0, 1):
            for field in ("util_gpu", "mem_percent"):
                got = history.gpu_series("h", gpu, field, t - reach)
                with fresh._lock:
                    want = fresh._series("h", fresh._gpus.get(("h", gpu), ()), field,
                                         t - reach)
                assert got == want, (n, gpu, field, reach)
        with fresh._lock:
            want_host = fresh._series("h", fresh._hosts.get("h", ()), "cpu_percent")
        assert history.host_series("h", "cpu_percent") == want_host, n
    assert len(history.gpu_series("h", 0, "mem_percent", t - 60)) > 10
