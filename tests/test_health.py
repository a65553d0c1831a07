"""Each health rule on hand-built snapshots: fires on the fault, stays quiet otherwise."""

from __future__ import annotations

import dataclasses

import pytest

from gputop.analysis import health
from gputop.analysis.health import Thresholds, WarningTracker
from gputop.analysis.history import History
from gputop.model import (
    CRITICAL,
    GPU_ERROR,
    GPU_LOST,
    HOST_CONNECTING,
    HOST_UNREACHABLE,
    INFO,
    WARNING,
    Gpu,
    GpuProcess,
    HostSnapshot,
    NvLink,
    XidEvent,
    error_snapshot,
)

GIB = 1024**3
NOW = 1_764_680_000.0


def healthy(index: int = 0, **changes: object) -> Gpu:
    """A busy, healthy data-centre card with every field the rules read filled in."""
    base = Gpu(
        index=index,
        name="NVIDIA H100 80GB HBM3",
        util_gpu=95,
        mem_used=40 * GIB,
        mem_total=80 * GIB,
        temp=62,
        temp_slowdown=90,
        temp_shutdown=95,
        fan=None,
        persistence_mode=True,
        ecc_mode=True,
        ecc_volatile_uncorrected=0,
        ecc_volatile_corrected=3,
        retired_pages_pending=False,
        remap_pending=False,
        remap_failure=False,
        clock_event_reasons=("sw_power_cap",),
        pcie_gen=5,
        pcie_gen_max=5,
        pcie_width=16,
        pcie_width_max=16,
        nvlinks=tuple(NvLink(link=n, active=True) for n in range(18)),
    )
    return dataclasses.replace(base, **changes)


def job(gpu: Gpu) -> GpuProcess:
    """The training job that keeps a busy card busy: it holds the card's memory (memory
    no listed process holds is someone unseen's: the unseen-use rule)."""
    return GpuProcess(pid=9000 + gpu.index, gpu=gpu.index, gpu_mem=gpu.mem_used, sm_util=95,
                      user="carol", command="python train.py", ppid=8000,
                      parent_command="bash", state="R", start_ticks=555, cpu_percent=100.0)


def snap(*gpus: Gpu, **changes: object) -> HostSnapshot:
    """One host's cards, each with its job unless ``processes`` says who runs there."""
    gpus = gpus or (healthy(),)
    changes.setdefault("time", NOW)
    changes.setdefault("processes", tuple(job(g) for g in gpus if g.mem_used))
    return HostSnapshot(host="node1", gpus=gpus, **changes)  # type: ignore[arg-type]


def running(*procs: GpuProcess, card: Gpu | None = None, **changes: object) -> HostSnapshot:
    """Card 0 (``card``, else a healthy one) running ``procs``: its memory used is what
    they hold."""
    used = sum(p.gpu_mem or 0 for p in procs)
    return snap(dataclasses.replace(card or healthy(), mem_used=used), processes=procs,
                **changes)


def codes(warnings: list) -> dict[str, str]:
    return {w.code: w.severity for w in warnings}


def test_healthy_busy_card_has_no_warnings() -> None:
    assert health.warnings(snap(healthy(0), healthy(1)), None, Thresholds(), NOW) == []


def test_all_none_card_has_no_warnings() -> None:
    # A consumer card answering "Not Supported" everywhere: None is never a fault.
    assert health.warnings(snap(Gpu(index=0)), None, Thresholds(), NOW) == []


def test_gpu_lost_is_critical_and_suppresses_other_rules() -> None:
    lost = Gpu(index=3, state=GPU_LOST, error="fallen off the bus; needs a reset or reboot",
              temp=99, temp_shutdown=95)
    found = health.warnings(snap(healthy(0), lost), None, Thresholds(), NOW)
    assert [(w.code, w.severity, w.gpu) for w in found] == [("gpu-lost", CRITICAL, 3)]
    assert "fallen off the bus" in found[0].message
    assert found[0].hint and found[0].host == "node1" and found[0].since == NOW


def test_gpu_unreadable_is_a_warning() -> None:
    found = health.warnings(snap(Gpu(index=1, state=GPU_ERROR, error="Unknown Error")))
    assert codes(found) == {"gpu-unreadable": WARNING}


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"ecc_volatile_uncorrected": 2}, "ecc-uncorrected"),
        ({"remap_failure": True}, "remap-failure"),
        ({"remap_pending": True}, "remap-pending"),
        ({"retired_pages_pending": True}, "retired-pages-pending"),
        ({"temp": 93}, "temp-shutdown"),  # shutdown 95, margin 2
    ],
)
def test_critical_rules(changes: dict, code: str) -> None:
    found = health.warnings(snap(healthy(2, **changes)), None, Thresholds(), NOW)
    assert codes(found).get(code) == CRITICAL
    w = next(w for w in found if w.code == code)
    assert w.gpu == 2 and w.hint and w.message


def test_temp_shutdown_replaces_near_slowdown() -> None:
    found = codes(health.warnings(snap(healthy(temp=93))))
    assert found == {"temp-shutdown": CRITICAL}
    # an A100 (slowdown 89, shutdown 92) at 88 C is hot, not about to shut down
    a100 = healthy(temp=88, temp_slowdown=89, temp_shutdown=92)
    assert codes(health.warnings(snap(a100))) == {"temp-near-slowdown": WARNING}


def test_temp_near_slowdown() -> None:
    assert codes(health.warnings(snap(healthy(temp=85)))) == {"temp-near-slowdown": WARNING}
    assert health.warnings(snap(healthy(temp=84))) == []
    th = Thresholds(temp_slowdown_margin=10)
    assert codes(health.warnings(snap(healthy(temp=80)), None, th)) == {
        "temp-near-slowdown": WARNING
    }


@pytest.mark.parametrize(
    ("reasons", "expected"),
    [
        (("sw_thermal_slowdown",), {"thermal-slowdown"}),
        (("hw_slowdown", "hw_thermal_slowdown"), {"thermal-slowdown"}),
        (("hw_slowdown", "hw_power_brake_slowdown"), {"power-brake"}),
        (("hw_slowdown",), {"hw-slowdown"}),
        (("gpu_idle",), set()),
        (("sw_power_cap",), set()),
        (("applications_clocks_setting", "sync_boost"), set()),
    ],
)
def test_clock_event_reasons(reasons: tuple, expected: set) -> None:
    found = health.warnings(snap(healthy(clock_event_reasons=reasons)))
    assert set(codes(found)) == expected
    assert all(w.severity == WARNING for w in found)


def test_busy_card_holding_most_memory_is_not_a_warning() -> None:
    # PyTorch's caching allocator and vLLM hold 90 %+ by design: no alarm by default.
    assert health.warnings(snap(healthy(mem_used=78 * GIB))) == []  # 97.5 %


def test_nearly_full_card_is_an_oom_risk() -> None:
    found = health.warnings(snap(healthy(mem_used=int(78.5 * GIB))))  # 98.1 %
    assert codes(found) == {"oom-risk": WARNING}
    assert "98%" in found[0].message and "next allocation" in found[0].message
    assert health.warnings(snap(healthy(mem_used=78 * GIB)), None,
                           Thresholds(oom_percent=97)) != []
    assert health.warnings(snap(healthy(mem_used=80 * GIB)), None,
                           Thresholds(oom_percent=0)) == []  # 0 turns it off


def test_classic_memory_alert_is_opt_in_with_remedies() -> None:
    th = Thresholds(mem_percent=80)
    found = health.warnings(snap(healthy(mem_used=70 * GIB)), None, th)
    assert codes(found) == {"mem-high": WARNING}
    w = found[0]
    assert "88%" in w.message
    for remedy in ("smaller batch", "mixed precision", "gradient accumulation", "checkpointing"):
        assert remedy in (w.hint or "")
    assert health.warnings(snap(healthy(mem_used=64 * GIB)), None, th) == []  # exactly 80 %
    assert health.warnings(snap(healthy(mem_used=70 * GIB))) == []  # off by default


def _ramp(history: History, minutes: float, used_at) -> float:  # type: ignore[no-untyped-def]
    """Feed one sample every 10 s; ``used_at(t)`` gives GiB used t seconds in."""
    t = 0.0
    while t <= minutes * 60:
        history.add(snap(healthy(mem_used=int(used_at(t) * GIB)), time=NOW + t))
        t += 10
    return NOW + t - 10


def _oom(history: History, last: float) -> list:
    current = history.gpu_series("node1", 0, "mem_used")[-1][1]
    found = health.warnings(snap(healthy(mem_used=current), time=last), history, Thresholds(),
                            last)
    return [w for w in found if w.code == "oom-risk"]


def test_memory_growing_towards_full_warns_only_while_it_grows() -> None:
    # 20 GiB + 1.2 GiB/min for 30 min, then flat at 56 GiB (a plateau under 98 %).
    def used(t: float) -> float:
        return 20 + 1.2 * min(t, 1800) / 60

    history = History(seconds=3600)
    # at 10 min: 32 GiB, 48 GiB to go = 40 min > 15 min horizon: quiet
    assert _oom(history, _ramp(history, 10, used)) == []
    history = History(seconds=3600)
    # at 28 min: 53.6 GiB, 26.4 GiB to go = 22 min: still quiet
    assert _oom(history, _ramp(history, 28, used)) == []

    def fast(t: float) -> float:
        return 20 + 4 * min(t, 720) / 60  # 4 GiB/min for 12 min, then flat at 68 GiB

    history = History(seconds=3600)
    found = _oom(history, _ramp(history, 10, fast))  # 60 GiB: 20 GiB to go = 5 min
    assert len(found) == 1 and found[0].severity == WARNING and found[0].gpu == 0
    assert "grows 4.0 GiB/min: full in ~5 min" in found[0].message
    history = History(seconds=3600)
    assert _oom(history, _ramp(history, 20, fast)) == []  # plateau for 8 min: no growth


def test_model_load_step_then_plateau_is_not_growth() -> None:
    # 2 GiB, then a model load to 70 GiB at minute 3, then flat: the straight line over
    # the window slopes up, but memory does not grow any more.
    history = History(seconds=3600)
    for minutes in (4.0, 5.0, 6.5):
        history = History(seconds=3600)
        last = _ramp(history, minutes, lambda t: 2 if t < 180 else 70)
        assert _oom(history, last) == []


def test_pcie_width_below_max_is_a_warning_even_when_idle() -> None:
    found = health.warnings(snap(healthy(pcie_width=4, util_gpu=0)))
    assert codes(found) == {"pcie-width": WARNING}
    assert "x4" in found[0].message and "x16" in found[0].message


def test_pcie_gen_below_max_only_matters_while_busy() -> None:
    idle = healthy(pcie_gen=1, util_gpu=0)
    assert health.warnings(snap(idle)) == []
    busy = healthy(pcie_gen=1, util_gpu=90)
    found = health.warnings(snap(busy))
    assert codes(found) == {"pcie-gen": WARNING}
    assert "gen 1" in found[0].message
    # util unknown: we cannot tell busy from idle, so no claim
    assert health.warnings(snap(healthy(pcie_gen=1, util_gpu=None))) == []


def test_nvlink_down_while_peers_up() -> None:
    links = tuple(NvLink(link=n, active=n not in (4, 7)) for n in range(18))
    found = health.warnings(snap(healthy(0, nvlinks=links), healthy(1)))
    assert codes(found) == {"nvlink-down": WARNING}
    assert found[0].gpu == 0 and "2 of 18" in found[0].message
    # a card whose links are all down while the other cards' links are up
    dead = tuple(NvLink(link=n, active=False) for n in range(18))
    found = health.warnings(snap(healthy(0), healthy(1, nvlinks=dead)))
    assert [(w.code, w.gpu) for w in found] == [("nvlink-down", 1)]


def test_nvlinks_all_down_everywhere_is_not_a_fault() -> None:
    # NVLink not in use on this box (e.g. bridges not installed): nothing is "down".
    dead = tuple(NvLink(link=n, active=False) for n in range(4))
    assert health.warnings(snap(healthy(0, nvlinks=dead), healthy(1, nvlinks=dead))) == []
    unknown = tuple(NvLink(link=n, active=None) for n in range(4))
    assert health.warnings(snap(healthy(0, nvlinks=unknown))) == []


def test_fan_stopped_on_hot_card() -> None:
    assert codes(health.warnings(snap(healthy(fan=0, temp=70)))) == {"fan-stopped": WARNING}
    # docs/health.md: temp >= fan_hot_temp (default 60)
    assert codes(health.warnings(snap(healthy(fan=0, temp=60)))) == {"fan-stopped": WARNING}
    assert health.warnings(snap(healthy(fan=0, temp=59))) == []
    # consumer cards stop their fans when cool: not a fault
    assert health.warnings(snap(healthy(fan=0, temp=40))) == []
    assert health.warnings(snap(healthy(fan=None, temp=70))) == []


def test_persistence_off_on_data_centre_cards_only() -> None:
    found = health.warnings(snap(healthy(persistence_mode=False)))
    assert codes(found) == {"persistence-off": INFO}
    assert found[0].gpu == 0
    consumer = healthy(persistence_mode=False, name="NVIDIA GeForce RTX 4090")
    assert health.warnings(snap(consumer)) == []


def test_persistence_off_on_many_cards_is_one_host_line() -> None:
    gpus = [healthy(i, persistence_mode=i == 3) for i in range(6)]  # only GPU 3 has it on
    found = health.warnings(snap(*gpus))
    assert [(w.code, w.gpu) for w in found] == [("persistence-off", None)]
    assert "5 data-centre cards (GPU 0-2,4-5)" in found[0].message


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Tesla T4", True),
        ("NVIDIA A100-SXM4-80GB", True),
        ("NVIDIA H100 80GB HBM3", True),
        ("NVIDIA L40S", True),
        ("NVIDIA A10G", True),
        ("NVIDIA GeForce RTX 3090", False),
        ("NVIDIA RTX A6000", False),
        ("NVIDIA RTX 4000 SFF Ada Generation", False),
        ("Quadro P4000", False),
        (None, False),
    ],
)
def test_data_centre_names(name: str | None, expected: bool) -> None:
    assert health.is_data_centre(name) is expected


def test_xid_events_carry_catalog_meaning() -> None:
    events = (
        XidEvent(gpu=1, xid=79, time=NOW - 5, detail="GPU has fallen off the bus."),
        XidEvent(gpu=1, xid=79, time=NOW - 2),
        XidEvent(gpu=0, xid=13, time=NOW - 1, detail="Graphics Exception"),
    )
    found = health.warnings(snap(healthy(0), healthy(1), xid_events=events))
    assert [(w.code, w.severity, w.gpu) for w in found] == [
        ("xid-79", CRITICAL, 1),
        ("xid-13", WARNING, 0),
    ]
    assert found[0].since == NOW - 5  # a burst is one warning, since the first event
    assert "fallen off the bus" in found[0].message
    assert "application" in found[1].message


def test_xid_unwatched_host_gets_an_info() -> None:
    found = health.warnings(snap(xid_watched=False))
    assert [(w.code, w.severity, w.gpu) for w in found] == [("xid-unwatched", INFO, None)]
    assert health.warnings(snap(xid_watched=True)) == []


def test_host_not_ok() -> None:
    down = error_snapshot("node9", NOW, HOST_UNREACHABLE, "connection refused")
    found = health.warnings(down)
    assert [(w.code, w.severity, w.host) for w in found] == [("host-state", WARNING, "node9")]
    assert "connection refused" in found[0].message
    assert health.warnings(error_snapshot("node9", NOW, HOST_CONNECTING, "")) == []


def test_sorted_by_severity_then_gpu() -> None:
    gpus = (
        healthy(0, persistence_mode=False),
        healthy(1, temp=86),
        healthy(2, ecc_volatile_uncorrected=1),
        healthy(3, mem_used=79 * GIB),
    )
    found = health.warnings(snap(*gpus))
    assert [(w.severity, w.gpu) for w in found] == [
        (CRITICAL, 2),
        (WARNING, 1),
        (WARNING, 3),
        (INFO, 0),
    ]
    assert health.worst(found) == CRITICAL
    assert health.worst([]) is None


def test_now_defaults_to_snapshot_time() -> None:
    found = health.warnings(snap(healthy(temp=86)))
    assert found[0].since == NOW


# ---------------------------------------------------------------- history rules


def proc(**changes: object) -> GpuProcess:
    base = GpuProcess(
        pid=4242,
        gpu=0,
        gpu_mem=12 * GIB,
        sm_util=0,
        user="alice",
        command="python train.py",
        ppid=4000,
        parent_command="bash",
        state="S",
        start_ticks=777,
        cpu_percent=3.0,
    )
    return dataclasses.replace(base, **changes)


def feed(history: History, minutes: float, step: float = 30.0, **proc_changes: object) -> float:
    """Feed `minutes` of snapshots with one process; return the last snapshot's time."""
    t = NOW - minutes * 60
    last = t
    while t <= NOW:
        history.add(running(proc(**proc_changes), card=healthy(util_gpu=0), time=t))
        last = t
        t += step
    return last


def test_idle_memory_needs_minutes_of_history() -> None:
    history = History(seconds=3600)
    last = feed(history, minutes=45)
    current = running(proc(), card=healthy(util_gpu=0), time=last)
    found = health.warnings(current, history, Thresholds(), last)
    idle = [w for w in found if w.code == "idle-memory"]
    assert len(idle) == 1
    w = idle[0]
    assert (w.severity, w.pid, w.gpu) == (INFO, 4242, 0)
    assert "12.0 GiB" in w.message and "45m" in w.message
    assert w.since == pytest.approx(NOW - 45 * 60)
    # without history (one-shot commands) the rule does not guess
    assert not [w for w in health.warnings(current, None, Thresholds(), last)
                if w.code == "idle-memory"]
    # with a longer idle threshold it is not yet idle
    longer = Thresholds(idle_minutes=60)
    assert not [w for w in health.warnings(current, history, longer, last)
                if w.code == "idle-memory"]


def test_busy_process_is_not_idle() -> None:
    history = History(seconds=3600)
    last = feed(history, minutes=45, sm_util=60)
    current = running(proc(sm_util=60), time=last)
    assert health.warnings(current, history, Thresholds(), last) == []


def test_input_bound_process() -> None:
    history = History(seconds=3600)
    last = feed(history, minutes=10, sm_util=3, cpu_percent=100.0, gpu_mem=2 * GIB)
    current = running(proc(sm_util=3, cpu_percent=100.0, gpu_mem=2 * GIB),
                      card=healthy(util_gpu=3), time=last)
    found = [w for w in health.warnings(current, history, Thresholds(), last)
             if w.code == "input-bound"]
    assert len(found) == 1
    assert found[0].severity == INFO
    assert "loader workers" in (found[0].hint or "")
    # the CPU is idle too: not input-bound, just idle
    calm = dataclasses.replace(current, processes=(proc(sm_util=3, cpu_percent=2.0),))
    assert not [w for w in health.warnings(calm, history, Thresholds(), last)
                if w.code == "input-bound"]
    # two minutes of it is not "for minutes" yet
    short = History(seconds=3600)
    last = feed(short, minutes=2, sm_util=3, cpu_percent=100.0)
    assert not [w for w in health.warnings(current, short, Thresholds(), last)
                if w.code == "input-bound"]


def test_a_graphics_process_is_not_input_bound() -> None:
    """Xorg at 0 % SM with 82 % CPU draws a desktop; it does not wait for input data."""
    for kind in ("G", "C+G"):
        xorg = {"type": kind, "command": "/usr/lib/xorg/Xorg vt1", "sm_util": 0,
                "cpu_percent": 82.0, "gpu_mem": 40 * 1024**2}
        history = History(seconds=3600)
        last = feed(history, minutes=10, **xorg)
        current = running(proc(**xorg), card=healthy(util_gpu=0), time=last)
        assert not [w for w in health.warnings(current, history, Thresholds(), last)
                    if w.code == "input-bound"], kind
    # the same readings from a compute process are input-bound
    compute = {**xorg, "type": "C", "command": "python train.py"}
    history = History(seconds=3600)
    last = feed(history, minutes=10, **compute)
    current = running(proc(**compute), card=healthy(util_gpu=0), time=last)
    assert [w.code for w in health.warnings(current, history, Thresholds(), last)
            if w.code == "input-bound"] == ["input-bound"]


def test_orphan_with_a_calm_cpu_is_not_input_bound() -> None:
    # Orphaned, holding memory and idle for 10 minutes (not yet `idle_minutes`): a running
    # nohup job is normal, so no warning; a calm CPU keeps it from being input-bound too.
    history = History(seconds=3600)
    calm = {"sm_util": 3, "cpu_percent": 2.0, "gpu_mem": 2 * GIB, "ppid": 1,
            "parent_command": "/sbin/init"}
    last = feed(history, minutes=10, **calm)
    current = running(proc(**calm), card=healthy(util_gpu=3), time=last)
    assert health.warnings(current, history, Thresholds(), last) == []
    # the same orphan starving on a busy CPU is input-bound, and still not "orphaned"
    hungry = {**calm, "cpu_percent": 100.0}
    history = History(seconds=3600)
    last = feed(history, minutes=10, **hungry)
    current = running(proc(**hungry), card=healthy(util_gpu=3), time=last)
    assert codes(health.warnings(current, history, Thresholds(), last)) == {"input-bound": INFO}


def test_running_nohup_job_is_not_advised_to_stop() -> None:
    nohup = proc(sm_util=61, gpu_mem=30 * GIB, ppid=1, parent_command="/sbin/init",
                 command="python train.py", cmdline=("python", "train.py"))
    assert health.warnings(running(nohup), None, Thresholds(), NOW) == []


def test_zombie_holding_idle_memory_gets_no_process_warning() -> None:
    history = History(seconds=3600)
    last = feed(history, minutes=45, state="Z")
    current = running(proc(state="Z"), card=healthy(util_gpu=0), time=last)
    assert health.warnings(current, history, Thresholds(), last) == []
    # the same process alive is reported: the zombie rule is what keeps it quiet
    living = History(seconds=3600)
    feed(living, minutes=45)
    alive = running(proc(), card=healthy(util_gpu=0), time=last)
    assert codes(health.warnings(alive, living, Thresholds(), last)) == {"idle-memory": INFO}


def test_orphaned_kernel_holding_memory_is_reported_without_history() -> None:
    orphan = proc(
        command="python -m ipykernel_launcher -f /tmp/kernel-1.json",
        cmdline=("python", "-m", "ipykernel_launcher", "-f", "/tmp/kernel-1.json"),
        ppid=1,
        parent_command="/sbin/init",
        kernel_file="/tmp/kernel-1.json",
        kernel_file_exists=False,
    )
    found = health.warnings(running(orphan), None, Thresholds(), NOW)
    assert [(w.code, w.severity, w.pid) for w in found] == [("orphan-memory", INFO, 4242)]


# ---------------------------------------------------------------- thresholds


def test_thresholds_from_config() -> None:
    th = Thresholds.from_config({"mem_percent": 90, "fan_hot_temp": 55.5})
    assert th.mem_percent == 90.0 and th.fan_hot_temp == 55.5
    assert th.busy_util == Thresholds().busy_util
    assert Thresholds.from_config(None) == Thresholds()
    assert Thresholds.from_config({}) == Thresholds()


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ({"mem_precent": 90}, "health.mem_precent: unknown key"),
        ({"mem_percent": "lots"}, "health.mem_percent: expected a number"),
        ({"mem_percent": True}, "health.mem_percent: expected a number"),
        ({"mem_percent": -1}, "health.mem_percent: expected a number >= 0"),
        ({"busy_util": float("nan")}, "health.busy_util"),
        (["mem_percent"], "health: expected a mapping"),
    ],
)
def test_thresholds_reject_bad_config(section: object, needle: str) -> None:
    with pytest.raises(ValueError) as err:
        Thresholds.from_config(section)  # type: ignore[arg-type]
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------- tracker


def test_tracker_keeps_first_seen_lingers_and_logs() -> None:
    tracker = WarningTracker(linger=30, xid_hold=600)
    hot = snap(healthy(0, temp=86))
    first = tracker.update("node1", health.warnings(hot, now=NOW), NOW)
    assert [w.code for w in first] == ["temp-near-slowdown"]
    later = tracker.update("node1", health.warnings(hot, now=NOW + 10), NOW + 10)
    assert later[0].since == NOW  # first seen, not the latest sighting
    # it clears: still shown (marked clearing) for the linger time
    cool = snap(healthy(0))
    shown = tracker.update("node1", health.warnings(cool, now=NOW + 20), NOW + 20)
    assert [w.code for w in shown] == ["temp-near-slowdown"]
    assert tracker.clearing(shown[0])
    assert tracker.log == []
    assert tracker.update("node1", [], NOW + 49) != []
    assert tracker.update("node1", [], NOW + 50) == []
    assert len(tracker.log) == 1
    entry = tracker.log[0]
    assert entry.warning.code == "temp-near-slowdown"
    assert entry.cleared == NOW + 20 and entry.warning.since == NOW


def test_tracker_warning_that_returns_while_lingering_continues() -> None:
    tracker = WarningTracker(linger=30)
    hot = health.warnings(snap(healthy(0, temp=86)), now=NOW)
    tracker.update("node1", hot, NOW)
    tracker.update("node1", [], NOW + 5)
    back = tracker.update("node1", health.warnings(snap(healthy(0, temp=87)), now=NOW + 8),
                          NOW + 8)
    assert back[0].since == NOW and "87 C" in back[0].message
    assert not tracker.clearing(back[0])
    tracker.update("node1", [], NOW + 100)
    assert tracker.log == []  # cleared at NOW + 100, lingers until NOW + 130
    tracker.expire(NOW + 130)
    assert [c.cleared for c in tracker.log] == [NOW + 100]


def test_tracker_holds_xids_longer_and_keeps_hosts_apart() -> None:
    tracker = WarningTracker(linger=30, xid_hold=600)
    xid = health.warnings(
        snap(xid_events=(XidEvent(gpu=0, xid=79, time=NOW),)), now=NOW
    )
    other = dataclasses.replace(health.warnings(snap(healthy(0, temp=86)), now=NOW)[0],
                                host="node2")
    tracker.update("node1", xid, NOW)
    tracker.update("node2", [other], NOW)
    # node1's next snapshot has no new XID event: the XID stays for xid_hold
    tracker.update("node1", [], NOW + 1)
    assert {w.code for w in tracker.expire(NOW + 100)} == {"xid-79", "temp-near-slowdown"}
    assert [w.host for w in tracker.current("node2")] == ["node2"]
    assert [w.code for w in tracker.for_gpu("node1", 0)] == ["xid-79"]
    # An event does not "clear": the panel must not call cleared what `w` lists as active.
    assert not tracker.clearing(tracker.for_gpu("node1", 0)[0])
    assert [w.code for w in tracker.expire(NOW + 601)] == ["temp-near-slowdown"]
    assert [c.warning.code for c in tracker.log] == ["xid-79"]


def test_tracker_from_thresholds() -> None:
    tracker = WarningTracker.from_thresholds(Thresholds(linger_seconds=5, xid_hold_minutes=2))
    assert (tracker.linger, tracker.xid_hold) == (5, 120)


def test_tracker_keeps_gpu_warnings_while_the_host_is_unreachable() -> None:
    tracker = WarningTracker(linger=30)
    tracker.update("node1", health.warnings(snap(healthy(2, remap_pending=True)), now=NOW), NOW)
    down = error_snapshot("node1", NOW + 10, HOST_UNREACHABLE, "timed out")
    for t in (NOW + 10, NOW + 100):
        shown = tracker.update("node1", health.warnings(down, now=t), t)
    assert [w.code for w in shown] == ["remap-pending", "host-state"]
    assert not tracker.clearing(shown[0]) and tracker.log == []
    assert shown[0].since == NOW
    # back, and repaired: now the remap warning clears, and so does the host state
    fine = snap(healthy(2), time=NOW + 110)
    tracker.update("node1", health.warnings(fine), NOW + 110)
    tracker.expire(NOW + 140)
    assert sorted(c.warning.code for c in tracker.log) == ["host-state", "remap-pending"]


def test_reservation_warnings_are_included() -> None:
    from gputop.model import Reservation

    reservation = Reservation(gpu=0, user="bob", until=NOW + 3600, since=NOW - 60)
    intruder = proc(user="alice", sm_util=80, gpu_mem=GIB)
    found = health.warnings(
        running(intruder, card=healthy(0), reservations=(reservation,)), me="bob"
    )
    ours = [w for w in found if w.code == "reserved-by-other"]
    assert len(ours) == 1
    assert ours[0].severity == WARNING and ours[0].gpu == 0 and "alice" in ours[0].message
    expired = dataclasses.replace(reservation, until=NOW - 1)
    quiet = health.warnings(
        running(intruder, card=healthy(0), reservations=(expired,)), me="bob"
    )
    assert not [w for w in quiet if w.code == "reserved-by-other"]


def test_fields_that_failed_are_named_apart_from_unsupported_ones() -> None:
    from gputop.sources import sim
    from gputop.sources.hostsource import nvml_collector

    nvml = sim.SimNvml(sim.load_scenario("faulty"), clock=lambda: NOW)
    nvml.set_error(1, "PowerUsage", sim.NVML_ERROR_TIMEOUT)
    nvml.set_not_supported(1, "FanSpeed")
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="f", demo=True, clock=lambda: NOW)
    got = HostSnapshot.from_dict(collector.collect())
    gpu1 = got.gpu(1)
    assert gpu1 is not None and gpu1.power_draw is None and gpu1.fan is None
    assert gpu1.field_errors == ("nvmlDeviceGetPowerUsage: Timeout",)  # not the fan
    found = [w for w in health.warnings(got) if w.code == "fields-unreadable"]
    assert [(w.gpu, w.severity) for w in found] == [(1, INFO)]
    assert "nvmlDeviceGetPowerUsage: Timeout" in found[0].message
