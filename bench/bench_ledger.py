"""The usage ledger's costs: recording CPU and RSS, size per GPU-year, and
`gputop report --since 30d` over a 30-day ledger.

    .venv/bin/python bench/bench_ledger.py [record|size|report|share|all]

record: the simulator's 8 GPUs x 200 processes (every process's SM % wanders, so no
  sample merges: the worst case), 360 intervals at 10 s of simulated time; CPU of the
  ledger's write per interval (warnings included, the collector excluded: it is
  bench_collector.py's) as % of one core at 10 s, and the peak RSS of a process that
  collects and records.
size: a typical mix on 2 GPUs for 7 days at 10 s (raw retention): per GPU, a training
  job (SM % wandering 30-95 %) for 18 h of each day, a new pid every 6 h, and a notebook
  kernel holding 12 GiB at 0 % SM for two days at a time; then the raw samples are
  expired, leaving the week's hourly rollups; the GPU-year is the first (7 days raw and
  rollups) + 358 days of rollups, after VACUUM.
report: a 30-day ledger of 8 GPUs x 200 processes written straight into the tables
  (30 days of hourly rollups, per process and per holder, the last 7 days also raw at
  10 s, every sample its own row), then
  `gputop report --since 30d --format json` as a subprocess, median of 3.
share: 70 days (ten 7-day half-lives, all fair share reads) of hourly rollups of 8 GPUs
  x 200 processes of 17 users; what a waiting `gputop run` reads once a minute
  (share_usage.uses, i.e. query.charged_seconds from now - 70 d) and `gputop quota`'s
  week (query.quota_hours), in-process, median of 5.
"""

from __future__ import annotations

import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from gputop.analysis.pipeline import Settings, warnings_once
from gputop.ledger import store
from gputop.ledger.writer import Recorder, expire_raw
from gputop.model import HostSnapshot
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector

GIB = 1 << 30
DAY = 86400
START = 1_800_000_000.0 - 1_800_000_000.0 % 3600


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def bench_record(tmp: str) -> None:
    clock = Clock(START)
    nvml = sim.SimNvml(sim.synthetic_scenario(8, 200), clock=clock)
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="bench", demo=True, clock=clock)
    recorder = Recorder(store.open_writer(os.path.join(tmp, "rec.sqlite")), 10.0, GIB)
    settings = Settings()
    cpu = []
    for _ in range(360):
        snap = HostSnapshot.from_dict(collector.collect())
        t0 = time.process_time()
        recorder.record(snap, warnings_once(snap, settings, None, snap.time))
        cpu.append(time.process_time() - t0)
        clock.now += 10.0
    med = statistics.median(cpu)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("| measure | value | target |\n|---|---|---|")
    print(f"| ledger write per interval, 8 GPUs x 200 processes, median | {med * 1000:.2f} ms | |")
    print(f"| ... as CPU at a 10 s interval | {100 * med / 10:.3f} % of one core | < 1 % |")
    print(f"| ... with the collector (bench_collector.py: ~4.6 ms) | "
          f"{100 * (med + 0.0046) / 10:.3f} % of one core | < 1 % |")
    print(f"| peak RSS of this process (collect + record) | {rss:.1f} MB | < 30 MB |")


def _typical(nvml: sim.SimNvml, hour: int, gpus: int) -> None:
    for gpu in range(gpus):
        train = 100_000 + gpu * 10_000 + hour // 6  # a new pid every 6 h
        if hour % 6 == 0:
            nvml.remove_process(train - 1)
            if hour % 24 < 18:
                nvml.add_process(train, f"user{gpu}", "python train.py", {gpu: 40_000},
                                 (30, 95), age=1)
        kernel = 200_000 + gpu * 10_000 + hour // 48
        if hour % 48 == 0:
            nvml.remove_process(kernel - 1)
            nvml.add_process(kernel, f"user{gpu + 1}", "python -m ipykernel_launcher",
                             {gpu: 12_288}, (0, 0), age=1)


def _size(path: str) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.close()
    return os.path.getsize(path)


def bench_size(tmp: str) -> None:
    gpus, days = 2, 7
    clock = Clock(START)
    nvml = sim.SimNvml(sim.synthetic_scenario(gpus, 0), clock=clock)
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="size", demo=True, clock=clock)
    path = os.path.join(tmp, "size.sqlite")
    recorder = Recorder(store.open_writer(path), 10.0, GIB)
    started = time.perf_counter()
    for tick in range(days * DAY // 10):
        if tick % 360 == 0:
            _typical(nvml, tick // 360, gpus)
        recorder.record(HostSnapshot.from_dict(collector.collect()))
        clock.now += 10.0
    recorder.conn.close()
    raw = _size(path)
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT (SELECT COUNT(*) FROM gpu_samples),"
                        " (SELECT COUNT(*) FROM proc_samples)").fetchone()
    conn.close()
    conn = store.open_writer(path)
    expire_raw(conn, clock.now + 3600)
    conn.close()
    hourly = _size(path)
    year = (raw + hourly * (365 - days) / days) / gpus
    print(f"simulated {days} days of {gpus} GPUs in {time.perf_counter() - started:.0f} s; "
          f"raw rows: {rows[0]} GPU, {rows[1]} process")
    print("| measure | value | target |\n|---|---|---|")
    print(f"| a week, raw and rollups, per GPU | {raw / gpus / 1e6:.2f} MB | |")
    print(f"| the same week, rollups only, per GPU | {hourly / gpus / 1e6:.3f} MB | |")
    print(f"| GPU-year (7 d raw + 358 d hourly) | {year / 1e6:.1f} MB | < 50 MB |")
    print(f"| GPU-year if every sample stayed raw | {raw / gpus * 365 / days / 1e6:.0f} MB | |")


def _hourly_ledger(path: str, now: float, days: int) -> sqlite3.Connection:
    """A fresh ledger at path: 8 GPUs x 200 processes, hourly rollups for the last days."""
    store.open_writer(path).close()
    conn = sqlite3.connect(path)
    first_hour, last_hour = int((now - days * DAY) // 3600), int(now // 3600) + 1
    conn.execute("INSERT INTO hosts VALUES (1, 'bench')")
    conn.executemany("INSERT INTO gpus VALUES (?, 1, ?, ?, 'H100', ?)",
                     [(g + 1, g, f"GPU-{g}", 80 * GIB) for g in range(8)])
    conn.executemany("INSERT INTO procs VALUES (?, 1, ?, 1, ?, NULL, 'python x.py')",
                     [(p + 1, 10_000 + p, f"user{p % 17}") for p in range(200)])
    conn.executemany(
        "INSERT INTO gpu_hourly VALUES (?, ?, 3600, 1800, 600, 90000, 360000, ?, 70)",
        [(g + 1, h, 40 * GIB) for g in range(8) for h in range(first_hour, last_hour)])
    conn.executemany(
        "INSERT INTO proc_hourly VALUES (?, ?, ?, 3600, 1800, 600, 72000, ?, ?)",
        [(p + 1, p % 8 + 1, h, 3600.0 * GIB, GIB) for p in range(200)
         for h in range(first_hour, last_hour)])
    # The per-holder rollups (schema 2) as the recorder would have kept them.
    conn.execute("INSERT INTO holder_hourly" + store.HOLDERS_FROM_PROCS)
    return conn


def bench_report(tmp: str) -> None:
    path = os.path.join(tmp, "month.sqlite")
    now = time.time()
    raw_from = now - 7 * DAY
    conn = _hourly_ledger(path, now, 30)
    for tick in range(7 * DAY // 10):
        t = raw_from + 10 * tick
        hour = int(t // 3600)
        conn.executemany("INSERT INTO gpu_samples VALUES (?, ?, ?, ?, 1, 10, 'ok', ?, ?, 300,"
                         " 60, 1)", [(g + 1, hour, t, t, tick % 100, 40 * GIB) for g in range(8)])
        conn.executemany("INSERT INTO proc_samples VALUES (?, ?, ?, ?, ?, 1, 10, ?, ?)",
                         [(p + 1, p % 8 + 1, hour, t, t, GIB + tick % 7, (tick + p) % 50)
                          for p in range(200)])
    conn.commit()
    conn.close()
    size = os.path.getsize(path) / 1e6
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gputop.cli", "report", "--db", path,
                        "--since", "30d", "--format", "json"], check=True,
                       stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
    print("| measure | value | target |\n|---|---|---|")
    print(f"| 30-day ledger, 8 GPUs x 200 processes ({size:.0f} MB, raw rows never merged) |"
          f" report --since 30d: {statistics.median(walls):.2f} s | < 2 s |")


def bench_share(tmp: str) -> None:
    from gputop.ledger import query, share_usage

    path = os.path.join(tmp, "share.sqlite")
    now = time.time()
    conn = _hourly_ledger(path, now, 70)
    conn.commit()
    conn.close()

    def median(fn: Callable[[], object]) -> float:
        walls = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            walls.append(time.perf_counter() - t0)
        return statistics.median(walls)

    def week() -> None:
        reader = store.open_reader(path)
        try:
            query.quota_hours(reader, now - 7 * DAY, now)
        finally:
            reader.close()

    size = os.path.getsize(path) / 1e6
    print("| measure | value | target |\n|---|---|---|")
    print(f"| fair share's read, 70 days x 8 GPUs x 200 processes ({size:.0f} MB) |"
          f" {median(lambda: share_usage.uses(path, now - 70 * DAY)):.3f} s"
          " | < 1 s (once a minute per waiting run) |")
    print(f"| `gputop quota`'s week of the same ledger | {median(week):.3f} s | < 1 s |")


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in (("record", bench_record), ("size", bench_size),
                         ("report", bench_report), ("share", bench_share)):
            if which in (name, "all"):
                fn(tmp)


if __name__ == "__main__":
    main()
