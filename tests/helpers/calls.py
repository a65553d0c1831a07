"""Work counted in operations, never in time (issues 14 and 27)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def count_calls(work: Callable[[], Any]) -> int:
    """Python and builtin calls made by ``work()``, as a profiler hook sees them."""
    calls = 0

    def hook(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(hook)
    try:
        work()
    finally:
        sys.setprofile(None)
    return calls
