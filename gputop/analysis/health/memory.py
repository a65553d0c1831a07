"""The memory rules of a working card (docs/health.md, "Memory: risk, not use").

A full card is shown by its gauge's colour; it is a warning only when the next
allocation is likely to fail, or (opt-in) above the site's classic limit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from gputop.analysis.health.common import GIB, gib
from gputop.analysis.health.registry import Context, Finding, rule
from gputop.model import WARNING, Gpu

_MEM_HINT = (
    "free memory: smaller batch, mixed precision (bf16/fp16), gradient accumulation, "
    "activation checkpointing"
)
_OOM_HINT = (
    "the next allocation may fail: look for a leak (memory that grows every step), "
    "or free memory: smaller batch, mixed precision, activation checkpointing"
)
_READS = ("mem_used", "mem_total")


def _size(gpu: Gpu) -> str:
    return f"({gib(gpu.mem_used)} of {gib(gpu.mem_total)} GiB)"


def _percent(gpu: Gpu) -> float | None:
    if gpu.mem_total is None or gpu.mem_used is None:
        return None
    return gpu.mem_percent


@rule("oom-risk", WARNING, reads=_READS, alert="GpuOomForecast",
      thresholds=("oom_percent", "oom_horizon_minutes", "oom_window_minutes"),
      summary="the GPU is nearly out of memory: the next allocation may fail",
      hint=_OOM_HINT,
      when="memory at or above `oom_percent` (98 %) of the card, or growing so that a "
      "straight line fitted over the last `oom_window_minutes` reaches the total within "
      "`oom_horizon_minutes` (\"memory grows 1.2 GiB/min: full in ~9 min\"); needs history "
      "for the trend")
def _oom(ctx: Context) -> Iterator[Finding]:
    gpu, th = ctx.card, ctx.thresholds
    pct = _percent(gpu)
    if pct is None or gpu.mem_total is None:
        return
    if th.oom_percent > 0 and pct >= th.oom_percent:
        yield Finding(f"memory {pct:.0f}% full {_size(gpu)}: the next allocation may fail",
                      gpu=gpu.index)
        return
    if ctx.history is None or th.oom_horizon_minutes <= 0:
        return
    from gputop.analysis import memtrend  # with a history only: a one-shot has none

    window = th.oom_window_minutes * 60
    series = ctx.history.gpu_series(ctx.snapshot.host, gpu.index, "mem_used",
                                    since=ctx.now - window)
    trend = memtrend.forecast(series, gpu.mem_total, ctx.now, window)
    if trend is None or trend.eta > th.oom_horizon_minutes * 60:
        return
    yield Finding(
        f"memory grows {trend.rate * 60 / GIB:.1f} GiB/min: full in "
        f"~{max(math.ceil(trend.eta / 60), 1)} min {_size(gpu)}",
        gpu=gpu.index)


@rule("mem-high", WARNING, reads=_READS, thresholds=("mem_percent",), alert="GpuMemoryHigh",
      summary="GPU memory is above the site's limit", hint=_MEM_HINT,
      when="**off by default**: memory used > `mem_percent` of the card, the classic "
      "Prometheus rule, for sites that want it (`health: {mem_percent: 80}`)")
def _high(ctx: Context) -> Iterator[Finding]:
    pct, limit = _percent(ctx.card), ctx.thresholds.mem_percent
    if pct is not None and limit > 0 and pct > limit:
        yield Finding(f"memory {pct:.0f}% full {_size(ctx.card)}", gpu=ctx.card.index)
