"""Workloads: rules, grouping and filters over the Slurm job, container or pod
of each GPU process.  Pure: the workload itself comes from sources/workload.py.

- ``warnings(snapshot)``: GPU memory held outside any Slurm job on a Slurm node, a job on
  a GPU it was not given, gputop in a container without the host's PID namespace, and the
  name sources that failed (docs/workloads.md).
- ``group(processes)``: one line per job, container or pod (the dashboard's fold).
- ``cluster_jobs(snapshots)``: a job running on several hosts as one line.
- ``matches(proc, term)``: the ``job:``, ``container:`` and ``pod:`` filters.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gputop.analysis.durations import format_duration
from gputop.model import INFO, GpuProcess, HealthWarning, HostSnapshot, Workload

OUTSIDE_JOB = "outside-job"
FOREIGN_GPU = "job-foreign-gpu"
OWN_PID_NAMESPACE = "own-pid-namespace"
NAME_SOURCE = "workload-names"

_CONTAINER_KINDS = frozenset({"docker", "podman", "containerd", "crio"})
FILTER_PREFIXES = ("job:", "container:", "pod:")
GIB = 1024**3


def is_slurm_node(snapshot: HostSnapshot) -> bool:
    """A host where some GPU process runs in a Slurm job (the only sign a snapshot has)."""
    return runs_jobs(snapshot.processes)


def runs_jobs(processes: Iterable[GpuProcess]) -> bool:
    return any(p.workload is not None and p.workload.kind == "slurm" for p in processes)


def outside_job(proc: GpuProcess, slurm_node: bool) -> bool:
    """GPU memory held outside any Slurm job, on a node where jobs run."""
    outside = proc.workload is None or proc.workload.kind != "slurm"
    return slurm_node and proc.visible and outside and bool(proc.gpu_mem)


def foreign_gpu(proc: GpuProcess) -> bool:
    """A job's process on a GPU the job was not given (when its GPUs are known)."""
    w = proc.workload
    return w is not None and w.kind == "slurm" and w.gpus is not None and proc.gpu not in w.gpus


def flags(proc: GpuProcess, slurm_node: bool) -> tuple[str, ...]:
    """The process table's flags for these rules: "nojob", "foreign-gpu"."""
    return (("nojob",) if outside_job(proc, slurm_node) else ()) + (
        ("foreign-gpu",) if foreign_gpu(proc) else ())


def _who(proc: GpuProcess) -> str:
    command = (proc.command or "?")[:40]
    return f"pid {proc.pid} ({proc.user or '?'}: {command})"


def warnings(snapshot: HostSnapshot, now: float) -> list[HealthWarning]:
    out: list[HealthWarning] = []

    def add(code: str, message: str, gpu: int | None = None, pid: int | None = None,
            hint: str | None = None) -> None:
        out.append(HealthWarning(severity=INFO, code=code, message=message, host=snapshot.host,
                                 gpu=gpu, pid=pid, hint=hint, since=now))

    for note in snapshot.workload_notes:
        if isinstance(note, str):  # from a probe: untrusted
            add(NAME_SOURCE, note[:300])
    procs = snapshot.processes
    own = snapshot.own_workload
    # On the host every process is in our PID namespace but one that just exited; none
    # of several (or none while we know we are in a container) means our own namespace.
    if procs and not any(p.visible for p in procs) and (own is not None or len(procs) > 1):
        where = own.label if own is not None else "a container"
        add(OWN_PID_NAMESPACE,
            f"none of the {len(procs)} GPU processes is in gputop's PID namespace: it runs "
            f"inside {where} without the host's PID namespace",
            hint="run it on the host, or with the host's PID namespace "
                 "(docker --pid=host, Kubernetes hostPID: true)")
        return out
    slurm_node = is_slurm_node(snapshot)
    for proc in procs:
        if outside_job(proc, slurm_node) and proc.gpu_mem:
            add(OUTSIDE_JOB,
                f"{proc.gpu_mem / GIB:.1f} GiB outside any Slurm job: {_who(proc)}",
                gpu=proc.gpu, pid=proc.pid,
                hint="a run that bypassed the scheduler, or a job's leftover")
    for proc in procs:
        w = proc.workload
        if w is not None and w.gpus is not None and foreign_gpu(proc):
            given = ",".join(str(g) for g in w.gpus) or "none"
            add(FOREIGN_GPU,
                f"GPU {proc.gpu} not given to job {w.id} ({w.user or proc.user or '?'}, "
                f"given: {given}) but used by its pid {proc.pid}",
                gpu=proc.gpu, pid=proc.pid,
                hint="the job ignores CUDA_VISIBLE_DEVICES, or the node lacks device cgroups")
    return out


@dataclass
class Group:
    """One workload's processes on one host (or the processes without one)."""

    key: tuple[str, str] | None  # Workload.group_key; None: no workload
    label: str
    workload: Workload | None
    processes: list[GpuProcess] = field(default_factory=list)

    @property
    def gpus(self) -> list[int]:
        return sorted({p.gpu for p in self.processes})

    @property
    def gpu_mem(self) -> int:
        return sum(p.gpu_mem or 0 for p in self.processes)

    @property
    def sm_util(self) -> int:
        return sum(p.sm_util or 0 for p in self.processes)

    @property
    def pids(self) -> list[int]:
        return sorted({p.pid for p in self.processes})


def group(processes: Iterable[GpuProcess]) -> list[Group]:
    """Processes folded by workload (all steps of a job together), biggest memory first;
    the processes without a workload come last as one group labelled "-"."""
    groups: dict[tuple[str, str] | None, Group] = {}
    for proc in processes:
        w = proc.workload
        key = w.group_key if w is not None else None
        found = groups.get(key)
        if found is None:
            label = _group_label(w) if w is not None else "-"
            found = groups[key] = Group(key=key, label=label, workload=w)
        found.processes.append(proc)
    return sorted(groups.values(), key=lambda g: (g.key is None, -g.gpu_mem, g.label))


def _group_label(w: Workload) -> str:
    # A job's line stands for all its steps, so the step is left off.
    if w.kind == "slurm":
        return f"slurm:{w.id}"
    return w.label


@dataclass
class ClusterJob:
    """One Slurm job (or container, pod) over every host it runs on."""

    label: str
    workload: Workload
    hosts: list[str]
    gpus: int  # GPU cards in use, all hosts together
    gpu_mem: int
    processes: int


def cluster_jobs(snapshots: Iterable[HostSnapshot]) -> list[ClusterJob]:
    """Workloads across hosts: a Slurm job is the same job on every host (one controller);
    containers and pods are per host, so they stay one line per host."""
    found: dict[tuple[str, ...], ClusterJob] = {}
    cards: dict[tuple[str, ...], set[tuple[str, int]]] = {}
    for snap in snapshots:
        for g in group(snap.processes):
            if g.workload is None:
                continue
            w = g.workload
            key = (w.kind, w.id) if w.kind == "slurm" else (w.kind, w.id, snap.host)
            job = found.get(key)
            if job is None:
                job = found[key] = ClusterJob(g.label, w, [], 0, 0, 0)
                cards[key] = set()
            if snap.host not in job.hosts:
                job.hosts.append(snap.host)
            cards[key].update((snap.host, gpu) for gpu in g.gpus)
            job.gpu_mem += g.gpu_mem
            job.processes += len(g.pids)
    for where, job in found.items():
        job.gpus = len(cards[where])
    return sorted(found.values(), key=lambda j: (-len(j.hosts), -j.gpu_mem, j.label))


def matches(proc: GpuProcess, term: str) -> bool | None:
    """Whether ``proc`` passes a workload filter; None when ``term`` is not one.

    ``job:4242`` (a Slurm job id, or a prefix of its name), ``container:web-api`` (a
    container's name or id prefix, bare or in a pod), ``pod:train`` (part of
    namespace/pod, or a pod uid prefix)."""
    prefix = next((p for p in FILTER_PREFIXES if term.startswith(p)), None)
    if prefix is None:
        return None
    want = term[len(prefix):].strip().lower()
    w = proc.workload
    if w is None or not want:
        return False
    if prefix == "job:":
        return w.kind == "slurm" and (w.id == want or (w.name or "").lower().startswith(want))
    if prefix == "container:":
        if w.kind in _CONTAINER_KINDS:
            return (w.name or "").lower() == want or w.id.startswith(want)
        if w.kind == "k8s":
            return (w.container or "").lower() == want or (w.container_id or "").startswith(want)
        return False
    if w.kind != "k8s":
        return False
    return want in f"{w.namespace or ''}/{w.pod or ''}".lower() or w.id.startswith(want)


def facts(w: Workload) -> list[tuple[str, str]]:
    """(name, value) lines for a detail view: the label first, then what is known."""
    rows = [("workload", w.label)]
    if w.kind == "slurm":
        rows.append(("job", w.id + (f", step {w.step}" if w.step else "")))
        for name, value in (("job name", w.name), ("job user", w.user), ("account", w.account),
                            ("partition", w.partition), ("job state", w.job_state)):
            if value:
                rows.append((name, value))
        if w.time_left is not None:
            rows.append(("time left", format_duration(w.time_left)))
        if w.gpus is not None:
            rows.append(("job's GPUs", ",".join(str(g) for g in w.gpus) or "none"))
    elif w.kind == "k8s":
        rows.append(("pod uid", w.id))
        if w.namespace and w.pod:
            rows.append(("pod", f"{w.namespace}/{w.pod}"))
        if w.container_id:
            rows.append(("container", (w.container or "?") + f" ({w.container_id[:12]})"))
    else:
        rows.append(("container", (w.name or "name unknown") + f" ({w.kind} {w.id[:12]})"))
    return rows
