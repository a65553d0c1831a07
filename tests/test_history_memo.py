"""History's series reuse what the last read of the same series computed (issue 27; the
properties' columns in analysis/columnar.py): every read equals a walk over the snapshots
fed, while samples are added, trimmed, missing and asked for with windows that move, grow
and shrink."""

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
    fed: list[HostSnapshot] = []
    t = 1_000.0
    for n in range(600):
        t += rng.choice([0.25, 1.0, 2.0, 7.0])
        snap = _snap(t, rng)
        history.add(snap)
        fed.append(snap)
        kept = [s for s in fed if s.time >= t - 60]
        reach = rng.choice([30.0, 60.0, 90.0, 180.0])
        for gpu in (0, 1):
            for field in ("util_gpu", "mem_percent"):
                got = history.gpu_series("h", gpu, field, t - reach)
                want = [(s.time, v) for s in kept if s.time >= t - reach for g in s.gpus
                        if g.index == gpu for v in [getattr(g, field)] if v is not None]
                assert got == want, (n, gpu, field, reach)
        want_host = [(s.time, s.cpu_percent) for s in kept]
        assert history.host_series("h", "cpu_percent") == want_host, n
    assert len(history.gpu_series("h", 0, "mem_percent", t - 60)) > 10
