"""Issue 26's numbers: `gputop --prometheus` at 1,000 hosts x 8 GPUs, a real Prometheus.

    .venv/bin/python bench/bench_prometheus_scale.py [--hosts 1000] [--runs 5]
        [--url URL] [--compare OTHER_TREE]

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


def timed(args: list[str], keep: bool = False,
          root: Path = ROOT) -> tuple[float, float, float, int, str]:
    """wall s, CPU s and peak RSS MB of one fresh `gputop` process (the one in ``root``),
    its exit status, and its output if ``keep`` (else read and dropped: a parent that
    grows would pass its size on to the next child's peak RSS at fork)."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gputop.cli", *args], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, "COLUMNS": "160"})
    out = b""
    assert proc.stdout is not None
    while piece := proc.stdout.read(1 << 16):
        if keep:
            out += piece
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode,
            out.decode(errors="replace"))


_DASHBOARD = """
import asyncio, resource, sys, time
from gputop.config import PrometheusConfig
from gputop.sources import promql
from gputop.sources.prometheus import PrometheusFeed
from gputop.ui.app import GputopApp

url, host, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
polls = []  # (started, ended, hosts sent on to the app, all sent so far)
done = []  # when each poll's last host was applied in the app

class Timed(PrometheusFeed):
    def poll(self):
        started = time.perf_counter()
        try:
            return super().poll()
        finally:
            self._started = started

    def news(self, snapshots):
        out = super().news(snapshots)
        total = (polls[-1][3] if polls else 0) + len(out)
        polls.append((self._started, time.perf_counter(), len(out), total))
        if not out:
            done.append(time.perf_counter())
        return out

feed = Timed(url, PrometheusConfig(), 30.0, view=promql.OVERVIEW, history_s=600.0)  # as opener.py
app = GputopApp([feed], interval=2.0, me="bench")
apply, applied = app._apply_result, [0]

def counted(result, **kw):
    apply(result, **kw)
    applied[0] += 1
    if any(p[3] == applied[0] and p[2] for p in polls):
        done.append(time.perf_counter())

app._apply_result = counted

async def main():
    async with app.run_test(size=(160, 50)) as pilot:
        while len(done) < 1:
            await pilot.pause(0.1)
        app.show_host(host)  # the dashboard opens one host: read in full from now on
        first = len(done)
        used = resource.getrusage(resource.RUSAGE_SELF)
        while len(done) < first + rounds:
            await pilot.pause(0.1)
        now = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (now.ru_utime - used.ru_utime + now.ru_stime - used.ru_stime) / rounds
        # A refresh: from its first query to its last new host applied in the app.
        pairs = list(zip(polls, done))[-rounds:]
        took = [d - p[0] for p, d in pairs]
        print(len(feed.hosts), " ".join(f"{t:.3f}" for t in took),
              " ".join(f"{p[1] - p[0]:.3f}" for p, _d in pairs),
              " ".join(str(p[2]) for p, _d in pairs), f"{cpu:.3f}",
              resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)

asyncio.run(main())
"""


_HISTORY = """
import dataclasses, gc, sys, tracemalloc
from gputop.analysis.history import History
from gputop.config import PrometheusConfig
from gputop.sources import promql
from gputop.sources.prometheus import PrometheusFeed

feed = PrometheusFeed(sys.argv[1], PrometheusConfig(), 60.0, view=promql.OVERVIEW)
history = History(600)
for snap in feed.poll():
    history.add(dataclasses.replace(snap, time=1000.0))
gc.collect()
tracemalloc.start()  # the next readings' records are allocated while traced
before = tracemalloc.get_traced_memory()[0]
for n in (1, 2):
    for snap in feed.poll():
        history.add(dataclasses.replace(snap, time=1000.0 + n))
del snap
gc.collect()
print((tracemalloc.get_traced_memory()[0] - before) / 2 / 1e6)
"""


def compare(url: str, other: Path, runs: int) -> None:
    """The one-shots of ``other`` and of this tree in turn: on a shared machine whose
    load swings, pairs taken together compare where medians taken minutes apart do not."""
    print(f"| one-shot, CPU s (rusage) | {other} | {ROOT} |")
    print("|---|---|---|")
    for label, cmd in (("--once", ["--once"]), ("check", ["check"])):
        cpu: dict[Path, list[float]] = {other: [], ROOT: []}
        for _ in range(runs):
            for root in (other, ROOT):
                cpu[root].append(timed(["--prometheus", url, *cmd], root=root)[1])
        print(f"| `gputop --prometheus URL {label}`, median (min) of {runs} | "
              + " | ".join(f"{statistics.median(v):.3f} ({min(v):.3f})"
                           for v in cpu.values()) + " |")
    load = os.getloadavg()
    print(f"\nload average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (2 cores)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--url", default="",
                        help="a Prometheus already scraping promgen.py's hosts")
    parser.add_argument("--compare", type=Path, default=None, metavar="TREE",
                        help="another checkout (e.g. main's): time its one-shots and "
                        "this tree's in turn, one run each, --runs pairs")
    args = parser.parse_args()
    if shutil.which("prometheus") is None:
        raise SystemExit("prometheus not installed: bash scripts/ensure-prometheus.sh")
    tmp = Path(tempfile.mkdtemp(prefix="gputop-bench-prom-"))
    proc, exporters = None, None
    if args.url:
        url = args.url
    else:
        proc, url, exporters = start(args.hosts, tmp)
    try:
        if args.compare is not None:
            compare(url, args.compare.resolve(), args.runs)
            return
        series = _count(url, '{__name__=~"DCGM_.+|gputop_.+"}')
        print(f"| {args.hosts} hosts x {GPUS} GPUs, {series} series in Prometheus | "
              "wall (median) | CPU (median) | peak RSS | exit |")
        print("|---|---|---|---|---|")
        results = {}
        for label, cmd in (("--once", ["--once"]), ("--json", ["--json"]),
                           ("check", ["check"])):
            runs = [timed(["--prometheus", url, *cmd], keep=label == "check")
                    for _ in range(args.runs)]
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
        n, *times, cpu, rss = dash.stdout.split()
        refresh = [float(t) for t in times[:args.runs]]
        polls = [float(t) for t in times[args.runs:2 * args.runs]]
        sent = [int(t) for t in times[2 * args.runs:]]
        print(f"| dashboard refresh, query to the app's state (overview + {host_name(3)} in "
              f"full), {n} hosts, {min(sent)}-{max(sent)} scraped anew per refresh | "
              f"{statistics.median(refresh):.2f} s (max {max(refresh):.2f}; the queries "
              f"alone {statistics.median(polls):.2f} s) | {float(cpu):.2f} s per refresh | "
              f"{int(rss)} MB | |")
        # The dashboard's history (analysis/history.py) keeps every new reading of a host
        # for its window: what the few refreshes above do not show.
        kept = float(subprocess.run([sys.executable, "-c", _HISTORY, url], cwd=ROOT,
                                    capture_output=True, text=True, timeout=600).stdout)
        print(f"| dashboard history, per reading of every host | | | {kept:.1f} MB "
              f"({kept * 40:.0f} MB over the 10-minute window at a 15 s scrape) | |")
        once = results["--once"]
        met = (once[0] <= 2 and once[1] <= 0.5 and max(refresh) <= 2
               and max(r[2] for r in results.values()) <= 150)
        load = os.getloadavg()
        print(f"\n`check` lines naming XID 79: {xids}; load average {load[0]:.1f} "
              f"{load[1]:.1f} {load[2]:.1f} (2 cores)")
        print(f"targets (--once <= 2 s wall, <= 0.5 s CPU; refresh <= 2 s; RSS <= 150 MB): "
              f"{'met' if met else 'MISSED'}")
    finally:
        if proc is not None and exporters is not None:
            proc.terminate()
            proc.wait(30)
            exporters.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
