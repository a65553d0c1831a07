"""Formatting for the dashboard: sizes, durations, gauges, sparklines, untrusted text.

No Textual here, only strings and rich Text, so the helpers are cheap to test.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from gputop.analysis.durations import format_duration
from gputop.text import visible

KIB = 1024
MIB = KIB * 1024
GIB = MIB * 1024


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 host``, ``3 hosts``, ``1 process``, ``2 processes``."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def safe_text(text: str | None, style: str = "") -> Text:
    """Untrusted text as a rich Text: never parsed as markup, escapes made visible."""
    return Text(visible(text), style=style, no_wrap=True, overflow="ellipsis")


def size(value: int | None, unit: int = MIB) -> str:
    """Bytes as a short human size: 512M, 40.1G, 1.2T."""
    if value is None:
        return "-"
    if value >= 1024 * GIB:
        return f"{value / (1024 * GIB):.1f}T"
    if value >= GIB:
        gib = value / GIB
        return f"{gib:.1f}G" if gib < 100 else f"{gib:.0f}G"
    if value >= MIB or unit == MIB:
        return f"{value / MIB:.0f}M"
    return f"{value / KIB:.0f}K"


def duration(seconds: float | None) -> str:
    """Running time as every view shows it (``format_duration``); '-' when unknown."""
    return "-" if seconds is None else format_duration(seconds)


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def level(value: float | None, thresholds: tuple[float, float]) -> str:
    """'ok', 'warn' or 'crit' for a value against (warn, crit); 'idle' when unknown."""
    if value is None:
        return "idle"
    warn, crit = thresholds
    if value >= crit:
        return "crit"
    if value >= warn:
        return "warn"
    return "ok"


_PARTIAL = " ▏▎▍▌▋▊▉"


def bar(fraction: float | None, width: int) -> tuple[str, str]:
    """A gauge of ``width`` cells: (filled part, empty part) so each can be styled."""
    if width <= 0:
        return "", ""
    if fraction is None:
        return "", "╌" * width
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    filled = "█" * full + (_PARTIAL[part] if part else "")
    return filled, " " * (width - len(filled))


_SPARK = "▁▂▃▄▅▆▇█"


def sparkline(
    series: Sequence[tuple[float, float]], width: int, now: float, span: float
) -> str:
    """Fixed 0-100 sparkline of the last ``span`` seconds, one cell per span/width.

    Each cell shows the highest value of its time slot (a short spike stays visible);
    a slot with no sample is a blank, so gaps in observation show as gaps.
    """
    if width <= 0:
        return ""
    cells: list[float | None] = [None] * width
    start = now - span
    step = span / width
    for t, value in series:
        if t < start or t > now:
            continue
        i = min(int((t - start) / step), width - 1)
        old = cells[i]
        cells[i] = value if old is None or value > old else old
    out = []
    for cell in cells:
        if cell is None:
            out.append(" ")
        else:
            v = min(max(cell, 0.0), 100.0)
            out.append(_SPARK[min(int(v / 100.0 * len(_SPARK)), len(_SPARK) - 1)])
    return "".join(out)
