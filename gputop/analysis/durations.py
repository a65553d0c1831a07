"""Parse what people type for "how long" and "how much": `4h`, `1h30m`, `until 18:00`, `20G`.

Pure functions; every error is a `ValueError` whose message is one line that can be
shown as it is (the CLI prints it, the reserve dialog shows it under the field).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import datetime as dt

_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# Patterns compiled when first used (re's own cache), not at import: a one-shot that
# parses none of them does not pay for them.
_DURATION_PART = r"(\d+(?:\.\d+)?)\s*([dhms])"
_DURATION_FULL = r"(?:\d+(?:\.\d+)?\s*[dhms]\s*)+"
_CLOCK = r"([01]?\d|2[0-3]):([0-5]\d)"
_DATE_CLOCK = r"(\d{4})-(\d{2})-(\d{2})[ T]([01]?\d|2[0-3]):([0-5]\d)"

# GPU memory is counted in binary units everywhere (nvidia-smi prints MiB), so "20G"
# means 20 GiB; "GB" and "GiB" are accepted as the same thing rather than as a trap.
_SIZE = r"(?i)(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?"
_SIZE_FACTOR = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_duration(text: str) -> float:
    """`4h`, `30m`, `1h30m`, `2d`, `90s`, `1.5h` -> seconds (> 0)."""
    cleaned = text.strip().lower()
    if not cleaned:
        raise ValueError("empty duration: use e.g. 4h, 30m, 1h30m or 'until 18:00'")
    if not re.fullmatch(_DURATION_FULL, cleaned):
        raise ValueError(
            f"bad duration {text!r}: use e.g. 4h, 30m, 1h30m, 2d or 'until 18:00'"
        )
    seconds = sum(
        float(number) * _UNIT_SECONDS[unit] for number, unit in re.findall(_DURATION_PART, cleaned)
    )
    if seconds <= 0:
        raise ValueError(f"bad duration {text!r}: it must be longer than zero")
    return seconds


def parse_until(text: str, now: float, tz: dt.tzinfo | None = None) -> float:
    """A duration or an end time -> the epoch second it ends.

    `until 18:00` (or just `18:00`) is the next 18:00 in local time: today if still
    ahead, else tomorrow. `until 2026-12-03 09:30` is that moment. Anything else is a
    duration counted from `now`.
    """
    cleaned = " ".join(text.strip().split())
    lowered = cleaned.lower()
    if lowered.startswith("until"):
        spec = cleaned[5:].strip()
        if not spec:
            raise ValueError("'until' needs a time: e.g. 'until 18:00'")
        return _parse_end_time(spec, now, tz, original=text)
    if re.fullmatch(_CLOCK, cleaned) or re.fullmatch(_DATE_CLOCK, cleaned):
        return _parse_end_time(cleaned, now, tz, original=text)
    return now + parse_duration(cleaned)


def _parse_end_time(spec: str, now: float, tz: dt.tzinfo | None, original: str) -> float:
    # Naive local time (tz None) or a zoneinfo zone: both do wall-clock arithmetic, so
    # "tomorrow 18:00" stays 18:00 across a DST change.
    import datetime as dt  # `until 18:00` only: a table of durations needs no calendar

    current = dt.datetime.fromtimestamp(now, tz)
    full = re.fullmatch(_DATE_CLOCK, spec)
    if full:
        year, month, day, hour, minute = (int(part) for part in full.groups())
        try:
            end = current.replace(
                year=year, month=month, day=day, hour=hour, minute=minute, second=0, microsecond=0
            )
        except ValueError as exc:
            raise ValueError(f"bad date in {original!r}: {exc}") from None
        if end.timestamp() <= now:
            raise ValueError(f"{original!r} is in the past")
        return end.timestamp()
    clock = re.fullmatch(_CLOCK, spec)
    if not clock:
        raise ValueError(
            f"bad time {original!r}: use HH:MM or YYYY-MM-DD HH:MM, e.g. 'until 18:00'"
        )
    hour, minute = int(clock.group(1)), int(clock.group(2))
    end = current.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if end.timestamp() <= now:
        end += dt.timedelta(days=1)
    return end.timestamp()


def parse_size(text: str) -> int:
    """`20G`, `512M`, `1.5T`, `20GiB`, `1000` (bytes) -> bytes. Units are binary."""
    match = re.fullmatch(_SIZE, text.strip())
    if not match:
        raise ValueError(f"bad size {text!r}: use e.g. 20G, 512M, 1.5T")
    number = float(match.group(1))
    value = number * _SIZE_FACTOR[match.group(2).lower()]
    if not math.isfinite(value):
        raise ValueError(f"bad size {text!r}: too large")
    return int(value)


def format_duration(seconds: float, minutes: bool = False) -> str:
    """Seconds as every view shows them: `45s`, `14m03s`, `1h02m`, `3d04h`.

    Two units at most, so a column stays narrow and a glance gives the size.  ``minutes``:
    whole minutes (`14m`), for ages that should not repaint every second."""
    seconds = max(int(seconds), 0)
    if seconds < 60 and not minutes:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m" if minutes else f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"
