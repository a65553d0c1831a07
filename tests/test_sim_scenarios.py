"""Scenario files: the built-ins load, user files load by path, mistakes are named."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from gputop.sources import sim

T0 = 1_764_680_000.0
BUILTINS = ("dgx-h100", "faulty", "lab", "mig", "slurm")


def test_builtin_scenarios_are_listed_with_descriptions() -> None:
    listed = sim.list_scenarios()
    assert [name for name, _ in listed] == list(BUILTINS)
    assert all(len(desc) > 20 for _, desc in listed)


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_scenario_loads_and_initializes(name: str) -> None:
    scenario = sim.load_scenario(name)
    assert scenario.name == name
    nv = sim.SimNvml(scenario, clock=lambda: T0)
    nv.nvmlInit()
    assert nv.nvmlDeviceGetCount() == len(scenario.gpus)
    count = len(scenario.gpus)
    uuids = {nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i)) for i in range(count)}
    assert len(uuids) == len(scenario.gpus)  # every card has its own identity
    pids = [p["pid"] for p in scenario.processes]
    assert min(pids) > sim.LINUX_PID_MAX_LIMIT


def test_scenario_shapes_asked_for() -> None:
    dgx = sim.load_scenario("dgx-h100")
    assert len(dgx.gpus) == 8 and {g["numa"] for g in dgx.gpus} == {0, 1}
    assert [g["numa"] for g in dgx.gpus].count(0) == 4
    assert sum(1 for p in dgx.processes if p["gpus"] and p["util"][0] >= 90) == 8
    lab = sim.load_scenario("lab")
    assert len(lab.gpus) == 4 and set(lab.topology.values()) == {"PIX", "NODE", "SYS"}
    states = {p["state"] for p in lab.processes}
    assert "Z" in states
    assert any(p["hidden"] for p in lab.processes)
    assert any(p["ignores_term"] for p in lab.processes)
    kernels = [p for p in lab.processes if "ipykernel_launcher" in " ".join(p["cmdline"])]
    assert len(kernels) >= 2
    faulty = sim.load_scenario("faulty")
    assert faulty.faults["lost"] and faulty.faults["xid"] and faulty.faults["nvlink_down"]
    assert {x["xid"] for x in faulty.faults["xid"]} >= {79, 48, 94}


def test_user_scenario_loads_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    shutil.copy(sim.scenario_dir() / "lab.yaml", path)
    text = path.read_text().replace("name: lab", "name: my-lab")
    path.write_text(text)
    scenario = sim.load_scenario(str(path))
    assert scenario.name == "my-lab"
    assert scenario.source == str(path)


def test_unknown_name_lists_the_builtins() -> None:
    with pytest.raises(sim.ScenarioError) as err:
        sim.load_scenario("dgx-a100")
    assert "dgx-a100" in str(err.value)
    for name in BUILTINS:
        assert name in str(err.value)


def test_missing_file_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(sim.ScenarioError, match="no such scenario file"):
        sim.load_scenario(str(tmp_path / "nope.yaml"))


GOOD = """\
name: tiny
description: two cards
model:
  name: NVIDIA H100 80GB HBM3
gpus:
  - {numa: 0}
  - {numa: 1}
processes:
  - pid: 5000001
    user: alice
    cmdline: python train.py
    gpus: {0: 1000}
    age: 2h
"""

# (replace this, with this, expected line, expected key in the message, expected words)
BROKEN = [
    ("  - {numa: 1}", "  - {numa: 1, powr_limit_w: 300}", 7, "gpus.1.powr_limit_w",
     "unknown key"),
    ("  name: NVIDIA H100 80GB HBM3", "  name: NVIDIA H100\n  mem_total_mib: lots", 5,
     "model.mem_total_mib", "expected an integer"),
    ("    gpus: {0: 1000}", "    gpus: {9: 1000}", 12, "processes.0.gpus.9", "no GPU 9"),
    ("    age: 2h", "    age: 3 weeks", 13, "processes.0.age", "duration"),
    ("name: tiny\n", "", None, "name", "missing"),
    ("    age: 2h", "    age: 2h\n  - {pid: 5000001, user: bob, cmdline: x}", 14,
     "processes.1.pid", "appears twice"),
    ("    age: 2h", "    age: 2h\nfaults:\n  xid:\n    - {gpu: 4, xid: 79}", 16,
     "faults.xid.0.gpu", "no GPU 4"),
    ("    age: 2h", "    age: 2h\n    state: zombie", 14, "processes.0.state", "one letter"),
    ("  - {numa: 0}", "  - {numa: 0, bus_id: 18:00}", 6, "gpus.0.bus_id", "expected like"),
    ("  - {numa: 0}", "  - {numa: 0, throttle: [too_hot]}", 6, "gpus.0.throttle",
     "unknown reason"),
]


@pytest.mark.parametrize(("old", "new", "line", "key", "words"), BROKEN)
def test_broken_scenario_names_file_line_and_key(
    tmp_path: Path, old: str, new: str, line: int | None, key: str, words: str
) -> None:
    assert old in GOOD
    path = tmp_path / "broken.yaml"
    path.write_text(GOOD.replace(old, new, 1))
    with pytest.raises(sim.ScenarioError) as err:
        sim.load_scenario(str(path))
    message = str(err.value)
    where = f"{path}:{line}" if line else str(path)  # a missing key has no line
    assert message.startswith(f"{where}: {key}: "), message
    assert words in message
    assert "\n" not in message


def test_good_tiny_scenario_loads(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(GOOD)
    scenario = sim.load_scenario(str(path))
    assert scenario.processes[0]["age"] == 7200
    assert scenario.topology == {(0, 1): "SYS"}  # different NUMA nodes


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent("""\
        name: bad
        gpus:
          - {numa: 0
        processes: []
        """))
    with pytest.raises(sim.ScenarioError) as err:
        sim.load_scenario(str(path))
    assert str(err.value).startswith(f"{path}:")
    assert "not valid YAML" in str(err.value)


def test_a_top_level_list_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(sim.ScenarioError, match="expected a mapping"):
        sim.load_scenario(str(path))


def test_durations() -> None:
    assert sim.parse_duration("2d") == 172800
    assert sim.parse_duration("3h30m") == 12600
    assert sim.parse_duration("45m") == 2700
    assert sim.parse_duration("90s") == 90
    assert sim.parse_duration(12) == 12.0
    with pytest.raises(ValueError):
        sim.parse_duration("soon")


@pytest.mark.parametrize("count", [200, 2000])
def test_synthetic_scenario_for_benchmarks(count: int) -> None:
    scenario = sim.synthetic_scenario(gpus=8, processes=count, seed=0)
    assert len(scenario.gpus) == 8 and len(scenario.processes) == count
    assert len({p["pid"] for p in scenario.processes}) == count
    nv = sim.SimNvml(scenario, clock=lambda: T0)
    nv.nvmlInit()
    listed = 0
    for i in range(8):
        handle = nv.nvmlDeviceGetHandleByIndex(i)
        mem = nv.nvmlDeviceGetMemoryInfo(handle)
        assert mem.used <= mem.total
        listed += len(nv.nvmlDeviceGetComputeRunningProcesses(handle))
    assert listed == count
    # The same seed builds the same scenario; another seed another one.
    assert sim.synthetic_scenario(8, count, seed=0).processes == scenario.processes
    assert sim.synthetic_scenario(8, count, seed=1).processes != scenario.processes


def test_lab_has_a_card_holding_memory_at_zero_utilization() -> None:
    nv = sim.SimNvml(sim.load_scenario("lab"), clock=lambda: T0)
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(2)
    for step in range(0, 600, 60):
        nv.clock = lambda step=step: T0 + step
        assert nv.nvmlDeviceGetUtilizationRates(h).gpu == 0
        assert nv.nvmlDeviceGetMemoryInfo(h).used > 20 * 1024 * sim.MIB
