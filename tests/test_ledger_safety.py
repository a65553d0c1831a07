"""The ledger file under stress: SIGKILL mid-write, two recorders, hostile input."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.procs import Reaper, wait_for

from gputop.cli import main
from gputop.ledger import store
from gputop.ledger.writer import Recorder
from gputop.model import Gpu, GpuProcess, HostSnapshot

ROUNDS = 100
GPUS = 4
PROCS_PER_GPU = 20


def _snapshot(tick: int) -> HostSnapshot:
    """Values that change every tick, so that no sample row is merged into another."""
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", util_gpu=tick % 97, mem_used=tick,
                     power_draw=100.0 + tick % 50, temp=40) for i in range(GPUS))
    procs = tuple(GpuProcess(pid=1000 + i * PROCS_PER_GPU + n, gpu=i, gpu_mem=tick + n,
                             sm_util=tick % 89, user="u", start_time=1.0)
                  for i in range(GPUS) for n in range(PROCS_PER_GPU))
    return HostSnapshot(host="h", time=1_700_000_000.0 + 10.0 * tick, gpus=gpus,
                        processes=procs)


def _child(path: str, first_tick: int, report_fd: int) -> None:
    """The recorder in a forked child: reports each tick once it is committed."""
    code = 0
    try:
        recorder = Recorder(store.open_writer(path), 10.0, 1)
        tick = first_tick
        while True:
            recorder.record(_snapshot(tick))
            os.write(report_fd, tick.to_bytes(4, "little"))
            tick += 1
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def test_sigkill_never_corrupts_and_keeps_every_committed_interval(tmp_path: Path) -> None:
    path = str(tmp_path / "crash.sqlite")
    rng = random.Random(17)
    committed = 0  # ticks the children said were committed
    next_tick = 0
    for _ in range(ROUNDS):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            _child(path, next_tick, write_fd)
        os.close(write_fd)
        # Let it open the file and write a few intervals, then kill it anywhere.
        chunk = os.read(read_fd, 4)
        assert chunk, "the recorder child died before its first interval"
        reported = [int.from_bytes(chunk, "little")]
        time.sleep(rng.uniform(0.0, 0.02))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        data = b""
        while more := os.read(read_fd, 65536):
            data += more
        os.close(read_fd)
        reported += [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]
        committed += len(reported)
        conn = store.open_reader(path)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            (in_db,) = conn.execute(
                "SELECT COUNT(*) FROM gpu_samples JOIN gpus ON gpus.id = gpu_id"
                " WHERE gpus.idx = 0").fetchone()
            (top,) = conn.execute("SELECT MAX(t1) FROM gpu_samples").fetchone()
        finally:
            conn.close()
        # Every reported interval is there; at most the one being written when killed
        # may be there unreported.
        assert committed <= in_db <= committed + 1
        committed = in_db
        assert top >= _snapshot(reported[-1]).time
        next_tick = in_db
    assert committed >= ROUNDS


def test_a_second_recorder_names_the_first_and_exits(tmp_path: Path, reaper: Reaper) -> None:
    db = str(tmp_path / "busy.sqlite")
    cmd = [sys.executable, "-m", "gputop.cli", "record", "--demo", "lab", "--interval", "0.2",
           "--db", db]
    first = reaper.add(subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True))
    assert first.stderr is not None
    assert "recording" in first.stderr.readline()

    def recorded() -> int:
        conn = store.open_reader(db)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0])
        finally:
            conn.close()

    wait_for(recorded, what="the first recorder's samples")
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert second.returncode == 2
    assert f"already being recorded by pid {first.pid} (user " in second.stderr
    first.send_signal(signal.SIGTERM)
    assert first.wait(30) == 0
    assert recorded() > 0


def _ledger_with_schema(path: Path, version: str) -> None:
    store.open_writer(str(path)).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (version,))
    conn.commit()
    conn.close()


@pytest.mark.parametrize("command", ["report", "record"])
def test_corrupt_and_future_ledgers_are_refused(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 20)
    future = tmp_path / "future.sqlite"
    _ledger_with_schema(future, "99")
    foreign = tmp_path / "foreign.sqlite"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.close()
    extra = ["--demo", "lab"] if command == "record" else []
    for path, words in ((corrupt, "not a gputop ledger"), (future, "schema version 99 is newer"),
                        (foreign, "not a gputop ledger")):
        assert main([command, "--db", str(path), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and str(path) in err, err


def test_bad_periods_and_an_empty_period_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "one.sqlite"
    recorder = Recorder(store.open_writer(str(db)), 10.0, 1)
    assert recorder.record(_snapshot(0))
    recorder.conn.close()
    for args, words in (
        (["--since", "a fortnight"], "--since 'a fortnight'"),
        (["--from", "last tuesday"], "--from 'last tuesday': not a date"),
        (["--from", "2026-01-02", "--to", "2026-01-01"], "--to must be after --from"),
        (["--since", "7d", "--from", "2026-01-01"], "one or the other"),
        (["--from", "2020-01-01", "--to", "2020-01-08"], "no samples in this period"),
        ([], "no samples in this period"),  # the last 7 days: the sample is from 2023
    ):
        assert main(["report", "--db", str(db), *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err
    assert main(["report", "--db", str(tmp_path / "missing.sqlite")]) == 2
    assert "no ledger here" in capsys.readouterr().err
