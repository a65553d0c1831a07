"""The four profiling series of dcgm-exporter's default counters that come from GPM
(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, _DRAM_ACTIVE, _PCIE_TX_BYTES, _PCIE_RX_BYTES), served
by a real `gputop serve` on gputop's fake driver (real pynvml, the fake's GPM samples and
their means between two collections: tests/fakenvml), issue 40 point 10."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from helpers import fakenvml
from helpers.prom import free_port, wait_http

ROOT = Path(__file__).resolve().parent.parent
MIB = 1024**2
PROF = ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES")
LICENSE = "DCGM_FI_DEV_VGPU_LICENSE_STATUS"


def series(text: str, names: tuple[str, ...] = PROF) -> dict[tuple[str, str], float]:
    """(family, gpu label) -> value of the ``names`` families in an exposition."""
    out = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0]
        if name in names:
            gpu = line.split('gpu="', 1)[1].split('"', 1)[0]
            out[(name, gpu)] = float(line.rsplit(" ", 1)[1])
    return out


def test_serve_exports_the_four_gpm_series_of_the_fake_driver(tmp_path: Path) -> None:
    hopper = {"name": "NVIDIA H100 80GB HBM3", "util_gpu": 90, "gpm": True,
              "gpm_tensor_active": 61.5, "gpm_dram_active": 33,
              "gpm_pcie_tx_mibs": 12, "gpm_pcie_rx_mibs": 0.5}
    old = {"name": "Tesla P100", "util_gpu": 10}  # no GPM: the series are absent
    env = fakenvml.environment(fakenvml.write_scenario(tmp_path / "s",
                                                       {"devices": [hopper, old]}))
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gputop.cli", "serve", "--listen", f"127.0.0.1:{port}",
         "--interval", "1", "--config", str(config)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        end = time.monotonic() + 60
        found: dict[tuple[str, str], float] = {}
        while len(found) < len(PROF):  # from the second collection on: a rate needs two
            assert time.monotonic() < end, f"no GPM series: {found}"
            text = wait_http(url).decode()
            found = series(text)
            time.sleep(0.3)
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=20)
    assert b"Traceback" not in err, err.decode()
    assert found == {("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "0"): 0.615,
                     ("DCGM_FI_PROF_DRAM_ACTIVE", "0"): 0.33,
                     ("DCGM_FI_PROF_PCIE_TX_BYTES", "0"): 12 * MIB,
                     ("DCGM_FI_PROF_PCIE_RX_BYTES", "0"): 0.5 * MIB}
    # dcgm-exporter's vGPU license status on bare metal: 0 on every card, as DCGM says
    assert series(text, (LICENSE,)) == {(LICENSE, "0"): 0, (LICENSE, "1"): 0}
    assert f"# TYPE {LICENSE} gauge" in text


def test_the_demo_exports_the_vgpu_license_status_as_dcgm_does() -> None:
    from gputop.commands import exposition
    from gputop.model import HostSnapshot
    from gputop.sources import sim
    from gputop.sources.hostsource import nvml_collector

    nvml = sim.SimNvml(sim.load_scenario("dgx-h100"), clock=lambda: 1_800_000_000.0)
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="dgx", demo=True,
                               clock=lambda: 1_800_000_000.0)
    snap = HostSnapshot.from_dict(collector.collect())
    text = exposition.render(exposition.families(snap, [], {}, {}, None))
    assert series(text, (LICENSE,)) == {(LICENSE, str(g.index)): 0 for g in snap.gpus}
