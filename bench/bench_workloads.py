"""Workload resolution for many GPU processes: cold and with nothing changed.

    .venv/bin/python bench/bench_workloads.py [--processes 2000] [--rounds 50]

A /proc-like tree in a temporary directory holds one cgroup file per pid (a mix of Slurm
v1/v2, Docker, Kubernetes and plain sessions, like tests/fixtures/cgroup); the resolver
reads it as it reads /proc.  "cold" is the first refresh (every file read and parsed),
"warm" a refresh where nothing changed (cache by pid + start time, names from the cache).
A fake squeue on PATH counts its runs over 10 simulated minutes of 1 s refreshes, with a
new job appearing every 7 s.  Targets: warm < 5 ms, cold < 50 ms, squeue <= 1 run / 30 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from gputop.sources.workload import SQUEUE_EVERY, WorkloadResolver

HEX = "d0b3604b67ac7930dd34ba3a796627e3e4717d12309e90a4afe3f38b6816ac98"
TEXTS = (
    "0::/system.slice/node_slurmstepd.scope/job_{n}/step_0/user/task_0\n",
    "11:devices:/slurm/uid_1000/job_{n}/step_batch/task_0\n10:memory:/slurm/uid_1000/"
    "job_{n}/step_batch/task_0\n1:name=systemd:/system.slice/slurmd.service\n",
    "0::/system.slice/docker-" + HEX + ".scope\n",
    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod7d4424e6_bb13_42f4_"
    "a47a_45a4828bf54d.slice/cri-containerd-" + HEX + ".scope\n",
    "0::/user.slice/user-1000.slice/session-3.scope\n",
)


def make_tree(root: Path, count: int) -> list[tuple[int, int]]:
    keys = []
    for pid in range(1000, 1000 + count):
        (root / str(pid)).mkdir()
        text = TEXTS[pid % len(TEXTS)].format(n=100 + pid % 40)
        (root / str(pid) / "cgroup").write_text(text)
        keys.append((pid, pid * 3))
    return keys


def refresh(resolver: WorkloadResolver, keys: list[tuple[int, int]]) -> None:
    found = []
    for pid, ticks in keys:
        parsed = resolver.resolve(pid, ticks)
        if parsed is not None:
            found.append(dict(parsed))
    resolver.forget_except(keys)
    resolver.name_all(found)


def squeue_runs(tmp: Path) -> tuple[int, float]:
    bindir = tmp / "bin"
    bindir.mkdir()
    script = bindir / "squeue"
    script.write_text('#!/bin/sh\necho \'{"jobs": []}\'\n')
    script.chmod(0o755)
    os.environ["PATH"] = f"{bindir}:{os.environ['PATH']}"
    now = [0.0]
    resolver = WorkloadResolver(root=str(tmp), sockets={}, clock=lambda: now[0])
    seconds = 600
    for t in range(seconds):
        now[0] = float(t)
        jobs = [{"kind": "slurm", "id": str(1 + j), "step": "0"} for j in range(t // 7 + 1)]
        resolver.name_all(jobs)
        resolver.wait()
    return resolver.slurm.runs, seconds / SQUEUE_EVERY


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        proc = tmp / "proc"
        proc.mkdir()
        keys = make_tree(proc, args.processes)
        colds, warms = [], []
        for _ in range(5):
            resolver = WorkloadResolver(root=str(proc), sockets={}, k8s_dirs=(str(tmp), str(tmp)))
            os.environ["PATH"] = "/nonexistent"  # no squeue: names stay ids here
            start = time.perf_counter()
            refresh(resolver, keys)
            colds.append(time.perf_counter() - start)
            for _ in range(args.rounds):
                start = time.perf_counter()
                refresh(resolver, keys)
                warms.append(time.perf_counter() - start)
        os.environ["PATH"] = os.defpath
        runs, allowed = squeue_runs(tmp)
    cold, warm = statistics.median(colds) * 1000, statistics.median(warms) * 1000
    print(f"{'processes':<22}{args.processes:>10}")
    print(f"{'cold refresh (ms)':<22}{cold:>10.2f}   target < 50")
    print(f"{'warm refresh (ms)':<22}{warm:>10.2f}   target < 5")
    print(f"{'squeue runs / 600 s':<22}{runs:>10}   at most {allowed:.0f} + 1")


if __name__ == "__main__":
    main()
