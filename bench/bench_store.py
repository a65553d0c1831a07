"""What 50,000 planted files in the reservation store cost the people who read it, and
whether the real reservation is still seen.  Run by hand: python bench/bench_store.py

Three stores, each with one real reservation of card 0 by the bench's user:
- 50,000 files with names that are no reservation file (``junk-00000``);
- 50,000 ``GPU-0000-N.1.json`` holding ``{}``: reservation-shaped names of cards this
  host does not have, sorting before every real UUID (issue 25, point 1);
- 50,000 ``<card 1's UUID>.N.json`` holding ``{}``: names of a real card of this host.

For each: the first display scan (what a dashboard or `gputop reservations` pays once per
change of the directory), the next scans while the directory is unchanged (cached), a
reservation of another card (a change: read under the lock), and whether card 0's
reservation was seen.  The planted files belong to the bench's user (nobody else exists
here); the store's rules do not depend on who planted them, only on their names.
"""

from __future__ import annotations

import inspect
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gputop.actions import reservations as store

UUIDS = [f"GPU-fa6e0000-0000-4000-8000-{i:012d}" for i in range(4)]
PLANTED = 50_000
# Older versions of the store take no card list: they read what the directory holds.
_KNOWS_CARDS = "gpu_uuids" in inspect.signature(store.scan).parameters


def _ms(fn: Callable[[], Any], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _scan(directory: Path) -> dict[str, Any]:
    if _KNOWS_CARDS:
        return store.scan(str(directory), gpu_uuids=UUIDS)
    return store.scan(str(directory))


def _plant(directory: Path, name_of: Callable[[int], str]) -> None:
    for i in range(1, PLANTED + 1):
        fd = os.open(directory / name_of(i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"{}")
        os.close(fd)


def main() -> None:
    cases: dict[str, Callable[[int], str]] = {
        "50,000 junk names": lambda i: f"junk-{i:05d}",
        "50,000 GPU-0000-N.1.json ({})": lambda i: f"GPU-0000-{i}.1.json",
        "50,000 <card 1 UUID>.N.json ({})": lambda i: f"{UUIDS[1]}.{i}.json",
    }
    how = "reads the cards by their names" if _KNOWS_CARDS else "reads the directory"
    print(f"store code: {how}")
    print("\n| store | first scan ms | cached scan ms | reserve another card ms "
          "| card 0 seen | problem lines |")
    print("|---|---|---|---|---|---|")
    for label, name_of in cases.items():
        tmp = Path(tempfile.mkdtemp(prefix="gputop-bench-store-"))
        try:
            directory = tmp / "store"
            store.ensure_directory(str(directory))
            now = time.time()
            assert store.reserve(str(directory), [0], now + 3600, "real", gpu_uuids=UUIDS,
                                 now=now)["ok"]
            _plant(directory, name_of)
            old = now - 60
            os.utime(directory, (old, old))  # quiet: display scans may be cached
            store._CACHE.clear()
            first = _ms(lambda d=directory: _scan(d), repeat=1)  # type: ignore[misc]
            cached = _ms(lambda d=directory: _scan(d), repeat=20)  # type: ignore[misc]
            found = _scan(directory)
            seen = [r["gpu"] for r in found["reservations"]] == [0]
            change = _ms(lambda d=directory: store.reserve(  # type: ignore[misc]
                str(d), [2], time.time() + 600, "", gpu_uuids=UUIDS), repeat=1)
            print(f"| {label} | {first:.0f} | {cached:.2f} | {change:.0f} | "
                  f"{'yes' if seen else 'NO'} | {len(found['problems'])} |")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
