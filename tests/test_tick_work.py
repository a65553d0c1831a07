"""Per-tick work follows what is drawn, not how long gputop has run (issue 14).

Counted in operations (Python and builtin calls seen by a profiler hook), never in time:
one tick of the analysis and of the GPU panels' history figures costs the same with four
minutes of history as with nine.
"""

from __future__ import annotations

import dataclasses

from helpers.calls import count_calls

from gputop.analysis.pipeline import Analyser, Settings
from gputop.model import Gpu, GpuProcess, HostSnapshot
from gputop.ui import fmt
from gputop.ui.widgets.gpu_panel import PanelData, compact_sparkline, history_reach, history_stats

GIB = 1 << 30
SPAN = 180.0
GPUS = 8


def snapshot(t: float) -> HostSnapshot:
    wave = int(t) % 7
    gpus = tuple(
        Gpu(index=i, util_gpu=80 + wave + i, temp=60, mem_used=40 * GIB, mem_total=80 * GIB)
        for i in range(GPUS)
    )
    procs = tuple(
        GpuProcess(pid=1000 + n, gpu=n % GPUS, start_ticks=n, gpu_mem=GIB, sm_util=wave * n % 90,
                   state="R", cpu_percent=50.0)
        for n in range(40)
    )
    return HostSnapshot(host="h", time=t, gpus=gpus, processes=procs)


def one_tick(analyser: Analyser, snap: HostSnapshot, compact: bool) -> None:
    analyser(snap)
    history = analyser.history
    since = snap.time - history_reach(SPAN, history.seconds, compact, 120)
    for gpu in snap.gpus:
        util = history.gpu_series("h", gpu.index, "util_gpu", since)
        mem = history.gpu_series("h", gpu.index, "mem_percent", since)
        data = PanelData(gpu=gpu, util_series=util, mem_series=mem, now=snap.time, span=SPAN,
                         kept=history.seconds)
        fmt.sparkline(util, 60, snap.time, SPAN)
        fmt.sparkline(mem, 60, snap.time, SPAN)
        history_stats(util, snap.time, SPAN)
        history_stats(mem, snap.time, SPAN)
        if compact:
            compact_sparkline(data, 120)


def tick_cost(samples: int, compact: bool) -> int:
    settings = dataclasses.replace(Settings(), history_minutes=10.0)
    analyser = Analyser(settings, settings.history(), lambda host: None)
    for t in range(samples):
        analyser(snapshot(float(t)))
    return count_calls(lambda: one_tick(analyser, snapshot(float(samples)), compact))


def test_a_tick_costs_the_same_with_more_history_behind_it() -> None:
    # Both lengths are past what a full panel draws (SPAN) and the OOM trend's window
    # (5 minutes), and equal modulo the history's tidying cycle (16) and the data's
    # period (7): the same tick, later.
    short, long = tick_cost(368, compact=False), tick_cost(592, compact=False)
    assert short > 1000  # the hook saw the work
    assert long == short


def test_a_compact_row_reads_only_as_far_back_as_its_width() -> None:
    # 120 cells of SPAN/60 = 360 s: the history beyond it is never walked.
    short, long = tick_cost(368, compact=True), tick_cost(592, compact=True)
    assert long == short
