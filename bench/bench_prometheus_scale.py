"""Issue 26's numbers: `gputop --prometheus` at 1,000 hosts x 8 GPUs, a real Prometheus.

    .venv/bin/python bench/bench_prometheus_scale.py [--hosts 1000] [--runs 5]

Debian's prometheus scrapes bench/promgen.py's generated exporters (dcgm-exporter's
default counters and labels, about 200,000 series at 1,000 hosts); then, in fresh
processes, `gputop --prometheus URL --once`, `--json` and `check` are timed (wall, CPU
of the child, its peak RSS), and the dashboard's refresh (the feed's poll in the
dashboard's view with one host opened, in a child process) is timed per refresh.
Targets: --once <= 2 s wall and <= 0.5 s CPU, a dashboard refresh <= 2 s, RSS <= 150 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from promgen import GPUS, Exporters, host_name

ROOT = Path(__file__).resolve().parents[1]


def _instant(url: str, expr: str) -> list[dict]:
    data = urllib.parse.urlencode({"query": expr}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=60) as response:
        return list(json.load(response)["data"]["result"])


def _count(url: str, expr: str) -> int:
    found = _instant(url, f"count({expr})")
    return int(float(found[0]["value"][1])) if found else 0


def start(hosts: int, tmp: Path) -> tuple[subprocess.Popen[bytes], str, Exporters]:
    exporters = Exporters(hosts)
    config = tmp / "prometheus.yml"
    config.write_text(exporters.scrape_config())
    port = exporters.port + 1 if exporters.port < 65000 else 19090
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 600
    while True:
        try:
            if _count(url, "DCGM_FI_DEV_GPU_UTIL") >= hosts * GPUS \
                    and _count(url, "up == 0") >= 1:
                break
        except OSError:
            pass
        if time.monotonic() > end:
            raise SystemExit("Prometheus never scraped every generated host")
        time.sleep(2)
    return proc, url, exporters


def timed(args: list[str]) -> tuple[float, float, float, int, str]:
    """wall s, CPU s and peak RSS MB of one fresh `gputop` process, its exit status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gputop.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "160"})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss / 1024, done.returncode, done.stdout


_DASHBOARD = """
import resource, sys, time
from gputop.config import PrometheusConfig
from gputop.sources import promql
from gputop.sources.prometheus import PrometheusFeed
feed = PrometheusFeed(sys.argv[1], PrometheusConfig(), 30.0, view=promql.SUMMARY)
feed.focus(sys.argv[2])
out = []
for _ in range(int(sys.argv[3])):
    t0 = time.perf_counter()
    snaps = feed.poll()
    out.append(time.perf_counter() - t0)
print(len(snaps), " ".join(f"{t:.3f}" for t in out),
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("prometheus") is None:
        raise SystemExit("prometheus not installed: bash scripts/ensure-prometheus.sh")
    tmp = Path(tempfile.mkdtemp(prefix="gputop-bench-prom-"))
    proc, url, exporters = start(args.hosts, tmp)
    try:
        series = _count(url, '{__name__=~"DCGM_.+|gputop_.+"}')
        print(f"| {args.hosts} hosts x {GPUS} GPUs, {series} series in Prometheus | "
              "wall (median) | CPU (median) | peak RSS | exit |")
        print("|---|---|---|---|---|")
        results = {}
        for label, cmd in (("--once", ["--once"]), ("--json", ["--json"]),
                           ("check", ["check"])):
            runs = [timed(["--prometheus", url, *cmd]) for _ in range(args.runs)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            rss = max(r[2] for r in runs)
            results[label] = (wall, cpu, rss, runs[-1])
            print(f"| `gputop --prometheus URL {' '.join(cmd)}` | {wall:.2f} s | "
                  f"{cpu:.2f} s | {rss:.0f} MB | {runs[-1][3]} |")
        check_out = results["check"][3][4]
        xids = check_out.count("XID 79")
        dash = subprocess.run([sys.executable, "-c", _DASHBOARD, url, host_name(3),
                               str(args.runs)], cwd=ROOT, capture_output=True, text=True,
                              timeout=600)
        n, *times, rss = dash.stdout.split()
        refresh = [float(t) for t in times]
        print(f"| dashboard refresh (summary + host {host_name(3)} in full), {n} hosts | "
              f"{statistics.median(refresh):.2f} s (max {max(refresh):.2f}) | | "
              f"{int(rss)} MB | |")
        once = results["--once"]
        met = (once[0] <= 2 and once[1] <= 0.5 and max(refresh) <= 2
               and max(r[2] for r in results.values()) <= 150)
        print(f"\n`check` lines naming XID 79: {xids}")
        print(f"targets (--once <= 2 s wall, <= 0.5 s CPU; refresh <= 2 s; RSS <= 150 MB): "
              f"{'met' if met else 'MISSED'}")
    finally:
        proc.terminate()
        proc.wait(30)
        exporters.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
