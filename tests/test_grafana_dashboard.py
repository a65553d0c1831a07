"""The shipped Grafana dashboard (gputop/examples/grafana-dashboard.json): every panel's
query returns data from a real Prometheus scraping `gputop serve --demo` processes, one
with a reservation and a `gputop run` job in its line, one with faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.prom import ROOT, free_port, instant, need_prometheus, start_prometheus, wait_http

DASHBOARD = ROOT / "gputop" / "examples" / "grafana-dashboard.json"


def panels(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in doc["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row keeps its panels inside


def expand(expr: str) -> str:
    # "All" hosts, as the dashboard's variable defaults to; Grafana's own intervals.
    return (expr.replace("$Hostname", ".*").replace("$__rate_interval", "1m")
            .replace("$__interval", "15s"))


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    need_prometheus()
    tmp = tmp_path_factory.mktemp("grafana")
    config = tmp / "config.yaml"
    config.write_text("{}\n")
    # The demo's reservations and queue live under $TMPDIR: this test's own.
    env = {**os.environ, "TMPDIR": str(tmp)}
    gputop = [sys.executable, "-m", "gputop.cli"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        done = subprocess.run([*gputop, "--demo", "lab", "reserve", "--gpus", "0", "--for",
                               "2h", "--note", "dashboard test", "--config", str(config)],
                              cwd=ROOT, env=env, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        # A job in the line: GPU 0 is taken, so it waits (and would run `sleep` if not).
        procs.append(subprocess.Popen(
            [*gputop, "--demo", "lab", "run", "--gpu-ids", "0", "--wait", "10m", "--config",
             str(config), "--", "sleep", "600"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        targets = []
        for scenario in ("lab", "faulty"):
            port = free_port()
            procs.append(subprocess.Popen(
                [*gputop, "serve", "--demo", scenario, "--listen", f"127.0.0.1:{port}",
                 "--interval", "1", "--config", str(config)],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            targets.append(f"127.0.0.1:{port}")
        for target in targets:
            wait_http(f"http://{target}/api/v1/snapshot")
        server, url = start_prometheus(tmp, {"gputop": targets})
        procs.append(server)
        end = time.monotonic() + 90
        # Ready once both are scraped and the queued job is in.
        while len(instant(url, "gputop_up")) < 2 or not instant(url, "gputop_queue_jobs"):
            assert time.monotonic() < end, "Prometheus never saw both serves and the job"
            time.sleep(0.5)
        yield url
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(20)


def test_gputop_config_prints_the_dashboard() -> None:
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "config", "--grafana-dashboard"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout) == json.loads(DASHBOARD.read_text())


def test_dashboard_is_importable_grafana_json() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] and doc["title"] and doc["schemaVersion"] >= 36
    assert [i["name"] for i in doc["__inputs"]] == ["DS_PROMETHEUS"]
    ids = [p["id"] for p in panels(doc)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(doc):
        box = panel["gridPos"]
        assert box["x"] >= 0 and box["x"] + box["w"] <= 24 and box["h"] > 0, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"], f"{panel['title']}: no query"
            assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}"
            assert {t["refId"] for t in panel["targets"]} == {
                chr(65 + i) for i in range(len(panel["targets"]))}


def test_every_panel_query_returns_data(prom: str) -> None:
    doc = json.loads(DASHBOARD.read_text())
    asked = 0
    for panel in panels(doc):
        for target in panel.get("targets", []):
            expr = expand(target["expr"])
            found = instant(prom, expr)
            assert found, f"panel {panel['title']!r}: {expr} returned nothing"
            asked += 1
    assert asked >= 15
    # The host variable: Grafana's label_values(gputop_up, Hostname) is Prometheus' label
    # values API with that match.
    [variable] = doc["templating"]["list"]
    assert variable["query"]["query"] == "label_values(gputop_up, Hostname)"
    query = urllib.parse.urlencode({"match[]": "gputop_up"})
    with urllib.request.urlopen(f"{prom}/api/v1/label/Hostname/values?{query}",
                                timeout=10) as response:
        hosts = json.load(response)["data"]
    assert set(hosts) == {"lab-gpu-03", "a100-node-12"}, hosts


def test_panels_show_the_reservation_queue_and_warnings(prom: str) -> None:
    [reserved] = instant(prom, "gputop_gpu_reserved")
    assert reserved["metric"]["Hostname"] == "lab-gpu-03" and reserved["metric"]["gpu"] == "0"
    jobs = instant(prom, 'gputop_queue_jobs{Hostname="lab-gpu-03"}')
    assert sum(float(j["value"][1]) for j in jobs) == 1
    severities = {r["metric"]["severity"] for r in instant(prom, "gputop_warning == 1")}
    assert "critical" in severities  # the faulty host's
