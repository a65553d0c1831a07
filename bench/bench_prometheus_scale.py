"""Issue 26's numbers: `gputop --prometheus` at 1,000 hosts x 8 GPUs, a real Prometheus.

    .venv/bin/python bench/bench_prometheus_scale.py [--hosts 1000] [--runs 5]
        [--url URL] [--compare OTHER_TREE]

Debian's prometheus scrapes bench/promgen.py's generated exporters (dcgm-exporter's
default counters and labels, about 200,000 series at 1,000 hosts); then, in fresh
processes, `gputop --prometheus URL --once`, `--json` and `check` are timed (wall, CPU
of the child, its peak RSS), and the dashboard's refresh (the feed's poll in the
dashboard's view with one host opened, in a child process) is timed per refresh.
Targets: --once <= 2 s wall and <= 0.5 s CPU, a dashboard refresh <= 2 s, RSS <= 150 MB.

    .venv/bin/python bench/bench_prometheus_scale.py --url URL --steady [--tree /other/checkout]

``--steady``: the dashboard's memory once its history window is full.  One poll of the
overview view gives 1,000 real snapshots; the app (headless, 160x50, one host opened) is
then fed ``--minutes`` of readings of every host at ``--scrape`` seconds apart (15 s:
the Prometheus and dcgm-exporter default), as fast as they are analysed, each card's
changing numbers (utilization, memory, temperature...) drawn anew every reading, as on a
working site.  RSS after the first reading, with the window full, and after two more
minutes; then three real polls of Prometheus (their decoding is in the peak RSS); each
tree (this one, then every ``--tree``) in a fresh process, back to back.
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

from compiled import compiled_copy
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
    """wall s, CPU s and peak RSS MB of one fresh `gputop` process (the one in ``root``,
    byte-compiled as installed), its exit status, and its output if ``keep`` (else read
    and dropped: a parent that grows would pass its size on to the next child's peak RSS
    at fork)."""
    tree = compiled_copy(root)
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gputop.cli", *args], cwd=tree,
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
# Traced from the start: a history that refers to the newest reading (as the columns do)
# frees the one before, which must count too.
tracemalloc.start()
marks = []
for n in range(5):
    for snap in feed.poll():
        history.add(dataclasses.replace(snap, time=1000.0 + n))
    del snap
    gc.collect()
    marks.append(tracemalloc.get_traced_memory()[0])
print((marks[-1] - marks[1]) / (len(marks) - 2) / 1e6)
"""


_STEADY = """
import asyncio, dataclasses, gc, random, resource, sys, time
from pathlib import Path
import gputop
from gputop.config import Config, PrometheusConfig
from gputop.sources import promql
from gputop.sources.prometheus import PrometheusFeed
from gputop.ui.app import GputopApp

url, host, scrape, minutes = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
# what changes reading to reading on a working card; the rest stays as polled
CHANGING = ("util_gpu", "util_mem", "mem_used", "temp", "temp_memory", "power_draw",
            "energy_mj", "clock_sm", "clock_mem", "prof_tensor_active", "prof_dram_active",
            "prof_pcie_tx_bytes", "prof_pcie_rx_bytes", "pcie_tx_kbs", "pcie_rx_kbs", "fan")

def rss():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0

def vary(value, rng):
    if type(value) is int:
        return max(0, value + rng.randrange(-3, 4) * max(1, value // 50))
    return value * (1 + (rng.random() - 0.5) / 10)

def reading(snaps, t, rng):
    for snap in snaps:
        gpus = tuple(dataclasses.replace(g, **{f: vary(getattr(g, f), rng) for f in CHANGING
                                               if getattr(g, f) is not None})
                     for g in snap.gpus)
        yield dataclasses.replace(snap, time=t, gpus=gpus)

class Clock:
    now = 0.0
    def __call__(self):
        return self.now

feed = PrometheusFeed(url, PrometheusConfig(), 60.0, view=promql.OVERVIEW)
polled = [s for s in feed.poll() if s.ok]
cards = sum(len(s.gpus) for s in polled)
clock, rng = Clock(), random.Random(26)
app = GputopApp(config=Config(), clock=clock, me="bench")
t0 = time.time()
marks = []

async def main():
    async with app.run_test(size=(160, 50)) as pilot:
        readings = int(minutes * 60 / scrape) + 1 + int(120 / scrape)
        full = int(minutes * 60 / scrape) + 1  # the window holds this many
        for n in range(readings):
            clock.now = t0 + n * scrape
            started = time.process_time()
            for snap in reading(polled, clock.now, rng):
                app._apply_result(app.analyser(snap), publish=False)
            if n == 0:
                app.show_host(host)
            app.state_changed.publish(app.state)
            app.dashboard.refresh_view()
            await pilot.pause()
            took = time.process_time() - started
            if n in (0, full - 1, readings - 1):
                gc.collect()
                marks.append((n + 1, rss(), took))
        # then real refreshes: the feed's queries and their decoding come on top
        for k in range(1, 4):
            clock.now += scrape
            for snap in feed.poll():
                snap = dataclasses.replace(snap, time=clock.now)
                app._apply_result(app.analyser(snap), publish=False)
            app.state_changed.publish(app.state)
            await pilot.pause()
    first, window, last = marks
    per = (window[1] - first[1]) / (window[0] - first[0]) * 1024 * 1024
    print(gputop.__file__, len(polled), cards, *first, *window, *last, per,
          resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)

asyncio.run(main())
"""


def steady(url: str, trees: list[str], scrape: float, minutes: float) -> None:
    """The dashboard's RSS with its history window full, per tree (see the docstring)."""
    print(f"| tree | hosts x cards | RSS after 1 reading | after {minutes:g} min "
          f"(window full) | 2 min later | per reading of every host | peak, with 3 real "
          f"polls after | CPU per reading |")
    print("|---|---|---|---|---|---|---|---|")
    for tree in trees:
        env = {**os.environ, "PYTHONPATH": tree}
        done = subprocess.run([sys.executable, "-c", _STEADY, url, host_name(3), str(scrape),
                               str(minutes)], cwd=tree, env=env, capture_output=True,
                              text=True, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
        where, hosts, cards, *rest = done.stdout.split()
        _n1, r1, _c1, n2, r2, c2, _n3, r3, c3, per, peak = map(float, rest)
        print(f"| {Path(where).parents[1]} | {hosts} x {int(cards) / int(hosts):g} | "
              f"{r1:.0f} MiB | {r2:.0f} MiB ({n2:.0f} readings) | {r3:.0f} MiB | "
              f"{per / 1e6:.2f} MB | {peak:.0f} MiB | {c2:.2f}-{c3:.2f} s |", flush=True)
    load = os.getloadavg()
    print(f"\nscrape every {scrape:g} s, a {minutes:g}-minute window; load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (2 cores)")
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
    parser.add_argument("--steady", action="store_true",
                        help="only the dashboard's RSS with its history window full")
    parser.add_argument("--tree", action="append", default=[],
                        help="--steady: another checkout to measure after this one")
    parser.add_argument("--scrape", type=float, default=15.0,
                        help="--steady: seconds between two readings of a host")
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="--steady: the history window (history_minutes)")
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
        if args.steady:
            steady(url, [str(ROOT), *args.tree], args.scrape, args.minutes)
            return
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
