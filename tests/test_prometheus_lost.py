"""A card that vanishes from its exporter's scrape is lost, as it is on the host (issue 40.4).

A real Prometheus (Debian's) scrapes three files in dcgm-exporter's format, 8 cards
each: on one (host label `hostname`, dcgm-exporter's newer spelling) GPU 7 drops out of
the scrape; on another (`Hostname`) GPU 3 does; the third renames its host label from
`Hostname` to `hostname` (dcgm-exporter's commit d5e5f51) and loses nothing.  Then
`gputop check --prometheus` and `--json` read them back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from helpers.prom import ROOT, FixedServer, Reply, instant, need_prometheus, start_prometheus

LOWER = "dgx-h100-rack07-node-0042.cluster.local"  # 38 characters, as the issue's
UPPER = "dcgm-upper-1"
RENAMED = "dcgm-renamed-1"


def _dcgm(host_label: str, host: str, cards: range | list[int]) -> bytes:
    lines = []
    for metric, value in (("DCGM_FI_DEV_GPU_UTIL", 50), ("DCGM_FI_DEV_FB_USED", 1000),
                          ("DCGM_FI_DEV_FB_FREE", 79000), ("DCGM_FI_DEV_GPU_TEMP", 50),
                          ("DCGM_FI_DEV_POWER_USAGE", 100.5)):
        lines.append(f"# TYPE {metric} gauge")
        for n in cards:
            lines.append(f'{metric}{{gpu="{n}",UUID="GPU-{host}-{n}",device="nvidia{n}",'
                         f'modelName="NVIDIA H100 80GB HBM3",{host_label}="{host}"}} {value}')
    return ("\n".join(lines) + "\n").encode()


@dataclass
class Site:
    url: str
    lower: str  # instances
    upper: str
    renamed: str


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    need_prometheus()
    tmp = tmp_path_factory.mktemp("promlost")
    after = threading.Event()
    servers = [
        FixedServer(lambda _p: Reply(body=_dcgm(
            "hostname", LOWER, [n for n in range(8) if n != 7 or not after.is_set()]))),
        FixedServer(lambda _p: Reply(body=_dcgm(
            "Hostname", UPPER, [n for n in range(8) if n != 3 or not after.is_set()]))),
        FixedServer(lambda _p: Reply(body=_dcgm(
            "hostname" if after.is_set() else "Hostname", RENAMED, range(8)))),
    ]
    targets = [s.url.removeprefix("http://") for s in servers]
    prom = None
    try:
        prom, url = start_prometheus(tmp, {"dcgm": targets})
        end = time.monotonic() + 60
        while len(instant(url, "DCGM_FI_DEV_FB_USED")) < 24:
            assert time.monotonic() < end, "Prometheus never scraped the three exporters"
            time.sleep(0.3)
        after.set()
        while (instant(url, f'DCGM_FI_DEV_FB_USED{{gpu="7",hostname="{LOWER}"}}')
               or instant(url, f'DCGM_FI_DEV_FB_USED{{gpu="3",Hostname="{UPPER}"}}')
               or len(instant(url, f'DCGM_FI_DEV_FB_USED{{hostname="{RENAMED}"}}')) < 8
               or instant(url, f'DCGM_FI_DEV_FB_USED{{Hostname="{RENAMED}"}}')):
            assert time.monotonic() < end, "Prometheus never saw the cards go"
            time.sleep(0.3)
        yield Site(url, *targets)
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(10)
        for server in servers:
            server.close()


def _gputop(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "gputop.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_a_card_gone_from_the_scrape_is_lost_critical(site: Site) -> None:
    done = _gputop("--prometheus", site.url, "check", "--json")
    doc = json.loads(done.stdout)
    lost = {(w["host"], w["gpu"], w["severity"]) for w in doc["warnings"]
            if w["code"] == "gpu-lost"}
    # Both spellings of the host label; the renamed exporter lost nothing.
    assert lost == {(LOWER, 7, "critical"), (UPPER, 3, "critical")}
    assert done.returncode == 2 and doc["status"] == "critical"


def test_the_lost_card_is_shown_with_the_others(site: Site) -> None:
    done = _gputop("--prometheus", site.url, "--json")
    hosts = {h["host"]: h for h in json.loads(done.stdout)["hosts"]}
    assert set(hosts) == {LOWER, UPPER, RENAMED}  # the rename is no second host
    for host, gone in ((LOWER, 7), (UPPER, 3), (RENAMED, None)):
        gpus = {g["index"]: g for g in hosts[host]["gpus"]}
        assert sorted(gpus) == list(range(8)), host
        assert {n for n, g in gpus.items() if g["state"] != "ok"} == (
            set() if gone is None else {gone}), host
    lost = {g["index"]: g for g in hosts[LOWER]["gpus"]}[7]
    assert lost["state"] == "lost" and lost["uuid"] == f"GPU-{LOWER}-7"
    assert "gone from the exporter's series" in lost["error"]
