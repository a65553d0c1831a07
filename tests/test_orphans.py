"""Orphan, kernel, idle, zombie and hidden flags; unaccounted memory; what is reclaimable.

The first half builds snapshots from /proc readings of real processes the test starts
(a fake Jupyter kernel and its fake server, a zombie, a sleeper); the second half covers
the rules on hand-made rows and on a real nvidia-smi capture.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from helpers.procs import (
    snapshot_of,
    start_fake_kernel,
    start_sleeper,
    start_zombie,
)

from gputop.analysis.history import History
from gputop.analysis.orphans import (
    MIB,
    OrphanRules,
    classify,
    classify_snapshot,
    ghost_memory,
    is_kernel,
    reclaimable,
    unaccounted,
)
from gputop.model import DeviceHolder, Gpu, GpuProcess, HostSnapshot

GIB = 1024**3
FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"


def _row(snapshot: HostSnapshot, pid: int) -> GpuProcess:
    return next(p for p in snapshot.processes if p.pid == pid)


# -- real processes -------------------------------------------------------------------


def test_fake_kernel_with_live_server_is_kernel_not_orphan(reaper, tmp_path):
    kernel = start_fake_kernel(reaper, tmp_path)
    snap = snapshot_of({kernel.pid: 4 * GIB})
    row = _row(snap, kernel.pid)
    assert row.kernel_file == str(kernel.connection_file)
    flags = classify(row, snap, None)
    assert flags.kernel and not flags.orphan
    assert flags.server_pid == kernel.server.pid
    assert dict(flags.reasons)["kernel"] == (
        f"Jupyter kernel, notebook server pid {kernel.server.pid}"
    )
    assert not flags.reclaimable


def test_kernel_becomes_orphan_when_its_server_dies(reaper, tmp_path):
    kernel = start_fake_kernel(reaper, tmp_path)
    kernel.orphan()
    snap = snapshot_of({kernel.pid: 4 * GIB})
    row = _row(snap, kernel.pid)
    # Linux hands it to init, or to a `systemd --user` subreaper on a desktop session.
    assert row.ppid != kernel.server.pid
    adopter = "init (pid 1)" if row.ppid == 1 else f"systemd --user (pid {row.ppid})"
    flags = classify(row, snap, None)
    assert flags.kernel and flags.orphan and flags.reclaimable
    reasons = dict(flags.reasons)
    assert reasons["orphan"] == f"its notebook server is gone; re-parented to {adopter}"
    assert reasons["kernel"] == "Jupyter kernel, notebook server not running"


def test_kernel_whose_connection_file_was_deleted_is_orphan(reaper, tmp_path):
    kernel = start_fake_kernel(reaper, tmp_path)
    snap = snapshot_of({kernel.pid: GIB})
    assert not classify(_row(snap, kernel.pid), snap, None).orphan
    kernel.connection_file.unlink()
    snap = snapshot_of({kernel.pid: GIB})
    row = _row(snap, kernel.pid)
    assert row.kernel_file_exists is False
    flags = classify(row, snap, None)
    assert flags.orphan
    assert "connection file" in dict(flags.reasons)["orphan"]
    assert str(kernel.connection_file) in dict(flags.reasons)["orphan"]


def test_real_zombie_names_the_parent_that_must_reap_it(reaper):
    zombie = start_zombie(reaper)
    snap = snapshot_of({zombie.pid: 512 * MIB})
    row = _row(snap, zombie.pid)
    assert row.state == "Z" and row.ppid == os.getpid()
    flags = classify(row, snap, None)
    assert flags.zombie and not flags.orphan and not flags.reclaimable
    text = dict(flags.reasons)["zombie"]
    assert text.startswith(f"defunct; its parent {os.getpid()} (")
    assert text.endswith("must reap it")
    assert "python" in text  # the parent's command: this pytest process


def test_real_process_idle_for_the_window_is_flagged(reaper):
    sleeper = start_sleeper(reaper)
    pid = sleeper.pid
    history = History(seconds=120, process_seconds=3600)
    t0 = 1_700_000_000.0
    # 31 minutes of samples one minute apart: 0 % SM while holding 12 GiB.
    for minute in range(32):
        history.add(snapshot_of({pid: 12 * GIB}, time_=t0 + 60 * minute))
    now = t0 + 60 * 31
    snap = snapshot_of({pid: 12 * GIB}, time_=now)
    history.add(snap)
    flags = classify(_row(snap, pid), snap, history, OrphanRules(), now)
    assert flags.idle and flags.idle_since == t0
    text = dict(flags.reasons)["idle"]
    assert text.startswith("0 % SM for 31m as observed by gputop (since ")
    assert text.endswith("while holding 12.0 GiB")
    assert flags.reclaimable  # idle alone is enough


# -- the idle rule on observed history --------------------------------------------------


def _proc(pid: int = 4242, **kw) -> GpuProcess:
    base = {
        "gpu": 0,
        "gpu_mem": 2 * GIB,
        "sm_util": 0,
        "user": "alice",
        "uid": 1001,
        "command": "python train.py",
        "ppid": 900,
        "parent_command": "bash",
        "state": "S",
        "start_ticks": 1234,
    }
    base.update(kw)
    return GpuProcess(pid=pid, **base)


def _snap(procs, time_=1_700_000_000.0, gpus=None) -> HostSnapshot:
    gpus = gpus or (Gpu(index=0, mem_used=sum(p.gpu_mem or 0 for p in procs), mem_total=80 * GIB),)
    return HostSnapshot(host="h", time=time_, gpus=tuple(gpus), processes=tuple(procs))


def _feed(history: History, samples: list[tuple[float, GpuProcess]]) -> HostSnapshot:
    snap = None
    for t, proc in samples:
        snap = _snap([proc], time_=t)
        history.add(snap)
    assert snap is not None
    return snap


def test_idle_needs_the_full_window_of_observation():
    history = History(process_seconds=7200)
    t0 = 1_700_000_000.0
    snap = _feed(history, [(t0 + 60 * m, _proc()) for m in range(30)])  # 29 min observed
    now = t0 + 60 * 29
    assert not classify(snap.processes[0], snap, history, OrphanRules(), now).idle
    snap = _feed(history, [(t0 + 60 * 30, _proc())])
    assert classify(snap.processes[0], snap, history, OrphanRules(), t0 + 1800).idle


def test_a_busy_sample_restarts_the_idle_clock():
    history = History(process_seconds=7200)
    t0 = 1_700_000_000.0
    samples = [(t0 + 60 * m, _proc(sm_util=0 if m != 20 else 35)) for m in range(41)]
    snap = _feed(history, samples)
    flags = classify(snap.processes[0], snap, history, OrphanRules(), t0 + 2400)
    assert not flags.idle  # only 20 min idle since the busy minute
    assert classify(
        snap.processes[0], snap, history, OrphanRules(idle_minutes=15), t0 + 2400
    ).idle_since == t0 + 60 * 21


def test_idle_needs_enough_memory_held():
    history = History(process_seconds=7200)
    t0 = 1_700_000_000.0
    small = _feed(history, [(t0 + 60 * m, _proc(gpu_mem=300 * MIB)) for m in range(40)])
    assert not classify(small.processes[0], small, history, OrphanRules(), t0 + 2340).idle
    rules = OrphanRules(idle_min_mem_mib=256)
    assert classify(small.processes[0], small, history, rules, t0 + 2340).idle


def test_idle_clock_starts_when_the_memory_floor_is_reached():
    history = History(process_seconds=7200)
    t0 = 1_700_000_000.0
    # 40 idle minutes holding only 300 MiB, then 2 GiB: idle with little memory held
    # does not count towards the window, so the clock starts at the jump.
    samples = [(t0 + 60 * m, _proc(gpu_mem=300 * MIB)) for m in range(40)]
    samples += [(t0 + 60 * m, _proc(gpu_mem=2 * GIB)) for m in range(40, 45)]
    snap = _feed(history, samples)
    assert not classify(snap.processes[0], snap, history, OrphanRules(), t0 + 2640).idle
    rules = OrphanRules(idle_minutes=4)
    assert classify(snap.processes[0], snap, history, rules, t0 + 2640).idle_since == t0 + 2400


def test_unknown_sm_util_never_counts_as_idle():
    history = History(process_seconds=7200)
    t0 = 1_700_000_000.0
    snap = _feed(history, [(t0 + 60 * m, _proc(sm_util=None)) for m in range(40)])
    assert not classify(snap.processes[0], snap, history, OrphanRules(), t0 + 2340).idle


# -- parents, kernels, containers ---------------------------------------------------------


@pytest.mark.parametrize(
    ("ppid", "parent", "orphan"),
    [
        (1, "/sbin/init", True),
        (3100, "/usr/lib/systemd/systemd --user", True),
        (900, "bash", False),
        (900, "/usr/bin/systemd-run --scope", False),
        (None, None, False),
    ],
)
def test_orphan_is_parent_gone(ppid, parent, orphan):
    proc = _proc(ppid=ppid, parent_command=parent)
    flags = classify(proc, _snap([proc]), None)
    assert flags.orphan is orphan
    if orphan:
        assert dict(flags.reasons)["orphan"].startswith("its parent is gone; re-parented to")


def test_desktop_graphics_under_systemd_user_is_not_orphan():
    proc = _proc(type="G", command="/usr/bin/plasmashell", ppid=1800,
                 parent_command="/usr/lib/systemd/systemd --user")
    assert not classify(proc, _snap([proc]), None).orphan


def test_kernel_detection_variants():
    launcher = ("python", "-m", "ipykernel_launcher", "-f", "/x/kernel-1.json")
    assert is_kernel(_proc(cmdline=launcher))
    assert is_kernel(_proc(cmdline=("python", "-m", "ipykernel", "-f", "k.json")))
    assert is_kernel(_proc(cmdline=("/opt/conda/bin/python", "/run/kernel-ab12.json")))
    assert not is_kernel(_proc(cmdline=("python", "train.py", "--config", "kernel.yaml")))


def test_hidden_process_from_another_namespace():
    proc = GpuProcess(pid=77, gpu=0, gpu_mem=8 * GIB, visible=False)
    flags = classify(proc, _snap([proc]), None)
    assert flags.hidden and not flags.orphan and not flags.reclaimable
    assert "not in this PID namespace" in dict(flags.reasons)["hidden"]


def test_flag_order_is_stable_for_the_detail_view():
    proc = _proc(cmdline=("python", "-m", "ipykernel_launcher", "-f", "/r/kernel-1.json"),
                 kernel_file="/r/kernel-1.json", kernel_file_exists=True, ppid=1)
    assert classify(proc, _snap([proc]), None).names == ("orphan", "kernel")
    assert classify(proc, _snap([proc]), None).explain()[0].startswith("orphan: ")


# -- memory nobody explains ----------------------------------------------------------------


def _smi_table(text: str, title: str) -> tuple[int, int, list[int]]:
    """(used MiB, total MiB, process MiB) from one default table of a capture."""
    section = text.split(f"# {title}\n", 1)[1]
    used, total = map(int, re.search(r"(\d+)MiB /\s+(\d+)MiB", section).groups())
    procs_block = section.split("Processes:", 1)[1].split("\n\n", 1)[0]
    mems = [int(m) for m in re.findall(r"(\d+)MiB \|", procs_block)]
    return used, total, mems


@pytest.mark.parametrize("title", ["idle :: nvidia-smi (default table)"])
def test_display_card_capture_shows_no_false_unaccounted(title):
    text = (FIXTURES / "capture-rtx-4080-super-595.txt").read_text()
    used, total, mems = _smi_table(text, title)
    assert used - sum(mems) > 200  # the real gap the floor must absorb
    procs = [GpuProcess(pid=1000 + i, gpu=0, gpu_mem=m * MIB) for i, m in enumerate(mems)]
    gpu = Gpu(index=0, mem_used=used * MIB, mem_total=total * MIB)
    assert unaccounted(_snap(procs, gpus=[gpu])) == {}
    # The same card with a 6 GiB holder NVML does not list:
    gpu = Gpu(index=0, mem_used=(used + 6144) * MIB, mem_total=total * MIB)
    assert unaccounted(_snap(procs, gpus=[gpu])) == {0: (used + 6144 - sum(mems)) * MIB}


def test_unaccounted_skips_gpus_with_unknown_process_memory():
    procs = [GpuProcess(pid=5, gpu=0, gpu_mem=None)]
    gpu = Gpu(index=0, mem_used=40 * GIB, mem_total=80 * GIB)
    assert unaccounted(_snap(procs, gpus=[gpu])) == {}


def test_unlisted_device_holders_and_scan_note():
    listed = _proc(pid=10)
    snap = HostSnapshot(
        host="h",
        time=0.0,
        gpus=(Gpu(index=0, mem_used=20 * GIB, mem_total=80 * GIB),),
        processes=(listed,),
        device_holders=(
            DeviceHolder(pid=10, command="python train.py", devices=("/dev/nvidia0",)),
            DeviceHolder(pid=11, command="/usr/bin/nvidia-persistenced --user x"),
            DeviceHolder(pid=12, user="bob", command="python stuck.py",
                         devices=("/dev/nvidia0", "/dev/nvidiactl")),
            DeviceHolder(pid=13, command="python self"),
        ),
        device_scan_note="12 processes not readable (not root)",
    )
    ghost = ghost_memory(snap, ignore_pids=[13])
    assert [h.pid for h in ghost.holders] == [12]
    assert ghost.note == "12 processes not readable (not root)"
    assert ghost.unaccounted == {0: 18 * GIB}


# -- what the reclaim view offers ----------------------------------------------------------


def test_reclaimable_mine_only_unless_root_and_largest_first():
    mine_a = _proc(pid=100, gpu=0, gpu_mem=3 * GIB, ppid=1)
    mine_a_gpu1 = _proc(pid=100, gpu=1, gpu_mem=5 * GIB, ppid=1)
    mine_b = _proc(pid=101, gpu_mem=10 * GIB, ppid=1)
    theirs = _proc(pid=200, user="bob", uid=1002, gpu_mem=20 * GIB, ppid=1)
    busy = _proc(pid=102, gpu_mem=30 * GIB)  # parent alive, not idle
    zombie = _proc(pid=103, state="Z", ppid=1)
    nohup = _proc(pid=104, gpu_mem=40 * GIB, ppid=1, sm_util=87)  # orphan, but computing
    snap = _snap([mine_a, mine_a_gpu1, mine_b, theirs, busy, zombie, nohup])
    flags = classify_snapshot(snap, None)
    mine = reclaimable(snap, flags, "alice", is_root=False)
    assert [(r.pid, r.mem, r.gpus) for r in mine] == [(101, 10 * GIB, (0,)), (100, 8 * GIB, (0, 1))]
    assert [r.pid for r in reclaimable(snap, flags, 1001, is_root=False)] == [101, 100]
    assert [r.pid for r in reclaimable(snap, flags, "root", is_root=True)] == [200, 101, 100]


def test_busy_orphan_is_flagged_but_not_offered_unless_a_kernel():
    nohup = _proc(pid=104, ppid=1, sm_util=87)
    flags = classify(nohup, _snap([nohup]), None)
    assert flags.orphan and flags.busy and not flags.reclaimable
    assert dict(flags.reasons)["orphan"].endswith("(still computing: started with nohup?)")
    kernel = _proc(pid=105, ppid=1, sm_util=20,
                   cmdline=("python", "-m", "ipykernel_launcher", "-f", "/r/kernel-2.json"))
    assert classify(kernel, _snap([kernel]), None).reclaimable
