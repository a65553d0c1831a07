"""Facts about host processes and the host itself, read straight from /proc.

Stdlib-only: this module is shipped to remote hosts inside the SSH probe.

psutil would do most of this, but it is not on the remote hosts, and for the ~200 pids a
GPU node shows, reading a handful of small files per pid directly is faster than psutil's
per-attribute calls.
"""

from __future__ import annotations

import os
import pwd
import time
from typing import Any

from gputop.sources.workload import WorkloadResolver
from gputop.vendors import ORDER_VARIABLES, VISIBLE_DEVICES

_DEFAULT_CLK_TCK = 100
# A kernel file path of a Jupyter kernel comes after one of these.
_KERNEL_FLAGS = ("-f", "--f")
# Guards parent_chain against a corrupt or cyclic /proc view.
_MAX_CHAIN = 64
# A command line is read up to this much (ps -ww reads it all; a screen shows a line).
MAX_CMDLINE_BYTES = 32 * 1024
CMDLINE_CUT = f"... (cut at {MAX_CMDLINE_BYTES // 1024} KiB)"
# What the detail view shows of a process's environment: the GPUs it was given, its
# job and rank; nothing else (an environment holds tokens and passwords).
ENVIRONMENT_KEYS = frozenset({
    *VISIBLE_DEVICES, *ORDER_VARIABLES,
    "LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "OMP_NUM_THREADS", "CONDA_DEFAULT_ENV", "VIRTUAL_ENV", "PBS_JOBID", "LSB_JOBID",
})
ENVIRONMENT_PREFIXES = ("SLURM_JOB_", "SLURM_STEP_", "SLURM_LOCALID", "SLURM_PROCID",
                        "SLURM_NODEID", "SLURM_ARRAY_", "SLURM_GPUS", "SLURM_NTASKS")
MAX_ENVIRON_BYTES = 256 * 1024
MAX_ENV_VALUE = 200
MAX_ENV_VARS = 40


def _sysconf(name: str, default: int) -> int:
    try:
        value = os.sysconf(name)
    except (ValueError, OSError):
        return default
    return value if value > 0 else default


class _Stat:
    """The fields of /proc/PID/stat that we use."""

    __slots__ = ("comm", "ppid", "rss_pages", "start_ticks", "state", "time_ticks")

    def __init__(self, text: str) -> None:
        # comm may itself contain spaces and ')', so split around the last ')'.
        open_paren = text.index("(")
        close_paren = text.rindex(")")
        self.comm = text[open_paren + 1 : close_paren]
        rest = text[close_paren + 2 :].split()
        self.state = rest[0]
        self.ppid = int(rest[1])
        self.time_ticks = int(rest[11]) + int(rest[12])
        self.start_ticks = int(rest[19])
        self.rss_pages = int(rest[21])


def _kernel_marker(cmdline: tuple[str, ...] | list[str], i: int) -> bool:
    arg = cmdline[i]
    if "ipykernel_launcher" in arg:
        return True
    if arg == "-m" and i + 1 < len(cmdline) and cmdline[i + 1].startswith("ipykernel"):
        return True
    base = os.path.basename(arg)
    return base.startswith("kernel-") and base.endswith(".json")


def kernel_file_of(cmdline: tuple[str, ...] | list[str]) -> str | None:
    """The -f connection file of a Jupyter kernel command line, else None."""
    # Cheap rejection first: this runs for every GPU process on every refresh.
    if not any("kernel" in arg for arg in cmdline):
        return None
    if not any(_kernel_marker(cmdline, i) for i in range(len(cmdline))):
        return None
    for i, arg in enumerate(cmdline):
        if arg in _KERNEL_FLAGS and i + 1 < len(cmdline):
            return cmdline[i + 1]
        for flag in _KERNEL_FLAGS:
            if arg.startswith(flag + "="):
                return arg[len(flag) + 1 :]
    for arg in cmdline:
        base = os.path.basename(arg)
        if base.startswith("kernel-") and base.endswith(".json"):
            return arg
    return None


class ProcFs:
    """Reads processes and host figures from a /proc tree (``root`` for tests)."""

    def __init__(self, root: str = "/proc") -> None:
        self.root = root
        self._clk_tck = _sysconf("SC_CLK_TCK", _DEFAULT_CLK_TCK)
        self._page_size = _sysconf("SC_PAGE_SIZE", 4096)
        self._boot_time = self._read_boot_time()
        self._users: dict[int, str | None] = {}
        # (pid, start_ticks) -> (cpu ticks, monotonic time) of the previous process_info call
        self._cpu_prev: dict[tuple[int, int], tuple[int, float]] = {}
        # What never changes for one process (user, command line, kernel file) and its
        # parent's command and user, by (pid, start ticks): a tick then reads only the
        # stat file of each process (157 -> 101 ms per tick at 4,000 processes).
        self._facts: dict[tuple[int, int], dict[str, Any]] = {}
        self._host_cpu_prev: tuple[int, int] | None = None
        self.workloads = WorkloadResolver(root)  # job / container / pod per pid

    def device_holders(self) -> tuple[list[dict[str, Any]], str | None]:
        """Processes with /dev/nvidia* open (sources/devscan.py)."""
        from gputop.sources.devscan import scan_device_holders  # never in a lean read

        return scan_device_holders(self.root)

    # -- host --------------------------------------------------------------------------

    def host_info(self) -> dict[str, Any]:
        return {
            "hostname": os.uname().nodename,  # what gethostname() returns, without socket
            "cpu_count": os.cpu_count(),
            "cpu_percent": self._host_cpu_percent(),
            "load": self._load(),
            **self._meminfo(),
        }

    def _read_boot_time(self) -> float:
        try:
            with open(os.path.join(self.root, "stat")) as f:
                for line in f:
                    if line.startswith("btime "):
                        return float(line.split()[1])
        except OSError:
            pass
        return time.time() - time.monotonic()

    def _host_cpu_percent(self) -> float | None:
        try:
            with open(os.path.join(self.root, "stat")) as f:
                fields = f.readline().split()
        except OSError:
            return None
        if not fields or fields[0] != "cpu":
            return None
        ticks = [int(v) for v in fields[1:]]
        # idle + iowait count as not busy; guest time is already inside user/nice.
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        total = sum(ticks[:8])
        prev, self._host_cpu_prev = self._host_cpu_prev, (total - idle, total)
        if prev is None or total <= prev[1]:
            return None
        return round(100.0 * (total - idle - prev[0]) / (total - prev[1]), 1)

    def _load(self) -> tuple[float, float, float] | None:
        try:
            with open(os.path.join(self.root, "loadavg")) as f:
                parts = f.read().split()
            return (float(parts[0]), float(parts[1]), float(parts[2]))
        except (OSError, ValueError, IndexError):
            return None

    def _meminfo(self) -> dict[str, int | None]:
        found: dict[str, int | None] = {"mem_total": None, "mem_available": None}
        keys = {"MemTotal:": "mem_total", "MemAvailable:": "mem_available"}
        try:
            with open(os.path.join(self.root, "meminfo")) as f:
                for line in f:
                    parts = line.split()
                    key = keys.get(parts[0]) if parts else None
                    if key is not None:
                        found[key] = int(parts[1]) * 1024
        except (OSError, ValueError):
            pass
        return found

    # -- processes -----------------------------------------------------------------------

    def process_info(self, pids: list[int] | tuple[int, ...] | set[int]) -> dict[int, dict]:
        """Facts per pid; a pid absent from the result is not in our PID namespace."""
        now = time.monotonic()
        result: dict[int, dict] = {}
        seen: set[tuple[int, int]] = set()
        parents: dict[int, tuple[str | None, str | None]] = {}
        for pid in pids:
            info = self._read(pid, self._facts)
            if info is None:
                continue
            key = (pid, info["start_ticks"])
            seen.add(key)
            ticks = info.pop("_ticks")
            prev = self._cpu_prev.get(key)
            self._cpu_prev[key] = (ticks, now)
            if prev is not None and now > prev[1]:
                seconds = (ticks - prev[0]) / self._clk_tck
                info["cpu_percent"] = round(100.0 * seconds / (now - prev[1]), 1)
            ppid = info["ppid"]
            facts = self._facts[key]
            # Same ppid, same parent: a dead parent's children are re-parented first.
            if facts.get("_ppid") != ppid:
                if ppid not in parents:
                    parents[ppid] = self._command_and_user(ppid)
                facts["_ppid"], facts["_parent"] = ppid, parents[ppid]
            info["parent_command"], info["parent_user"] = facts["_parent"]
            result[pid] = info
        # Forget pids that were not asked for this time, so the tables do not grow forever.
        for key in [k for k in self._cpu_prev if k not in seen]:
            del self._cpu_prev[key]
        for key in [k for k in self._facts if k not in seen]:
            del self._facts[key]
        return result

    def process(self, pid: int) -> dict | None:
        """One process with everything process_info gives, plus ``cwd``."""
        info = self._read(pid)
        if info is None:
            return None
        info.pop("_ticks")
        info["parent_command"], info["parent_user"] = self._command_and_user(info["ppid"])
        try:
            info["cwd"] = os.readlink(os.path.join(self.root, str(pid), "cwd"))
        except OSError:
            info["cwd"] = None
        info["environment"] = self._environment(pid)
        return info

    def _environment(self, pid: int) -> dict[str, str] | None:
        """The variables of ENVIRONMENT_KEYS the process has (which GPUs it was given, its
        Slurm job, its rank); None when /proc/PID/environ is not readable (another user's
        process, unless we are root).  Read up to MAX_ENVIRON_BYTES."""
        try:
            with open(os.path.join(self.root, str(pid), "environ"), "rb") as f:
                raw = f.read(MAX_ENVIRON_BYTES)
        except OSError:
            return None
        found: dict[str, str] = {}
        for item in raw.split(b"\0"):
            name, sep, value = item.partition(b"=")
            key = name.decode("utf-8", "replace")
            if sep and (key in ENVIRONMENT_KEYS or key.startswith(ENVIRONMENT_PREFIXES)):
                found[key] = value.decode("utf-8", "replace")[:MAX_ENV_VALUE]
        return dict(sorted(found.items())[:MAX_ENV_VARS])

    def parent_chain(self, pid: int) -> list[dict]:
        """The ancestors of pid, nearest first, ending with pid 1 (or the last readable one)."""
        chain: list[dict] = []
        first = self._read(pid)
        if first is None:
            return chain
        ppid = first["ppid"]
        seen = {pid}
        while ppid > 0 and ppid not in seen and len(chain) < _MAX_CHAIN:
            seen.add(ppid)
            info = self._read(ppid)
            if info is None:
                break
            info.pop("_ticks")
            chain.append(info)
            ppid = info["ppid"]
        return chain

    def user_name(self, uid: int | None) -> str | None:
        if uid is None:
            return None
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                # A uid without a passwd entry (containers, LDAP down): show the number.
                self._users[uid] = str(uid)
        return self._users[uid]

    def _read(self, pid: int, cache: dict[tuple[int, int], dict] | None = None) -> dict | None:
        """A process's facts; with ``cache``, those that never change are read once per
        (pid, start ticks) and kept there."""
        base = os.path.join(self.root, str(pid))
        try:
            with open(base + "/stat", "rb") as f:
                stat = _Stat(f.read().decode("utf-8", "replace"))
        except (OSError, ValueError, IndexError):
            return None
        facts = cache.get((pid, stat.start_ticks)) if cache is not None else None
        if facts is None:
            try:
                uid = os.stat(base).st_uid
            except OSError:
                return None
            cmdline = self._cmdline(base)
            facts = {
                "user": self.user_name(uid),
                "uid": uid,
                # Kernel threads and zombies have an empty cmdline; ps shows [comm].
                "command": " ".join(cmdline) if cmdline else f"[{stat.comm}]",
                "cmdline": cmdline,
                "kernel_file": kernel_file_of(cmdline),
            }
            if cache is not None:
                cache[(pid, stat.start_ticks)] = facts
        kernel_file = facts["kernel_file"]
        return {
            "pid": pid,
            "user": facts["user"],
            "uid": facts["uid"],
            "command": facts["command"],
            "cmdline": facts["cmdline"],
            "ppid": stat.ppid,
            "state": stat.state,
            "start_time": self._boot_time + stat.start_ticks / self._clk_tck,
            "start_ticks": stat.start_ticks,
            "cpu_percent": None,
            "rss": stat.rss_pages * self._page_size,
            "kernel_file": kernel_file,
            "kernel_file_exists": self._kernel_file_exists(base, kernel_file),
            "_ticks": stat.time_ticks,
        }

    @staticmethod
    def _cmdline(base: str) -> tuple[str, ...]:
        """The argv, at most MAX_CMDLINE_BYTES of it: anyone may start a process with a
        2 MB command line, and it would be read, sent over SSH and drawn every second."""
        try:
            with open(base + "/cmdline", "rb") as f:
                raw = f.read(MAX_CMDLINE_BYTES + 1)
        except OSError:
            return ()
        cut = len(raw) > MAX_CMDLINE_BYTES
        parts = raw[:MAX_CMDLINE_BYTES].split(b"\0")
        if parts and parts[-1] == b"":
            parts.pop()
        argv = tuple(p.decode("utf-8", "replace") for p in parts)
        return (*argv, CMDLINE_CUT) if cut else argv

    @staticmethod
    def _kernel_file_exists(base: str, kernel_file: str | None) -> bool | None:
        if kernel_file is None:
            return None
        if not os.path.isabs(kernel_file):
            # A relative path is relative to the kernel's working directory.
            try:
                kernel_file = os.path.join(os.readlink(base + "/cwd"), kernel_file)
            except OSError:
                return None
        return os.path.exists(kernel_file)

    def _command_and_user(self, pid: int) -> tuple[str | None, str | None]:
        if pid <= 0:
            return (None, None)
        base = os.path.join(self.root, str(pid))
        try:
            uid = os.stat(base).st_uid
        except OSError:
            return (None, None)
        cmdline = self._cmdline(base)
        if cmdline:
            command = " ".join(cmdline)
        else:
            try:
                with open(base + "/stat") as f:
                    command = f"[{_Stat(f.read()).comm}]"
            except (OSError, ValueError, IndexError):
                command = None
        return (command, self.user_name(uid))
