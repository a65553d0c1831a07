"""Workloads from real parts (issue 15): real processes moved into real cgroups made here,
a fake ``squeue`` on PATH (recorded output, a hang, a failure), a Unix-socket HTTP server
answering like the Docker Engine API, and the remote probe over the test sshd.

Making cgroups needs root and a writable cgroup mount; without them those tests skip and
say why (the parser is still tested on recorded texts in test_workload_parse.py)."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import socketserver
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from helpers.procs import Reaper, start_sleeper, start_ticks
from sshd import HostConf, SshdCluster

from gputop.sources.procfs import ProcFs
from gputop.sources.ssh import SshFeed
from gputop.sources.workload import (
    ContainerNames,
    SlurmNames,
    WorkloadResolver,
    container_name,
)

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent
# Our own top-level names, so parallel test runs of other issues never meet them.
TAG = "gt15"


def _mounts() -> dict[str, str]:
    """cgroup mount point by kind: "v1:<controller>" and "v2"."""
    found: dict[str, str] = {}
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 4:
                continue
            if parts[2] == "cgroup2":
                found.setdefault("v2", parts[1])
            elif parts[2] == "cgroup":
                for opt in parts[3].split(","):
                    found.setdefault(f"v1:{opt}", parts[1])
    return found


class Cgroups:
    """Makes cgroups under one mount, moves pids into them, removes everything at the end."""

    def __init__(self, mount: str) -> None:
        self.mount = Path(mount)
        self.made: list[Path] = []

    def move(self, relative: str, pid: int) -> None:
        path = self.mount / relative
        parts = Path(relative).parts
        for i in range(len(parts)):
            step = self.mount.joinpath(*parts[: i + 1])
            if not step.exists():
                step.mkdir()
                self.made.append(step)
        (path / "cgroup.procs").write_text(f"{pid}\n")

    def close(self) -> None:
        for path in reversed(self.made):
            try:
                for pid in (path / "cgroup.procs").read_text().split():
                    (self.mount / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # the process is gone already
            with contextlib.suppress(OSError):
                path.rmdir()


def _cgroups(kind: str) -> Iterator[Cgroups]:
    mount = _mounts().get(kind)
    if os.geteuid() != 0:
        pytest.skip("making cgroups needs root")
    if mount is None:
        pytest.skip(f"no {kind} cgroup mount on this machine")
    probe = Path(mount) / f"{TAG}-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as err:
        pytest.skip(f"cgroup mount {mount} is not writable here: {err}")
    groups = Cgroups(mount)
    try:
        yield groups
    finally:
        groups.close()


@pytest.fixture
def cgroup_v1() -> Iterator[Cgroups]:
    yield from _cgroups("v1:devices")


@pytest.fixture
def cgroup_v2() -> Iterator[Cgroups]:
    yield from _cgroups("v2")


HEX = "0123456789abcdef" * 4


def test_slurm_cgroup_v1_steps(cgroup_v1: Cgroups, reaper: Reaper) -> None:
    batch, extern = start_sleeper(reaper), start_sleeper(reaper)
    # Multiple-slurmd layout (slurm_<node>/...): our own top name, the same job_/step_ parts.
    cgroup_v1.move(f"slurm_{TAG}/uid_0/job_9101/step_batch/task_0", batch.pid)
    cgroup_v1.move(f"slurm_{TAG}/uid_0/job_9102/step_extern", extern.pid)
    resolver = ProcFs().workloads
    assert resolver.resolve(batch.pid, start_ticks(batch.pid)) == {
        "kind": "slurm", "id": "9101", "step": "batch"}
    assert resolver.resolve(extern.pid, start_ticks(extern.pid)) == {
        "kind": "slurm", "id": "9102", "step": "extern"}


def test_cgroup_v2_job_container_and_pod(cgroup_v2: Cgroups, reaper: Reaper) -> None:
    job, box, pod, plain = (start_sleeper(reaper) for _ in range(4))
    pod_uid = str(uuid.UUID(int=0x1E597579417E482FBF655FE170C3AEBD))
    cgroup_v2.move(f"{TAG}.slice/{TAG}_slurmstepd.scope/job_9201/step_0/user/task_0", job.pid)
    cgroup_v2.move(f"{TAG}.slice/docker-{HEX}.scope", box.pid)
    cgroup_v2.move(
        f"{TAG}-kubepods.slice/kubepods-besteffort-pod{pod_uid.replace('-', '_')}.slice/"
        f"cri-containerd-{HEX}.scope", pod.pid)
    resolver = WorkloadResolver(sockets={})
    got = {p.pid: resolver.resolve(p.pid, start_ticks(p.pid)) for p in (job, box, pod, plain)}
    assert got == {
        job.pid: {"kind": "slurm", "id": "9201", "step": "0"},
        box.pid: {"kind": "docker", "id": HEX},
        pod.pid: {"kind": "k8s", "id": pod_uid, "container_id": HEX},
        plain.pid: None,
    }


def test_resolution_is_cached_by_pid_and_start_time(cgroup_v2: Cgroups, reaper: Reaper,
                                                    tmp_path: Path) -> None:
    proc = start_sleeper(reaper)
    ticks = start_ticks(proc.pid)
    cgroup_v2.move(f"{TAG}.slice/docker-{HEX}.scope", proc.pid)
    resolver = WorkloadResolver(sockets={})
    first = resolver.resolve(proc.pid, ticks)
    cgroup_v2.move(f"{TAG}.slice/elsewhere.scope", proc.pid)
    assert resolver.resolve(proc.pid, ticks) == first  # read once per process lifetime
    assert resolver.resolve(proc.pid, ticks + 1) is None  # another process: read again
    resolver.forget_except([])
    assert resolver.resolve(proc.pid, ticks) is None


# -- squeue ----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _squeue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """A fake squeue on PATH; it appends each argv to calls.log."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "squeue"
    log = tmp_path / "calls.log"
    script.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return log


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("version", ["slurm-22.05.json", "slurm-23.11.json"])
def test_squeue_json_at_most_every_30_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              version: str) -> None:
    log = _squeue(tmp_path, monkeypatch, f"cat {FIXTURES / 'squeue' / version}")
    notes: list[str] = []
    clock = Clock()
    names = SlurmNames(notes.append, clock)
    assert names.lookup({"4242"}) == {}  # the first answer comes later, in the background
    names.wait()
    assert names.lookup({"4242"})["4242"]["name"] == "llama-ft"
    clock.now += 29
    names.lookup({"4242", "9999"})  # an unknown job, but within 30 s: no new run
    names.wait()
    assert _calls(log) == ["--json --jobs 4242"]
    clock.now += 2
    names.lookup({"4242", "9999"})
    names.wait()
    assert _calls(log) == ["--json --jobs 4242", "--json --jobs 4242,9999"]
    assert notes == []


def test_old_squeue_without_json_uses_the_format(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    body = ('case "$1" in --json) echo "squeue: unrecognized option --json" >&2; exit 1;; esac\n'
            'echo "4242|alice|nlp|gpu|RUNNING|2025-12-03T10:00:00|gpu:4|llama ft"')
    log = _squeue(tmp_path, monkeypatch, body)
    names = SlurmNames(lambda _: None, Clock())
    names.lookup({"4242"})
    names.wait()
    assert names.lookup({"4242"})["4242"]["name"] == "llama ft"
    assert len(_calls(log)) == 2 and _calls(log)[1].startswith("-h -o ")


def test_hung_squeue_is_timed_out_and_never_blocks(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _squeue(tmp_path, monkeypatch, "exec sleep 60")
    notes: list[str] = []
    resolver = WorkloadResolver(sockets={}, squeue_timeout=0.5)
    job = {"kind": "slurm", "id": "4242", "step": "0"}
    resolver.name_all([dict(job)])
    # While squeue hangs, every refresh still gets its answer (ids only), at once.
    assert resolver.slurm._work.busy()
    again = dict(job)
    resolver.name_all([again])
    assert again == job
    resolver.wait()
    notes = resolver.notes()
    assert notes == ["squeue did not answer in 0.5 s: Slurm jobs are shown by id"]
    assert not resolver.slurm._work.busy()


def test_failing_squeue_is_noted_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _squeue(tmp_path, monkeypatch,
            'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1')
    clock = Clock()
    resolver = WorkloadResolver(sockets={}, clock=clock)
    for _ in range(2):
        resolver.name_all([{"kind": "slurm", "id": "1", "step": None}])
        resolver.wait()
        clock.now += 31
    assert resolver.notes() == [
        "squeue failed (slurm_load_jobs error: Unable to contact slurm controller): "
        "Slurm jobs are shown by id"]


# -- Docker Engine API on a Unix socket -------------------------------------------------------


class _Engine(http.server.BaseHTTPRequestHandler):
    names: ClassVar[dict[str, str]] = {}
    status = 200

    def do_GET(self) -> None:
        parts = self.path.split("/")
        cid = parts[2] if len(parts) == 4 and parts[1] == "containers" else ""
        if self.status != 200:
            self.send_response(self.status)
            body = b"{}"
        elif cid in self.names:
            self.send_response(200)
            body = json.dumps({"Id": cid, "Name": "/" + self.names[cid]}).encode()
        else:
            self.send_response(404)
            body = json.dumps({"message": f"No such container: {cid}"}).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        """Quiet."""


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):  # type: ignore[no-untyped-def]
        request, _ = super().get_request()
        return request, ("local", 0)  # BaseHTTPRequestHandler wants a (host, port)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Callable[[dict[str, str], int], str]]:
    servers: list[_UnixHTTPServer] = []

    def start(names: dict[str, str], status: int = 200) -> str:
        path = str(tmp_path / f"engine{len(servers)}.sock")
        handler = type("Engine", (_Engine,), {"names": names, "status": status})
        server = _UnixHTTPServer(path, handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return path

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


OTHER = "f" * 64


def test_engine_api_name_and_404(engine: Callable[..., str]) -> None:
    sock = engine({HEX: "web-api"})
    assert container_name(sock, HEX) == "web-api"
    assert container_name(sock, OTHER) is None


def test_engine_api_failure_is_noted_once_and_ids_stay(engine: Callable[..., str]) -> None:
    sock = engine({HEX: "web-api"}, 500)
    notes: list[str] = []
    names = ContainerNames("docker", sock, notes.append)
    names.lookup({HEX, OTHER})
    names.wait()
    names.lookup({HEX, OTHER})
    names.wait()
    assert notes == [f"docker API at {sock} failed (HTTP 500): containers are shown by id"]
    assert names.lookup({HEX}) == {}


def test_real_process_in_a_docker_cgroup_gets_its_name(
    cgroup_v2: Cgroups, reaper: Reaper, engine: Callable[..., str]
) -> None:
    named, unnamed = start_sleeper(reaper), start_sleeper(reaper)
    cgroup_v2.move(f"{TAG}.slice/docker-{HEX}.scope", named.pid)
    cgroup_v2.move(f"{TAG}.slice/docker-{OTHER}.scope", unnamed.pid)
    resolver = WorkloadResolver(sockets={"docker": engine({HEX: "web-api"})})
    rows = [dict(resolver.resolve(p.pid, start_ticks(p.pid)) or {}) for p in (named, unnamed)]
    resolver.name_all(rows)
    resolver.wait()
    resolver.name_all(rows)
    assert [(r["kind"], r.get("name")) for r in rows] == [("docker", "web-api"), ("docker", None)]
    assert resolver.notes() == []


# -- the remote probe ------------------------------------------------------------------------

# The host's "driver" is the simulator reading a scenario whose processes are real pids,
# so the probe runs its real path: /proc and the cgroups made here, on the "remote" host.
FAKE_PYNVML = '''
import os
from gputop.sources import sim as _sim

_nvml = _sim.SimNvml(_sim.load_scenario(os.environ["GT15_SCENARIO"]))


def __getattr__(name):
    return getattr(_nvml, name)
'''


async def test_probe_over_ssh_reports_the_same_workloads(
    cgroup_v2: Cgroups, reaper: Reaper, tmp_path: Path
) -> None:
    job, box = start_sleeper(reaper), start_sleeper(reaper)
    cgroup_v2.move(f"{TAG}.slice/{TAG}_slurmstepd.scope/job_9301/step_0/user/task_0", job.pid)
    cgroup_v2.move(f"{TAG}.slice/docker-{HEX}.scope", box.pid)
    scenario = tmp_path / "real-pids.yaml"
    scenario.write_text(
        "name: real-pids\ngpus: [{}, {}]\nprocesses:\n"
        f"  - {{pid: {job.pid}, user: root, cmdline: python train.py, gpus: {{0: 2048}}}}\n"
        f"  - {{pid: {box.pid}, user: root, cmdline: python serve.py, gpus: {{1: 1024}}}}\n"
    )
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "pynvml.py").write_text(FAKE_PYNVML)
    env = {"PYTHONPATH": f"{tmp_path / 'pylib'}:{driver}", "GT15_SCENARIO": str(scenario)}
    local = ProcFs().workloads
    expected = {p.pid: local.resolve(p.pid, start_ticks(p.pid)) for p in (job, box)}
    with SshdCluster(tmp_path, [HostConf("gpu-cg", scenario=None, env=env)]) as cluster:
        feed = SshFeed(cluster.specs(["gpu-cg"]))
        latest: dict[str, object] = {}
        task = asyncio.create_task(feed.run(0.2, lambda s: latest.__setitem__("snap", s)))
        try:
            for _ in range(300):
                snap = latest.get("snap")
                if snap is not None and snap.state == "ok" and snap.processes:  # type: ignore[attr-defined]
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"no snapshot with processes: {latest}")
        finally:
            await feed.close()
            await asyncio.wait_for(task, 10)
    remote = {p.pid: p.workload for p in snap.processes}  # type: ignore[attr-defined]
    assert {pid: w.to_dict() if w else None for pid, w in remote.items()} == {
        pid: {**_blank(), **(w or {})} for pid, w in expected.items()}
    assert remote[job.pid] is not None and remote[job.pid].label == "slurm:9301.0"


def _blank() -> dict[str, object]:
    from gputop.model import Workload

    return {k: v for k, v in Workload(kind="", id="").to_dict().items() if k not in ("kind", "id")}


def test_a_one_shot_waits_briefly_for_names_and_never_for_a_hung_squeue(
        cgroup_v2: Cgroups, reaper: Reaper, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the collector does for `--once`/`--json` (name_wait_s): ask, wait a bounded
    time, ask again; the answer then has squeue's names."""
    proc = start_sleeper(reaper)
    cgroup_v2.move(f"{TAG}.slice/{TAG}_slurmstepd.scope/job_4242/step_0", proc.pid)
    _squeue(tmp_path, monkeypatch, f"cat {FIXTURES / 'squeue' / 'slurm-23.11.json'}")
    resolver = WorkloadResolver(sockets={})
    found = [dict(resolver.resolve(proc.pid, start_ticks(proc.pid)) or {})]
    resolver.name_all(found)
    assert "name" not in found[0]  # the first refresh never blocks on squeue
    resolver.wait(timeout=30.0)
    resolver.name_all(found)
    assert found[0]["name"] == "llama-ft" and found[0]["id"] == "4242"
    # A hung squeue: the bounded wait returns with the lookup still running.
    hung = tmp_path / "hung"
    hung.mkdir()
    _squeue(hung, monkeypatch, "exec sleep 60")
    slow = WorkloadResolver(sockets={}, squeue_timeout=5.0)
    slow.name_all([{"kind": "slurm", "id": "4242"}])
    slow.wait(timeout=0.2)
    assert slow.slurm._work.busy()
