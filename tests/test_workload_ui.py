"""Workloads on screen (issue 15): the `slurm` demo scenario, the JOB column, folding by
job, the job:/container:/pod: filters, the detail view, the cluster views and --once."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

from helpers.ui import SIZE, demo_app, demo_snapshots, feed_all, plain

from gputop.analysis.health import workloads as rules
from gputop.analysis.pipeline import Settings, warnings_once
from gputop.ui.screens.cluster import ClusterScreen
from gputop.ui.screens.cluster_processes import ClusterProcessesScreen
from gputop.ui.screens.detail import DetailScreen
from gputop.ui.table_model import cell


def test_slurm_scenario_has_three_jobs_an_outsider_and_a_foreign_gpu() -> None:
    snap = demo_snapshots("slurm", 1)[0]
    labels = {p.pid: p.workload.label if p.workload else None for p in snap.processes}
    assert labels[6000101] == "slurm:4242.0"
    assert labels[6000201] == "slurm:4250.batch"
    assert labels[6000301] == "slurm:4261.interactive"
    assert labels[6000400] is None
    job = next(p.workload for p in snap.processes if p.pid == 6000101)
    assert job is not None and (job.user, job.name, job.gpus) == ("alice", "llama-ft", (0, 1, 2, 3))
    codes = {(w.code, w.gpu, w.pid) for w in warnings_once(snap, Settings(), "alice")}
    assert (rules.OUTSIDE_JOB, 6, 6000400) in codes
    assert (rules.FOREIGN_GPU, 6, 6000202) in codes
    assert not any(c == rules.FOREIGN_GPU and g != 6 for c, g, _ in codes)


async def test_job_column_fold_and_filter() -> None:
    app, _ = demo_app("slurm", me="alice")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.pause()
        table = app.dashboard.table
        assert "job" in table.columns
        jobs = {cell("job", r, 0.0) for r in table.rows}
        assert {"slurm:4242.0", "slurm:4250.batch", "-"} <= jobs
        flagged = {(r.proc.pid, r.proc.gpu): {"nojob", "foreign-gpu"} & set(r.flags)
                   for r in table.rows if {"nojob", "foreign-gpu"} & set(r.flags)}
        assert flagged == {(6000400, 6): {"nojob"}, (6000202, 6): {"foreign-gpu"}}
        assert "NJOB" in cell("flags", next(r for r in table.rows if r.proc.pid == 6000400), 0.0)
        await pilot.press("J")
        await pilot.pause()
        lines = [(cell("job", r, 0.0), cell("pid", r, 0.0)) for r in table.rows]
        assert ("slurm:4242", "4p") in lines and ("slurm:4250", "2p") in lines
        assert ("-", "1p") in lines and len(lines) == 4
        table.move_to(next(i for i, r in enumerate(table.rows)
                           if r.group is not None and r.group.label == "slurm:4250"))
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, DetailScreen)  # Enter opened the group instead
        assert sorted(r.proc.pid for r in table.rows if r.group is None) == [
            6000201, 6000202, 6000202]
        await pilot.press("J")
        app.dashboard.search = "job:4261"
        app.dashboard.refresh_view()
        await pilot.pause()
        assert [r.proc.pid for r in table.rows] == [6000301]


async def test_no_job_column_where_nothing_runs_in_a_job() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.pause()
        assert "job" not in app.dashboard.table.columns


async def test_detail_shows_the_job() -> None:
    app, _ = demo_app("slurm")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.pause()
        table = app.dashboard.table
        table.move_to(next(i for i, r in enumerate(table.rows) if r.proc.pid == 6000202))
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        proc = app.state.selected_process()
        assert proc is not None
        text = plain(app.screen._facts_table(app.state, proc))
        assert "slurm:4250.batch" in text and "diffusion-sweep" in text
        assert "job's GPUs" in text and "4,5" in text


async def test_cluster_shows_a_job_on_two_hosts_and_filters_by_job() -> None:
    a = demo_snapshots("slurm", 1)[0]
    b = dataclasses.replace(a, host="gpu-node-018")
    app, _ = demo_app("slurm")
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app, [a, b])
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, ClusterScreen)
        jobs = plain(app.screen.query_one("#cluster-jobs").render())
        assert "slurm:4242" in jobs and "on 2 hosts: slurm, gpu-node-018" in jobs
        assert "8 GPUs" in jobs
        await pilot.press("p")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ClusterProcessesScreen)
        screen._filter("job:4250 host:018")
        await pilot.pause()
        hosts_pids = set(screen.keys)
        assert hosts_pids == {("gpu-node-018", 6000201), ("gpu-node-018", 6000202)}


def test_once_and_json_show_the_workload() -> None:
    once = subprocess.run([sys.executable, "-m", "gputop.cli", "--demo", "slurm", "--once"],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert "JOB" in once and "slurm:4242.0" in once
    assert "GiB outside any Slurm job" in once and "GPU 6 not given to job 4250" in once
    doc = json.loads(subprocess.run(
        [sys.executable, "-m", "gputop.cli", "--demo", "slurm", "--json"],
        capture_output=True, text=True, timeout=60, check=True).stdout)
    host = doc["hosts"][0] if "hosts" in doc else doc
    by_pid = {p["pid"]: p["workload"] for p in host["processes"]}
    assert by_pid[6000400] is None
    assert by_pid[6000101]["kind"] == "slurm" and by_pid[6000101]["id"] == "4242"
    assert by_pid[6000101]["gpus"] == [0, 1, 2, 3]
