"""The workload rules (docs/workloads.md): GPU memory held outside any Slurm job on a Slurm
node, a job on a GPU it was not given, gputop in a container without the host's PID
namespace, and the name sources that failed.  The workload itself comes from
sources/workload.py; the process table shows the same rules as ``flags``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from gputop.analysis.health.common import GIB
from gputop.analysis.health.registry import HOST, Context, Finding, rule, run_family
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
    """This family's warnings alone."""
    return run_family(__name__.rsplit(".", 1)[-1], Context(snapshot, now=now))


_READS = ("processes", "own_workload")


@rule(NAME_SOURCE, INFO, scope=HOST, reads=("workload_notes",), unexported=("workload_notes",),
      summary="a workload name source failed; ids are shown", hint="",
      when="a name source (squeue, the Docker/Podman socket) failed; ids are shown")
def _names(ctx: Context) -> Iterator[Finding]:
    for note in ctx.snapshot.workload_notes:
        if isinstance(note, str):  # from a probe: untrusted
            yield Finding(note[:300])


def own_pid_namespace(snapshot: HostSnapshot) -> bool:
    """gputop runs without the host's PID namespace: none of its processes is visible.

    On the host every process is in our PID namespace but one that just exited; none of
    several (or none while we know we are in a container) means our own namespace."""
    procs = snapshot.processes
    return bool(procs) and not any(p.visible for p in procs) and (
        snapshot.own_workload is not None or len(procs) > 1)


@rule(OWN_PID_NAMESPACE, INFO, scope=HOST, reads=_READS, unexported=_READS,
      summary="gputop runs inside a container without the host's PID namespace",
      hint="run it on the host, or with the host's PID namespace "
      "(docker --pid=host, Kubernetes hostPID: true)",
      when="none of the GPU processes is in gputop's PID namespace (gputop in a container "
      "without the host's): said once")
def _own_namespace(ctx: Context) -> Iterator[Finding]:
    snapshot = ctx.snapshot
    if own_pid_namespace(snapshot):
        own = snapshot.own_workload
        where = own.label if own is not None else "a container"
        yield Finding(
            f"none of the {len(snapshot.processes)} GPU processes is in gputop's PID "
            f"namespace: it runs inside {where} without the host's PID namespace")


@rule(OUTSIDE_JOB, INFO, scope=HOST, reads=_READS, unexported=_READS,
      summary="GPU memory held outside any Slurm job",
      hint="a run that bypassed the scheduler, or a job's leftover",
      when="issue 15, on a host where some GPU process runs in a Slurm job: a visible "
      "process outside any job holding GPU memory (docs/workloads.md)")
def _outside(ctx: Context) -> Iterator[Finding]:
    snapshot = ctx.snapshot
    if own_pid_namespace(snapshot):
        return  # said once, as own-pid-namespace
    slurm_node = is_slurm_node(snapshot)
    for proc in snapshot.processes:
        if outside_job(proc, slurm_node) and proc.gpu_mem:
            yield Finding(f"{proc.gpu_mem / GIB:.1f} GiB outside any Slurm job: {_who(proc)}",
                          gpu=proc.gpu, pid=proc.pid)


@rule(FOREIGN_GPU, INFO, scope=HOST, reads=_READS, unexported=_READS,
      summary="a Slurm job uses a GPU it was not given",
      hint="the job ignores CUDA_VISIBLE_DEVICES, or the node lacks device cgroups",
      when="a Slurm job's process on a GPU the job was not given (when squeue gives the "
      "job's GPUs)")
def _foreign(ctx: Context) -> Iterator[Finding]:
    if own_pid_namespace(ctx.snapshot):
        return
    for proc in ctx.snapshot.processes:
        w = proc.workload
        if w is not None and w.gpus is not None and foreign_gpu(proc):
            given = ",".join(str(g) for g in w.gpus) or "none"
            yield Finding(
                f"GPU {proc.gpu} not given to job {w.id} ({w.user or proc.user or '?'}, "
                f"given: {given}) but used by its pid {proc.pid}",
                gpu=proc.gpu, pid=proc.pid)
