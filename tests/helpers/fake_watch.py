"""Watch this machine's (fake) NVML the way the dashboard does, one step per stdin line.

Run by tests/test_fakenvml.py in a subprocess whose LD_LIBRARY_PATH loads gputop's fake
driver (tests/fakenvml), so the real pynvml and the real collector read it.  Each line read
from stdin triggers one collect; the reply is one JSON line: the snapshot (as --json prints
it) and the warnings the dashboard's WarningTracker holds after it.
"""

from __future__ import annotations

import json
import sys

from gputop.analysis import health
from gputop.model import HostSnapshot
from gputop.sources.hostsource import open_local


def main() -> None:
    collector = open_local().collector
    tracker = health.WarningTracker()
    for _ in sys.stdin:
        snap = HostSnapshot.from_dict(collector.collect())
        current = tracker.update(snap.host, health.warnings(snap), snap.time)
        print(json.dumps({"snapshot": snap.to_dict(),
                          "warnings": [w.to_dict() for w in current]}), flush=True)


if __name__ == "__main__":
    main()
