"""Workloads as the views show them: the Slurm job, container or pod of each GPU process
folded, spread over hosts, filtered and described.  Pure: the workload itself comes from
sources/workload.py; the rules about workloads are in health/workloads.py.

- ``group(processes)``: one line per job, container or pod (the dashboard's fold).
- ``cluster_jobs(snapshots)``: a job running on several hosts as one line.
- ``matches(proc, term)``: the ``job:``, ``container:`` and ``pod:`` filters.
- ``facts(workload)``: the detail view's lines.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gputop.analysis.durations import format_duration
from gputop.model import GpuProcess, HostSnapshot, Workload

_CONTAINER_KINDS = frozenset({"docker", "podman", "containerd", "crio"})
FILTER_PREFIXES = ("job:", "container:", "pod:")


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
