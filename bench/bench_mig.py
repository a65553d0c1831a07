"""Issue 19: CPU per collect of a MIG node, and how much of it is ours.

    .venv/bin/python bench/bench_mig.py [--rounds 100]

8 H100 cards, each split into 7x 1g.10gb with GPM, 10 processes per MIG device (560).
"sim" is the time inside the simulated NVML and /proc (timing proxy of bench_collector);
"ours" = total - sim.  Target: ours < 10 ms per refresh.  The same processes on cards
without MIG are the baseline: the difference is what MIG reading costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_collector import Clock, Timed, cpu_per_collect

from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector

TARGET_MS = 10.0
CARDS, SLOTS, PER_SLOT = 8, 7, 10


def scenario(mig: bool) -> sim.Scenario:
    gpus = [{"mig": mig, "gpm": mig, "mig_devices": ["1g.10gb"] * SLOTS if mig else []}
            for _ in range(CARDS)]
    procs = []
    for n in range(CARDS * SLOTS * PER_SLOT):
        card, slot = divmod(n // PER_SLOT, SLOTS)
        procs.append({"pid": 4_000_000 + n, "user": f"u{n % 13}", "cmdline": f"python job{n}.py",
                      "gpus": {card: 900}, "util": [5, 15], **({"mig": slot} if mig else {})})
    return sim.scenario_from_dict({"name": "bench-mig", "model": {"name": "NVIDIA H100 80GB HBM3"},
                                   "gpus": gpus, "processes": procs})


def measure(mig: bool, rounds: int) -> tuple[float, float]:
    clock = Clock()
    nvml = sim.SimNvml(scenario(mig), clock=clock)
    procs = sim.SimProcs(nvml)
    plain = nvml_collector(nvml, procs, demo=True, clock=clock)
    total = statistics.mean(cpu_per_collect(plain, clock, rounds, False, [0.0]))
    spent = [0.0]
    timed = nvml_collector(Timed(nvml, spent), Timed(procs, spent), demo=True, clock=clock)
    cpu_per_collect(timed, clock, rounds, False, spent)
    return total, spent[0] * 1000 / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    opts = parser.parse_args()
    print(f"{'case':<34} {'total ms':>9} {'sim ms':>8} {'ours ms':>8} {'target':>8}")
    for mig in (True, False):
        total, sim_ms = measure(mig, opts.rounds)
        ours = max(total - sim_ms, 0.0)
        case = f"{CARDS} cards x {SLOTS} MIG x {PER_SLOT} procs" if mig else \
            f"{CARDS} cards, same {CARDS * SLOTS * PER_SLOT} procs, no MIG"
        print(f"{case:<34} {total:>9.2f} {sim_ms:>8.2f} {ours:>8.2f} "
              f"{'< ' + str(TARGET_MS) if mig else '':>8}")


if __name__ == "__main__":
    main()
