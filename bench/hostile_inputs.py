"""Hostile inputs: how long a refusal takes, and what 50,000 junk files in the
reservation store cost a dashboard.  Run by hand: python bench/hostile_inputs.py"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from gputop.actions import reservations as store
from gputop.hosts import HostsFileError, load


def _ms(fn: object, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        with contextlib.suppress(HostsFileError):
            fn()  # type: ignore[operator]
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gputop-bench-hostile-"))
    try:
        bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n"
            for i in range(8))
        files = {
            "alias bomb (10^9 values)": "hosts: [gpu01]\n" + bomb,
            "1,500 levels deep": "hosts: " + "[" * 1500 + "]" * 1500 + "\n",
        }
        print("| input | refused in ms |\n|---|---|")
        for label, text in files.items():
            path = tmp / "hosts.yaml"
            path.write_text(text)
            print(f"| {label} | {_ms(lambda p=path: load(p)):.1f} |")
        big = tmp / "big.yaml"
        with big.open("w") as fh:
            fh.truncate(50 * 1024 * 1024)
        print(f"| 50 MB file | {_ms(lambda: load(big)):.2f} |")
        fifo = tmp / "fifo"
        os.mkfifo(fifo)
        print(f"| FIFO | {_ms(lambda: load(fifo)):.2f} |")

        directory = tmp / "store"
        store.ensure_directory(str(directory))
        now = time.time()
        store.reserve(str(directory), [0], now + 3600, "real", now=now)
        for i in range(50_000):
            (directory / f"junk-{i:05d}").touch()
        for i in range(1, 3000):
            record = {"gpu": 1, "uuid": None, "user": "x", "uid": 0, "since": now,
                      "until": now + 60, "note": "", "host": "x"}
            (directory / f"index-1.{i}.json").write_text(json.dumps(record))
        old = now - 60
        os.utime(directory, (old, old))
        store._CACHE.clear()
        first = _ms(lambda: store.scan(str(directory)), repeat=1)
        cached = _ms(lambda: store.scan(str(directory)), repeat=20)
        print("\n| store with 50,000 junk names + 3,000 reservation files | ms |\n|---|---|")
        print(f"| first display scan (reads only the cards' own names) | {first:.0f} |")
        print(f"| next scans, directory unchanged (cached) | {cached:.2f} |")
        print(f"| problems lines | {len(store.scan(str(directory))['problems'])} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
