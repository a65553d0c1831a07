"""The process rules: memory held idle or by an abandoned kernel, and input-bound work."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gputop.analysis import orphans
from gputop.analysis.durations import format_duration
from gputop.analysis.health.common import MIB, Adder, gib, one_line
from gputop.analysis.health.thresholds import Thresholds
from gputop.model import INFO, GpuProcess, HostSnapshot
from gputop.text import without_program_dir


def orphan_rules(thresholds: Thresholds) -> orphans.OrphanRules:
    """The orphan/idle rules the health warnings use: the ``flags`` ``warnings`` expects."""
    return orphans.OrphanRules(
        idle_minutes=thresholds.idle_minutes, idle_min_mem_mib=int(thresholds.idle_memory_mib)
    )


def rules(
    snapshot: HostSnapshot,
    history: Any,
    th: Thresholds,
    add: Adder,
    flags: Mapping[tuple[int, int], orphans.ProcessFlags] | None,
) -> None:
    if not snapshot.processes:
        return
    # One pass over all processes: classifying each row on its own rescans the
    # snapshot per row, which is what made 2,000 processes cost a quarter second.
    if flags is None or any(p.key not in flags for p in snapshot.processes):
        flags = orphans.classify_snapshot(snapshot, history, orphan_rules(th), add.now)
    for proc in snapshot.processes:
        _process_rules(snapshot, proc, history, th, add, flags)


def _process_rules(
    snapshot: HostSnapshot,
    proc: GpuProcess,
    history: Any,
    th: Thresholds,
    add: Adder,
    all_flags: Mapping[tuple[int, int], orphans.ProcessFlags],
) -> None:
    if proc.state == "Z":
        return  # a zombie's memory is the reclaim view's business: its parent must reap it
    # The orphan rules (analysis/orphans.py) decide "orphan" and "idle", so the process
    # table's flags and these warnings never disagree.
    flags = all_flags[proc.key]
    held = proc.gpu_mem is not None and proc.gpu_mem >= th.idle_memory_mib * MIB
    # A running process whose parent is gone (nohup, setsid) is normal: its orphan flag
    # stays in the detail view.  Only a kernel whose notebook server is gone holds memory
    # for nobody for sure, so only it gets the "stop it" advice (idle ones get it below).
    abandoned = flags.orphan and flags.kernel and held
    if not (flags.idle or abandoned) and (
        proc.cpu_percent is None or proc.cpu_percent < th.input_bound_cpu_percent
    ):
        return  # the common case: nothing to say, and no need to format the process
    what = ", orphaned" if flags.orphan else ""
    if flags.idle and flags.idle_since is not None:
        add(
            INFO,
            "idle-memory",
            f"{_who(proc)} holds {gib(proc.gpu_mem)} GiB at 0% SM for "
            f"{format_duration(add.now - flags.idle_since, minutes=True)} "
            f"({_source(flags)}){what}",
            gpu=proc.gpu,
            pid=proc.pid,
            hint="if it is a forgotten notebook or job, stop it (reclaim view) to free the card",
            since=flags.idle_since,
        )
        return
    if abandoned:
        reason = next((text for name, text in flags.reasons if name == "orphan"), "orphaned")
        add(
            INFO,
            "orphan-memory",
            f"{_who(proc)} holds {gib(proc.gpu_mem)} GiB, orphaned: {reason}",
            gpu=proc.gpu,
            pid=proc.pid,
            hint="if nobody uses it any more, stop it (reclaim view) to free the card",
        )
    streak: Callable[..., float | None] | None = getattr(history, "process_streak", None)
    if streak is None or proc.cpu_percent is None:
        return
    if proc.cpu_percent < th.input_bound_cpu_percent:
        return
    if "G" in (proc.type or ""):
        return  # a display server or desktop app (type G, C+G) is no job starving for data
    if proc.sm_util is not None and proc.sm_util > th.input_bound_sm_percent:
        return  # computing now, so no starving streak: spare the history walk

    def starving(sample: Any) -> bool:
        # The streak is the SM side only; the CPU side is the current reading. History
        # does keep CPU % per sample now (the metrics screen), but a data loader's CPU
        # wanders (60-100 %), and a per-sample cut would reset the streak on every dip.
        return sample.sm_util is not None and sample.sm_util <= th.input_bound_sm_percent

    # The key names the predicate, so the history walks only the samples since last tick.
    start = streak(snapshot.host, proc.pid, proc.start_ticks, starving,
                   key=("input-bound", th.input_bound_sm_percent, th.input_bound_cpu_percent))
    if start is not None and add.now - start >= th.input_bound_minutes * 60:
        add(
            INFO,
            "input-bound",
            f"{_who(proc)} at {_pct(proc.sm_util)} SM with {proc.cpu_percent:.0f}% CPU for "
            f"{format_duration(add.now - start, minutes=True)}: probably waiting for input data",
            gpu=proc.gpu,
            pid=proc.pid,
            hint="more data-loader workers, pinned memory, prefetching, data on faster "
            "(local) storage",
            since=start,
        )


def _who(proc: GpuProcess) -> str:
    user = proc.user or "?"
    # The program without its directory: the room goes to the script and the reason.
    command = one_line(without_program_dir(proc.command or "?"), 32)
    return f"pid {proc.pid} ({user}: {command})"


def _pct(value: int | None) -> str:
    return "?%" if value is None else f"{value}%"


def _source(flags: orphans.ProcessFlags) -> str:
    """Where an idle streak's start comes from: never "observed" for made-up history."""
    if flags.idle_recorded:
        return "ledger"
    return "simulated before the demo began" if flags.idle_simulated else "as observed"
