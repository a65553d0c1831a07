"""The warnings panel asks for a layout pass only when its number of lines changes.

A layout of the whole dashboard costs tens of milliseconds; a warning whose text changes
every tick (an age, a temperature) must only repaint the panel.  ``_layout_required`` is
Textual's own flag for "lay the screen out again on the next frame".
"""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Static

from gputop.model import CRITICAL, WARNING, HealthWarning
from gputop.ui.widgets.warnings import WarningsPanel

NOW = 1_764_680_000.0


def warn(gpu: int, message: str, severity: str = WARNING) -> HealthWarning:
    return HealthWarning(severity=severity, code="temp-near-slowdown", message=message,
                         host="node1", gpu=gpu, hint="cool it", since=NOW)


class PanelApp(App[None]):
    def __init__(self, hints: bool = False) -> None:
        super().__init__()
        self.hints = hints

    def compose(self) -> ComposeResult:
        yield WarningsPanel(id="panel", hints=self.hints)
        yield Static("below", id="below")


async def test_changed_text_repaints_without_layout() -> None:
    app = PanelApp()
    async with app.run_test(size=(100, 20)) as pilot:
        panel = app.query_one(WarningsPanel)
        below = app.query_one("#below")
        panel.show([warn(0, "85 C"), warn(1, "86 C")], now=NOW)
        await pilot.pause()
        assert panel.size.height == 2 and below.region.y == 2
        assert not panel._layout_required

        assert panel.show([warn(0, "87 C"), warn(1, "88 C")], now=NOW) is True
        assert not panel._layout_required  # same two lines: a repaint is enough
        await pilot.pause()
        assert "87 C" in panel.render().plain  # type: ignore[union-attr]
        assert below.region.y == 2


async def test_more_or_fewer_lines_lay_out_again() -> None:
    app = PanelApp()
    async with app.run_test(size=(100, 20)) as pilot:
        panel = app.query_one(WarningsPanel)
        below = app.query_one("#below")
        panel.show([warn(0, "85 C")], now=NOW)
        await pilot.pause()
        assert below.region.y == 1

        panel.show([warn(0, "85 C"), warn(1, "86 C"), warn(2, "x", CRITICAL)], now=NOW)
        assert panel._layout_required
        await pilot.pause()
        assert panel.size.height == 3 and below.region.y == 3

        panel.show([warn(3, "90 C")], now=NOW)
        assert panel._layout_required
        await pilot.pause()
        assert panel.size.height == 1 and below.region.y == 1
        # none left: the panel keeps its one "no warnings" line, so no layout either
        panel.show([], now=NOW)
        assert not panel._layout_required
        await pilot.pause()
        assert below.region.y == 1


async def test_with_hints_two_lines_per_warning() -> None:
    app = PanelApp(hints=True)
    async with app.run_test(size=(100, 20)) as pilot:
        panel = app.query_one(WarningsPanel)
        below = app.query_one("#below")
        panel.show([warn(0, "85 C")], now=NOW)
        await pilot.pause()
        assert panel.size.height == 2 and below.region.y == 2
        panel.show([warn(0, "86 C", CRITICAL)], now=NOW)
        assert not panel._layout_required
        panel.show([warn(0, "86 C"), warn(1, "87 C")], now=NOW)
        assert panel._layout_required
        await pilot.pause()
        assert panel.size.height == 4 and below.region.y == 4
