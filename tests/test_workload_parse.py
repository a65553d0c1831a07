"""Workloads from recorded texts: /proc/PID/cgroup of real systems (tests/fixtures/cgroup,
sources in SOURCES.md), squeue output, kubelet's log directory names, and the rules,
grouping and filters over them (issue 15)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.analysis import workload_groups
from gputop.analysis.health import workloads as rules
from gputop.model import GpuProcess, HostSnapshot, Workload
from gputop.sources.workload import (
    gres_gpus,
    parse_cgroup,
    parse_squeue_json,
    parse_squeue_text,
    scan_k8s_logs,
)

FIXTURES = Path(__file__).parent / "fixtures"
DOCKER_ID = "d0b3604b67ac7930dd34ba3a796627e3e4717d12309e90a4afe3f38b6816ac98"

EXPECTED = {
    "slurm-v2-issue.txt": {"kind": "slurm", "id": "1392969", "step": "0"},
    "slurm-v2-nodename-enroot.txt": {"kind": "slurm", "id": "4749", "step": "0"},
    "slurm-v1-interactive.txt": {"kind": "slurm", "id": "280678", "step": "interactive"},
    "slurm-v1-batch-rstudio.txt": {"kind": "slurm", "id": "13759490", "step": "batch"},
    "slurm-v1-no-task-cgroup.txt": None,
    "k8s-containerd-v1-systemd-colon.txt": {
        "kind": "k8s", "id": "0125ec2f-b64a-4868-8f5b-94b56cbab864",
        "container_id": "ee4b20e90ac7f42a10bd004d05646b13d8ab5e2c5e7cbc01abf8006bac016459"},
    "k8s-crio-v1-systemd.txt": {
        "kind": "k8s", "id": "a5c1f8d5-1919-434d-add7-4afaafdaef89",
        "container_id": "5eed917563583925ffdbd40a64efb2aaffe58638e57add8becaf460fe74f5b1c"},
    "k8s-docker-v1-systemd.txt": {
        "kind": "k8s", "id": "7d4424e6-bb13-42f4-a47a-45a4828bf54d", "container_id": DOCKER_ID},
    "k8s-cgroupfs-v2-kubelet.txt": {
        "kind": "k8s", "id": "dfd874dc-ab52-4793-af47-d06b78b68337",
        "container_id": "a3804295d867b752119eab99a9e6364fdf7fe6a4be5af0b11f9915fa7b64ff95"},
    "k8s-containerd-v2-kind.txt": {
        "kind": "k8s", "id": "1e597579-417e-482f-bf65-5fe170c3aebd",
        "container_id": "a09bc17f5aa29b0dbdec9ede5f46cf1396d2405917ab02e6f1eb1019f388396e"},
    "podman-v2-rootless.txt": {
        "kind": "podman", "id": "cf21d19260ace8544fe8b769fc2638bf2c0873dfbfff0b6253f0569b26a1d5eb"},
    "podman-conmon-v2.txt": None,
    "docker-v1-cgroupfs.txt": {"kind": "docker", "id": DOCKER_ID},
    "docker-v2-systemd.txt": {"kind": "docker", "id": DOCKER_ID},
    "host-user-session.txt": None,
}


def test_every_recorded_text_has_an_expectation() -> None:
    assert {p.name for p in (FIXTURES / "cgroup").glob("*.txt")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_cgroup_texts(name: str) -> None:
    assert parse_cgroup((FIXTURES / "cgroup" / name).read_text()) == EXPECTED[name]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage without colons",
        "0::/system.slice/job_12x/step_0",  # not a job number
        "0::/user.slice/ajob_42/step_0",  # job_ must be a whole path component
        "0::/system.slice/docker-abc.scope",  # not a 64-hex id
        "0::/kubepods.slice/kubepods-podnot-a-uid.slice",
        "0::/" + "a/" * 20000,  # long: capped, no match
    ],
)
def test_hostile_or_foreign_texts_are_no_workload(text: str) -> None:
    assert parse_cgroup(text) is None


def test_a_job_wins_over_a_container_inside_it() -> None:
    text = (
        "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0/"
        f"docker-{DOCKER_ID}.scope\n"
    )
    assert parse_cgroup(text) == {"kind": "slurm", "id": "77", "step": "0"}


def test_a_job_without_step_cgroup() -> None:
    assert parse_cgroup("0::/system.slice/slurmstepd.scope/job_9") == {
        "kind": "slurm", "id": "9", "step": None}


def test_squeue_json_of_two_versions() -> None:
    old = parse_squeue_json((FIXTURES / "squeue" / "slurm-22.05.json").read_text())
    new = parse_squeue_json((FIXTURES / "squeue" / "slurm-23.11.json").read_text())
    assert old["4242"] == new["4242"] == {
        "user": "alice", "name": "llama-ft", "account": "nlp", "partition": "gpu",
        "job_state": "RUNNING", "end_time": 1764756000.0, "gpus": [0, 1, 2, 3]}
    # Two nodes: which gres_detail entry is ours is unknown, so no GPU list.
    assert old["4250"]["gpus"] is None and old["4250"]["name"] == "diffusion sweep"
    assert new["4261"]["end_time"] is None and new["4261"]["job_state"] == "RUNNING"


@pytest.mark.parametrize("text", ["{}", "[]", '{"jobs": 3}', "not json"])
def test_squeue_json_nonsense_raises(text: str) -> None:
    with pytest.raises(ValueError):
        parse_squeue_json(text)


def test_squeue_json_skips_bad_jobs() -> None:
    text = '{"jobs": [1, {"job_id": "x"}, {"job_id": true}, {"job_id": 5, "name": ["x"]}]}'
    assert parse_squeue_json(text) == {"5": {
        "user": None, "name": None, "account": None, "partition": None, "job_state": None,
        "end_time": None, "gpus": None}}


def test_squeue_text_format() -> None:
    found = parse_squeue_text(
        "4242|alice|nlp|gpu|RUNNING|2025-12-03T10:00:00|gpu:4|my job|x\nbad\n")
    assert found["4242"]["name"] == "my job|x"
    assert found["4242"]["user"] == "alice"
    assert list(found) == ["4242"]


@pytest.mark.parametrize(
    ("detail", "gpus"),
    [
        ("gpu:h100:4(IDX:0-3)", [0, 1, 2, 3]),
        ("gpu:2(IDX:0,2)", [0, 2]),
        ("gpu:a100:3(IDX:1,4-5)", [1, 4, 5]),
        ("gpu(IDX:N/A)", None),
        ("gpu:a100:1(IDX:5-3)", None),
        (7, None),
    ],
)
def test_gres_detail(detail: object, gpus: list[int] | None) -> None:
    assert gres_gpus(detail) == gpus


def test_k8s_names_from_kubelet_log_directories(tmp_path: Path) -> None:
    pods, containers = tmp_path / "pods", tmp_path / "containers"
    (pods / "ml_train-7f9c_1e597579-417e-482f-bf65-5fe170c3aebd" / "trainer").mkdir(parents=True)
    (pods / "junk").mkdir()
    containers.mkdir()
    cid = "a09bc17f5aa29b0dbdec9ede5f46cf1396d2405917ab02e6f1eb1019f388396e"
    (containers / f"train-7f9c_ml_trainer-{cid}.log").write_text("")
    (containers / "train-7f9c_ml_trainer-nothex.log").write_text("")
    found_pods, found_containers = scan_k8s_logs(str(pods), str(containers))
    assert found_pods == {"1e597579-417e-482f-bf65-5fe170c3aebd": ("ml", "train-7f9c")}
    assert found_containers == {cid: "trainer"}


# -- rules, grouping, filters ------------------------------------------------------------

GIB = 1024**3


def _proc(pid: int, gpu: int, mem_gib: float, workload: dict | None, **kw: object) -> GpuProcess:
    return GpuProcess.from_dict({"pid": pid, "gpu": gpu, "gpu_mem": int(mem_gib * GIB),
                                 "sm_util": 50, "user": "u", "command": "python x.py",
                                 "workload": workload, **kw})


JOB = {"kind": "slurm", "id": "4242", "step": "0", "user": "alice", "gpus": [0, 1]}


def test_memory_outside_any_job_on_a_slurm_node() -> None:
    snap = HostSnapshot(host="n1", time=0.0, processes=(
        _proc(1, 0, 10, JOB), _proc(2, 2, 5, None), _proc(3, 2, 0, None),
        _proc(4, 3, 2, None, visible=False)))
    found = [(w.code, w.pid) for w in rules.warnings(snap, 0.0)]
    assert found == [(rules.OUTSIDE_JOB, 2)]


def test_no_outside_job_flag_where_no_job_runs() -> None:
    snap = HostSnapshot(host="n1", time=0.0, processes=(_proc(2, 2, 5, None),))
    assert rules.warnings(snap, 0.0) == []


def test_job_on_a_gpu_it_was_not_given() -> None:
    snap = HostSnapshot(host="n1", time=0.0, processes=(
        _proc(1, 0, 10, JOB), _proc(1, 3, 1, JOB), _proc(9, 1, 1, {**JOB, "gpus": None})))
    found = rules.warnings(snap, 0.0)
    assert [(w.code, w.gpu, w.pid) for w in found] == [(rules.FOREIGN_GPU, 3, 1)]
    assert "given: 0,1" in found[0].message


def test_in_a_container_without_the_host_pid_namespace_says_so_once() -> None:
    own = Workload(kind="docker", id=DOCKER_ID)
    procs = tuple(_proc(p, 0, 1, None, visible=False) for p in range(5))
    snap = HostSnapshot(host="n1", time=0.0, processes=procs, own_workload=own)
    found = rules.warnings(snap, 0.0)
    assert [w.code for w in found] == [rules.OWN_PID_NAMESPACE]
    assert "docker:d0b3604b67ac" in found[0].message
    # Without knowing our container (cgroup namespaces hide it), several unresolvable
    # processes say the same; one that just exited does not.
    unknown = HostSnapshot(host="n1", time=0.0, processes=procs)
    assert [w.code for w in rules.warnings(unknown, 0.0)] == [rules.OWN_PID_NAMESPACE]
    one = HostSnapshot(host="n1", time=0.0, processes=procs[:1])
    assert rules.warnings(one, 0.0) == []


def test_name_source_notes_become_infos() -> None:
    snap = HostSnapshot(host="n1", time=0.0, workload_notes=("squeue failed (x)",))
    assert [(w.code, w.message) for w in rules.warnings(snap, 0.0)] == [
        (rules.NAME_SOURCE, "squeue failed (x)")]


def test_group_folds_steps_of_a_job_and_sums() -> None:
    procs = [_proc(1, 0, 10, JOB), _proc(2, 1, 10, {**JOB, "step": "batch"}),
             _proc(3, 2, 4, None),
             _proc(4, 3, 30, {"kind": "docker", "id": DOCKER_ID, "name": "web"})]
    groups = workload_groups.group(procs)
    assert [(g.label, g.gpus, g.gpu_mem // GIB, g.pids) for g in groups] == [
        ("docker:web", [3], 30, [4]), ("slurm:4242", [0, 1], 20, [1, 2]), ("-", [2], 4, [3])]
    assert groups[1].sm_util == 100


def test_cluster_jobs_join_hosts() -> None:
    a = HostSnapshot(host="a", time=0.0, processes=(_proc(1, 0, 10, JOB), _proc(2, 1, 10, JOB)))
    b = HostSnapshot(host="b", time=0.0, processes=(
        _proc(7, 0, 5, JOB), _proc(8, 0, 1, {"kind": "docker", "id": DOCKER_ID})))
    c = HostSnapshot(host="c", time=0.0,
                     processes=(_proc(8, 0, 1, {"kind": "docker", "id": DOCKER_ID}),))
    jobs = workload_groups.cluster_jobs([a, b, c])
    assert [(j.label, j.hosts, j.gpus, j.processes) for j in jobs] == [
        ("slurm:4242", ["a", "b"], 3, 3),
        (f"docker:{DOCKER_ID[:12]}", ["b"], 1, 1),
        (f"docker:{DOCKER_ID[:12]}", ["c"], 1, 1)]


@pytest.mark.parametrize(
    ("workload", "term", "want"),
    [
        (JOB, "job:4242", True),
        (JOB, "job:424", False),
        ({**JOB, "name": "llama-ft"}, "job:llama", True),
        (JOB, "container:4242", False),
        ({"kind": "docker", "id": DOCKER_ID, "name": "web-api"}, "container:web-api", True),
        ({"kind": "docker", "id": DOCKER_ID}, "container:d0b3604b", True),
        ({"kind": "k8s", "id": "1e59", "namespace": "ml", "pod": "train-7f9c",
          "container": "trainer"}, "pod:ml/train", True),
        ({"kind": "k8s", "id": "1e59", "container": "trainer"}, "container:trainer", True),
        ({"kind": "k8s", "id": "1e59"}, "pod:1e5", True),
        (None, "job:4242", False),
        (JOB, "alice", None),
    ],
)
def test_filters(workload: dict | None, term: str, want: bool | None) -> None:
    assert workload_groups.matches(_proc(1, 0, 1, workload), term) is want


def test_labels() -> None:
    assert Workload(kind="slurm", id="4242", step="0").label == "slurm:4242.0"
    assert Workload(kind="docker", id=DOCKER_ID, name="web-api").label == "docker:web-api"
    pod = Workload(kind="k8s", id="x", namespace="ml", pod="train-7f9c")
    assert pod.label == "k8s:ml/train-7f9c"
    assert Workload(kind="podman", id=DOCKER_ID).label == "podman:d0b3604b67ac"


def test_snapshot_round_trip_keeps_the_workload() -> None:
    snap = HostSnapshot(host="n1", time=0.0, processes=(_proc(1, 0, 1, JOB),),
                        own_workload=Workload(kind="k8s", id="u"))
    again = HostSnapshot.from_dict(snap.to_dict())
    assert again == snap
    assert again.processes[0].workload is not None and again.processes[0].workload.gpus == (0, 1)
    assert HostSnapshot.from_dict({"host": "x", "time": 0, "processes": [
        {"pid": 1, "gpu": 0, "workload": {"kind": 3}}]}).processes[0].workload is None
    hostile = Workload.from_any({"kind": "slurm", "id": "1", "name": ["x"], "gpus": [0, "1"],
                                 "time_left": "soon", "user": "bob", "extra": 1})
    assert hostile == Workload(kind="slurm", id="1", user="bob")
