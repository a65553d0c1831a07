"""What reading one probe line costs the client, per host and refresh (issue 25.9):
json.loads, the untrusted-data check (sources/untrusted.py) and HostSnapshot.from_dict,
for real probe snapshots of the simulated scenarios and for a hostile 100,000-process
line (cut to 4,096).  Printed as a table; not a test.

    .venv/bin/python bench/bench_probe_lines.py
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from gputop.model import HostSnapshot
from gputop.sources import untrusted
from gputop.sources.hostsource import open_simulation


def _ms(fn: Callable[[], Any], rounds: int) -> float:
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(rounds):
            fn()
        samples.append((time.perf_counter() - started) / rounds * 1000)
    return statistics.median(samples)


def main() -> None:
    lines: list[tuple[str, bytes, int]] = []
    for name in ("lab", "dgx-h100", "slurm"):
        source = open_simulation(name)
        source.collector.collect()
        data = source.collector.collect()
        lines.append((name, json.dumps(data, default=str).encode(), 200))
    procs = [{"pid": 1000 + i, "gpu": i % 8, "gpu_mem": 1 << 20, "user": f"u{i % 50}",
              "command": f"python train.py --rank {i}"} for i in range(100_000)]
    hostile = {"host": "h", "time": 1.0, "processes": procs,
               "gpus": [{"index": g, "mem_total": 80 << 30} for g in range(8)]}
    lines.append(("hostile: 100,000 processes", json.dumps(hostile).encode(), 3))
    print(f"{'snapshot line':<28} {'KB':>7} {'loads ms':>9} {'check ms':>9} "
          f"{'from_dict ms':>13} {'check share':>12}")
    for name, line, rounds in lines:
        data = json.loads(line, parse_constant=untrusted.json_constant)
        cleaned, _ = untrusted.clean_snapshot(data)
        loads = _ms(lambda line=line: json.loads(line, parse_constant=untrusted.json_constant),
                    rounds)
        check = _ms(lambda data=data: untrusted.clean_snapshot(data), rounds)
        build = _ms(lambda cleaned=cleaned: HostSnapshot.from_dict(cleaned), rounds)
        share = check / (loads + check + build)
        print(f"{name:<28} {len(line) / 1024:>7.0f} {loads:>9.2f} {check:>9.2f} "
              f"{build:>13.2f} {share:>11.0%}")


if __name__ == "__main__":
    main()
