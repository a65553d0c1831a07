"""`gputop report --jobs` (issue 28.10): a `gputop run` job and two Slurm jobs recorded,
then each job's GPUs, runtime, limit, wait and advice checked against the scenario."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from gputop.analysis.jobstats import GpuUse, Job, recommendations
from gputop.cli import main
from gputop.ledger import store
from gputop.ledger.jobs import JobRecord, write_job
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
        gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", name="NVIDIA H100 80GB HBM3",
                         util_gpu=20 if i == 2 and 60 <= tick <= 120 else 0,
                         mem_used=20 * GIB if i == 2 and 60 <= tick <= 120 else 0,
                         mem_total=80 * GIB) for i in range(4))
        assert recorder.record(HostSnapshot(host="lab-1", time=t, gpus=gpus,
                                            processes=tuple(procs)))
    # A `gputop run` job on card 2 from 01:00 to 02:00, queued five minutes, --for 12h.
    write_job(recorder.conn, "lab-1", JobRecord(
        job_id="a1b2c3d4", user="bob", command="python sweep.py", gpus_requested=1,
        gpus=(2,), submit=START + 3300, start=START + 3600, end=START + 7200, status="done",
        requested_s=12 * 3600, exit_code=0))
    recorder.conn.close()
    return path


def _jobs(ledger: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict]:
    assert main(["report", "--db", str(ledger), *SPAN, "--jobs", "--format", "json"]) == 0
    return {j["id"]: j for j in json.loads(capsys.readouterr().out)["jobs"]}


def test_each_job_with_its_gpus_and_advice(ledger: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    jobs = _jobs(ledger, capsys)
    assert set(jobs) == {"a1b2c3d4", "4242", "4343"}
    run = jobs["a1b2c3d4"]
    assert (run["kind"], run["user"], run["runtime_s"], run["wait_s"], run["requested_s"]) == (
        "run", "bob", 3600.0, 300.0, 43200.0)
    (g,) = run["gpus"]
    assert (g["gpu"], g["mean_sm"], g["peak_sm"], g["peak_mem"]) == (2, 20.0, 20, 20 * GIB)
    assert run["recommendations"] == [
        "time limit 12h00m, ran 1h00m: a limit of about 1h30m would start sooner",
        "memory never above a third of the card (peak 20.0 of 80 GiB): a smaller card or a"
        " MIG slice would do"]
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
