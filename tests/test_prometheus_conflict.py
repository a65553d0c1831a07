"""Issue 41, point 8: a second exporter that claims an existing host's name (a neighbour's
copy of dcgm-exporter's output, ``Hostname="dcgm-node-1"``, every value 0) must not
replace the real one's numbers.  Two sources for one host are a conflict, shown as such:
a real Prometheus scrapes both, `gputop --prometheus URL --json` reads them back."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from helpers.prom import (
    ROOT,
    FixedServer,
    Reply,
    instant,
    need_prometheus,
    start_prometheus,
)

from gputop import model
from gputop.analysis.health.common import HOST_STATE

FIXTURES = ROOT / "tests" / "fixtures" / "prometheus"


def zeroed(text: str) -> bytes:
    """The same series, every value 0: what the forger exports."""
    return "".join(line if line.startswith("#") or not line.strip()
                   else line.rsplit(" ", 1)[0] + " 0\n"
                   for line in text.splitlines(keepends=True)).encode()


def test_two_exporters_claiming_one_host_are_a_conflict_not_a_merge(tmp_path: Path) -> None:
    need_prometheus()
    text = (FIXTURES / "dcgm-exporter.txt").read_text()
    assert 'Hostname="dcgm-node-1"' in text
    real = FixedServer(lambda path: Reply(body=text.encode()))
    forged = FixedServer(lambda path: Reply(body=zeroed(text)))
    proc = None
    try:
        targets = [s.url.removeprefix("http://") for s in (real, forged)]
        proc, url = start_prometheus(tmp_path, {"dcgm": [targets[0]], "vm": [targets[1]]})
        end = time.monotonic() + 60
        while len(instant(url, "up == 1")) < 2:
            assert time.monotonic() < end, "Prometheus never scraped both targets"
            time.sleep(0.3)
        done = subprocess.run([sys.executable, "-m", "gputop.cli", "--prometheus", url,
                               "--json"], cwd=ROOT, capture_output=True, text=True,
                              timeout=90)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        real.close()
        forged.close()
    assert "Traceback" not in done.stderr, done.stderr
    (host,) = [h for h in json.loads(done.stdout)["hosts"] if h["host"] == "dcgm-node-1"]
    # Neither's numbers: not the forger's zeros, not a card-by-card mix of both.
    assert host["state"] == model.HOST_ERROR and host["gpus"] == [], host
    assert all(t in host["error"] for t in targets), host["error"]
    assert "2 exporters claim this host name" in host["error"]
    (warning,) = [w for w in host["warnings"] if w["code"] == HOST_STATE]
    assert warning["severity"] == model.WARNING and all(t in warning["message"]
                                                        for t in targets)
