"""`gputop report --jobs` (issue 28.10): `gputop run` jobs written into the ledger's
job_history as `gputop run` writes them (jobs.begin, Attempt.end; one retried, one that
never ran) and two Slurm jobs recorded, then each job's GPUs, runtime, limit, wait and
advice checked against the scenario."""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
from pathlib import Path

import pytest

from gputop.analysis.jobstats import GpuUse, Job, recommendations
from gputop.cli import main
from gputop.ledger import jobs, store
from gputop.ledger.writer import Recorder
from gputop.model import Gpu, GpuProcess, HostSnapshot, Workload

GIB = 1024**3
START = 1_764_547_200.0  # 2025-12-01 00:00 UTC
STEP = 60.0
SPAN = ["--from", "2025-12-01T00:00+00:00", "--to", "2025-12-01T04:00+00:00"]


def _slurm(job: str, end: float) -> Workload:
    return Workload(kind="slurm", id=job, step="0", user="alice", name=f"train-{job}",
                    end_time=end)


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("jobs") / "jobs.sqlite"
    recorder = Recorder(store.open_writer(str(path)), STEP, GIB)
    big = _slurm("4242", START + 24 * 3600)  # asked for a day
    small = _slurm("4343", START + 2 * 3600)
    for tick in range(3 * 60 + 1):  # three hours
        t = START + tick * STEP
        procs = []
        if tick <= 120:  # 4242: two hours on cards 0 (busy) and 1 (never used)
            procs += [GpuProcess(pid=10, gpu=0, gpu_mem=30 * GIB, sm_util=60, user="alice",
                                 start_time=START - 5, workload=big),
                      GpuProcess(pid=10, gpu=1, gpu_mem=2 * GIB, sm_util=0, user="alice",
                                 start_time=START - 5, workload=big)]
        if tick <= 60:  # 4343: an hour on card 3, small and nearly idle
            procs.append(GpuProcess(pid=20, gpu=3, gpu_mem=4 * GIB, sm_util=5, user="alice",
                                    start_time=START - 5, workload=small))
        # Card 2: bob's first job 01:00-02:00 at 20 %, 20 GiB; his retried job's first
        # attempt 02:05-02:20 at 40 %, 10 GiB; idle after.
        sm, mem = (20, 20) if 60 <= tick <= 120 else (40, 10) if 125 < tick <= 140 else (0, 0)
        gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", name="NVIDIA H100 80GB HBM3",
                         util_gpu=sm if i == 2 else 0, mem_used=mem * GIB if i == 2 else 0,
                         mem_total=80 * GIB) for i in range(4))
        assert recorder.record(HostSnapshot(host="lab-1", time=t, gpus=gpus,
                                            processes=tuple(procs)))
    recorder.conn.close()
    db = str(path)
    # A `gputop run` job on card 2 from 01:00 to 02:00, queued five minutes, --for 12h.
    attempt(db, "a1b2c3d4", 1, submitted=START + 3300, started=START + 3600,
            ended=START + 7200, status="success", reason="done", for_s=12 * 3600)
    # One retried (--retries 1) on card 2: 02:05-02:20 failed, 02:30-02:50 done.
    attempt(db, "e5f6a7b8", 1, submitted=START + 7200, started=START + 7500,
            ended=START + 8400, status="failed", reason="failed", exit_code=1)
    attempt(db, "e5f6a7b8", 2, submitted=START + 7200, started=START + 9000,
            ended=START + 10200, status="success", reason="done")
    # One that gave up waiting at 03:10 without running.
    attempt(db, "0badc0de", 1, submitted=START + 10800, started=None, ended=START + 11400,
            status="cancelled", reason="wait expired", exit_code=None, gpus=())
    return path


def attempt(db: str, job_id: str, n: int, *, submitted: float, started: float | None,
            ended: float, status: str, reason: str, for_s: float | None = None,
            exit_code: int | None = 0, gpus: tuple[int, ...] = (2,), user: str = "bob",
            command: str = "python sweep.py", host: str = "lab-1") -> None:
    """One attempt recorded as `gputop run` records it, ended at a time of the recorded
    hours."""
    row = {"id": job_id, "attempt": n, "user": user, "uid": os.geteuid(), "host": host,
           "command": command, "request": {"gpus": len(gpus) or 1, "for_s": for_s},
           "gpus": list(gpus), "submitted": submitted, "started": started,
           "status": "running" if started is not None else "cancelled", "log": None,
           "pid": os.getpid(), "pid_start": None}
    jobs.begin(row, db).end(status, reason, exit_code, None, at=ended)


def _jobs(ledger: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict]:
    assert main(["report", "--db", str(ledger), *SPAN, "--jobs", "--format", "json"]) == 0
    return {j["id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}


def test_each_job_with_its_gpus_and_advice(ledger: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    jobs = _jobs(ledger, capsys)
    assert set(jobs) == {"a1b2c3d4", "e5f6a7b8", "0badc0de", "4242", "4343"}
    assert [j for j in jobs][:3] == ["0badc0de", "e5f6a7b8", "a1b2c3d4"]  # newest first
    run = jobs["a1b2c3d4"]
    assert (run["kind"], run["user"], run["runtime_s"], run["wait_s"], run["requested_s"],
            run["status"], run["attempts"], run["name"]) == (
        "run", "bob", 3600.0, 300.0, 43200.0, "success", 1, "python sweep.py")
    (g,) = run["gpus"]
    assert (g["gpu"], g["mean_sm"], g["peak_sm"], g["peak_mem"]) == (2, 20.0, 20, 20 * GIB)
    assert run["recommendations"] == [
        "time limit 12h00m, ran 1h00m: a limit of about 1h30m would start sooner",
        "memory never above a third of the card (peak 20.0 of 80 GiB): a smaller card or a"
        " MIG slice would do"]
    retried = jobs["e5f6a7b8"]  # one entry: the last attempt's status, both attempts' time
    assert (retried["status"], retried["attempts"], retried["runtime_s"], retried["wait_s"],
            retried["start"], retried["end"]) == (
        "success", 2, 900.0 + 1200.0, 300.0, START + 7500, START + 10200)
    (g,) = retried["gpus"]  # the card over the attempts' 35 minutes, not the back-off's 10
    assert (g["gpu"], g["peak_sm"], g["peak_mem"]) == (2, 40, 10 * GIB)
    assert g["mean_sm"] == pytest.approx(40 * 15 / 35)  # 13.3 % with the back-off
    assert g["mean_mem"] == pytest.approx(10 * GIB * 15 / 35)
    assert retried["recommendations"] == [
        "memory never above a third of the card (peak 10.0 of 80 GiB): a smaller card or a"
        " MIG slice would do"]
    never = jobs["0badc0de"]
    assert (never["status"], never["runtime_s"], never["wait_s"], never["gpus"],
            never["start"], never["recommendations"]) == ("cancelled", 0.0, None, [], None, [])
    big = jobs["4242"]
    assert (big["kind"], big["name"], big["runtime_s"], big["status"]) == (
        "slurm", "train-4242", 7200.0, "ended")
    assert big["requested_s"] == 24 * 3600.0 and big["wait_s"] is None
    cards = {u["gpu"]: u for u in big["gpus"]}
    assert cards[0]["mean_sm"] == 60.0 and cards[0]["peak_sm"] == 60
    assert cards[0]["peak_mem"] == 30 * GIB
    assert cards[0]["mean_mem"] == pytest.approx(30 * GIB)
    assert cards[1]["mean_sm"] == 0.0 and cards[1]["peak_sm"] == 0
    assert big["recommendations"] == [
        "GPU 1 stayed at 0 % SM the whole job: ask for 1 GPU(s) instead of 2",
        "time limit 1d00h, ran 2h00m: a limit of about 3h00m would start sooner"]
    small = jobs["4343"]
    assert small["runtime_s"] == 3600.0 and small["requested_s"] == 7200.0
    assert small["recommendations"] == [
        "would fit a MIG 1g slice: peak 4.0 GiB of 80 GiB, mean SM 5 %"]


def test_every_format(ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def out(fmt: str) -> str:
        assert main(["report", "--db", str(ledger), *SPAN, "--jobs", "--format", fmt]) == 0
        return capsys.readouterr().out

    text = out("text")
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "slurm 4242  alice on lab-1  ended  ran 2h00m (limit 1d00h, waited -), 2 GPU(s)" \
        in text
    assert "  -> would fit a MIG 1g slice" in text
    assert ("run e5f6a7b8  bob on lab-1  success  ran 35m00s (limit -, waited 5m00s), 1 GPU(s),"
            " 2 attempts") in text
    md = out("md")
    assert "## run a1b2c3d4" in md and "- GPU 1 stayed at 0 % SM" in md
    rows = list(csv.reader(io.StringIO(out("csv"))))
    assert rows[0][:3] == ["kind", "job", "user"]
    assert sum(1 for r in rows if r[1] == "4242") == 2  # one row per GPU
    page = out("html")
    assert "<h2>slurm 4343</h2>" in page and "<li>would fit a MIG 1g slice" in page


def test_advice_rules_by_their_numbers() -> None:
    def job(**kw: object) -> Job:
        base: dict = dict(kind="run", id="x", host="h", user="u", name=None, start=0.0,
                          end=100.0, runtime_s=7200.0, requested_s=None, wait_s=0.0,
                          status="done", gpus=[], finished=True)
        base.update(kw)
        return Job(**base)

    card = dict(name="NVIDIA A100-SXM4-80GB", mem_total=80 * GIB)
    busy = GpuUse(0, mean_sm=80.0, peak_sm=99.0, mean_mem=60 * GIB, peak_mem=70 * GIB, **card)
    assert recommendations(job(gpus=[busy])) == []  # a well-used card: nothing to say
    assert recommendations(job(gpus=[busy], requested_s=4 * 3600)) == []  # one hour over:
    # not "far above"
    idle = GpuUse(1, mean_sm=0.0, peak_sm=0.0, mean_mem=GIB, peak_mem=GIB, **card)
    assert recommendations(job(gpus=[idle], runtime_s=100.0)) == [
        "would fit a MIG 1g slice: peak 1.0 GiB of 80 GiB, mean SM 0 %"]  # too short to judge
    # the SM %
    assert recommendations(job(gpus=[idle]))[0].startswith("every GPU (1) stayed at 0 % SM")
    consumer = GpuUse(0, "NVIDIA GeForce RTX 3090", 24 * GIB, 3.0, 9.0, GIB, 2 * GIB)
    assert recommendations(job(gpus=[consumer])) == [
        "memory never above a third of the card (peak 2.0 of 24 GiB): a smaller card or a"
        " MIG slice would do"]  # no MIG on a 3090
    running = job(gpus=[busy], requested_s=48 * 3600.0, finished=False)
    assert recommendations(running) == []  # the limit is judged when the job has ended


def test_a_ledger_made_with_the_old_jobs_table_keeps_it_and_reports(
        ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Schema 2 once had a `jobs` table that nothing wrote; such a ledger keeps it, unread.
    old = tmp_path / "old.sqlite"
    old.write_bytes(ledger.read_bytes())
    conn = sqlite3.connect(old)
    conn.execute("CREATE TABLE jobs (host_id INTEGER NOT NULL, job_id TEXT NOT NULL,"
                 " PRIMARY KEY (host_id, job_id)) WITHOUT ROWID")
    conn.commit()
    conn.close()
    store.open_writer(str(old)).close()  # the recorder opens it as it is
    assert set(_jobs(old, capsys)) == {"a1b2c3d4", "e5f6a7b8", "0badc0de", "4242", "4343"}
    assert store.has_table(store.open_reader(str(old)), "jobs")


def test_a_job_history_that_is_not_one_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "bad.sqlite"
    store.open_writer(str(db)).close()
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE job_history (id TEXT)")  # someone else's table of that name
    conn.commit()
    conn.close()
    assert main(["report", "--db", str(db), *SPAN, "--jobs"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(db) in err and "not a job history" in err, err
