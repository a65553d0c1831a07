"""`gputop record --demo lab`: the seeded past and the live simulation are one box of nine
GPU processes, not eighteen (issue 28.8)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.procs import Reaper, wait_for

from gputop.cli import main
from gputop.ledger import store
from gputop.sources import sim

LAB_GPU_PROCESSES = 9  # lab.yaml: the processes with GPU memory (docs in the file)


def _recorded_live(db: str) -> bool:
    """Three live samples written (the seeded past ends half a minute ago or more)."""
    try:
        conn = store.open_reader(db)
    except store.LedgerError:
        return False
    try:
        (n,) = conn.execute("SELECT COUNT(DISTINCT t1) FROM gpu_samples WHERE t1 > ?",
                            (time.time() - 20,)).fetchone()
        return int(n) >= 3
    finally:
        conn.close()


def test_demo_record_counts_each_process_once(
    tmp_path: Path, reaper: Reaper, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = sim.load_scenario("lab")
    expected = [p for p in scenario.processes if p["gpus"]]
    assert len(expected) == LAB_GPU_PROCESSES
    db = str(tmp_path / "lab.sqlite")
    rec = reaper.add(subprocess.Popen(
        [sys.executable, "-m", "gputop.cli", "record", "--demo", "lab", "--interval", "0.3",
         "--db", db], stderr=subprocess.PIPE, text=True))
    wait_for(lambda: _recorded_live(db), timeout=60, what="live samples after the seed")
    rec.send_signal(signal.SIGTERM)
    assert rec.wait(30) == 0

    conn = store.open_reader(db)
    try:
        rows = conn.execute("SELECT pid, start FROM procs").fetchall()
        (seeded,) = conn.execute("SELECT COUNT(DISTINCT t0) FROM gpu_samples").fetchone()
    finally:
        conn.close()
    assert seeded > 10  # the seeded past is there: a minute apart, over half an hour
    pids = [pid for pid, _start in rows]
    assert sorted(pids) == sorted(p["pid"] for p in expected)  # one row per process

    assert main(["report", "--db", db, "--since", "2h", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["processes"] == LAB_GPU_PROCESSES
    assert f"ran {LAB_GPU_PROCESSES} GPU process(es)" in doc["summary"]
    holds = [(h["pid"], h["gpu"]) for h in doc["idle_holds"]]
    assert len(holds) == len(set(holds)), holds  # each idle hold listed once
