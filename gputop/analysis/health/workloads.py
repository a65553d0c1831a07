"""The workload rules (docs/workloads.md): GPU memory held outside any Slurm job on a Slurm
node, a job on a GPU it was not given, gputop in a container without the host's PID
namespace, and the name sources that failed.  The workload itself comes from
sources/workload.py; the process table shows the same rules as ``flags``."""

from __future__ import annotations

from collections.abc import Iterable

from gputop.analysis.health.common import GIB
from gputop.model import INFO, GpuProcess, HealthWarning, HostSnapshot

OUTSIDE_JOB = "outside-job"
FOREIGN_GPU = "job-foreign-gpu"
OWN_PID_NAMESPACE = "own-pid-namespace"
NAME_SOURCE = "workload-names"


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
