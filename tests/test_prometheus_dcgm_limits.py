"""dcgm-exporter hosts raise the host's own card rules through Prometheus (issue 40.5).

A real Prometheus (Debian's) scrapes two exporters in dcgm-exporter's label shapes (gpu,
UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION; GPU_I_ID and
GPU_I_PROFILE on a MIG card's instances, pod/namespace/container and hpc_job where it maps
jobs):

- ``dcgm-limits-1``, 6 cards with DCGM_FI_DEV_SLOWDOWN_TEMP / SHUTDOWN_TEMP and the power
  limits in its counters: card 0 at 91 C (shutdown 92), card 1 at 84 C (slowdown 87),
  card 2 busy and held by the software power cap at 200 W of a 400 W card (its limit
  lowered to 250 W), card 3 at XID 79, card 4 capped at its own default limit (by design:
  nothing to say), card 5 cool and idle;
- ``dcgm-mig-1``: card 0 in MIG mode with two GPU instances, whose series alone carry the
  card's temperature and power, one pod on GI 1 and a Slurm job on GI 2; card 1 whole,
  with a pod of its own.

Then `gputop check` (the overview's queries), `--once` (the summary's) and `--json` (the
full view) read them back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.prom import ROOT, FixedServer, Reply, instant, need_prometheus, start_prometheus

LIMITS = "dcgm-limits-1"
MIG = "dcgm-mig-1"

# card -> metric -> value, for dcgm-limits-1
_CARDS: dict[int, dict[str, float]] = {
    0: {"GPU_TEMP": 91, "GPU_UTIL": 90, "POWER_USAGE": 380.5, "CLOCKS_EVENT_REASONS": 1},
    1: {"GPU_TEMP": 84, "GPU_UTIL": 90, "POWER_USAGE": 370.25, "CLOCKS_EVENT_REASONS": 1},
    2: {"GPU_TEMP": 60, "GPU_UTIL": 95, "POWER_USAGE": 200.0, "CLOCKS_EVENT_REASONS": 4,
        "POWER_MGMT_LIMIT": 250},
    3: {"GPU_TEMP": 45, "GPU_UTIL": 0, "POWER_USAGE": 60.0, "XID_ERRORS": 79},
    4: {"GPU_TEMP": 70, "GPU_UTIL": 99, "POWER_USAGE": 395.0, "CLOCKS_EVENT_REASONS": 4},
    5: {"GPU_TEMP": 40, "GPU_UTIL": 0, "POWER_USAGE": 55.0},
}
_DEFAULTS = {"FB_USED": 1000, "FB_FREE": 79000, "FB_RESERVED": 500, "FAN_SPEED": 50,
             "SLOWDOWN_TEMP": 87, "SHUTDOWN_TEMP": 92, "POWER_MGMT_LIMIT": 400,
             "POWER_MGMT_LIMIT_DEF": 400, "POWER_MGMT_LIMIT_MAX": 400, "XID_ERRORS": 0,
             "CLOCKS_EVENT_REASONS": 0}


def _card_labels(host: str, gpu: int, model: str = "NVIDIA A100-SXM4-80GB") -> str:
    return (f'gpu="{gpu}",UUID="GPU-{host}-{gpu}",pci_bus_id="00000000:{7 + 4 * gpu:02X}:00.0",'
            f'device="nvidia{gpu}",modelName="{model}",Hostname="{host}",'
            'DCGM_FI_DRIVER_VERSION="550.54.15"')


def _exposition(rows: list[tuple[str, str, float]]) -> bytes:
    """(metric, labels, value) rows as dcgm-exporter writes them: HELP and TYPE once per
    family, its series under it."""
    families: dict[str, list[str]] = {}
    for metric, labels, value in rows:
        families.setdefault(metric, []).append(f"{metric}{{{labels}}} {value:g}")
    lines = []
    for metric, series in families.items():
        kind = "counter" if metric.endswith(("_TOTAL", "_VIOLATION")) else "gauge"
        lines += [f"# HELP {metric} {metric}.", f"# TYPE {metric} {kind}", *series]
    return ("\n".join(lines) + "\n").encode()


def limits_text() -> bytes:
    rows = []
    for gpu, values in _CARDS.items():
        for field, value in {**_DEFAULTS, **values}.items():
            rows.append((f"DCGM_FI_DEV_{field}", _card_labels(LIMITS, gpu), value))
    return _exposition(rows)


def mig_text() -> bytes:
    rows = []
    card = _card_labels(MIG, 0, "NVIDIA H100 80GB HBM3")
    instances = {1: ',pod="train-a",namespace="ml",container="trainer"',
                 2: ',hpc_job="777"'}
    for gi, jobs in instances.items():
        labels = f'{card},GPU_I_PROFILE="3g.40gb",GPU_I_ID="{gi}"{jobs}'
        # dcgm-exporter puts the card's own fields on each instance's series.
        for field, value in (("GPU_TEMP", 55), ("POWER_USAGE", 180.5),
                             ("POWER_MGMT_LIMIT", 700), ("FB_USED", 1000 * gi),
                             ("FB_FREE", 39000), ("XID_ERRORS", 0)):
            rows.append((f"DCGM_FI_DEV_{field}", labels, value))
        rows.append(("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, 0.25 * gi))
    whole = _card_labels(MIG, 1, "NVIDIA H100 80GB HBM3") + \
        ',pod="infer-b",namespace="ml",container="server"'
    for field, value in (("GPU_UTIL", 30), ("GPU_TEMP", 48), ("POWER_USAGE", 150.0),
                         ("POWER_MGMT_LIMIT", 700), ("FB_USED", 2000), ("FB_FREE", 78000),
                         ("FB_RESERVED", 500)):
        rows.append((f"DCGM_FI_DEV_{field}", whole, value))
    return _exposition(rows)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    need_prometheus()
    tmp = tmp_path_factory.mktemp("promlimits")
    servers = [FixedServer(lambda _p: Reply(body=limits_text())),
               FixedServer(lambda _p: Reply(body=mig_text()))]
    prom = None
    try:
        prom, url = start_prometheus(
            tmp, {"dcgm": [s.url.removeprefix("http://") for s in servers]})
        end = time.monotonic() + 60
        while len(instant(url, "DCGM_FI_DEV_FB_USED")) < 9:
            assert time.monotonic() < end, "Prometheus never scraped the two exporters"
            time.sleep(0.3)
        yield url
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(10)
        for server in servers:
            server.close()


def gputop(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "gputop.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "COLUMNS": "200"})
    assert "Traceback" not in done.stderr, done.stderr
    return done


def found(doc: dict[str, Any], host: str) -> dict[tuple[str, int | None], dict[str, Any]]:
    return {(w["code"], w["gpu"]): w for w in doc["warnings"] if w["host"] == host}


def test_check_fires_the_temperature_power_and_lost_rules(url: str) -> None:
    done = gputop("--prometheus", url, "check", "--json")
    doc = json.loads(done.stdout)
    seen = found(doc, LIMITS)
    assert done.returncode == 2 and doc["status"] == "critical"
    assert seen[("temp-shutdown", 0)]["severity"] == "critical"
    assert "91 C, shutdown at 92 C" in seen[("temp-shutdown", 0)]["message"]
    assert ("temp-near-slowdown", 0) not in seen  # critical already: one warning
    assert "84 C, clocks slow down at 87 C" in seen[("temp-near-slowdown", 1)]["message"]
    capped = seen[("power-capped", 2)]["message"]
    assert "200 W, limit 250 W" in capped and "made for 400 W" in capped
    assert ("power-capped", 4) not in seen  # at its own default limit: capped by design
    assert seen[("gpu-lost", 3)]["severity"] == "critical"
    assert "fallen off the bus" in seen[("gpu-lost", 3)]["message"]
    assert ("xid-79", 3) in seen  # as on the host: the XID and the lost card
    assert not [key for key in seen if key[1] == 5]
    # The MIG card's temperature and power are the card's: nothing hot there.
    assert not [key for key in found(doc, MIG) if key[0].startswith("temp")]


def test_once_reads_the_same_through_the_summary(url: str) -> None:
    done = gputop("--prometheus", url, "--once")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "91 C, shutdown at 92 C" in text and "84 C, clocks slow down at 87 C" in text
    assert "software power cap at 200 W" in text
    lines = text.splitlines()
    lost = next(line for line in lines if line.lstrip().startswith("3 ") and "A100" in line)
    assert "LOST" in lost
    mig = next(line for line in lines if line.lstrip().startswith("0 ") and "H100" in line)
    assert "55C" in mig and "180/700W" in mig  # the card's, from its instances' series


def test_json_has_the_limits_and_the_mig_cards_own_readings(url: str) -> None:
    done = gputop("--prometheus", url, "--json")
    assert done.returncode == 0, done.stderr
    hosts = {h["host"]: h for h in json.loads(done.stdout)["hosts"]}
    cards = {g["index"]: g for g in hosts[LIMITS]["gpus"]}
    assert (cards[0]["temp_slowdown"], cards[0]["temp_shutdown"]) == (87, 92)
    assert (cards[2]["power_default_limit"], cards[2]["power_max_limit"]) == (400.0, 400.0)
    assert cards[2]["clock_event_reasons"] == ["sw_power_cap"]
    assert cards[3]["state"] == "lost" and cards[5]["state"] == "ok"
    mig, whole = (g for g in sorted(hosts[MIG]["gpus"], key=lambda g: g["index"]))
    assert mig["mig_mode"] is True and len(mig["mig_devices"]) == 2
    assert (mig["temp"], mig["power_draw"], mig["power_limit"]) == (55, 180.5, 700.0)
    assert (whole["temp"], whole["power_draw"]) == (48, 150.0)
    # Each job on the instance its series name, not on the card.
    assert [[(j["kind"], j["id"]) for j in d["workloads"]] for d in mig["mig_devices"]] == [
        [("k8s", "ml/train-a")], [("slurm", "777")]]
    assert mig["workloads"] == []
    assert [(j["kind"], j["id"]) for j in whole["workloads"]] == [("k8s", "ml/infer-b")]


def test_once_names_each_job_on_its_instance_line(url: str) -> None:
    text = gputop("--prometheus", url, "--once").stdout
    block = text[text.index(MIG):]
    lines = block.splitlines()
    under = {lines[n - 1].split()[0]: line.strip() for n, line in enumerate(lines)
             if line.strip().startswith("jobs:")}
    # each instance's under its line, the whole card's under its own; none for card 0
    assert under == {"0:0": "jobs: k8s:ml/train-a", "0:1": "jobs: slurm:777",
                     "1": "jobs: k8s:ml/infer-b"}
