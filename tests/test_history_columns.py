"""The column-kept GPU and host history (analysis/columnar.py) reads what a plain walk over
the snapshots fed reads: random feeds with gaps, unreachable and late snapshots, cards
appearing and disappearing, fields that start varying late, change type, go None, NaN,
MIG devices and workloads, windows asked for that move, grow and shrink."""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

import pytest

from gputop.analysis.history import History
from gputop.model import (
    GPU_LOST,
    GPU_OK,
    HOST_UNREACHABLE,
    Gpu,
    HostSnapshot,
    MigDevice,
    Workload,
    error_snapshot,
)

GIB = 1 << 30
FIELDS = ("util_gpu", "mem_used", "mem_total", "temp", "power_draw", "state", "fans",
          "clock_event_reasons", "mig_devices", "workloads", "ecc_volatile_corrected",
          "persistence_mode", "name", "energy_mj")
PROPERTIES = ("mem_percent", "mem_free", "mig_free_slices", "jobs_label")
HOST_FIELDS = ("cpu_percent", "mem_available", "mem_total", "load", "time", "queue",
               "state", "hostname")


class Reference:
    """What the history should hold: the accepted snapshots, walked whole on every read."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.kept: dict[str, list[HostSnapshot]] = {}

    def add(self, snap: HostSnapshot) -> None:
        if not snap.ok:
            return
        kept = self.kept.setdefault(snap.host, [])
        if kept and snap.time < kept[-1].time:
            return
        kept.append(snap)

    def _window(self, host: str, since: float | None) -> list[HostSnapshot]:
        kept = self.kept.get(host, [])
        if not kept:
            return []
        low = kept[-1].time - self.seconds
        if since is not None:
            low = max(low, since)
        return [s for s in kept if s.time >= low]

    def gpu_series(self, host: str, gpu: int, field: str,
                   since: float | None) -> list[tuple[float, Any]]:
        return [(s.time, v) for s in self._window(host, since) for g in s.gpus
                if g.index == gpu for v in [getattr(g, field)] if v is not None]

    def host_series(self, host: str, field: str) -> list[tuple[float, Any]]:
        return [(s.time, v) for s in self._window(host, None)
                for v in [getattr(s, field)] if v is not None]

    def gpu_streak(self, host: str, gpu: int, predicate: Any) -> float | None:
        start = None
        for s in reversed(self._window(host, None)):
            card = s.gpu(gpu)
            if card is None or not predicate(card):
                break
            start = s.time
        return start


def same(got: list[tuple[float, Any]], want: list[tuple[float, Any]]) -> bool:
    """Equal, of the same types, NaN equal to NaN: the reprs match."""
    return repr(got) == repr(want)


def _mig(rng: random.Random, card: int) -> tuple[MigDevice, ...]:
    if rng.random() < 0.5:
        return ()
    return tuple(MigDevice(gpu=card, index=i, gi=i, profile=rng.choice(["1g.10gb", "2g.20gb"]),
                           mem_used=rng.choice([GIB, 2 * GIB]), mem_total=10 * GIB,
                           sm_active=rng.choice([None, 0, 50]))
                 for i in range(rng.randrange(1, 4)))


def _gpu(rng: random.Random, index: int, n: int) -> Gpu:
    late = n > 150  # fields constant for a while, then varying: the switch mid-window
    return Gpu(
        index=index,
        name="NVIDIA H100 80GB HBM3",
        state=GPU_LOST if rng.random() < 0.03 else GPU_OK,
        util_gpu=rng.choice([None, rng.randrange(101), rng.randrange(101)]),
        mem_used=rng.choice([None, rng.randrange(80) * GIB, 1 << 70]) if rng.random() < 0.5
        else rng.randrange(80) * GIB,
        mem_total=rng.choice([80 * GIB, 0, None]) if late else 80 * GIB,
        temp=rng.randrange(30, 90) if late else 40,
        power_draw=rng.choice([None, 312.5, 400.25, 300, math.nan, rng.random() * 700]),
        fans=rng.choice([(), (30,), (30, 31), (rng.randrange(100),)]),
        clock_event_reasons=rng.choice([None, (), ("sw_power_cap",), ("sw_power_cap",)]),
        mig_devices=_mig(rng, index),
        workloads=rng.choice([(), (Workload(kind="slurm", id=str(rng.randrange(3))),)]),
        ecc_volatile_corrected=rng.choice([0, 0, 0, 1]) if late else 0,
        persistence_mode=rng.choice([True, False, None, 1]) if late else True,
        energy_mj=10**12 + n * 1000,
    )


def _snap(rng: random.Random, host: str, t: float, n: int) -> HostSnapshot:
    cards = tuple(_gpu(rng, i, n) for i in range(4) if rng.random() > (0.3 if i == 3 else 0.05))
    return HostSnapshot(host=host, time=t, gpus=cards, cpu_percent=rng.random() * 100,
                        hostname=rng.choice(["node1", "node1", None]),
                        mem_total=64 * GIB, mem_available=rng.randrange(64) * GIB,
                        load=rng.choice([None, (1.0, 2.0, 3.0)]))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_read_equals_a_walk_over_what_was_fed(seed: int) -> None:
    rng = random.Random(seed)
    seconds = rng.choice([30.0, 60.0])
    history = History(seconds=seconds, process_seconds=rng.choice([seconds, 300.0]))
    ref = Reference(seconds)
    t = {"a": 1_000.0, "b": 5_000.0}
    seen = 0
    for n in range(400):
        host = rng.choice(["a", "a", "b"])
        t[host] += 45.0 if rng.random() < 0.02 else rng.choice([0.0, 0.25, 1.0, 2.0, 7.0])
        roll = rng.random()
        if roll < 0.05:
            snap = error_snapshot(host, t[host], HOST_UNREACHABLE, "no route")
        elif roll < 0.08:
            snap = _snap(rng, host, t[host] - 3.0, n)  # late: older than the newest
        else:
            snap = _snap(rng, host, t[host], n)
        history.add(snap)
        ref.add(snap)
        for _ in range(3):
            read = rng.choice(["a", "b"])
            gpu = rng.randrange(5)
            field = rng.choice(FIELDS + PROPERTIES)
            since = rng.choice([None, t[read] - rng.choice([0.0, 5.0, 20.0, 45.0, 90.0])])
            got = history.gpu_series(read, gpu, field, since)
            seen += len(got)
            assert same(got, ref.gpu_series(read, gpu, field, since)), (n, gpu, field, since)
        # the same window every refresh, as the panels ask: properties come from their memo
        for gpu in range(4):
            since = t["a"] - 20.0
            assert same(history.gpu_series("a", gpu, "mem_percent", since),
                        ref.gpu_series("a", gpu, "mem_percent", since)), n
        field = rng.choice(HOST_FIELDS)
        assert same(history.host_series(host, field), ref.host_series(host, field)), (n, field)

        def hot(g: Gpu) -> bool:
            return g.state == GPU_OK and (g.util_gpu or 0) > 10

        gpu = rng.randrange(4)
        assert history.gpu_streak(host, gpu, hot) == ref.gpu_streak(host, gpu, hot), n
    assert seen > 2000  # the reads were of real windows, not mostly empty ones


def test_a_card_gone_keeps_its_samples_within_the_window_only() -> None:
    history = History(seconds=10, process_seconds=100)
    ref = Reference(10)
    for t in range(200):
        gpus = (Gpu(index=0, util_gpu=t % 100),) + ((Gpu(index=1, util_gpu=7),) if t < 50
                                                    else ())
        snap = HostSnapshot(host="h", time=float(t), gpus=gpus)
        history.add(snap)
        ref.add(snap)
    assert history.gpu_series("h", 1, "util_gpu") == [] == ref.gpu_series("h", 1, "util_gpu",
                                                                           None)
    assert 1 not in history._gpus["h"]  # its columns went with its last sample
    assert history.gpu_series("h", 0, "util_gpu") == ref.gpu_series("h", 0, "util_gpu", None)


def test_unknown_field_is_an_attribute_error_and_no_samples_read_nothing() -> None:
    history = History()
    assert history.gpu_series("h", 0, "no_such_field") == []
    history.add(HostSnapshot(host="h", time=1.0, gpus=(Gpu(index=0),)))
    with pytest.raises(AttributeError):
        history.gpu_series("h", 0, "no_such_field")
    # the bulk of a snapshot is no host series: the GPUs and processes have their own
    for bulk in ("gpus", "processes", "topology", "device_holders"):
        with pytest.raises(AttributeError):
            history.host_series("h", bulk)


def test_a_steady_card_costs_its_varying_numbers_only() -> None:
    history = History(seconds=600)
    rng = random.Random(5)
    gpu = Gpu(index=0, name="NVIDIA H100", uuid="GPU-1", mem_total=80 * GIB, temp=40,
              clock_event_reasons=("sw_power_cap",))
    for t in range(600):
        history.add(HostSnapshot(host="h", time=float(t), gpus=(dataclasses.replace(
            gpu, util_gpu=rng.randrange(101), mem_used=rng.randrange(80) * GIB,
            clock_event_reasons=("sw_power_cap",)),)))
    window = history._gpus["h"][0]
    # two 8-byte columns and the sequence numbers: about 24 bytes a reading
    assert window.nbytes() <= 601 * 24 * 1.2
    assert history.gpu_series("h", 0, "clock_event_reasons")[0] == (0.0, ("sw_power_cap",))
