"""CPU cost of the health rules per refresh (printed as a table; not a test).

    .venv/bin/python bench/health_rules.py
"""

from __future__ import annotations

import dataclasses
import statistics
import time

from gputop.analysis import health, topology
from gputop.analysis.history import History
from gputop.model import GpuProcess, HostSnapshot
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector

ROUNDS = 300


def main() -> None:
    now = [1_764_680_000.0]
    nvml = sim.SimNvml(sim.load_scenario("dgx-h100"), clock=lambda: now[0])
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="bench", demo=True,
                          clock=lambda: now[0])
    base = HostSnapshot.from_dict(collector.collect())
    rows = []
    for count in (20, 200):
        procs = tuple(
            GpuProcess(pid=1000 + i, gpu=i % 8, gpu_mem=2 << 30, sm_util=i % 3, user="u",
                       command="python train.py", ppid=999, parent_command="bash", state="S",
                       start_ticks=i, cpu_percent=50.0)
            for i in range(count)
        )
        history = History(seconds=600, process_seconds=3600)
        th = health.Thresholds()
        tracker = health.WarningTracker()
        rules, tracked = [], []
        for k in range(ROUNDS):
            snap = dataclasses.replace(base, time=base.time + k, processes=procs)
            history.add(snap)
            t0 = time.perf_counter()
            fresh = health.warnings(snap, history, th, snap.time, "u")
            t1 = time.perf_counter()
            tracker.update(snap.host, fresh, snap.time)
            t2 = time.perf_counter()
            rules.append(t1 - t0)
            tracked.append(t2 - t1)
        rows.append((f"warnings(), 8 GPUs x {count} procs", rules))
        rows.append((f"WarningTracker.update, {count} procs", tracked))
    # The OOM trend reads each GPU's memory series: the same refresh without it.
    for label, th in (("warnings(), OOM trend off, 600 s history", health.Thresholds(
            oom_horizon_minutes=0)), ("warnings(), OOM trend on, 600 s history",
                                     health.Thresholds())):
        history = History(seconds=600)
        samples = []
        for k in range(600):
            snap = dataclasses.replace(base, time=base.time + k)
            history.add(snap)
            t0 = time.perf_counter()
            health.warnings(snap, history, th, snap.time, "u")
            if k >= 300:
                samples.append(time.perf_counter() - t0)
        rows.append((label, samples))
    topo = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        topology.render_text(base)
        topo.append(time.perf_counter() - t0)
    rows.append(("topology.render_text, 8 GPUs", topo))
    print(f"{'what':<40} {'median ms':>10} {'p95 ms':>8}")
    for name, samples in rows:
        samples.sort()
        p95 = samples[int(len(samples) * 0.95)]
        print(f"{name:<40} {statistics.median(samples) * 1e3:>10.3f} {p95 * 1e3:>8.3f}")


if __name__ == "__main__":
    main()
