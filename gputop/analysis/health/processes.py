"""The process rules: memory held idle or by an abandoned kernel, and input-bound work.

The orphan rules (analysis/orphans.py) decide "orphan" and "idle", so the process
table's flags and these warnings never disagree.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from gputop.analysis import orphans
from gputop.analysis.durations import format_duration
from gputop.analysis.health.common import MIB, gib, one_line
from gputop.analysis.health.registry import HOST, Context, Finding, orphan_rules, rule
from gputop.model import INFO, WARNING, GpuProcess
from gputop.text import without_program_dir

if TYPE_CHECKING:
    from gputop.analysis.history import ProcessSample

__all__ = ["orphan_rules"]


def _judged(ctx: Context) -> Iterator[tuple[GpuProcess, orphans.ProcessFlags]]:
    """Each process these rules judge, with its flags; a zombie's memory is the reclaim
    view's business (its parent must reap it)."""
    if not ctx.snapshot.processes:
        return
    flags = ctx.flags()
    for proc in ctx.snapshot.processes:
        if proc.state != "Z":
            yield proc, flags[proc.key]


def _told_idle(flags: orphans.ProcessFlags) -> bool:
    return flags.idle and flags.idle_since is not None


def _abandoned(ctx: Context, proc: GpuProcess, flags: orphans.ProcessFlags) -> bool:
    # A running process whose parent is gone (nohup, setsid) is normal: its orphan flag
    # stays in the detail view.  Only a kernel whose notebook server is gone holds memory
    # for nobody for sure, so only it gets the "stop it" advice (idle ones get theirs).
    held = proc.gpu_mem is not None and proc.gpu_mem >= ctx.thresholds.idle_memory_mib * MIB
    return flags.orphan and flags.kernel and held


@rule("orphan-memory", INFO, scope=HOST, reads=("processes",), unexported=("processes",),
      thresholds=("idle_memory_mib",),
      summary="a Jupyter kernel whose notebook server is gone holds GPU memory",
      hint="if nobody uses it any more, stop it (reclaim view) to free the card",
      when="a Jupyter kernel holding >= `idle_memory_mib` whose notebook server is gone "
      "(flags from `analysis/orphans.py`); hint: stop it")
def _orphan(ctx: Context) -> Iterator[Finding]:
    for proc, flags in _judged(ctx):
        if not _told_idle(flags) and _abandoned(ctx, proc, flags):
            reason = next((text for name, text in flags.reasons if name == "orphan"),
                          "orphaned")
            yield Finding(f"{_who(proc)} holds {gib(proc.gpu_mem)} GiB, orphaned: {reason}",
                          gpu=proc.gpu, pid=proc.pid)


@rule("idle-memory", INFO, scope=HOST, reads=("processes",), unexported=("processes",),
      thresholds=("idle_minutes", "idle_memory_mib"), alert="GpuMemoryHeldIdle",
      summary="a process holds GPU memory at 0% SM",
      hint="if it is a forgotten notebook or job, stop it (reclaim view) to free the card",
      when="a process at 0 % SM for `idle_minutes` while holding >= `idle_memory_mib` "
      "(observed by gputop; needs history)")
def _idle(ctx: Context) -> Iterator[Finding]:
    for proc, flags in _judged(ctx):
        if flags.idle and flags.idle_since is not None:  # _told_idle, for mypy
            what = ", orphaned" if flags.orphan else ""
            yield Finding(
                f"{_who(proc)} holds {gib(proc.gpu_mem)} GiB at 0% SM for "
                f"{format_duration(ctx.now - flags.idle_since, minutes=True)} "
                f"({_source(flags)}){what}",
                gpu=proc.gpu, pid=proc.pid, since=flags.idle_since)


@rule("input-bound", INFO, scope=HOST, reads=("processes",), unexported=("processes",),
      thresholds=("input_bound_minutes", "input_bound_sm_percent", "input_bound_cpu_percent"),
      summary="a process is probably waiting for input data: low SM with a busy CPU",
      hint="more data-loader workers, pinned memory, prefetching, data on faster "
      "(local) storage",
      when="a process at <= `input_bound_sm_percent` SM with >= `input_bound_cpu_percent` "
      "CPU for `input_bound_minutes`; hint: more loader workers, data on faster storage")
def _input_bound(ctx: Context) -> Iterator[Finding]:
    history, th = ctx.history, ctx.thresholds
    if history is None:
        return
    for proc, flags in _judged(ctx):
        if _told_idle(flags) or proc.cpu_percent is None:
            continue  # an idle process is told about as idle only
        if proc.cpu_percent < th.input_bound_cpu_percent:
            continue
        if "G" in (proc.type or ""):
            continue  # a display server or desktop app (type G, C+G) starves for no data
        if proc.sm_util is not None and proc.sm_util > th.input_bound_sm_percent:
            continue  # computing now, so no starving streak: spare the history walk

        def starving(sample: ProcessSample) -> bool:
            # The streak is the SM side only; the CPU side is the current reading. History
            # does keep CPU % per sample now (the metrics screen), but a data loader's CPU
            # wanders (60-100 %), and a per-sample cut would reset the streak on every dip.
            return sample.sm_util is not None and sample.sm_util <= th.input_bound_sm_percent

        # The key names the predicate, so the history walks only the samples since last
        # tick.
        start = history.process_streak(
            ctx.snapshot.host, proc.pid, proc.start_ticks, starving,
            key=("input-bound", th.input_bound_sm_percent, th.input_bound_cpu_percent))
        if start is not None and ctx.now - start >= th.input_bound_minutes * 60:
            yield Finding(
                f"{_who(proc)} at {_pct(proc.sm_util)} SM with {proc.cpu_percent:.0f}% CPU "
                f"for {format_duration(ctx.now - start, minutes=True)}: probably waiting "
                "for input data",
                gpu=proc.gpu, pid=proc.pid, since=start)


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


@rule("unseen-use", WARNING, scope=HOST, reads=("gpus", "processes"),
      unexported=("processes",),
      summary="memory in use that no listed process holds: something unseen uses the card",
      hint="a container with its own pid namespace, a vGPU guest or a process the driver "
      "does not list runs there; gputop pick, reserve --count and run leave the card out "
      "(--share takes it)",
      when="memory used beyond the driver's own reserve (512 MiB or 1 % of the card) that "
      "no listed process holds is more than 1 GiB or 2 % of the card (25 % on a card "
      "that draws a desktop: a graphics process listed) "
      "(`analysis/orphans.unseen_use`, pick's rule too); not for a source without a "
      "process list")
def _unseen(ctx: Context) -> Iterator[Finding]:
    # One pass for the host's cards, not one per card: the dashboard runs it every tick.
    for gpu, why in sorted(orphans.unseen_use(ctx.snapshot).items()):
        yield Finding(why, gpu=gpu)
