"""A per-job view like Princeton's jobstats (issue 28.10): for a finished or running job,
per GPU its mean and peak SM % and memory, and the recommendation lines that apply.  Pure.

The rules, each from the job's own numbers:

- a GPU at 0 % SM the whole job (ran at least ``MIN_RUN_S``): ask for fewer GPUs;
- a time limit more than twice the runtime, and an hour or more above it (finished jobs):
  a shorter limit starts sooner (schedulers backfill short jobs);
- a job whose every GPU peaked at or below an eighth of the card's memory at a mean SM
  below ``MIG_MAX_SM`` % on a card that can be split (A100, A30, H100, H200, B200): it
  would fit a MIG 1g slice;
- otherwise, memory never above a third of the card: a smaller card would do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gputop.analysis.durations import format_duration

GIB = 1024**3
MIN_RUN_S = 300.0
MIG_MAX_SM = 15.0
MIG_MODELS = ("A100", "A30", "H100", "H200", "H20", "B200", "GB200")


@dataclass(frozen=True)
class GpuUse:
    gpu: int
    name: str | None
    mem_total: int | None  # bytes
    mean_sm: float | None  # % over the job's time on it
    peak_sm: float | None
    mean_mem: float | None  # bytes
    peak_mem: int | None


@dataclass(frozen=True)
class Job:
    kind: str  # "run" (gputop run) or "slurm"
    id: str
    host: str
    user: str | None
    name: str | None
    start: float | None
    end: float | None  # None: still running (or last seen)
    runtime_s: float
    requested_s: float | None  # the time limit (--for, Slurm's)
    wait_s: float | None  # queue wait, when known
    status: str | None
    gpus: Sequence[GpuUse]
    finished: bool
    attempts: int = 1  # a `gputop run` job's tries (--retries); a Slurm job's: 1
    cancelled_by: str | None = None  # who cancelled a `gputop run` job: its owner or root


def _mig_capable(name: str | None) -> bool:
    upper = (name or "").upper()
    return any(model in upper for model in MIG_MODELS)


def recommendations(job: Job) -> list[str]:
    out = []
    if job.runtime_s >= MIN_RUN_S:
        idle = [g.gpu for g in job.gpus if g.peak_sm is not None and g.peak_sm == 0]
        if idle and len(idle) == len(job.gpus):
            out.append(f"every GPU ({_list(idle)}) stayed at 0 % SM: the job did not use"
                       " its GPUs; check that the code runs on the GPU")
        elif idle:
            out.append(f"GPU {_list(idle)} stayed at 0 % SM the whole job: ask for"
                       f" {len(job.gpus) - len(idle)} GPU(s) instead of {len(job.gpus)}")
    if (job.finished and job.requested_s is not None and job.runtime_s > 0
            and job.requested_s > 2 * job.runtime_s
            and job.requested_s - job.runtime_s >= 3600):
        suggest = format_duration(max(job.runtime_s * 1.5, job.runtime_s + 900))
        out.append(f"time limit {format_duration(job.requested_s)}, ran"
                   f" {format_duration(job.runtime_s)}: a limit of about {suggest} would"
                   " start sooner")
    measured = [g for g in job.gpus if g.peak_mem is not None and g.mem_total]
    if measured and len(measured) == len(job.gpus):
        peak = max(g.peak_mem or 0 for g in measured)
        total = min(g.mem_total or 0 for g in measured)
        means = [g.mean_sm for g in job.gpus if g.mean_sm is not None]
        if (all(_mig_capable(g.name) for g in measured) and peak <= total / 8
                and means and max(means) < MIG_MAX_SM):
            out.append(f"would fit a MIG 1g slice: peak {peak / GIB:.1f} GiB of"
                       f" {total / GIB:.0f} GiB, mean SM {max(means):.0f} %")
        elif peak <= total / 3:
            out.append(f"memory never above a third of the card (peak {peak / GIB:.1f} of"
                       f" {total / GIB:.0f} GiB): a smaller card or a MIG slice would do")
    return out


def _list(gpus: Sequence[int]) -> str:
    return ",".join(str(g) for g in gpus)
