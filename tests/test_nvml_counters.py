"""dcgm-exporter's default counters beyond the basics, read through real pynvml on
gputop's fake driver: memory temperature, total energy, PCIe replays and NVLink data (one
field-value call, or the single calls where the driver has none), and GPM's whole-card
tensor, DRAM and PCIe activity (a rate between two refreshes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers import fakenvml

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("temp_memory", "energy_mj", "pcie_replays", "nvlink_data_kib", "prof_tensor_active",
        "prof_dram_active", "prof_pcie_tx_bytes", "prof_pcie_rx_bytes")

PROBE = """
import json, sys
import pynvml
from gputop.sources.hostsource import nvml_collector
from gputop.sources.procfs import ProcFs
""" + fakenvml.SINGLE_CALLS + """
keys = sys.argv[1].split(",")
out = {}
for name, nvml in (("batched", pynvml), ("single", Single())):
    collector = nvml_collector(nvml, ProcFs())
    first = collector.collect()["gpus"]
    second = collector.collect()["gpus"]
    out[name] = [[{k: g.get(k) for k in keys} for g in gpus] for gpus in (first, second)]
print(json.dumps(out))
"""


def collect(tmp_path: Path, scenario: dict[str, Any]) -> dict[str, Any]:
    env = fakenvml.environment(fakenvml.write_scenario(tmp_path / "s", scenario))
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", PROBE, ",".join(KEYS)], env=env,
                          check=True, capture_output=True, text=True, timeout=60)
    return dict(json.loads(done.stdout))


def test_counters_and_gpm_of_a_hopper_card_and_an_old_one(tmp_path: Path) -> None:
    hopper = {"name": "NVIDIA H100 80GB HBM3", "util_gpu": 90, "temperature_memory": 47,
              "energy_mj": 123_456_789_012, "pcie": {"replays": 3},
              "nvlink": {"links": 4, "data_tx_kib": 1000, "data_rx_kib": 250},
              "gpm": True, "gpm_tensor_active": 61.5, "gpm_dram_active": 33,
              "gpm_pcie_tx_mibs": 12, "gpm_pcie_rx_mibs": 0.5}
    old = {"name": "Tesla P100", "util_gpu": 10}  # none of it: absent, never 0
    got = collect(tmp_path, {"devices": [hopper, old]})
    (first_h, first_o), (second_h, second_o) = got["batched"]
    assert first_h["temp_memory"] == 47 and first_h["energy_mj"] == 123_456_789_012
    assert first_h["pcie_replays"] == 3
    assert first_h["nvlink_data_kib"] == 4 * (1000 + 250)  # every link, both ways
    assert first_h["prof_tensor_active"] is None  # a rate needs a previous sample
    assert second_h["prof_tensor_active"] == 61.5 and second_h["prof_dram_active"] == 33
    assert second_h["prof_pcie_tx_bytes"] == 12 * 1024**2
    assert second_h["prof_pcie_rx_bytes"] == 0.5 * 1024**2
    assert set(first_o.values()) == {None} and set(second_o.values()) == {None}
    # Without field values: energy and replays from their own calls, the rest unknown.
    (single_h, _), (single_h2, _) = got["single"]
    assert single_h["energy_mj"] == 123_456_789_012 and single_h["pcie_replays"] == 3
    assert single_h["temp_memory"] is None and single_h["nvlink_data_kib"] is None
    assert single_h2["prof_tensor_active"] == 61.5  # GPM does not need field values


def test_one_link_without_data_makes_the_total_unknown(tmp_path: Path) -> None:
    card = {"nvlink": {"links": 2, "data_tx_kib": 5}}  # no receive counter
    got = collect(tmp_path, {"devices": [card]})
    assert got["batched"][0][0]["nvlink_data_kib"] is None


def test_a_mig_card_has_no_whole_card_gpm(tmp_path: Path) -> None:
    card = {"gpm": True, "gpm_tensor_active": 50, "mig_mode": 1,
            "mig_devices": [{"gi": 1, "profile": "1g.10gb", "sm_active": 40}]}
    got = collect(tmp_path, {"devices": [card]})
    assert got["batched"][1][0]["prof_tensor_active"] is None
