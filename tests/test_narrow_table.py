"""At 80 columns the process table keeps TYPE and TIME, and each card's row its fan and
power cap, as nvitop does (issue 39.8): which columns a narrow terminal hides is the
registry's `drop` order (gputop/columns.py), and COMMAND keeps its minimum."""

from __future__ import annotations

from typing import Any

from gputop.ui.cells import MIN_COMMAND
from gputop.ui.screenshots import demo_app, load


async def test_the_80_column_table_keeps_type_and_time() -> None:
    app = demo_app("lab")
    async with app.run_test(size=(80, 24)) as pilot:
        await load(pilot)
        header: Any = app.screen.query_one("TableHeader")
        shown = [col.id for col, width in header._layout()]
        command = dict((col.id, width) for col, width in header._layout())["command"]
    assert command >= MIN_COMMAND
    assert {"type", "time"} <= set(shown), shown
    assert {"gpu", "pid", "user", "gpu_mem", "sm", "flags", "command"} <= set(shown)


async def test_the_80_column_card_rows_keep_fan_and_power_cap() -> None:
    app = demo_app("lab")
    async with app.run_test(size=(80, 24)) as pilot:
        await load(pilot)
        rows = [str(panel.render()) for panel in app.screen.query("GpuPanel")]
        cards = app.state.snapshot.gpus
    assert len(rows) == len(cards)
    for row, gpu in zip(rows, cards, strict=True):
        assert f"/{gpu.power_limit:.0f}W" in row, row
        assert f"fan {gpu.fan:.0f}%" in row, row
