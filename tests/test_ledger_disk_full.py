"""A full disk pauses recording with one message and resumes when space returns.

SQLite's max_page_count gives the writer the very error a full disk gives
(SQLITE_FULL, "database or disk is full") without needing a filesystem to fill."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.analysis.pipeline import Settings
from gputop.commands.record import RecordLoop
from gputop.ledger import store
from gputop.ledger.writer import Recorder
from gputop.model import Gpu, GpuProcess, HostSnapshot


def _snap(tick: int) -> HostSnapshot:
    return HostSnapshot(
        host="h", time=1_700_000_000.0 + 10 * tick,
        gpus=(Gpu(index=0, uuid="GPU-0", util_gpu=tick % 100, mem_used=tick),),
        processes=tuple(GpuProcess(pid=100 + n, gpu=0, gpu_mem=tick * 1000 + n, sm_util=tick % 7,
                                   command="x" * 200, start_time=1.0) for n in range(50)))


def test_full_disk_pauses_then_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "full.sqlite")
    conn = store.open_writer(path)
    loop = RecordLoop(Recorder(conn, 10.0, 1), Settings(), path, raw_days=7)
    loop.emit(_snap(0))
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    for tick in range(1, 6):
        loop.emit(_snap(tick))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "disk full" in err and "recording paused" in err
    conn.execute("PRAGMA max_page_count = 1000000")
    for tick in range(6, 9):
        loop.emit(_snap(tick))
    assert "recording resumed" in capsys.readouterr().err
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    kept = [t for (t,) in conn.execute("SELECT t0 FROM gpu_samples ORDER BY t0")]
    assert kept[0] == _snap(0).time and kept[-3:] == [_snap(t).time for t in (6, 7, 8)]
    assert len(kept) < 9  # what the full disk refused is not there
