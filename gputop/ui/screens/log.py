"""The session log: warnings that cleared since gputop started, newest first, with when
they began and ended; the warnings still active are listed above them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from gputop.analysis.health import ClearedWarning
from gputop.model import HealthWarning
from gputop.ui import fmt
from gputop.ui.keys import bindings
from gputop.ui.widgets.warnings import SEVERITY_LABEL, SEVERITY_STYLE, WarningsPanel

if TYPE_CHECKING:
    from gputop.ui.app import GputopApp


def _clock(epoch: float | None) -> str:
    if epoch is None:
        return "--:--:--"
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def log_text(log: Sequence[ClearedWarning]) -> Text:
    out = Text(overflow="fold")  # wrapped: a long message is read in full here
    if not log:
        out.append("nothing has cleared yet in this session", style="dim")
        return out
    for n, entry in enumerate(reversed(log)):
        w = entry.warning
        if n:
            out.append("\n")
        out.append(f"{_clock(entry.cleared)}  ", style="dim")
        label = SEVERITY_LABEL.get(w.severity, w.severity[:4].upper())
        out.append(f"{label:<4} ", style=SEVERITY_STYLE.get(w.severity, ""))
        where = fmt.visible(w.host or "") + " " + (f"GPU{w.gpu}" if w.gpu is not None else "host")
        out.append(where.strip() + "  ", style="bold")
        out.append(fmt.visible(w.message))
        if w.since is not None:
            out.append(
                f"  (from {_clock(w.since)}, {fmt.duration(entry.cleared - w.since)})", style="dim"
            )
    return out


class WarningLogScreen(Screen[None]):
    """Opened by the app's `w` binding with the tracker's current list and log."""

    BINDINGS: ClassVar[list[BindingType]] = bindings("log")

    DEFAULT_CSS = """
    WarningLogScreen .title { padding: 1 1 0 1; text-style: bold; }
    WarningLogScreen #log { padding: 0 1; }
    WarningLogScreen #active { max-height: 1000; }
    """

    def __init__(
        self,
        log: Sequence[ClearedWarning],
        current: Sequence[HealthWarning] = (),
        now: float | None = None,
        source: Callable[[], tuple[list[ClearedWarning], list[HealthWarning], float]]
        | None = None,
    ) -> None:
        super().__init__()
        self.source = source  # re-read on every new snapshot while the screen is open
        self.cleared = list(log)
        self.active = list(current)
        self.now = now

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(f"Active warnings ({len(self.active)})", classes="title")
            panel = WarningsPanel(id="active", hints=True, wrap=True)
            panel.show(self.active, now=self.now)
            yield panel
            yield Static(f"Cleared this session ({len(self.cleared)})", classes="title")
            yield Static(log_text(self.cleared), id="log")
        yield Footer()

    def on_mount(self) -> None:
        if self.source is not None:
            cast("GputopApp", self.app).state_changed.subscribe(self, self._pull)

    def _pull(self, _state: object = None) -> None:
        if self.source is not None and self.is_attached:
            self.update_log(*self.source())

    def update_log(
        self, log: Sequence[ClearedWarning], current: Sequence[HealthWarning], now: float
    ) -> None:
        """Called by the app when new snapshots arrive while the screen is open."""
        self.cleared = list(log)
        self.active = list(current)
        self.query_one("#active", WarningsPanel).show(self.active, now=now)
        self.query_one("#log", Static).update(log_text(self.cleared))
        titles = list(self.query(".title").results(Static))
        titles[0].update(f"Active warnings ({len(self.active)})")
        titles[1].update(f"Cleared this session ({len(self.cleared)})")


def open_log(app: GputopApp) -> None:
    """The dashboard's `w`: active warnings with hints, then what cleared this session."""
    tracker = app.analyser.tracker

    def source() -> tuple[list[ClearedWarning], list[HealthWarning], float]:
        return list(tracker.log), list(app.state.warnings), app.clock()

    log, current, now = source()
    app.push_screen(WarningLogScreen(log, current, now=now, source=source))
