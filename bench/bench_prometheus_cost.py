"""Issue 40.7's number: Prometheus's own CPU per open dashboard, 1,000 hosts x 8 GPUs.

    .venv/bin/python bench/bench_prometheus_cost.py [--hosts 1000] [--seconds 60]
        [--url URL] [--tree OTHER_TREE ...] [--rounds 3]

Debian's prometheus scrapes bench/promgen.py's generated exporters every 15 s (or
``--url`` names one already doing so).  Then, in turn: nothing but the scrapes (the
baseline), and for each tree (this one, then every ``--tree``) one dashboard's feed in a
child process, as the dashboard runs it (sources/opener.py: the overview of every host,
one host opened and read in full, a refresh asked every second, ``model.
DEFAULT_INTERVAL_S``), each for ``--seconds``.  Prometheus's CPU is its own
``process_cpu_seconds_total``, read before and after each window; a dashboard's cost is
its window's CPU minus the baseline's, as a share of one core.  ``--rounds`` repeats the
sequence (baseline, trees) so that a load that swings on a shared machine hits all
alike; medians are reported.  Goal: under 10 % of a core per dashboard.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_prometheus_scale import start
from promgen import host_name

ROOT = Path(__file__).resolve().parents[1]

_DASHBOARD = """
import asyncio, sys
from gputop.config import PrometheusConfig
from gputop.model import DEFAULT_INTERVAL_S
from gputop.sources import promql
from gputop.sources.prometheus import PrometheusFeed

url, host = sys.argv[1], sys.argv[2]
feed = PrometheusFeed(url, PrometheusConfig(), 30.0, view=promql.OVERVIEW)
feed.focus(host)
print("polling", flush=True)
asyncio.run(feed.run(DEFAULT_INTERVAL_S, lambda snap: None))
"""


def prometheus_cpu(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("process_cpu_seconds_total "):
                return float(line.split()[1])
    raise SystemExit("Prometheus does not export process_cpu_seconds_total")


def window(url: str, seconds: float, tree: Path | None) -> float:
    """Prometheus's CPU seconds per wall second over ``seconds``, with one dashboard of
    ``tree`` open (None: none)."""
    child = None
    if tree is not None:
        child = subprocess.Popen([sys.executable, "-c", _DASHBOARD, url, host_name(3)],
                                 cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert child.stdout is not None
        child.stdout.readline()  # started: its first refresh is in the window
    try:
        before, started = prometheus_cpu(url), time.monotonic()
        time.sleep(seconds)
        return (prometheus_cpu(url) - before) / (time.monotonic() - started)
    finally:
        if child is not None:
            child.send_signal(signal.SIGTERM)
            child.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default="", help="a Prometheus scraping promgen.py's hosts")
    parser.add_argument("--tree", action="append", type=Path, default=[],
                        help="another checkout (e.g. main's) to measure after this one")
    args = parser.parse_args()
    proc = exporters = None
    if args.url:
        url = args.url
    else:
        proc, url, exporters = start(args.hosts, Path(tempfile.mkdtemp(prefix="gputop-cost-")))
    trees: list[Path | None] = [None, ROOT, *(t.resolve() for t in args.tree)]
    shares: dict[Path | None, list[float]] = {t: [] for t in trees}
    try:
        for _ in range(args.rounds):
            for tree in trees:
                shares[tree].append(window(url, args.seconds, tree))
    finally:
        if proc is not None and exporters is not None:
            proc.terminate()
            proc.wait(30)
            exporters.close()
    base = statistics.median(shares[None])
    print(f"| {args.hosts} hosts x 8 GPUs, {args.seconds:g} s windows, median of "
          f"{args.rounds} | Prometheus CPU (share of a core) | one dashboard's cost |")
    print("|---|---|---|")
    print(f"| scrapes alone | {base:.1%} | |")
    for tree in trees[1:]:
        with_one = statistics.median(shares[tree])
        print(f"| one dashboard of {tree} | {with_one:.1%} | {with_one - base:.1%} |")
    load = os.getloadavg()
    print(f"\nload average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
          f"({os.cpu_count()} cores); goal: under 10 % of a core per dashboard")


if __name__ == "__main__":
    main()
