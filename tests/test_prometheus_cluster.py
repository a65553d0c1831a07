"""`gputop serve` scraped by a real Prometheus, and `gputop --prometheus` reading it back.

One Prometheus (Debian's package) on loopback scrapes two `gputop serve --demo`
processes, recorded dcgm-exporter and nvidia_gpu_exporter output served as static text,
and a port where nothing listens.  Then `gputop --prometheus URL --json` must show every
host and GPU with the right values, and every query of Grafana dashboard 12239 must find
gputop's series.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.prom import (
    ROOT,
    FixedServer,
    Reply,
    free_port,
    instant,
    need_prometheus,
    start_prometheus,
    start_serve,
    wait_http,
)

FIXTURES = ROOT / "tests" / "fixtures" / "prometheus"
MIB = 1024**2


@dataclass
class Cluster:
    url: str
    serve_urls: dict[str, str]  # scenario -> http://...
    dead: str  # instance of the target nobody answers


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need_prometheus()
    tmp = tmp_path_factory.mktemp("prom")
    config = tmp / "config.yaml"
    config.write_text("serve: {lowercase_hostname: true}\n")
    texts = {"/dcgm": (FIXTURES / "dcgm-exporter.txt").read_bytes(),
             "/smi": (FIXTURES / "nvidia_gpu_exporter.txt").read_bytes()}
    static = {name: FixedServer(lambda path, b=body: Reply(body=b))
              for name, body in texts.items()}
    procs = []
    serve_urls = {}
    try:
        for scenario in ("dgx-h100", "lab"):
            port = free_port()
            procs.append(start_serve(scenario, port, config))
            serve_urls[scenario] = f"http://127.0.0.1:{port}"
        for url in serve_urls.values():
            wait_http(f"{url}/api/v1/snapshot")
        dead = f"127.0.0.1:{free_port()}"
        jobs = {
            "gputop": [u.removeprefix("http://") for u in serve_urls.values()],
            "dcgm": [static["/dcgm"].url.removeprefix("http://")],
            "smi": [static["/smi"].url.removeprefix("http://")],
            "dead": [dead],
        }
        prom, url = start_prometheus(tmp, jobs)
        procs.append(prom)
        end = time.monotonic() + 60
        # Ready when every live target was scraped and the serve's processes are in.
        while (len(instant(url, "up == 1")) < 4
               or not instant(url, "gputop_process_gpu_memory_bytes")):
            assert time.monotonic() < end, "Prometheus never scraped every target"
            time.sleep(0.3)
        yield Cluster(url, serve_urls, dead)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
        for server in static.values():
            server.close()


def gputop_json(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "gputop.cli", *args, "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return dict(json.loads(done.stdout))


def test_every_host_and_gpu_with_its_values(cluster: Cluster) -> None:
    doc = gputop_json("--prometheus", cluster.url)
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert set(hosts) == {"dgx-h100-07", "lab-gpu-03", "dcgm-node-1",
                          *[h for h in hosts if h.startswith("127.0.0.1:")]}
    # gputop serve: everything, processes and users included.
    dgx = hosts["dgx-h100-07"]
    assert dgx["state"] == "ok" and dgx["source"] == "prometheus: gputop serve"
    assert len(dgx["gpus"]) == 8 and [g["index"] for g in dgx["gpus"]] == list(range(8))
    assert {g["mem_total"] for g in dgx["gpus"]} == {81559 * MIB}
    assert all(g["name"] == "NVIDIA H100 80GB HBM3" for g in dgx["gpus"])
    assert len(dgx["processes"]) == 10 and all(p["user"] for p in dgx["processes"])
    assert "processes" not in dgx["missing"]
    assert len(hosts["lab-gpu-03"]["gpus"]) == 4
    # The recorded dcgm-exporter output, value for value.
    dcgm = hosts["dcgm-node-1"]
    assert dcgm["source"] == "prometheus: dcgm-exporter"
    g0, g1 = dcgm["gpus"]
    assert (g0["index"], g0["uuid"]) == (0, "GPU-4d2a7b5e-1c3f-4a8e-9b6d-0f1e2d3c4b5a")
    assert (g0["util_gpu"], g0["util_mem"], g0["temp"], g0["clock_sm"]) == (93, 41, 61, 1410)
    assert g0["power_draw"] == pytest.approx(312.5)  # --json rounds power to 0.1 W
    assert g0["mem_used"] == 78262 * MIB
    assert g0["mem_total"] == (78262 + 2140 + 598) * MIB
    assert g1["remapped_uncorrectable"] == 1 and g0["remap_failure"] is False
    assert {"processes", "reservations", "fan"} <= set(dcgm["missing"])
    # nvidia_gpu_exporter: ratios, bytes and hertz, and a uuid without "GPU-".
    [smi] = [h for h in hosts.values() if h["source"] == "prometheus: nvidia_gpu_exporter"]
    [g] = smi["gpus"]
    assert g["uuid"] == "GPU-7b2f1c9a-3e4d-4f5a-8b6c-1d2e3f4a5b6c"
    assert (g["util_gpu"], g["util_mem"], g["fan"], g["clock_sm"]) == (57, 23, 72, 1905)
    assert (g["mem_used"], g["mem_total"]) == (12_582_912_000, 25_769_803_776)
    assert g["name"] == "NVIDIA GeForce RTX 3090" and smi["driver_version"] == "535.183.01"
    assert "power_draw" not in smi["missing"] and "processes" in smi["missing"]
    # The target nobody ever answered had no GPU series: not a GPU host.
    assert cluster.dead not in hosts


def test_selector_narrows_and_check_runs(cluster: Cluster, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text('prometheus: {selector: \'job="dcgm"\'}\n')
    doc = gputop_json("--prometheus", cluster.url, "--config", str(config))
    assert [h["host"] for h in doc["hosts"]] == ["dcgm-node-1"]
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "check", "--prometheus",
                           cluster.url, "--config", str(config)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    # GPU 1's remapped row was remapped (none pending, no failure): healthy. The
    # selector leaves one host of two cards.
    assert done.returncode == 0, done.stderr
    assert "1 host(s), 2 GPU(s): no warnings" in done.stdout and "Traceback" not in done.stderr


def scrape(url: str, accept: str | None = None) -> tuple[str, str]:
    import urllib.request

    request = urllib.request.Request(f"{url}/metrics",
                                     headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def promtool_problems(text: str) -> list[str]:
    """What `promtool check metrics` finds in ``text``, less the lints DCGM's names must
    keep: its counters lack `_total` (one even ends in `_COUNTER`) and its labels (UUID,
    modelName, Hostname) are camelCase, and dashboards query them by those names.
    Under OpenMetrics a counter's samples are <family>_total, which promtool's text
    parser takes for a family of its own without HELP: allowed for exactly the declared
    counters.  A parse error (an
    `unknown` type, a bad line) is never filtered."""
    done = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                          capture_output=True, timeout=30)
    counters = {line.split()[2] for line in text.splitlines()
                if line.startswith("# TYPE ") and line.endswith(" counter")}
    allowed_help = {f"{name}_total no help text" for name in counters}
    dcgm_names = ('should have "_total" suffix', "should not include type 'counter'")

    def allowed(line: str) -> bool:
        name = line.split(" ", 1)[0]
        if "camelCase" in line or line.strip() in allowed_help:
            return True  # DCGM's label names, on gputop's series too
        # DCGM's metric names (DCGM_FI_DEV_PCIE_REPLAY_COUNTER...), never gputop's own.
        return name.startswith("DCGM_FI_") and any(words in line for words in dcgm_names)

    problems = [line for line in done.stderr.decode().splitlines()
                if line.strip() and not allowed(line)]
    if done.returncode not in (0, 3):  # 3: lint findings only
        problems.append(f"promtool exit {done.returncode}")
    return problems


def test_exposition_passes_promtool_in_both_formats(cluster: Cluster) -> None:
    for url in cluster.serve_urls.values():
        _kind, text = scrape(url)
        assert 'hostname="' in text  # the config switch for newer dashboards
        assert not promtool_problems(text)
        kind, om = scrape(url, "application/openmetrics-text;version=1.0.0")
        assert kind.startswith("application/openmetrics-text") and om.endswith("# EOF\n")
        assert " unknown" not in om and not promtool_problems(om)


def test_counters_are_typed_counter_in_both_formats(cluster: Cluster) -> None:
    import urllib.request

    url = cluster.serve_urls["dgx-h100"]
    _kind, text = scrape(url)
    _kind, om = scrape(url, "application/openmetrics-text")
    name = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
    assert f"# TYPE {name} counter" in text and f"\n{name}{{" in text
    # OpenMetrics: the same family, typed counter, samples named as that format requires.
    assert f"# TYPE {name} counter" in om and f"\n{name}_total{{" in om
    assert f"\n{name}{{" not in om
    # Prometheus asks for OpenMetrics first but takes the text format, which keeps DCGM's
    # names: stored under the exact name, and its metadata says counter.
    assert instant(cluster.url, f'{name}{{job="gputop"}}')
    assert not instant(cluster.url, f'{name}_total{{job="gputop"}}')
    with urllib.request.urlopen(f"{cluster.url}/api/v1/metadata?metric={name}",
                                timeout=10) as response:
        meta = json.load(response)["data"][name]
    assert {m["type"] for m in meta} == {"counter"}


def test_dashboard_12239_queries_find_gputop_series(cluster: Cluster) -> None:
    spec = json.loads((FIXTURES / "dashboard-12239-queries.json").read_text())
    # Every panel, the tensor one included: the demo's H100s have GPM, which gives it.
    for host in ("dgx-h100-07", "dcgm-node-1"):
        for query in spec["queries"]:
            expr = query["expr"].replace("$Hostname", host).replace("$gpu", ".*")
            found = instant(cluster.url, expr)
            assert found, f"{query['panel']}: {expr} is empty for {host}"
            if "label" in query:
                assert all(query["label"] in r["metric"] for r in found)


def test_history_backfill_from_query_range(cluster: Cluster) -> None:
    from gputop.config import PrometheusConfig
    from gputop.sources import promql
    from gputop.sources.prometheus import MIN_HISTORY_POINTS, PrometheusFeed

    feed = PrometheusFeed(cluster.url, PrometheusConfig(selector='job="gputop"'), 10.0,
                          environ={}, history_s=120.0)
    # Needs two scrapes of each serve in the range (the newest point is the live
    # query's): on a loaded machine one serve's first scrapes can come seconds after
    # the other's, so wait for both hosts rather than for any history at all.
    end = time.monotonic() + 60
    while {s.host for s in feed.backfill(120.0)} < {"dgx-h100-07", "lab-gpu-03"}:
        assert time.monotonic() < end, "no history of both serves in Prometheus"
        time.sleep(0.5)
    snaps = feed.backfill(120.0)
    times = [s.time for s in snaps]
    assert times == sorted(times) and times[-1] < time.time()
    assert {s.host for s in snaps} == {"dgx-h100-07", "lab-gpu-03"}
    dgx = [s for s in snaps if s.host == "dgx-h100-07"]
    assert dgx and all(len(s.gpus) == 8 for s in dgx)
    assert all(g.util_gpu is not None and g.mem_total == 81559 * MIB for g in dgx[0].gpus)
    # A cluster too big for the history's budget is not backfilled at all: the cards
    # here times the fewest points a sparkline needs is past it.
    util = promql.history_queries('job="gputop"')["util_gpu"]
    [count] = instant(cluster.url, f"count({util})")
    cards = int(count["value"][1])
    assert cards >= 8
    assert feed.backfill(120.0, budget=cards * MIN_HISTORY_POINTS - 1) == []
    end = time.monotonic() + 60  # 12 points over 120 s: two of them need 10 s of data
    while not (few := feed.backfill(120.0, budget=cards * MIN_HISTORY_POINTS)):
        assert time.monotonic() < end, "no history at the budget's edge"
        time.sleep(1)
    assert len({s.time for s in few}) <= MIN_HISTORY_POINTS
