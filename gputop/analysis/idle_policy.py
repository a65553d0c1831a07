"""The opt-in idle policy (issue 28.7): which GPU processes it may act on, and when each
step is due.  Pure: `gputop record` observes, this module decides, commands/idle.py acts.

A process is idle while every GPU it uses is at 0 % SM (known, not missing) and it holds at
least the idle threshold of memory in all.  Its owner is told at ``warn_after``, again half
way to ``release_after``, and at ``release_after`` the process is released (SIGTERM, with
``action: kill``) or the owner told once more (``action: notify``).  A kill never comes
sooner than half the warn-to-release gap after the first warning was actually sent, so a
recorder that starts beside a process idle for days warns before it acts.

Never root's processes; never a process in a Slurm job, container or pod unless the policy
names that kind in ``include``; never one outside our pid namespace or without a start
time (its identity for a safe kill).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gputop.model import GpuProcess

STEPS = ("warn", "remind", "release")
ACTIONS = ("notify", "kill")
WORKLOAD_KINDS = ("slurm", "docker", "podman", "containerd", "k8s", "lxc")  # for include


@dataclass(frozen=True)
class IdlePolicy:
    warn_after_s: float
    release_after_s: float
    action: str = "notify"
    notify: tuple[str, ...] = ()  # argv; the message goes to its stdin
    include: frozenset[str] = frozenset()  # workload kinds the policy may act on
    grace_s: float = 10.0  # SIGTERM, then SIGKILL after this

    @property
    def gap_s(self) -> float:
        return self.release_after_s - self.warn_after_s

    def due_at(self, step: str) -> float:
        """Seconds idle at which ``step`` is due."""
        if step == "warn":
            return self.warn_after_s
        if step == "remind":
            return self.warn_after_s + self.gap_s / 2
        return self.release_after_s


@dataclass(frozen=True)
class IdleProcess:
    """One process's facts, merged over the GPUs it uses."""

    host: str
    pid: int
    start: int  # start time, whole seconds: the ledger's identity
    start_ticks: int | None  # /proc's: what a kill checks
    user: str | None
    uid: int | None
    gpus: tuple[int, ...]
    mem: int  # bytes, all its GPUs
    sm: int | None  # highest SM % over its GPUs; None when one is unknown
    command: str
    workload: str | None  # kind: slurm, docker, ...
    simulated: bool

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.host, self.pid, self.start)


def merge(host: str, procs: Iterable[GpuProcess]) -> list[IdleProcess]:
    """A snapshot's GPU processes, one per process (a process on two cards is one)."""
    found: dict[tuple[int, int], list[GpuProcess]] = {}
    for p in procs:
        if p.start_time is None:
            continue
        found.setdefault((p.pid, round(p.start_time)), []).append(p)
    out = []
    for (pid, start), entries in sorted(found.items()):
        first = entries[0]
        sms = [e.sm_util for e in entries]
        out.append(IdleProcess(
            host=host, pid=pid, start=start, start_ticks=first.start_ticks, user=first.user,
            uid=first.uid, gpus=tuple(sorted({e.gpu for e in entries})),
            mem=sum(e.gpu_mem or 0 for e in entries),
            sm=None if any(s is None for s in sms) else max(s or 0 for s in sms),
            command=first.command or "", workload=first.workload.kind if first.workload else None,
            simulated=first.simulated or not first.visible))
    return out


def why_not(proc: IdleProcess, policy: IdlePolicy, idle_mem: int) -> str | None:
    """None when the policy may act on ``proc`` (it is idle and fair game), else why not."""
    if proc.user == "root" or proc.uid == 0:
        return "root's process"
    if proc.user is None:
        return "owner unknown"
    if proc.workload is not None and proc.workload not in policy.include:
        return f"in a {proc.workload} workload (not in the policy's include)"
    if proc.start_ticks is None:
        return "not in this pid namespace"
    if proc.sm is None:
        return "SM % unknown"
    if proc.sm > 0:
        return "busy"
    if proc.mem < idle_mem:
        return "holds less than the idle threshold"
    return None


@dataclass(frozen=True)
class Due:
    """A step to take now for one process."""

    step: str
    proc: IdleProcess
    idle_since: float
    idle_for_s: float


@dataclass
class _State:
    since: float
    done: dict[str, float] = field(default_factory=dict)  # step -> when it was taken


class IdleTracker:
    """Idle runs per process across observations, and the steps due."""

    def __init__(self, policy: IdlePolicy, idle_mem: int) -> None:
        self.policy, self.idle_mem = policy, idle_mem
        self._state: dict[tuple[str, int, int], _State] = {}

    def seed(self, key: tuple[str, int, int], since: float, done: dict[str, float]) -> None:
        """What the ledger knew before this recorder: the run's start, the steps taken."""
        self._state[key] = _State(since, dict(done))

    def observe(self, host: str, procs: Iterable[IdleProcess], now: float) -> list[Due]:
        seen = set()
        due = []
        for proc in procs:
            seen.add(proc.key)
            if why_not(proc, self.policy, self.idle_mem) is not None:
                self._state.pop(proc.key, None)  # busy again, or never ours: a new run
                continue
            state = self._state.setdefault(proc.key, _State(now))
            step = self._next(state, now)
            if step is not None:
                due.append(Due(step, proc, state.since, now - state.since))
        for key in [k for k in self._state if k[0] == host and k not in seen]:
            del self._state[key]  # gone
        return due

    def taken(self, due: Due, now: float) -> None:
        """``due`` was acted on (or tried): it is not due again in this run."""
        state = self._state.get(due.proc.key)
        if state is not None:
            state.done[due.step] = now

    def _next(self, state: _State, now: float) -> str | None:
        idle_for = now - state.since
        for step in STEPS:
            if step in state.done:
                continue
            if idle_for < self.policy.due_at(step):
                return None
            if step == "release" and now - state.done.get("warn", now) < self.policy.gap_s / 2:
                return None
            return step
        return None
