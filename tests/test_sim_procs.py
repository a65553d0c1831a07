"""SimProcs: the fake /proc of simulated processes, and signals that touch only the sim."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputop.sources import sim

T0 = 1_764_680_000.0
PROC_KEYS = {
    "user", "uid", "command", "cmdline", "ppid", "state", "start_time", "start_ticks",
    "cpu_percent", "rss", "parent_command", "parent_user", "kernel_file",
    "kernel_file_exists", "simulated",
}


def lab() -> tuple[sim.SimNvml, sim.SimProcs]:
    nv = sim.SimNvml(sim.load_scenario("lab"), clock=lambda: T0)
    nv.nvmlInit()
    return nv, sim.SimProcs(nv)


def listed_pids(nv: sim.SimNvml) -> set[int]:
    pids = set()
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        pids |= {p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h)}
        pids |= {p.pid for p in nv.nvmlDeviceGetGraphicsRunningProcesses(h)}
    return pids


def test_simulated_pids_cannot_be_real_pids() -> None:
    real_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert real_max <= sim.LINUX_PID_MAX_LIMIT
    for name in ("dgx-h100", "lab", "faulty"):
        for proc in sim.load_scenario(name).processes:
            assert proc["pid"] > sim.LINUX_PID_MAX_LIMIT >= real_max


def test_host_info_has_the_procfs_keys() -> None:
    _, procs = lab()
    info = procs.host_info()
    assert set(info) == {"hostname", "cpu_count", "cpu_percent", "load", "mem_total",
                         "mem_available"}
    assert info["hostname"] == "lab-gpu-03" and info["cpu_count"] == 48
    assert 0 < info["mem_available"] <= info["mem_total"]
    assert len(info["load"]) == 3 and 10 <= info["cpu_percent"] <= 30


def test_process_info_for_every_listed_pid_except_the_hidden_one() -> None:
    nv, procs = lab()
    pids = listed_pids(nv)
    assert 5100090 in pids  # NVML lists the container's process ...
    info = procs.process_info(pids)
    assert 5100090 not in info  # ... but it is not in our PID namespace
    assert set(info) == pids - {5100090}
    for pid, entry in info.items():
        assert set(entry) >= PROC_KEYS, pid
        assert entry["simulated"] is True
        assert entry["start_time"] < T0
        assert entry["start_ticks"] == procs.start_ticks(entry["start_time"])
    bob = info[5100012]
    assert bob["user"] == "bob" and bob["state"] == "S"
    assert T0 - bob["start_time"] == 14 * 3600  # "age: 14h" in the scenario


def test_jupyter_kernels_and_their_parents() -> None:
    _, procs = lab()
    live, orphan = procs.process(5100032), procs.process(5100034)
    assert live is not None and orphan is not None
    assert live["kernel_file"].endswith(".json") and live["kernel_file_exists"] is True
    assert "jupyter-lab" in live["parent_command"]
    assert orphan["kernel_file"].startswith("/home/alice/.local/share/jupyter/runtime/kernel-")
    assert orphan["kernel_file_exists"] is False
    assert orphan["parent_command"] == "/usr/lib/systemd/systemd --user"
    assert T0 - orphan["start_time"] > 6 * 86400
    assert orphan["cwd"] == "/home/alice"


def test_zombie_looks_like_proc_shows_it() -> None:
    _, procs = lab()
    zombie = procs.process(5100041)
    assert zombie is not None
    assert zombie["state"] == "Z"
    assert zombie["cmdline"] == () and zombie["command"] == "[python]"
    assert zombie["parent_user"] == "erin"


def test_parent_chain_walks_up_to_init() -> None:
    _, procs = lab()
    chain = procs.parent_chain(5100012)
    assert [p["pid"] for p in chain] == [5100011, 5100010, 1]
    assert chain[-1]["user"] == "root"
    assert procs.parent_chain(5100090) == []  # hidden: nothing to walk
    assert procs.user_name(0) == "root"


def _gpu_of(nv: sim.SimNvml, pid: int) -> int:
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        if pid in {p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h)}:
            return i
    raise AssertionError(f"{pid} not listed")


@pytest.fixture
def no_real_signals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Record any os.kill: simulated pids must never reach the real kernel."""
    sent: list[tuple[int, int]] = []

    def record(pid: int, sig: int) -> None:
        sent.append((pid, sig))
        raise AssertionError("os.kill called for a simulated process")

    monkeypatch.setattr(os, "kill", record)
    return sent


def test_term_ends_my_process_and_frees_its_memory(no_real_signals: list) -> None:
    nv, procs = lab()
    gpu = _gpu_of(nv, 5100032)
    h = nv.nvmlDeviceGetHandleByIndex(gpu)
    before = nv.nvmlDeviceGetMemoryInfo(h).used
    ticks = procs.process(5100032)["start_ticks"]
    answer = procs.signal(5100032, ticks, "TERM")
    assert answer["outcome"] == "exited" and answer["ok"] is True
    assert answer["owner"] == "alice"
    assert procs.process(5100032) is None
    assert 5100032 not in listed_pids(nv)
    assert before - nv.nvmlDeviceGetMemoryInfo(h).used > 20 * 1024 * sim.MIB
    assert procs.signal(5100032, ticks, "TERM")["outcome"] == "already gone"
    assert no_real_signals == []


def test_a_process_that_ignores_term_needs_kill(no_real_signals: list) -> None:
    _, procs = lab()
    ticks = procs.process(5100033)["start_ticks"]
    answer = procs.signal(5100033, ticks, "SIGTERM")
    assert answer["outcome"] == "still alive" and answer["ok"] is False
    assert procs.process(5100033) is not None
    assert procs.signal(5100033, ticks, 9)["outcome"] == "killed"
    assert procs.process(5100033) is None
    assert no_real_signals == []


def test_refusals(no_real_signals: list) -> None:
    _, procs = lab()
    bob = procs.process(5100012)
    denied = procs.signal(5100012, bob["start_ticks"], "KILL")
    assert denied["outcome"] == "permission denied" and denied["owner"] == "bob"
    assert procs.process(5100012) is not None
    mine = procs.process(5100034)
    reused = procs.signal(5100034, mine["start_ticks"] + 1, "KILL")
    assert reused["outcome"] == "pid reused"
    assert procs.process(5100034) is not None
    assert procs.signal(5_999_999, 1, "TERM")["outcome"] == "already gone"
    assert procs.signal(5100090, 1, "TERM")["outcome"] == "already gone"  # hidden
    with pytest.raises(ValueError):
        procs.signal(5100034, mine["start_ticks"], "SIGFOO")
    assert no_real_signals == []


def test_a_zombie_does_not_die_from_a_signal_even_for_its_owner(no_real_signals: list) -> None:
    nv = sim.SimNvml(sim.load_scenario("lab"), clock=lambda: T0)
    nv.scenario.me = "erin"
    procs = sim.SimProcs(nv)
    zombie = procs.process(5100041)
    answer = procs.signal(5100041, zombie["start_ticks"], "KILL")
    assert answer["outcome"] == "still alive"
    assert "zombie" in answer["message"] and "5100040" in answer["message"]
    assert procs.process(5100041) is not None
    assert no_real_signals == []


def test_root_may_signal_anyone(no_real_signals: list) -> None:
    nv = sim.SimNvml(sim.load_scenario("lab"), clock=lambda: T0)
    nv.scenario.me = "root"
    procs = sim.SimProcs(nv)
    bob = procs.process(5100012)
    assert procs.signal(5100012, bob["start_ticks"], "TERM")["outcome"] == "exited"
    assert procs.process(5100012) is None  # gone from the simulation ...
    assert no_real_signals == []  # ... and only from the simulation


def test_processes_added_at_runtime_show_up_everywhere() -> None:
    nv, procs = lab()
    nv.add_process(5_300_001, "alice", ["python", "new.py"], {1: 512}, util=(10, 20), age=90)
    assert 5_300_001 in listed_pids(nv)
    entry = procs.process(5_300_001)
    assert entry["command"] == "python new.py" and T0 - entry["start_time"] == 90
    with pytest.raises(ValueError):
        nv.add_process(5_300_002, "alice", "python x.py", {9: 1})
