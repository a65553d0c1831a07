"""Commands and user names are untrusted: markup and escape sequences show literally."""

from __future__ import annotations

import dataclasses

from helpers.ui import demo_app, feed_all, table_lines, with_processes
from rich.console import Console
from textual.widgets import Static

from gputop.ui import fmt
from gputop.ui.screens.detail import DetailScreen

EVIL_COMMAND = "python [bold red]pwn[/bold red] \x1b[31mred\x1b[0m \x1b]0;title\x07\tend\nnext"
EVIL_USER = "[i]eve"
SHOWN_COMMAND = "python [bold red]pwn[/bold red] \\e[31mred\\e[0m \\e]0;title\\x07\\tend\\nnext"


def test_visible_escapes_control_characters_only() -> None:
    assert fmt.visible(EVIL_COMMAND) == SHOWN_COMMAND
    assert fmt.visible("plain [b]text[/b] ünïcödé 日本") == "plain [b]text[/b] ünïcödé 日本"
    assert fmt.visible("\x00\x7f\x9b") == "\\x00\\x7f\\x9b"
    assert fmt.safe_text("[bold]x[/bold]").plain == "[bold]x[/bold]"
    assert fmt.safe_text("[bold]x[/bold]").spans == []


async def test_markup_and_escapes_in_table_and_detail_are_literal() -> None:
    app, clock = demo_app("lab", me="alice")
    async with app.run_test(size=(200, 40)) as pilot:
        feed_all(app)
        snap = app.state.snapshot
        assert snap is not None
        evil = dataclasses.replace(
            snap.processes[0], pid=4242, user=EVIL_USER, command=EVIL_COMMAND,
            cmdline=tuple(EVIL_COMMAND.split(" ")), gpu_mem=10**12,  # sorts first
        )
        clock.now += 1
        app.ingest(with_processes(snap, [evil, *snap.processes[1:]]))
        app.dashboard.refresh_view()
        await pilot.pause()
        line = next(line for line in table_lines(app) if "4242" in line)
        assert "[i]eve" in line
        assert SHOWN_COMMAND[:60] in line
        assert "\x1b" not in line and "\n" not in line and "\t" not in line
        # the segments carry no style taken from the text
        index = next(i for i, r in enumerate(app.dashboard.table.rows) if r.proc.pid == 4242)
        strip = app.dashboard.table.render_line(index)
        assert "4242" in strip.text
        assert not any(seg.style and seg.style.italic for seg in strip)

        app.dashboard.table.move_to(index)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        command = app.screen.query_one("#detail-command", Static).content
        console = Console(width=300, record=True, color_system=None)
        console.print(command)
        shown = console.export_text()
        assert "[bold red]pwn[/bold red]" in shown and "\\e[31mred" in shown
        assert "\x1b" not in shown
        title = app.screen.query_one("#detail-title", Static).content
        console = Console(width=300, record=True, color_system=None)
        console.print(title)
        assert "[i]eve" in console.export_text()
