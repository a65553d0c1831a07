"""Process rows: which state's colour wins, and every state stays readable under the
cursor (WCAG AA, 4.5:1), computed from the styles the table itself draws with."""

from __future__ import annotations

import dataclasses

from helpers.ui import SIZE, demo_app, feed_all
from rich.color import Color as RichColor
from rich.style import Style

from gputop.ui.app import GputopApp
from gputop.ui.table_model import Row
from gputop.ui.widgets.process_table import ProcessTable


def _luminance(color: RichColor) -> float:
    r, g, b = color.get_truecolor()

    def channel(v: int) -> float:
        c = v / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(style: Style) -> float:
    assert style.color is not None and style.bgcolor is not None
    hi, lo = sorted((_luminance(style.color), _luminance(style.bgcolor)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_contrast_formula_matches_wcag() -> None:
    black_on_white = Style(color="#000000", bgcolor="#ffffff")
    assert round(contrast(black_on_white), 1) == 21.0
    assert round(contrast(Style(color="#777777", bgcolor="#ffffff")), 1) == 4.5


def _states(table: ProcessTable, row: Row) -> dict[str, tuple[Row, bool]]:
    proc = row.proc
    other = dataclasses.replace(proc, user="somebody-else")
    mine = dataclasses.replace(proc, user=table.me)
    return {
        "normal": (Row(("h", 1, 1, 0), other, ()), False),
        "mine": (Row(("h", 2, 2, 0), mine, ()), False),
        "flagged": (Row(("h", 3, 3, 0), other, ("orphan",)), False),
        "mine+flagged": (Row(("h", 4, 4, 0), mine, ("kernel",)), False),
        "tagged": (Row(("h", 5, 5, 0), other, ()), True),
        "zombie": (Row(("h", 6, 6, 0), dataclasses.replace(mine, state="Z"), ()), False),
    }


async def _check(app: GputopApp) -> None:
    table = app.dashboard.table
    base = table.rows[0]
    states = _states(table, base)
    table.tagged = {row.key for row, tagged in states.values() if tagged}
    plain = table.row_style(states["normal"][0], False)
    flagged = table.row_style(states["flagged"][0], False)
    mine_flagged = table.row_style(states["mine+flagged"][0], False)
    zombie = table.row_style(states["zombie"][0], False)
    # Flags win over "mine": my flagged and zombie rows keep their colours.
    assert flagged.color != plain.color
    assert mine_flagged.color == flagged.color and mine_flagged.bold
    assert zombie.color not in (plain.color, None) and zombie.color != flagged.color
    for name, (row, _tagged) in states.items():
        style = table.row_style(row, True)
        assert contrast(style) >= 4.5, f"{name} under the cursor: {contrast(style):.2f}:1"


async def test_row_states_under_the_focused_and_unfocused_cursor() -> None:
    app, _clock = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.pause()
        assert app.dashboard.table.has_focus
        await _check(app)
        app.dashboard.query_one("#search").focus()  # the table without focus
        await pilot.pause()
        assert not app.dashboard.table.has_focus
        await _check(app)
