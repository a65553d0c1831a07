"""Orphan flags computed once per snapshot and shared with the health rules.

The dashboard classifies every process once (for the table's flags) and hands the same
verdicts to ``health.warnings``; one-shot commands let ``warnings`` classify by itself.
Both paths must give the same warnings as classifying each row on its own did.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from gputop.analysis import health, orphans
from gputop.analysis.history import History
from gputop.analysis.pipeline import Analyser
from gputop.config import Config, analysis_settings
from gputop.model import GpuProcess, HostSnapshot
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector

T0 = 1_764_680_000.0


def lab_after(minutes: int) -> tuple[HostSnapshot, History]:
    """The lab scenario observed once a minute for ``minutes``: idle and orphan holders."""
    now = [T0]
    scenario = sim.load_scenario("lab")
    # The lab's busy-CPU, idle-SM process is its display server, which is no job starving
    # for data (type G); as a compute job the same readings are input-bound.
    for proc in scenario.processes:
        if proc["cmdline"][0].endswith("Xorg"):
            proc.update(type="C", cmdline=["python", "loader_bound.py"])
    nvml = sim.SimNvml(scenario, clock=lambda: now[0])
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="lab", demo=True,
                          clock=lambda: now[0])
    history = History(seconds=3600, process_seconds=3600)
    snap = None
    for step in range(minutes + 1):
        now[0] = T0 + 60 * step
        snap = HostSnapshot.from_dict(collector.collect())
        history.add(snap)
    assert snap is not None
    return snap, history


@pytest.fixture(scope="module")
def lab() -> tuple[HostSnapshot, History]:
    return lab_after(40)


def test_shared_flags_give_the_same_warnings_as_per_row_classification(
    lab: tuple[HostSnapshot, History],
) -> None:
    snap, history = lab
    th = health.Thresholds()
    rules = health.orphan_rules(th)
    # The round-1 way: every row classified on its own, rescanning the snapshot.
    per_row = {p.key: orphans.classify(p, snap, history, rules, snap.time)
               for p in snap.processes}
    once = orphans.classify_snapshot(snap, history, rules, snap.time)
    assert once == per_row
    by_itself = health.warnings(snap, history, th, snap.time, "alice")
    assert health.warnings(snap, history, th, snap.time, "alice", once) == by_itself
    assert health.warnings(snap, history, th, snap.time, "alice", per_row) == by_itself
    codes = Counter(w.code for w in by_itself)
    # The comparison means something only if the process rules fired.
    assert codes["idle-memory"] >= 1
    assert codes["input-bound"] >= 1


def test_given_flags_are_used_not_recomputed(lab: tuple[HostSnapshot, History]) -> None:
    snap, history = lab
    th = health.Thresholds()
    flags = dict(orphans.classify_snapshot(snap, history, health.orphan_rules(th), snap.time))
    big = max((p for p in snap.processes if not flags[p.key].names),
              key=lambda p: p.gpu_mem or 0)
    assert (big.gpu_mem or 0) >= th.idle_memory_mib * 2**20  # enough to be warned about
    assert not [w for w in health.warnings(snap, history, th, snap.time, "alice", flags)
                if w.pid == big.pid and w.code == "orphan-memory"]
    flags[big.key] = orphans.ProcessFlags(
        orphan=True, kernel=True, reasons=(("orphan", "marked by test"), ("kernel", "test"))
    )
    found = health.warnings(snap, history, th, snap.time, "alice", flags)
    mine = [w for w in found if w.pid == big.pid and w.code == "orphan-memory"]
    assert len(mine) == 1 and "marked by test" in mine[0].message


def test_incomplete_flags_are_recomputed(lab: tuple[HostSnapshot, History]) -> None:
    snap, history = lab
    th = health.Thresholds()
    expected = health.warnings(snap, history, th, snap.time, "alice")
    assert health.warnings(snap, history, th, snap.time, "alice", {}) == expected


def analyser(config: Config, history: History) -> Analyser:
    return Analyser(analysis_settings(config), history, lambda _host: "alice")


def test_flags_from_another_config_are_not_shared() -> None:
    assert analyser(Config(), History()).shares_flags
    # health: idle limits that differ from reclaim:'s need their own classification.
    assert not analyser(Config(health={"idle_minutes": 60.0}), History()).shares_flags
    assert not analyser(Config(health={"idle_memory_mib": 4096.0}), History()).shares_flags


def test_analyser_honours_the_health_idle_limit_when_it_differs() -> None:
    snap, history = lab_after(40)
    stricter = analyser(Config(health={"idle_minutes": 60.0}), history)
    # The table (reclaim: 30 min) calls them idle; the health rules (60 min) do not yet.
    flags = orphans.classify_snapshot(snap, history, stricter.settings.rules, snap.time)
    assert any(f.idle for f in flags.values())
    result = stricter(snap)
    assert any(f.idle for f in result.flags.values())
    assert not [w for w in result.warnings if w.code == "idle-memory"]


def test_analyser_flags_and_warnings_agree() -> None:
    now = [T0]
    scenario = sim.load_scenario("lab")
    # The lab's busy-CPU, idle-SM process is its display server, which is no job starving
    # for data (type G); as a compute job the same readings are input-bound.
    for proc in scenario.processes:
        if proc["cmdline"][0].endswith("Xorg"):
            proc.update(type="C", cmdline=["python", "loader_bound.py"])
    nvml = sim.SimNvml(scenario, clock=lambda: now[0])
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="lab", demo=True,
                          clock=lambda: now[0])
    analyse = analyser(Config(), History(seconds=3600, process_seconds=3600))
    result = None
    for step in range(41):
        now[0] = T0 + 60 * step
        result = analyse(HostSnapshot.from_dict(collector.collect()))
    assert result is not None and result.warnings is not None
    idle_pids = {p for (_, p), f in result.flags.items() if f.idle}
    warned = {w.pid for w in result.warnings if w.code == "idle-memory"}
    assert idle_pids and warned == idle_pids


def row(pid: int, cmdline: tuple[str, ...], **changes: object) -> GpuProcess:
    base = GpuProcess(pid=pid, gpu=0, gpu_mem=2 << 30, sm_util=0, user="alice",
                      command=" ".join(cmdline), cmdline=cmdline, ppid=100,
                      parent_command="bash", state="S", start_ticks=pid * 10)
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(
    ("cmdline", "kernel"),
    [
        (("python", "-m", "ipykernel_launcher", "-f", "/run/k.json"), True),
        (("/opt/conda/bin/ipykernel",), True),
        (("python", "-m", "ipykernel", "-f", "x"), True),
        (("python", "app.py", "/home/a/.local/share/jupyter/runtime/kernel-9f.json"), True),
        (("python", "train.py", "--kernel-size", "3"), False),
        (("python", "train.py"), False),
        ((), False),
    ],
)
def test_is_kernel_after_the_quick_rejection(cmdline: tuple[str, ...], kernel: bool) -> None:
    assert orphans.is_kernel(row(7, cmdline)) is kernel


def test_rows_without_a_flag_still_carry_busy() -> None:
    busy = row(1, ("python", "train.py"), sm_util=90)
    calm = row(2, ("python", "serve.py"), sm_util=0, gpu_mem=1 << 20)
    other_gpu = row(2, ("python", "serve.py"), gpu=1, sm_util=40, gpu_mem=1 << 20)
    snap = HostSnapshot(host="h", time=T0, processes=(busy, calm, other_gpu))
    flags = orphans.classify_snapshot(snap, None)
    assert flags[busy.key].busy and not flags[busy.key]
    # busy on any of its GPUs counts for the process on every GPU
    assert flags[calm.key].busy and flags[other_gpu.key].busy
    lone = HostSnapshot(host="h", time=T0, processes=(calm,))
    assert not orphans.classify_snapshot(lone, None)[calm.key].busy
