"""GPU panels drawn from (text, style) pieces, not Rich Text (issue 42.3): the same strips
as before, a live refresh builds no Text, and a figure that reads the same dirties
nothing.  Counted in calls and cells, never in time."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import pytest
from helpers.ui import demo_app, feed_all
from rich.style import Style
from rich.text import Text

from gputop.model import Gpu
from gputop.ui.partial import Lines, text_strips
from gputop.ui.widgets.gpu_panel import GpuPanel

STYLES = ("", "bold", "dim", "green", "bold reverse red", "cyan dim", "italic")
WORDS = ("GPU", "  ", "▕", "███", "░░", "42%", "H100", "\n", "MEM 80G", "é", "a b")


def random_lines(rng: random.Random) -> Lines:
    out = Lines()
    for _ in range(rng.randrange(0, 30)):
        if rng.random() < 0.1:
            badge = Lines()
            badge.append(rng.choice(WORDS), rng.choice(STYLES))
            out.append_text(badge)
        else:
            out.append(rng.choice(WORDS) * rng.randrange(1, 3), rng.choice(STYLES))
    return out


def test_lines_draw_what_text_strips_draws_of_their_text() -> None:
    rng = random.Random(42)
    base = Style(color="white", bgcolor="black")
    drawn: list[tuple[Any, Any]] = []
    for _ in range(500):
        lines = random_lines(rng)
        width = rng.randrange(1, 60)
        expected = text_strips(lines.text(), width, base)
        first = lines.strips(width, base, drawn)
        assert first == expected
        assert lines.plain == lines.text().plain
        assert lines.cell_len == lines.text().cell_len
        # Drawn again, the kept strips are handed back: equal, and the same objects.
        again = lines.strips(width, base, drawn)
        assert [id(s) for s in again] == [id(s) for s in first]


async def _panel_after_a_tick(changes: Callable[[Gpu], dict[str, Any]],
                              monkeypatch: pytest.MonkeyPatch) -> tuple[GpuPanel, int]:
    """A lab panel updated once more, its card's values changed by ``changes(card)``:
    the panel and the Rich Text appends the update made."""
    app, _ = demo_app("lab")
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        panel = app.dashboard.gpu_panel(0)
        assert panel is not None and panel.data is not None
        await pilot.pause()
        panel._dirty_regions.clear()
        gpu = panel.data.gpu
        data = dataclasses.replace(panel.data, gpu=dataclasses.replace(gpu, **changes(gpu)))
        appends = 0
        real = Text.append

        def counting(self: Text, *args: Any, **kwargs: Any) -> Text:
            nonlocal appends
            appends += 1
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Text, "append", counting)
        panel.update_data(data)
        monkeypatch.setattr(Text, "append", real)
        return panel, appends


async def test_a_live_refresh_of_a_panel_builds_no_rich_text(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Every figure moves on a live machine: the panel draws its changed line from pieces.
    panel, appends = await _panel_after_a_tick(
        lambda gpu: {"util_gpu": (gpu.util_gpu + 37) % 100, "temp": (gpu.temp or 0) + 9},
        monkeypatch)
    assert panel._dirty_regions  # the figures that moved are repainted
    assert appends == 0


async def test_a_figure_that_reads_the_same_draws_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A power draw that reads the same whole watts; the energy counter is drawn nowhere.
    panel, _ = await _panel_after_a_tick(
        lambda gpu: {"power_draw": round(gpu.power_draw) + 0.1,
                     "energy_mj": (gpu.energy_mj or 0) + 5000},
        monkeypatch)
    assert panel.data is not None and panel.data.gpu.power_draw
    assert not panel._dirty_regions
