"""``SimProcs``: the fake /proc for the simulated processes of a ``SimNvml``.

It answers what ``procfs.ProcFs`` answers, and ``signal()`` acts only on the simulation:
it never touches a real process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from gputop.sources.sim.api import CLOCK_TICKS, GIB, MIB
from gputop.sources.sim.dynamics import wander
from gputop.sources.sim.library import SimNvml, _Proc
from gputop.sources.workload import parse_cgroup

_SIGNAL_NUMBERS = {"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12,
                   "TERM": 15, "CONT": 18, "STOP": 19}
_INIT_PID = 1


def _signal_number(sig: int | str) -> int:
    if isinstance(sig, bool):
        raise ValueError(f"not a signal: {sig!r}")
    if isinstance(sig, int):
        return int(sig)
    name = str(sig).upper().removeprefix("SIG")
    if name.isdigit():
        return int(name)
    if name not in _SIGNAL_NUMBERS:
        raise ValueError(f"unknown signal {sig!r}")
    return _SIGNAL_NUMBERS[name]


def _kernel_file(cmdline: list[str]) -> str | None:
    """A Jupyter kernel's connection file: ``-f /path/kernel-<id>.json``."""
    for i, arg in enumerate(cmdline):
        if arg == "-f" and i + 1 < len(cmdline):
            return cmdline[i + 1]
        if arg.startswith(("--f=", "-f=")):
            return arg.split("=", 1)[1]
    return None


class SimProcs:
    """What ``procfs.ProcFs`` answers, for the processes of a ``SimNvml``.

    It never touches a real process: ``signal`` only changes the simulation.
    """

    def __init__(self, sim: SimNvml) -> None:
        self.sim = sim
        host = sim.scenario.host
        self.boot_time = sim.t0 - float(host["uptime_days"]) * 86400.0
        self.workloads = SimWorkloads(sim)

    def _entry(self, pid: int, table: dict[int, _Proc]) -> dict[str, Any] | None:
        proc = table.get(pid)
        if proc is None:
            if pid != _INIT_PID:
                return None
            return self._init_entry()
        if proc.hidden or proc.state == "X":
            return None
        parent = table.get(proc.ppid)
        parent_command: str | None = None
        parent_user: str | None = None
        if parent is not None:
            parent_command, parent_user = " ".join(parent.cmdline), parent.user
        elif proc.ppid == _INIT_PID:
            parent_command, parent_user = "/sbin/init", "root"
        start_time = max(proc.start_time, self.boot_time + 1.0)
        cmdline = tuple(proc.cmdline)
        command = " ".join(cmdline)
        if proc.state == "Z":
            # A zombie's /proc/PID/cmdline is empty; ps and ProcFs show [comm] instead.
            command = f"[{os.path.basename(cmdline[0])[:15]}]" if cmdline else "[?]"
            cmdline = ()
        kernel_file = _kernel_file(list(cmdline))
        exists = proc.kernel_file_exists
        if kernel_file is not None and exists is None:
            exists = True
        return {
            "pid": proc.pid,
            "user": proc.user,
            "uid": proc.uid,
            "name": os.path.basename(proc.cmdline[0]) if proc.cmdline else "",
            "command": command,
            "cmdline": cmdline,
            "ppid": proc.ppid,
            "state": proc.state,
            "start_time": start_time,
            "start_ticks": self.start_ticks(start_time),
            "cpu_percent": self._cpu_percent(proc),
            "rss": int(proc.rss_mib) * MIB,
            "parent_command": parent_command,
            "parent_user": parent_user,
            "kernel_file": kernel_file,
            "kernel_file_exists": exists if kernel_file is not None else None,
            "simulated": True,
        }

    def _init_entry(self) -> dict[str, Any]:
        return {
            "pid": _INIT_PID, "user": "root", "uid": 0, "name": "systemd",
            "command": "/sbin/init", "cmdline": ("/sbin/init",), "ppid": 0, "state": "S",
            "start_time": self.boot_time, "start_ticks": 1, "cpu_percent": 0.0,
            "rss": 12 * MIB, "parent_command": None, "parent_user": None,
            "kernel_file": None, "kernel_file_exists": None, "simulated": True,
        }

    def start_ticks(self, start_time: float) -> int:
        """/proc/PID/stat field 22: clock ticks after boot."""
        return max(int((start_time - self.boot_time) * CLOCK_TICKS), 1)

    def _cpu_percent(self, proc: _Proc) -> float:
        t = self.sim.clock()
        if proc.state in ("Z", "T", "X"):
            return 0.0
        if proc.cpu_percent is not None:
            lo, hi = proc.cpu_percent
        elif proc.gpus and proc.util[1] > 0:
            lo, hi = 60.0, 100.0  # a busy CUDA process keeps a core feeding the GPU
        else:
            lo, hi = 0.0, 1.0
        return round(lo + (hi - lo) * wander(self.sim.seed, proc.pid * 64 + 63, t), 1)

    # ---- ProcFs interface ----------------------------------------------------------------

    def device_holders(self) -> tuple[list[dict[str, Any]], str | None]:
        """The simulation opens no device files: nothing beyond NVML's own list."""
        return [], None

    def host_info(self) -> dict[str, Any]:
        host = self.sim.scenario.host
        t = self.sim.clock()
        seed = self.sim.seed
        lo, hi = host["cpu_percent"]
        cpu = lo + (hi - lo) * wander(seed, 0xC0FFEE, t)
        cpus = int(host["cpu_count"])
        total = int(float(host["mem_total_gib"]) * GIB)
        if host["mem_available_gib"] is not None:
            alo, ahi = host["mem_available_gib"]
            avail = int((alo + (ahi - alo) * wander(seed, 0xA7A1, t)) * GIB)
        else:
            avail = int(total * (0.55 + 0.1 * wander(seed, 0xA7A1, t)))
        load1 = cpus * cpu / 100.0
        return {
            "hostname": host["hostname"],
            "cpu_count": cpus,
            "cpu_percent": round(cpu, 1),
            "load": (round(load1, 2), round(load1 * 0.97, 2), round(load1 * 0.95, 2)),
            "mem_total": total,
            "mem_available": min(avail, total),
        }

    def process_info(self, pids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """Pids not visible (exited, or 'hidden' in another PID namespace) are absent."""
        table = self.sim.processes()
        out = {}
        for pid in pids:
            entry = self._entry(int(pid), table)
            if entry is not None:
                out[int(pid)] = entry
        return out

    def process(self, pid: int) -> dict[str, Any] | None:
        """One process with everything process_info gives, plus ``cwd``."""
        entry = self._entry(int(pid), self.sim.processes())
        if entry is not None:
            user = entry["user"]
            entry["cwd"] = "/root" if user == "root" else f"/home/{user}"
        return entry

    def user_name(self, uid: int | None) -> str | None:
        if uid is None:
            return None
        for proc in self.sim.processes().values():
            if proc.uid == uid:
                return proc.user
        return "root" if uid == 0 else str(uid)

    def parent_chain(self, pid: int) -> list[dict[str, Any]]:
        """The ancestors of ``pid``, nearest first, up to and including pid 1."""
        table = self.sim.processes()
        chain: list[dict[str, Any]] = []
        entry = self._entry(int(pid), table)
        seen = {int(pid)}
        while entry is not None and entry["ppid"] and entry["ppid"] not in seen:
            seen.add(entry["ppid"])
            entry = self._entry(entry["ppid"], table)
            if entry is not None:
                chain.append(entry)
        return chain

    def signal(self, pid: int, start_ticks: int | None, sig: int | str) -> dict[str, Any]:
        """Signal a simulated process; same answer shape as actions.kill.

        outcome: exited | killed | still alive | permission denied | already gone |
        pid reused.  Never calls os.kill.
        """
        number = _signal_number(sig)
        sim = self.sim
        with sim._lock:
            table = sim.processes()
            entry = self._entry(int(pid), table)
            if entry is None:
                return _answer("already gone", f"pid {pid} is not running", None)
            owner = entry["user"]
            if start_ticks is not None and entry["start_ticks"] != start_ticks:
                return _answer(
                    "pid reused", f"pid {pid} is now a different process ({entry['command']})",
                    owner,
                )
            if sim.scenario.me != "root" and owner != sim.scenario.me:
                return _answer(
                    "permission denied", f"pid {pid} belongs to {owner}, not {sim.scenario.me}",
                    owner,
                )
            proc = table.get(int(pid))
            if proc is None:  # pid 1, owned by root: only reachable when me is root
                return _answer("still alive", "init does not take signals from here", owner)
            if number == 0:
                return _answer("still alive", f"pid {pid} is running", owner)
            if proc.state == "Z":
                return _answer(
                    "still alive",
                    f"pid {pid} is a zombie: it has exited and waits for its parent "
                    f"(pid {proc.ppid}) to reap it",
                    owner,
                )
            if number == 9:
                sim.remove_process(proc.pid)
                return _answer("killed", f"pid {pid} killed", owner)
            if number in (1, 2, 3, 15) and not proc.ignores_term:
                sim.remove_process(proc.pid)
                return _answer("exited", f"pid {pid} exited", owner)
            if number == 19:
                sim.set_process_state(proc.pid, "T")
            elif number == 18 and proc.state == "T":
                sim.set_process_state(proc.pid, "S")
            return _answer("still alive", f"pid {pid} is still running after the signal", owner)


def _answer(outcome: str, message: str, owner: str | None) -> dict[str, Any]:
    return {
        "ok": outcome in ("exited", "killed", "already gone"),
        "outcome": outcome,
        "message": message,
        "owner": owner,
        "simulated": True,
    }


class SimWorkloads:
    """What ``workload.WorkloadResolver`` answers, from the scenario: each process's
    ``cgroup`` text goes through the real parser, and ``slurm_jobs`` is squeue's answer."""

    def __init__(self, sim: SimNvml) -> None:
        self.sim = sim
        self._cgroups = {p["pid"]: p["cgroup"] for p in sim.scenario.processes if p["cgroup"]}
        self._jobs = {str(job["id"]): job for job in sim.scenario.host.get("slurm_jobs") or ()}

    def resolve(self, pid: int, start_ticks: int) -> dict[str, Any] | None:
        text = self._cgroups.get(pid)
        return parse_cgroup(text) if text else None

    def forget_except(self, keys: Iterable[tuple[int, int]]) -> None:
        """Nothing is cached: the scenario is the cache."""

    def name_all(self, workloads: Iterable[dict[str, Any]]) -> None:
        elapsed = self.sim.clock() - self.sim.t0
        for w in workloads:
            job = self._jobs.get(w["id"]) if w["kind"] == "slurm" else None
            if job is None:
                continue
            w.update({k: job[k] for k in ("user", "name", "account", "partition") if job.get(k)})
            w["job_state"] = "RUNNING"
            if job.get("gpus") is not None:
                w["gpus"] = list(job["gpus"])
            if job.get("time_left") is not None:
                w["time_left"] = max(job["time_left"] - elapsed, 0.0)
                w["end_time"] = self.sim.t0 + job["time_left"]

    def notes(self) -> list[str]:
        return []

    def own(self) -> dict[str, Any] | None:
        return None

    def wait(self, timeout: float = 0.0) -> None:
        """Nothing runs in the background."""
