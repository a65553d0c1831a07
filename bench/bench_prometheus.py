"""Issue 16's numbers: `gputop serve` scrape latency and CPU.

    .venv/bin/python bench/bench_prometheus.py [--scrapes 200] [--cpu-window 60]

1. serve: an exporter over a synthetic 8 GPU x 200 process host (the simulator), in a
   child process with serve's own HTTP handler; 10 scraper threads in this process each
   GET /metrics ``--scrapes`` times over keep-alive connections: p50/p95/max latency.
   Target: p95 under 5 ms.  Then the same over TLS with basic auth (--web-config-file,
   a bcrypt cost-10 user): the first scrape of a connection pays the handshake and one
   bcrypt check, the rest the cache.
2. serve CPU: the child's utime+stime over ``--cpu-window`` seconds of collecting every
   15 s with one scrape per 15 s, as a share of one core.  Target: under 1 %.
`--prometheus` at 1,000 hosts is bench/bench_prometheus_scale.py's: a real Prometheus
scraping generated exporters, per-view queries (one canned answer no longer stands in).
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import ssl
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers.prom import free_port

from gputop.analysis.pipeline import Settings
from gputop.commands import exposition as expo
from gputop.commands import serve


def _exporter_child(port: int, interval: float, ready: multiprocessing.Event,
                    web_config: str | None = None) -> None:
    from gputop.sources import sim
    from gputop.sources.feed import LocalFeed
    from gputop.sources.hostsource import nvml_collector
    from gputop.sources.identity import named_identity

    nvml = sim.SimNvml(sim.synthetic_scenario(8, 200))
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="synthetic", demo=True)
    feed = LocalFeed(collector, host="synthetic", identity=named_identity("alice"))
    exporter = serve.Exporter(feed, Settings(), expo.ExportSettings(), "alice")
    from gputop.commands import webconfig

    web = webconfig.load(web_config) if web_config else webconfig.WebConfig()
    server = serve.Server(("127.0.0.1", port), serve._handler(exporter, web), web)

    def collect() -> None:
        while True:
            started = time.monotonic()
            exporter.collect_once()
            ready.set()
            time.sleep(max(interval - (time.monotonic() - started), 0))

    threading.Thread(target=collect, daemon=True).start()
    server.serve_forever()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tls_auth(folder: Path) -> tuple[str, ssl.SSLContext, dict[str, str]]:
    """A web config with TLS and a bcrypt (cost 10, htpasswd's) user; the client's side."""
    import base64

    import bcrypt
    from helpers.tlscerts import make_pki

    pki = make_pki(folder)
    hashed = bcrypt.hashpw(b"bench", bcrypt.gensalt(10)).decode()
    web = folder / "web.yml"
    web.write_text(f"tls_server_config: {{cert_file: {pki.server_cert}, "
                   f"key_file: {pki.server_key}}}\nbasic_auth_users: {{prom: '{hashed}'}}\n")
    context = ssl.create_default_context(cafile=str(pki.ca))
    token = base64.b64encode(b"prom:bench").decode()
    return str(web), context, {"Authorization": f"Basic {token}"}


def bench_scrapes(scrapes: int, tls: bool = False) -> None:
    import tempfile

    port = free_port()
    ready = multiprocessing.Event()
    web = None
    context: ssl.SSLContext | None = None
    headers: dict[str, str] = {}
    folder = tempfile.TemporaryDirectory()
    if tls:
        web, context, headers = _tls_auth(Path(folder.name))
    child = multiprocessing.Process(target=_exporter_child, args=(port, 1.0, ready, web),
                                    daemon=True)
    child.start()
    ready.wait(60)
    latencies: list[float] = []
    size = [0]
    lock = threading.Lock()

    def scraper() -> None:
        conn: http.client.HTTPConnection
        if context is not None:
            conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        mine = []
        for _ in range(scrapes):
            start = time.perf_counter()
            conn.request("GET", "/metrics", headers=headers)
            body = conn.getresponse().read()
            mine.append(time.perf_counter() - start)
            size[0] = len(body)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=scraper) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    child.terminate()
    folder.cleanup()
    ms = sorted(x * 1000 for x in latencies)
    p95 = ms[int(len(ms) * 0.95) - 1]
    how = ", TLS + basic auth (bcrypt cost 10)" if tls else ""
    print(f"\n| serve scrape, 8 GPUs x 200 processes, 10 scrapers{how} | value |")
    print("|---|---|")
    print(f"| scrapes | {len(ms)} ({size[0] // 1024} KiB each) |")
    print(f"| p50 / p95 / max | {statistics.median(ms):.2f} / {p95:.2f} / {ms[-1]:.2f} ms |")
    print(f"| target p95 < 5 ms | {'met' if p95 < 5 else 'MISSED'} |")


def bench_cpu(window: float) -> None:
    port = free_port()
    ready = multiprocessing.Event()
    child = multiprocessing.Process(target=_exporter_child, args=(port, 15.0, ready),
                                    daemon=True)
    child.start()
    ready.wait(60)
    assert child.pid is not None
    before, start = _cpu_seconds(child.pid), time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while time.monotonic() - start < window:
        conn.request("GET", "/metrics")
        conn.getresponse().read()
        time.sleep(15)
    used = _cpu_seconds(child.pid) - before
    elapsed = time.monotonic() - start
    child.terminate()
    share = 100 * used / elapsed
    print(f"\n| serve CPU at a 15 s interval, {elapsed:.0f} s window | value |")
    print("|---|---|")
    print(f"| CPU | {used:.2f} s = {share:.2f} % of a core |")
    print(f"| target < 1 % | {'met' if share < 1 else 'MISSED'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--cpu-window", type=float, default=60.0)
    args = parser.parse_args()
    bench_scrapes(args.scrapes)
    bench_scrapes(args.scrapes, tls=True)
    bench_cpu(args.cpu_window)


if __name__ == "__main__":
    main()
