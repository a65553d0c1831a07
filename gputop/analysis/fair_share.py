"""Fair share for `gputop run`'s line: recent GPU-hours, decayed, as Slurm's fair share
counts them. Pure arithmetic: the ledger's rows come in, numbers go out (docs/queue.md).

A GPU-hour used ``age`` ago counts ``2 ** (-age / half_life)``: one used a half-life ago
counts half, two half-lives ago a quarter. Among jobs of equal priority, the user with
fewer decayed GPU-hours goes first, then arrival decides (as without fair share).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

HOUR = 3600.0


@dataclass(frozen=True)
class Use:
    """GPU time one user spent: ``gpu_seconds`` of card time centred at ``t``."""

    user: str
    t: float  # epoch seconds
    gpu_seconds: float


def weight(age_s: float, half_life_s: float) -> float:
    """What a GPU-hour ``age_s`` old counts now (1 now, 1/2 a half-life ago); a use in
    the future (a clock step) counts as now."""
    return 2.0 ** (-max(0.0, age_s) / half_life_s)


def decayed_hours(uses: Iterable[Use], now: float, half_life_s: float) -> dict[str, float]:
    """Each user's decayed GPU-hours at ``now``."""
    if not half_life_s > 0 or not math.isfinite(half_life_s):
        raise ValueError(f"half-life must be a positive number of seconds, got {half_life_s}")
    out: dict[str, float] = {}
    for use in uses:
        if use.gpu_seconds <= 0 or not math.isfinite(use.gpu_seconds):
            continue
        out[use.user] = out.get(use.user, 0.0) + (
            use.gpu_seconds / HOUR * weight(now - use.t, half_life_s))
    return out


def fractions(hours: Mapping[str, float]) -> dict[str, float]:
    """Each user's part of everyone's decayed GPU-hours (0..1); all 0 when none."""
    total = sum(hours.values())
    return {user: (h / total if total > 0 else 0.0) for user, h in hours.items()}


def rank_key(user: str, hours: Mapping[str, float]) -> float:
    """The fair-share part of a job's place in line: its user's decayed GPU-hours (a user
    the ledger has never seen: 0, first)."""
    return hours.get(user, 0.0)
