"""The per-process metrics screen (`m` in the detail view), in the real app fed the
simulator's snapshots: every metric of one process over time, memory bandwidth among
them (NVML's per-process memUtil, which the simulator and the fake driver give)."""

from __future__ import annotations

from helpers.ui import demo_app, feed_all, plain, with_processes
from textual.widgets import Static

from gputop.ui import fmt
from gputop.ui.screens.detail import DetailScreen
from gputop.ui.screens.metrics import MetricsScreen

BLOCKS = set("▁▂▃▄▅▆▇█")


async def test_m_in_the_detail_view_charts_one_process_over_time() -> None:
    app, clock = demo_app("lab", history=40)
    async with app.run_test(size=(120, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        snap = app.state.snapshot
        assert snap is not None
        target = max((p for p in snap.processes if p.mem_util), key=lambda p: p.mem_util or 0)
        assert target.cpu_percent is not None and target.rss is not None
        app.state.selected = (snap.host, target.pid, target.start_ticks, target.gpu)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        history = plain(app.screen.query_one("#detail-history", Static).content)
        assert "MEM BW %" in history and fmt.percent(target.mem_util) in history
        await pilot.press("m")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MetricsScreen)
        title = plain(screen.query_one("#metrics-title", Static).content)
        assert f"PID {target.pid}" in title and (target.user or "?") in title
        body = plain(screen.query_one("#metrics-body", Static).content).splitlines()

        def block(name: str) -> list[str]:
            at = next(i for i, line in enumerate(body) if line.startswith(name + "  "))
            return body[at:at + 4]

        sample = app.state.history.process_samples(snap.host, target.pid,
                                                   target.start_ticks)[-1]
        for name, now in (("GPU memory", fmt.size(target.gpu_mem)),
                          ("SM %", f"{target.sm_util}%"),
                          ("memory bandwidth %", f"{target.mem_util}%"),
                          ("CPU %", f"{sample.cpu_percent}%"),
                          ("RSS (host memory)", fmt.size(sample.rss))):
            lines = block(name)
            assert f"now {now} " in lines[0], (name, lines[0])
            # 40 samples a second apart, 600 s over the chart: a few columns drawn
            assert set("".join(lines[1:])) & BLOCKS, (name, lines)

        # the process exits: said so, its charts stay
        clock.now += 1
        app.ingest(with_processes(snap, [p for p in snap.processes if p.pid != target.pid]))
        await pilot.pause()
        assert "no longer listed" in plain(screen.query_one("#metrics-title", Static).content)
        assert "memory bandwidth %  now" in plain(screen.query_one("#metrics-body",
                                                                  Static).content)
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)


def test_chart_rows_stack_to_the_value_and_leave_gaps_blank() -> None:
    # span 10 s over 10 cells: one cell a second; values 0, 50, 100 of a top of 100
    rows = fmt.chart([(1.0, 0.0), (2.0, 50.0), (3.0, 100.0), (5.0, 200.0)], 10, 2,
                     now=9.5, span=10.0, top=100.0)
    assert len(rows) == 2 and all(len(r) == 10 for r in rows)
    top, bottom = rows
    assert (bottom[1], top[1]) == ("▁", " ")  # a sample at 0 still shows it was seen
    assert (bottom[2], top[2]) == ("█", " ")  # 50 % of two rows: the lower row full
    assert (bottom[3], top[3]) == ("█", "█")
    assert (bottom[5], top[5]) == ("█", "█")  # above the top: clipped, not wrapped
    assert bottom[4] == top[4] == " " and bottom[0] == " "  # no sample: blank
