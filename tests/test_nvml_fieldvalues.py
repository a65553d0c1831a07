"""Batched NVML reads through real pynvml on gputop's fake driver (issue 14).

ECC, retired pages, row remapping and NVLink states come from one
nvmlDeviceGetFieldValues call per GPU; the values must equal what the single calls give.
The fake libnvidia-ml.so.1 is tests/fakenvml (tests/helpers/fakenvml.py builds it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import fakenvml

ROOT = Path(__file__).resolve().parent.parent

KEYS = (
    "ecc_volatile_corrected", "ecc_volatile_uncorrected", "ecc_aggregate_corrected",
    "ecc_aggregate_uncorrected", "retired_pages_sbe", "retired_pages_dbe",
    "retired_pages_pending", "remapped_correctable", "remapped_uncorrectable",
    "remap_pending", "remap_failure",
)

PROBE = """
import json, sys
import pynvml
from gputop.sources.hostsource import nvml_collector
from gputop.sources.procfs import ProcFs
""" + fakenvml.SINGLE_CALLS + """
keys = sys.argv[1].split(",")
out = {}
for name, nvml in (("batched", pynvml), ("single", Single())):
    gpus = nvml_collector(nvml, ProcFs()).collect()["gpus"]
    out[name] = [dict({k: g.get(k) for k in keys},
                      nvlinks=[link["active"] for link in g["nvlinks"]]) for g in gpus]
print(json.dumps(out))
"""


def collect(tmp_path: Path, template: str) -> dict:
    with fakenvml.processes(fakenvml.template(template)) as scenario:
        env = fakenvml.environment(fakenvml.write_scenario(tmp_path / template, scenario))
        env["PYTHONPATH"] = str(ROOT)
        done = subprocess.run([sys.executable, "-c", PROBE, ",".join(KEYS)], env=env,
                              check=True, capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout)


def test_ecc_and_remapping_batched_equal_the_single_calls(tmp_path: Path) -> None:
    got = collect(tmp_path, "faulty")
    assert got["batched"] == got["single"]
    bad = got["batched"][1]  # the scenario's GPU 1: uncorrectable ECC, a pending remap
    assert bad["ecc_volatile_uncorrected"] > 0 and bad["remap_pending"] is True
    assert got["batched"][0]["ecc_volatile_uncorrected"] == 0


def test_nvlink_states_batched_equal_the_single_calls(tmp_path: Path) -> None:
    got = collect(tmp_path, "dgx8")
    assert got["batched"] == got["single"]
    assert [len(g["nvlinks"]) for g in got["batched"]] == [18] * 8
    states = got["batched"][0]["nvlinks"]
    assert True in states and None not in states
