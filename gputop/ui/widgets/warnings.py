"""The warnings panel: current health warnings, most severe first, with their hints.

A plain render() widget: ``show()`` re-renders only when the list (or which entries are
lingering after they cleared) changed, so a quiet tick costs nothing.  Messages can
carry command lines and user names, so every piece is a rich Text, never markup.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from rich.cells import cell_len
from rich.console import RenderableType
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from gputop.analysis.durations import format_duration
from gputop.model import CRITICAL, INFO, SEVERITY_ORDER, WARNING, HealthWarning
from gputop.ui import fmt

SEVERITY_STYLE = {CRITICAL: "bold red", WARNING: "yellow", INFO: "cyan"}
SEVERITY_LABEL = {CRITICAL: "CRIT", WARNING: "WARN", INFO: "INFO"}


def warning_lines(
    warnings: Iterable[HealthWarning],
    clearing: Callable[[HealthWarning], bool] | None = None,
    show_host: bool = True,
    hints: bool = True,
    now: float | None = None,
    wrap: bool = False,
    width: int | None = None,
) -> Text:
    """The panel's text, also used by the log screen and tests; ``wrap``: long messages
    go on over the next lines instead of ending in an ellipsis; ``width`` (one line a
    warning otherwise): a warning longer than that goes on over one more line, indented,
    so that the reason after a long command is read, not cut (80 columns)."""
    items = _sorted(warnings)
    out = Text(no_wrap=not wrap, overflow="fold" if wrap else "ellipsis")
    if not items:
        out.append("no warnings", style="green")
        return out
    for n, w in enumerate(items):
        if n:
            out.append("\n")
        line = _one_warning(w, clearing, show_host, hints, now)
        if width is not None and not wrap and not hints:
            line = _fold_once(line, width)
        out.append_text(line)
    return out


CONTINUATION = " " * 6  # under the message, past "INFO GPU3"'s label


def _fold_once(line: Text, width: int) -> Text:
    """``line`` as it fits ``width``: whole, or broken at the last space that fits (else
    at the width) with the rest on one indented line (which ends in an ellipsis if it is
    still too long)."""
    if not folded(line, width):
        return line
    cells, cut = 0, len(line.plain)
    for i, ch in enumerate(line.plain):
        cells += cell_len(ch)
        if cells > width:
            cut = i
            break
    space = line.plain.rfind(" ", 0, cut + 1)
    if space > width // 2:
        cut = space
    head, tail = line.divide([cut])
    if tail.plain.startswith(" "):
        tail = tail[1:]
    out = head.copy()
    out.rstrip()
    out.append("\n" + CONTINUATION)
    out.append_text(tail)
    return out


def folded(warning_line: Text, width: int) -> bool:
    """Whether ``_fold_once`` breaks this line at ``width``."""
    return width > len(CONTINUATION) + 10 and warning_line.cell_len > width


def _one_warning(
    w: HealthWarning,
    clearing: Callable[[HealthWarning], bool] | None,
    show_host: bool,
    hints: bool,
    now: float | None,
) -> Text:
    out = Text()
    faded = clearing is not None and clearing(w)
    style = "dim" if faded else SEVERITY_STYLE.get(w.severity, "")
    out.append(f"{SEVERITY_LABEL.get(w.severity, w.severity[:4].upper()):<4} ", style=style)
    where = []
    if show_host and w.host:
        where.append(fmt.visible(w.host))
    where.append(f"GPU{w.gpu}" if w.gpu is not None else "host")
    out.append(" ".join(where) + "  ", style="bold" if not faded else "dim")
    out.append(fmt.visible(w.message), style="dim" if faded else "")
    if w.since is not None and now is not None and now - w.since >= 60:
        out.append(f"  ({format_duration(now - w.since, minutes=True)})", style="dim")
    if faded:
        out.append("  cleared", style="dim italic")
    if hints and w.hint:
        out.append("\n" + CONTINUATION)
        out.append("→ " + fmt.visible(w.hint), style="dim")
    return out


def _sorted(items: Iterable[HealthWarning]) -> list[HealthWarning]:
    return sorted(items, key=lambda w: SEVERITY_ORDER.get(w.severity, 9))


class WarningsPanel(Widget):
    """Current warnings of every host (or one), sorted by severity.

    On the dashboard it is one line per warning (``hints=False``), so it leaves room for
    the processes; the warnings-log screen shows the hints and wraps (``wrap=True``).
    """

    DEFAULT_CSS = """
    WarningsPanel {
        height: auto; max-height: 12; padding: 0 1;
        text-wrap: nowrap; text-overflow: ellipsis;
    }
    """

    def __init__(
        self,
        *,
        show_host: bool = True,
        hints: bool = False,
        wrap: bool = False,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.show_host = show_host
        self.hints = hints
        self.wrap = wrap
        if wrap:
            self.styles.text_wrap = "wrap"
        self._warnings: list[HealthWarning] = []
        self._clearing: frozenset[tuple[object, ...]] = frozenset()
        self._now: float | None = None
        self._others = 0  # warnings of other hosts, shown only as a count
        self._item_memo: tuple[tuple[Any, ...], list[int]] | None = None

    @property
    def warnings(self) -> list[HealthWarning]:
        return list(self._warnings)

    def show(
        self,
        warnings: Iterable[HealthWarning],
        clearing: Callable[[HealthWarning], bool] | None = None,
        now: float | None = None,
        others: int = 0,
    ) -> bool:
        """Set the list (``others``: how many warnings other hosts have, shown as one
        count line); returns True when it changed (and a repaint was asked for)."""
        items = list(warnings)
        faded = frozenset(w.key for w in items if clearing is not None and clearing(w))
        # Ages shown are whole minutes: repaint for the clock only when a minute passes.
        minute = None if now is None else int(now // 60)
        old_minute = None if self._now is None else int(self._now // 60)
        if (items == self._warnings and faded == self._clearing and minute == old_minute
                and others == self._others):
            return False
        # A layout pass of the whole screen costs tens of ms; only a change in the number
        # of lines can move the widgets below, so a changed text is a plain repaint.
        resized = (self._lines(items, others) != self._lines(self._warnings, self._others))
        self._others = others
        self._warnings = items
        self._clearing = faded
        self._now = now
        self.refresh(layout=resized)
        return True

    def _item_lines(self, items: list[HealthWarning], width: int | None = None) -> list[int]:
        """How many lines each warning takes, in the panel's order."""
        if self.hints:
            return [2] * len(items)
        width = self.content_size.width if width is None else width
        # Asked every tick (folded_lines) with what was asked last: the lines are built
        # again only when the warnings, the width or the clock shown changed.
        key = (width, self._now, items)
        memo = self._item_memo
        if memo is not None and memo[0] == key:
            return memo[1]
        show_host = self._show_host(items)
        sizes = [2 if width and folded(_one_warning(w, None, show_host, False, self._now),
                                       width) else 1
                 for w in _sorted(items)]
        self._item_memo = ((width, self._now, list(items)), sizes)
        return sizes

    def _show_host(self, items: list[HealthWarning]) -> bool:
        # One host's warnings under its own header need no host name: at 80 columns it
        # took the room of the reason.
        return self.show_host and len({w.host for w in items}) > 1

    def _lines(self, items: list[HealthWarning], others: int = 0,
               width: int | None = None) -> int:
        return max(1, sum(self._item_lines(items, width)) + (1 if others else 0))

    def folded_lines(self) -> int:
        """How many warnings take a second line at the panel's width (the app gives the
        panel that much more room)."""
        return sum(n - 1 for n in self._item_lines(self._warnings)) if not self.hints else 0

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.wrap:  # as many lines as the wrapped text takes at this width
            return super().get_content_height(container, viewport, width)
        # Ask for every line; max-height (set by the app) caps it and render() then
        # summarises what did not fit.
        return self._lines(self._warnings, self._others, width)

    def render(self) -> RenderableType:
        now = self._now if self._now is not None else time.time()
        items = _sorted(self._warnings)
        room = self.content_size.height
        hidden = 0
        footer = 1 if self._others else 0
        sizes = self._item_lines(items)
        show_host = self._show_host(items)  # decided on all of them: the sizes were
        if room and sum(sizes) + footer > room:
            # Clipped silently, the least severe warnings would vanish without a trace.
            keep, used = 0, 0
            for size in sizes:
                if used + size > room - 1:
                    break
                keep, used = keep + 1, used + size
            hidden = len(items) - keep
            items = items[:keep]
        text = warning_lines(
            items,
            clearing=lambda w: w.key in self._clearing,
            show_host=show_host,
            hints=self.hints,
            now=now,
            wrap=self.wrap,
            width=self.content_size.width or None,
        ) if items or not self._others else Text()
        parts = []
        if hidden:
            parts.append(f"… {hidden} more")
        if self._others:
            noun = "warning" if self._others == 1 else "warnings"
            parts.append(f"+ {self._others} {noun} on other hosts")
        if parts:
            if items:
                text.append("\n")
            where = "w for all warnings and hints" if hidden else "c for the cluster"
            text.append(", ".join(parts) + f": press {where}", style="dim")
        return text
