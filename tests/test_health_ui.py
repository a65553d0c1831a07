"""The warnings panel and the session-log screen, driven headless with Pilot."""

from __future__ import annotations

import dataclasses

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import Static

from gputop.analysis.health import WarningTracker
from gputop.model import CRITICAL, INFO, WARNING, HealthWarning
from gputop.ui.screens.log import WarningLogScreen, log_text
from gputop.ui.widgets.warnings import WarningsPanel, warning_lines

NOW = 1_764_680_000.0


def w(severity: str, code: str, gpu: int | None, message: str, **extra: object) -> HealthWarning:
    return HealthWarning(
        severity=severity, code=code, message=message, host="node1", gpu=gpu,
        hint=f"hint for {code}", since=NOW, **extra,  # type: ignore[arg-type]
    )


SAMPLE = [
    w(INFO, "persistence-off", 0, "persistence mode is off"),
    w(CRITICAL, "ecc-uncorrected", 2, "3 uncorrectable ECC errors"),
    w(WARNING, "pcie-width", 5, "PCIe link x4"),
]


def test_lines_sorted_by_severity_with_hints() -> None:
    text = warning_lines(SAMPLE, now=NOW).plain.splitlines()
    assert text[0].startswith("CRIT node1 GPU2") and "ECC" in text[0]
    assert "hint for ecc-uncorrected" in text[1]
    assert text[2].startswith("WARN node1 GPU5")
    assert text[4].startswith("INFO node1 GPU0")
    assert warning_lines([]).plain == "no warnings"


def test_untrusted_text_is_not_markup() -> None:
    evil = w(INFO, "idle-memory", 1, "pid 7 (eve: python [bold red]x[/] \x1b[2J) holds 9 GiB")
    text = warning_lines([evil])
    assert isinstance(text, Text)
    assert "[bold red]x[/]" in text.plain  # shown literally, not interpreted
    assert "\x1b" not in text.plain


def test_age_and_clearing_marks() -> None:
    old = w(WARNING, "temp-near-slowdown", 1, "86 C")
    text = warning_lines([old], clearing=lambda _: True, now=NOW + 3600 + 120).plain
    assert "(1h02m)" in text and "cleared" in text


class PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield WarningsPanel(id="panel")


async def test_panel_shows_and_skips_unchanged_updates() -> None:
    app = PanelApp()
    async with app.run_test(size=(100, 20)) as pilot:
        panel = app.query_one(WarningsPanel)
        assert panel.show(SAMPLE, now=NOW) is True
        await pilot.pause()
        rendered = panel.render()
        assert isinstance(rendered, Text)
        assert rendered.plain.splitlines()[0].startswith("CRIT")
        assert panel.show(list(SAMPLE), now=NOW + 1) is False  # same list, same minute
        assert panel.show(SAMPLE[:1], now=NOW + 1) is True
        assert [x.code for x in panel.warnings] == ["persistence-off"]
        assert panel.size.height >= 2


async def test_the_panel_names_hosts_only_when_there_are_several() -> None:
    """One host's warnings need no host name: at 80 columns it took the reason's room."""
    app = PanelApp()
    async with app.run_test(size=(80, 20)) as pilot:
        panel = app.query_one(WarningsPanel)
        panel.show(SAMPLE, now=NOW)
        await pilot.pause()
        lines = str(panel.render()).splitlines()
        assert lines and not any("node1" in line for line in lines)
        other = dataclasses.replace(SAMPLE[0], host="node2")
        panel.show([*SAMPLE, other], now=NOW + 60)
        await pilot.pause()
        lines = str(panel.render()).splitlines()
        assert any("node1" in line for line in lines) and any("node2" in line for line in lines)


class LogApp(App[None]):
    def __init__(self, screen: WarningLogScreen) -> None:
        super().__init__()
        self._log_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self._log_screen)


async def test_log_screen_lists_cleared_warnings_and_closes() -> None:
    tracker = WarningTracker(linger=10)
    tracker.update("node1", SAMPLE, NOW)
    tracker.update("node1", SAMPLE[1:], NOW + 60)  # persistence-off cleared
    tracker.expire(NOW + 120)
    assert [c.warning.code for c in tracker.log] == ["persistence-off"]
    screen = WarningLogScreen(tracker.log, tracker.current(), now=NOW + 120)
    app = LogApp(screen)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        assert app.screen is screen
        log = screen.query_one("#log", Static)
        plain = str(log.render())
        assert "persistence mode is off" in plain and "1m00s)" in plain
        active = screen.query_one("#active", WarningsPanel)
        assert [x.code for x in active.warnings] == ["ecc-uncorrected", "pcie-width"]
        # new data while open
        tracker.update("node1", [], NOW + 130)
        tracker.expire(NOW + 200)
        screen.update_log(tracker.log, tracker.current(), NOW + 200)
        await pilot.pause()
        assert active.warnings == []
        assert "Cleared this session (3)" in str(screen.query(".title").last().render())
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is not screen


def test_log_text_empty_and_order() -> None:
    assert "nothing has cleared" in log_text([]).plain
    tracker = WarningTracker(linger=0)
    tracker.update("node1", SAMPLE, NOW)
    tracker.update("node1", [], NOW + 5)
    lines = log_text(tracker.log).plain.splitlines()
    assert len(lines) == 3
    assert all("from " in line for line in lines)


class SmallPanelApp(App[None]):
    CSS = "WarningsPanel { max-height: 4; }"

    def compose(self) -> ComposeResult:
        yield WarningsPanel(id="panel")
        yield Static("below", id="below")


async def test_panel_says_how_many_did_not_fit() -> None:
    many = [w(WARNING, f"code-{n}", n, f"message {n}") for n in range(9)]
    app = SmallPanelApp()
    async with app.run_test(size=(80, 20)) as pilot:
        panel = app.query_one(WarningsPanel)
        panel.show([*many, SAMPLE[1]], now=NOW)
        await pilot.pause()
        assert panel.size.height == 4
        lines = panel.render().plain.splitlines()  # type: ignore[union-attr]
        assert len(lines) == 4
        assert lines[0].startswith("CRIT")  # the most severe always stays visible
        assert lines[-1].startswith("… 7 more")
        # few warnings: the panel shrinks to fit them
        panel.show(SAMPLE[:1], now=NOW)
        await pilot.pause()
        assert panel.size.height == 1


async def test_a_long_warning_goes_on_over_a_second_line_at_80_columns() -> None:
    """The reason after a long command was cut at 80 columns: it now goes on, indented."""
    long = w(INFO, "orphan-memory", 3,
             "pid 5100034 (alice: python -m ipykernel_launcher -f…) holds 10.7 GiB, "
             "orphaned: its notebook server is gone")
    app = PanelApp()
    async with app.run_test(size=(80, 20)) as pilot:
        panel = app.query_one(WarningsPanel)
        panel.show([SAMPLE[1], long], now=NOW)
        await pilot.pause()
        shown = [panel.render_line(y).text.rstrip() for y in range(panel.size.height)]
        assert len(shown) == 3 and shown[0].startswith("CRIT")
        assert shown[1].startswith("INFO GPU3  pid 5100034") and shown[1].endswith("10.7")
        assert shown[2] == "      GiB, orphaned: its notebook server is gone"
        assert all(len(line) <= 80 for line in shown)
        # wide enough: one line, as before
        await pilot.resize_terminal(160, 20)
        await pilot.pause()
        panel.show([SAMPLE[1], long], now=NOW + 60)
        await pilot.pause()
        shown = [panel.render_line(y).text.rstrip() for y in range(panel.size.height)]
        assert len(shown) == 2 and shown[1].endswith("its notebook server is gone  (1m)")


async def test_the_panel_budget_counts_folded_lines() -> None:
    long = w(INFO, "orphan-memory", 3, "x" * 70 + " orphaned: its notebook server is gone")
    many = [w(WARNING, f"code-{n}", n, f"message {n}") for n in range(3)]
    app = SmallPanelApp()
    async with app.run_test(size=(80, 20)) as pilot:
        panel = app.query_one(WarningsPanel)
        panel.show([*many, long], now=NOW)  # 3 + 2 lines do not fit in 4
        await pilot.pause()
        lines = panel.render().plain.splitlines()  # type: ignore[union-attr]
        assert panel.folded_lines() == 1
        # the folded one is counted as two lines: left out whole, not cut in half
        assert lines[-1].startswith("… 1 more") and len(lines) == 4
        assert not any("orphaned" in line for line in lines)
