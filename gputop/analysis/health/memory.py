"""The memory rules of a working card (docs/health.md, "Memory: risk, not use")."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gputop.analysis.health.common import GIB, Adder, gib
from gputop.analysis.health.thresholds import Thresholds
from gputop.model import WARNING, Gpu

_MEM_HINT = (
    "free memory: smaller batch, mixed precision (bf16/fp16), gradient accumulation, "
    "activation checkpointing"
)
_OOM_HINT = (
    "the next allocation may fail: look for a leak (memory that grows every step), "
    "or free memory: smaller batch, mixed precision, activation checkpointing"
)


def rules(host: str, gpu: Gpu, history: Any, th: Thresholds, add: Adder) -> None:
    """OOM risk (nearly full, or growing towards full soon), and the opt-in classic alert.

    A full card is shown by its gauge's colour; it is a warning only when the next
    allocation is likely to fail.
    """
    i = gpu.index
    pct = gpu.mem_percent
    if pct is None or gpu.mem_total is None or gpu.mem_used is None:
        return
    size = f"({gib(gpu.mem_used)} of {gib(gpu.mem_total)} GiB)"
    if th.mem_percent > 0 and pct > th.mem_percent:
        add(WARNING, "mem-high", f"memory {pct:.0f}% full {size}", gpu=i, hint=_MEM_HINT)
    if th.oom_percent > 0 and pct >= th.oom_percent:
        add(WARNING, "oom-risk", f"memory {pct:.0f}% full {size}: the next allocation may fail",
            gpu=i, hint=_OOM_HINT)
        return
    series: Callable[..., list[tuple[float, Any]]] | None = getattr(history, "gpu_series", None)
    if series is None or th.oom_horizon_minutes <= 0:
        return
    from gputop.analysis import memtrend  # with a history only: a one-shot has none

    window = th.oom_window_minutes * 60
    trend = memtrend.forecast(
        series(host, i, "mem_used", since=add.now - window), gpu.mem_total, add.now, window
    )
    if trend is None or trend.eta > th.oom_horizon_minutes * 60:
        return
    add(
        WARNING,
        "oom-risk",
        f"memory grows {trend.rate * 60 / GIB:.1f} GiB/min: full in "
        f"~{max(math.ceil(trend.eta / 60), 1)} min {size}",
        gpu=i,
        hint=_OOM_HINT,
    )
