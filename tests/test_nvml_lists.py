"""NVML's list reads in one call (sources/nvmlcalls.FastPynvml), through the real pynvml on
gputop's fake driver: the same entries as pynvml's own two-call functions, one call a
read once the buffer fits, and a list that outgrows it read whole all the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers import fakenvml

ROOT = Path(__file__).resolve().parent.parent

# Each read of a list by pynvml's own function and twice by FastPynvml, with the NVML
# calls each made (FAKENVML_TRACE: one line a call).
PROBE = """
import json, os
import pynvml
from gputop.sources.nvmlcalls import FastPynvml
pynvml.nvmlInit()
lists = FastPynvml(pynvml)
trace = os.environ["FAKENVML_TRACE"]

def calls():
    with open(trace) as lines:
        return sum(1 for line in lines if line.startswith("nvml"))

def procs(entries):
    return sorted([e.pid, e.usedGpuMemory] for e in entries)

def samples(entries):
    return sorted([s.pid, s.smUtil, s.memUtil] for s in entries)

def read(fn, shape, *args):
    try:
        return shape(fn(*args))
    except pynvml.NVMLError as err:  # the same error as pynvml's, or the test fails
        return type(err).__name__

out = {}
for index in range(pynvml.nvmlDeviceGetCount()):
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    reads = [(f"nvmlDeviceGet{kind}RunningProcesses_v3", (), procs)
             for kind in ("Compute", "Graphics", "MPSCompute")]
    reads.append(("nvmlDeviceGetProcessUtilization", (0,), samples))
    for name, args, shape in reads:
        row = {"theirs": read(getattr(pynvml, name), shape, handle, *args)}
        for attempt in ("first", "second"):
            before = calls()
            row[attempt] = read(getattr(lists, name), shape, handle, *args)
            row[attempt + "_calls"] = calls() - before
        out[f"{index} {name}"] = row
print(json.dumps(out))
"""


def _read(tmp_path: Path, scenario: dict[str, Any]) -> dict[str, Any]:
    env = fakenvml.environment(fakenvml.write_scenario(tmp_path / "s", scenario))
    env.update(PYTHONPATH=str(ROOT), FAKENVML_TRACE=str(tmp_path / "trace"))
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    return dict(json.loads(done.stdout))


def test_list_reads_match_pynvml_in_one_call_once_the_buffer_fits(tmp_path: Path) -> None:
    crowded = [{"used_mib": 100 + n, "sm_util": n % 90, "mem_util": n % 7}
               for n in range(40)]  # past FastPynvml.FIRST (16) entries
    few = [{"used_mib": 512, "type": "G", "sm_util": 5},
           {"used_mib": 256, "type": "M", "sm_util": 9}, {"type": "C"}]  # no used_mib
    scenario = {"devices": [{"name": "NVIDIA H100 80GB HBM3", "processes": crowded},
                            {"name": "NVIDIA H100 80GB HBM3", "processes": few},
                            {"name": "NVIDIA H100 80GB HBM3"}]}
    with fakenvml.processes(scenario):
        got = _read(tmp_path, scenario)
    assert len(got) == 3 * 4
    for name, row in got.items():
        assert row["first"] == row["second"] == row["theirs"], name
    # What pynvml reads in two calls (the count, then the array), one call here; the
    # crowded card's first reads outgrow the buffer: two calls, then one with a bigger one.
    compute, util = ("0 nvmlDeviceGetComputeRunningProcesses_v3",
                     "0 nvmlDeviceGetProcessUtilization")
    assert len(got[compute]["theirs"]) == 40 and len(got[util]["theirs"]) == 40
    for name in (compute, util):
        assert (got[name]["first_calls"], got[name]["second_calls"]) == (2, 1), name
    for name, row in got.items():
        if not name.startswith("0 "):
            assert (row["first_calls"], row["second_calls"]) == (1, 1), name
    # An unknown size stays unknown (None), as pynvml gives it.
    assert [None] in [[mem] for _pid, mem in got["1 nvmlDeviceGetComputeRunningProcesses_v3"]
                      ["first"]]
    assert got["2 nvmlDeviceGetComputeRunningProcesses_v3"]["first"] == []
    # No sample since the time asked: NVML's NotFound, as pynvml raises it.
    assert got["2 nvmlDeviceGetProcessUtilization"]["first"] == "NVMLError_NotFound"


# Field values read by pynvml and by FastPynvml, before and after the card changes (the
# fake driver reads its scenario file again when it is replaced).
FIELDS_PROBE = """
import json, os, sys
import pynvml
from gputop.sources.nvmlcalls import FastPynvml
pynvml.nvmlInit()
fast = FastPynvml(pynvml)
fields = [(82, 0), (83, 0), (94, 0), (3, 0), (999999, 0)]  # temp, energy, replays, ECC, none

def shape(values):
    out = []
    for v in values:
        if v.nvmlReturn != 0:
            out.append(["error", v.nvmlReturn])
        else:
            kind = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal"}[v.valueType]
            out.append(getattr(v.value, kind))
    return out

handle = pynvml.nvmlDeviceGetHandleByIndex(0)
reads, arrays = [], []
for step in range(2):
    arrays.append(fast.nvmlDeviceGetFieldValues(handle, fields))
    reads.append([shape(pynvml.nvmlDeviceGetFieldValues(handle, fields)), shape(arrays[-1])])
    if step == 0:
        os.replace(sys.argv[1], os.environ["FAKENVML_SCENARIO"])
print(json.dumps({"reads": reads, "one_array": arrays[0] is arrays[1]}))
"""


def test_field_values_from_one_prepared_array_match_pynvml_read_after_read(
        tmp_path: Path) -> None:
    card = {"name": "NVIDIA H100 80GB HBM3", "temperature_memory": 47, "pcie": {"replays": 3},
            "energy_mj": 1_000, "ecc_mode": True,
            "ecc_errors": {"volatile": {"corrected": 2, "uncorrected": 0}}}
    later = {**card, "temperature_memory": 51, "pcie": {"replays": 9}, "energy_mj": 5_000,
             "ecc_errors": {"volatile": {"corrected": 7, "uncorrected": 0}}}
    env = fakenvml.environment(fakenvml.write_scenario(tmp_path / "s", {"devices": [card]}))
    fakenvml.write_scenario(tmp_path / "later", {"devices": [later]})
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", FIELDS_PROBE, str(tmp_path / "later")],
                          env=env, capture_output=True, text=True, timeout=60, check=True)
    got = json.loads(done.stdout)
    (theirs1, ours1), (theirs2, ours2) = got["reads"]
    assert got["one_array"]  # prepared once, passed again (its values read in between)
    assert ours1 == theirs1 and ours2 == theirs2
    assert ours1[:4] == [47, 1_000, 3, 2] and ours2[:4] == [51, 5_000, 9, 7]  # fresh values
    assert ours1[4][0] == ours2[4][0] == "error"  # an unknown field fails on its own
