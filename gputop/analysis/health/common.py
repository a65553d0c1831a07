"""What the rule modules share: units, text helpers, and the order every list is shown in."""

from __future__ import annotations

from collections.abc import Iterable

from gputop.model import SEVERITY_ORDER, HealthWarning

GIB = 1024**3
MIB = 1024**2

HOST_STATE = "host-state"  # the code of "this host cannot be seen"


def sort_warnings(items: Iterable[HealthWarning]) -> list[HealthWarning]:
    return sorted(
        items,
        key=lambda w: (
            SEVERITY_ORDER.get(w.severity, 9),
            w.host or "",
            -1 if w.gpu is None else w.gpu,
            w.code,
            -1 if w.pid is None else w.pid,
        ),
    )


def worst(items: Iterable[HealthWarning]) -> str | None:
    """The most severe severity among ``items`` (None for an empty list)."""
    ranks = [SEVERITY_ORDER.get(w.severity, 9) for w in items]
    if not ranks:
        return None
    best = min(ranks)
    return next(s for s, r in SEVERITY_ORDER.items() if r == best)


def one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def gib(value: int | None) -> str:
    return "?" if value is None else f"{value / GIB:.1f}"
