"""The rules' tunable limits: the config file's ``health:`` section."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gputop.records import Record, record
from gputop.yamlnodes import unknown_key


@record(frozen=True, slots=True)
class Thresholds(Record):
    """Tunable limits; the config file's ``health:`` section uses the same names."""

    # The classic "memory above N %" alert, off (0) by default: caching allocators
    # (PyTorch, vLLM, JAX) hold most of a card by design, so high use alone is no fault.
    mem_percent: float = 0.0
    oom_percent: float = 98.0  # OOM risk at or above this share of a card's memory
    oom_horizon_minutes: float = 15.0  # OOM risk when the trend reaches the total this soon
    oom_window_minutes: float = 5.0  # the trend is a straight line over this many minutes
    temp_slowdown_margin: float = 5.0  # warn this close (C) to the slowdown threshold
    # critical this close (C) to the shutdown threshold; small, because slowdown is often
    # only 3 C below shutdown (A100: 89/92 C) and a throttling card is a warning, not a page
    temp_shutdown_margin: float = 2.0
    fan_hot_temp: float = 60.0  # a stopped fan (0 %) is a problem at or above this (C)
    busy_util: float = 20.0  # a card at or above this util % is busy (PCIe gen rule)
    idle_minutes: float = 30.0  # a process at 0 % SM this long while holding memory
    idle_memory_mib: float = 1024.0  # ... and holding at least this much
    input_bound_minutes: float = 5.0  # low SM with a busy CPU for this long
    input_bound_sm_percent: float = 5.0
    input_bound_cpu_percent: float = 80.0
    linger_seconds: float = 30.0  # a cleared warning stays visible this long
    xid_hold_minutes: float = 60.0  # an XID (a one-off event) stays visible this long

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None) -> Thresholds:
        """Build from the config's ``health:`` mapping; ValueError names a bad key."""
        if section is None:
            return cls()
        if not isinstance(section, Mapping):
            raise ValueError("health: expected a mapping of thresholds")
        names = set(cls._names)
        values: dict[str, float] = {}
        for key, value in section.items():
            if key not in names:
                raise ValueError(f"health.{key}: {unknown_key(key, sorted(names), 'known')}")
            # bool is an int in Python, but `mem_percent: yes` is a mistake, not 1 %.
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"health.{key}: expected a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"health.{key}: expected a number >= 0, got {value!r}")
            values[key] = float(value)
        return cls(**values)
