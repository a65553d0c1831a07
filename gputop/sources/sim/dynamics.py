"""Deterministic noise: how the simulated values move over time.

A hash of (seed, key, step), smoothly interpolated: a pure function of time, so a frozen
clock freezes every value and the same clock replays.
"""

from __future__ import annotations

import math

_MASK64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finalizer: a cheap, well-spread integer hash."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _rand01(seed: int, key: int, step: int) -> float:
    return _mix(_mix((seed * 1_000_003) ^ key) ^ (step & _MASK64)) / 2.0**64


def _smooth(seed: int, key: int, t: float, period: float) -> float:
    x = t / period
    step = math.floor(x)
    frac = x - step
    frac = frac * frac * (3.0 - 2.0 * frac)
    a = _rand01(seed, key, step)
    return a + (_rand01(seed, key, step + 1) - a) * frac


def wander(seed: int, key: int, t: float) -> float:
    """A value in [0, 1) that drifts over ~30 s with faster small wiggles."""
    return 0.7 * _smooth(seed, key, t, 30.0) + 0.3 * _smooth(seed, key ^ 0x5BD1E995, t, 4.0)


def _clamp(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x
