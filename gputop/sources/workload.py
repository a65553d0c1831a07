"""Who is behind a GPU process: its Slurm job, container or Kubernetes pod.

Stdlib-only: this module is shipped to remote hosts inside the SSH probe, so a remote
host gets the same answers as this one.

The base is ``/proc/PID/cgroup``, which any user may read (``environ`` is not): the
cgroup path names the Slurm job and step, the container id or the pod uid.
``parse_cgroup`` turns that text into a workload dict (pure, tested on recorded texts).

Names are extras, each from its own optional source, looked up in a background thread and
cached, so a slow ``squeue`` or a stuck Docker daemon never delays a refresh: Slurm jobs
through ``squeue`` (at most once per ``SQUEUE_EVERY`` seconds per host), Docker and
Podman containers through their Engine API socket, Kubernetes pods through the
directory names under ``/var/log/pods`` and ``/var/log/containers``.  A source that fails
says so once (``notes()``) and ids are shown instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

SQUEUE_EVERY = 30.0  # seconds between two squeue runs on one host
SQUEUE_TIMEOUT = 10.0  # a hung slurmctld must not keep a thread forever
SOCKET_TIMEOUT = 2.0
K8S_RESCAN_EVERY = 10.0
DOCKER_SOCKETS = {"docker": "/var/run/docker.sock", "podman": "/run/podman/podman.sock"}
K8S_POD_LOGS = "/var/log/pods"
K8S_CONTAINER_LOGS = "/var/log/containers"

# Caps on hostile or corrupt input (a cgroup file is short; squeue output can be big).
MAX_CGROUP_BYTES = 16384
MAX_SQUEUE_BYTES = 64 * 1024 * 1024
MAX_API_BYTES = 1024 * 1024
MAX_TEXT = 256  # a name, user, account or partition longer than this is cut
MAX_K8S_ENTRIES = 20000

_HEX64 = r"[0-9a-f]{64}"
# Patterns compiled when first used (re's own cache), not at import, and tried only on a
# path holding their literal start: most processes are in none of them, and a one-shot
# of a host without jobs or containers compiles none.
# Sites may put the node name in front of slurmstepd.scope, and cgroup v1 has
# /slurm/uid_N/ instead, so only the job_N component is relied on.
_SLURM = r"/job_(\d{1,19})(?:/step_([A-Za-z0-9_]{1,32}))?(?=/|$)"
# The systemd driver: kubepods[-qos]-pod<uid with _>.slice (kind adds a kubelet- prefix),
# then the container's scope, or on cgroup v1 with containerd ":cri-containerd:<id>".
_K8S_SYSTEMD = (
    r"kubepods(?:-(?:besteffort|burstable))?-pod([0-9a-f]{8}(?:_[0-9a-f]{4}){3}_[0-9a-f]{12})"
    r"\.slice(?:/(?:cri-containerd|crio|docker)-(" + _HEX64 + r")\.scope"
    r"|:(?:cri-containerd|crio|docker):(" + _HEX64 + r"))?"
)
_K8S_CGROUPFS = (
    r"/kubepods/(?:(?:besteffort|burstable)/)?pod([0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})"
    r"(?:/(" + _HEX64 + r"))?"
)
# (literal start, pattern, runtime); conmon scopes (libpod-conmon-, crio-conmon-) are the
# monitor, not the container, and do not match because their id is not right after the
# prefix.
_CONTAINERS = (
    ("/docker-", r"/docker-(" + _HEX64 + r")\.scope", "docker"),
    ("/docker/", r"/docker/(" + _HEX64 + r")(?=/|$)", "docker"),
    ("/libpod-", r"/libpod-(" + _HEX64 + r")\.scope", "podman"),
    ("/libpod_parent/", r"/libpod_parent/libpod-(" + _HEX64 + r")(?=/|$)", "podman"),
    ("/cri-containerd-", r"/cri-containerd-(" + _HEX64 + r")\.scope", "containerd"),
    ("/crio-", r"/crio-(" + _HEX64 + r")\.scope", "crio"),
)
_GRES_IDX = r"gpu(?::[^:(]*)*\(IDX:([0-9,\-]{1,256})\)"


def parse_cgroup(text: str) -> dict[str, Any] | None:
    """The workload named by a /proc/PID/cgroup text, or None when there is none.

    A Slurm job wins over a pod, and a pod over a bare container: a container started
    inside a job belongs to the job, and a pod's container belongs to the pod.
    """
    paths = []
    for line in text[:MAX_CGROUP_BYTES].splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            paths.append(parts[2])
    for path in paths:
        m = re.search(_SLURM, path) if "/job_" in path else None
        if m:
            return {"kind": "slurm", "id": m.group(1), "step": m.group(2)}
    for path in paths:
        if "kubepods" not in path:
            continue
        m = re.search(_K8S_SYSTEMD, path)
        if m:
            uid = m.group(1).replace("_", "-")
            return {"kind": "k8s", "id": uid, "container_id": m.group(2) or m.group(3)}
        m = re.search(_K8S_CGROUPFS, path)
        if m:
            return {"kind": "k8s", "id": m.group(1), "container_id": m.group(2)}
    for path in paths:
        for start, pattern, runtime in _CONTAINERS:
            m = re.search(pattern, path) if start in path else None
            if m:
                return {"kind": runtime, "id": m.group(1)}
    return None


def gres_gpus(detail: Any) -> list[int] | None:
    """GPU indexes from one ``gres_detail`` entry, e.g. ``gpu:a100:2(IDX:0,2-3)``."""
    if not isinstance(detail, str):
        return None
    m = re.search(_GRES_IDX, detail)
    if not m:
        return None
    found: list[int] = []
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return None
        first, last = int(lo), int(hi or lo)
        if last < first or last - first > 1024:
            return None
        found.extend(range(first, last + 1))
    return found


def _number(value: Any) -> float | None:
    """A squeue number: plain (old Slurm) or {"set": .., "infinite": .., "number": ..}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _short(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    return value[:MAX_TEXT]


def _state(value: Any) -> str | None:
    # Slurm 23.02 gives "RUNNING"; 23.11 and later give ["RUNNING"] (state plus flags).
    if isinstance(value, list):
        value = value[0] if value else None
    return _short(value)


def parse_squeue_json(text: str) -> dict[str, dict[str, Any]]:
    """Job facts by job id from ``squeue --json`` output (any Slurm from 21.08 on)."""
    import json  # here and for the Engine API: only where a process is in a job

    data = json.loads(text)
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list):
        raise ValueError("no 'jobs' list")
    found: dict[str, dict[str, Any]] = {}
    for job in jobs:
        if not isinstance(job, dict):
            continue
        job_id = _number(job.get("job_id"))
        if job_id is None or job_id < 0:
            continue
        end = _number(job.get("end_time"))
        details = job.get("gres_detail")
        gpus = None
        if isinstance(details, list) and len(details) == 1:
            # One entry per node; with several nodes we cannot tell which one is ours.
            gpus = gres_gpus(details[0])
        found[str(int(job_id))] = {
            "user": _short(job.get("user_name")),
            "name": _short(job.get("name")),
            "account": _short(job.get("account")),
            "partition": _short(job.get("partition")),
            "job_state": _state(job.get("job_state")),
            "end_time": end if end else None,
            "gpus": gpus,
        }
    return found


# The old-Slurm fallback: fixed fields, '|' separated (job names may hold spaces).
SQUEUE_FORMAT = "%i|%u|%a|%P|%T|%e|%b|%j"


def parse_squeue_text(text: str) -> dict[str, dict[str, Any]]:
    """Job facts by job id from ``squeue -h -o SQUEUE_FORMAT`` output."""
    found: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        parts = line.split("|", 7)
        if len(parts) != 8 or not parts[0].isdigit():
            continue
        found[parts[0]] = {
            "user": _short(parts[1]),
            "account": _short(parts[2]),
            "partition": _short(parts[3]),
            "job_state": _short(parts[4]),
            "end_time": None,  # %e is local time text; time left is not worth a guess
            "gpus": None,
            "name": _short(parts[7]),
        }
    return found


class _Background:
    """One lookup at a time in a daemon thread; the refresh only reads what it left."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, work: Callable[[], None]) -> None:
        if self.busy():
            return
        self._thread = threading.Thread(target=work, name="gputop-workload", daemon=True)
        self._thread.start()

    def wait(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)


class SlurmNames:
    """Job facts from squeue, refreshed in the background at most every SQUEUE_EVERY s."""

    def __init__(
        self,
        note: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        timeout: float = SQUEUE_TIMEOUT,
    ) -> None:
        self._note = note
        self._clock = clock
        self._timeout = timeout
        self._jobs: dict[str, dict[str, Any]] = {}
        self._last: float | None = None
        self._work = _Background()
        self.runs = 0  # how many times squeue was started (bench and tests count it)

    def lookup(self, job_ids: set[str]) -> dict[str, dict[str, Any]]:
        """The facts known now; asks squeue again when a job is new and the wait is over."""
        now = self._clock()
        unknown = job_ids - self._jobs.keys()
        due = self._last is None or (unknown and now - self._last >= SQUEUE_EVERY)
        if due and job_ids and not self._work.busy():
            self._last = now
            self._work.start(lambda: self._refresh(sorted(job_ids)))
        return self._jobs

    def wait(self, timeout: float = SQUEUE_TIMEOUT + 1) -> None:
        self._work.wait(timeout)

    def _run(self, args: list[str]) -> str:
        self.runs += 1
        done = subprocess.run(
            args, capture_output=True, timeout=self._timeout, check=False,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip().splitlines()
            reason = tail[-1][:120] if tail else f"exit status {done.returncode}"
            raise RuntimeError(reason)
        return done.stdout[:MAX_SQUEUE_BYTES].decode("utf-8", "replace")

    def _refresh(self, job_ids: list[str]) -> None:
        import shutil  # pulls in bz2 and lzma: only where Slurm is asked

        squeue = shutil.which("squeue")
        if squeue is None:
            self._note("squeue not found: Slurm jobs are shown by id")
            return
        jobs = ",".join(job_ids)
        try:
            try:
                found = parse_squeue_json(self._run([squeue, "--json", "--jobs", jobs]))
            except (RuntimeError, ValueError):
                # Slurm before 21.08 has no --json: ask for fixed fields instead.
                found = parse_squeue_text(
                    self._run([squeue, "-h", "-o", SQUEUE_FORMAT, "--jobs", jobs])
                )
        except subprocess.TimeoutExpired:
            self._note(f"squeue did not answer in {self._timeout:g} s: Slurm jobs are shown by id")
            return
        except (OSError, RuntimeError, ValueError) as err:
            self._note(f"squeue failed ({err}): Slurm jobs are shown by id")
            return
        self._jobs = found


def _unix_connection(path: str, timeout: float) -> Any:
    """An HTTP connection over a Unix socket.  Built when a container is looked up, so
    that a one-shot on a host without containers never loads http.client, ssl and email
    (tens of ms)."""
    import http.client
    import socket

    class UnixHTTPConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(path)
            except OSError:
                sock.close()
                raise
            self.sock = sock

    return UnixHTTPConnection("localhost", timeout=timeout)


def container_name(
    socket_path: str, container_id: str, timeout: float = SOCKET_TIMEOUT
) -> str | None:
    """The container's name from a Docker-compatible Engine API; None when it has none.

    Raises OSError or ValueError when the daemon cannot be asked or answers nonsense.
    """
    import http.client

    conn = _unix_connection(socket_path, timeout)
    try:
        conn.request("GET", f"/containers/{container_id}/json")
        response = conn.getresponse()
        body = response.read(MAX_API_BYTES + 1)
    except http.client.HTTPException as err:
        raise ValueError(f"bad answer: {err}") from None
    finally:
        conn.close()
    if response.status == 404:
        return None
    if response.status != 200:
        raise ValueError(f"HTTP {response.status}")
    if len(body) > MAX_API_BYTES:
        raise ValueError("answer too long")
    import json

    data = json.loads(body)
    name = data.get("Name") if isinstance(data, dict) else None
    if not isinstance(name, str) or not name:
        return None
    return name.lstrip("/")[:MAX_TEXT] or None


class ContainerNames:
    """Container names by id from one runtime's socket, looked up in the background."""

    def __init__(self, runtime: str, socket_path: str, note: Callable[[str], None]) -> None:
        self.runtime = runtime
        self.socket_path = socket_path
        self._note = note
        self._names: dict[str, str | None] = {}  # id -> name; None: the daemon has no name
        self._work = _Background()
        self._broken = False

    def lookup(self, ids: set[str]) -> dict[str, str | None]:
        missing = ids - self._names.keys()
        if missing and not self._broken and os.access(self.socket_path, os.R_OK | os.W_OK):
            self._work.start(lambda: self._fetch(sorted(missing)))
        return self._names

    def wait(self, timeout: float = SOCKET_TIMEOUT * 4) -> None:
        self._work.wait(timeout)

    def _fetch(self, ids: list[str]) -> None:
        for cid in ids:
            try:
                self._names[cid] = container_name(self.socket_path, cid)
            except (OSError, ValueError) as err:
                self._broken = True
                self._note(
                    f"{self.runtime} API at {self.socket_path} failed ({err}): "
                    "containers are shown by id"
                )
                return


def scan_k8s_logs(pods_dir: str = K8S_POD_LOGS, containers_dir: str = K8S_CONTAINER_LOGS) -> tuple[
    dict[str, tuple[str, str]], dict[str, str]
]:
    """(pod uid -> (namespace, pod), container id -> container name) from kubelet's logs.

    kubelet names ``/var/log/pods/<namespace>_<pod>_<uid>/`` and
    ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log``; Kubernetes names hold
    no ``_``, so the split is unambiguous.
    """
    pods: dict[str, tuple[str, str]] = {}
    for entry in _listdir(pods_dir):
        parts = entry.split("_")
        if len(parts) == 3 and all(parts):
            pods[parts[2]] = (parts[0][:MAX_TEXT], parts[1][:MAX_TEXT])
    containers: dict[str, str] = {}
    for entry in _listdir(containers_dir):
        if not entry.endswith(".log"):
            continue
        parts = entry[: -len(".log")].split("_")
        if len(parts) != 3:
            continue
        name, _, cid = parts[2].rpartition("-")
        if name and re.fullmatch(_HEX64, cid):
            containers[cid] = name[:MAX_TEXT]
    return pods, containers


def _listdir(path: str) -> list[str]:
    try:
        with os.scandir(path) as it:
            names = []
            for entry in it:
                names.append(entry.name)
                if len(names) >= MAX_K8S_ENTRIES:
                    break
            return names
    except OSError:
        return []


class WorkloadResolver:
    """Workloads of pids, cached by (pid, start ticks), with names from optional sources.

    ``resolve`` reads /proc/PID/cgroup once per process lifetime; ``name_all`` adds the
    names known now and starts background lookups for the rest.
    """

    def __init__(
        self,
        root: str = "/proc",
        sockets: dict[str, str] | None = None,
        k8s_dirs: tuple[str, str] = (K8S_POD_LOGS, K8S_CONTAINER_LOGS),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        squeue_timeout: float = SQUEUE_TIMEOUT,
    ) -> None:
        self.root = root
        self._cache: dict[tuple[int, int], dict[str, Any] | None] = {}
        self._notes: list[str] = []
        self._lock = threading.Lock()
        self._clock = clock
        self._wall = wall
        self.slurm = SlurmNames(self._note, clock, squeue_timeout)
        self.containers = {
            runtime: ContainerNames(runtime, path, self._note)
            for runtime, path in (DOCKER_SOCKETS if sockets is None else sockets).items()
        }
        self._k8s_dirs = k8s_dirs
        self._k8s: tuple[dict[str, tuple[str, str]], dict[str, str]] = ({}, {})
        self._k8s_at: float | None = None
        self._own: dict[str, Any] | None = None
        self._own_read = False

    def _note(self, text: str) -> None:
        with self._lock:
            if text not in self._notes:
                self._notes.append(text)

    def notes(self) -> list[str]:
        with self._lock:
            return list(self._notes)

    def resolve(self, pid: int, start_ticks: int) -> dict[str, Any] | None:
        """The parsed workload of one process (no names), read once per process lifetime."""
        key = (pid, start_ticks)
        if key in self._cache:
            return self._cache[key]
        try:
            with open(f"{self.root}/{pid}/cgroup", "rb") as f:
                text = f.read(MAX_CGROUP_BYTES).decode("utf-8", "replace")
        except OSError:
            return None  # gone, or hidden by hidepid: try again next time
        found = parse_cgroup(text)
        self._cache[key] = found
        return found

    def own(self) -> dict[str, Any] | None:
        """The container or pod gputop itself runs in (read once), else None."""
        if not self._own_read:
            self._own_read = True
            try:
                with open(f"{self.root}/self/cgroup", "rb") as f:
                    self._own = parse_cgroup(f.read(MAX_CGROUP_BYTES).decode("utf-8", "replace"))
            except OSError:
                self._own = None
        return dict(self._own) if self._own else None

    def forget_except(self, keys: Iterable[tuple[int, int]]) -> None:
        """Drop processes no longer asked about, so the cache does not grow forever."""
        keep = set(keys)
        for key in [k for k in self._cache if k not in keep]:
            del self._cache[key]

    def name_all(self, workloads: Iterable[dict[str, Any]]) -> None:
        """Add the names known now to each workload dict (in place)."""
        items = list(workloads)
        jobs = {w["id"] for w in items if w["kind"] == "slurm"}
        facts = self.slurm.lookup(jobs) if jobs else {}
        by_runtime: dict[str, set[str]] = {}
        for w in items:
            if w["kind"] in self.containers:
                by_runtime.setdefault(w["kind"], set()).add(w["id"])
        names = {
            runtime: self.containers[runtime].lookup(ids) for runtime, ids in by_runtime.items()
        }
        if any(w["kind"] == "k8s" for w in items):
            self._rescan_k8s(items)
        pods, container_names = self._k8s
        now = self._wall()
        for w in items:
            kind = w["kind"]
            if kind == "slurm":
                job = facts.get(w["id"])
                if job:
                    w.update(job)
                    end = job.get("end_time")
                    w["time_left"] = max(end - now, 0.0) if end else None
            elif kind == "k8s":
                found = pods.get(w["id"])
                if found:
                    w["namespace"], w["pod"] = found
                cid = w.get("container_id")
                if cid:
                    w["container"] = container_names.get(cid)
            elif kind in names:
                w["name"] = names[kind].get(w["id"])

    def _rescan_k8s(self, items: list[dict[str, Any]]) -> None:
        now = self._clock()
        unknown = any(w["kind"] == "k8s" and w["id"] not in self._k8s[0] for w in items)
        if self._k8s_at is None or (unknown and now - self._k8s_at >= K8S_RESCAN_EVERY):
            self._k8s_at = now
            self._k8s = scan_k8s_logs(*self._k8s_dirs)

    def wait(self, timeout: float | None = None) -> None:
        """Let pending background lookups finish (tests and one-shot commands), for at
        most ``timeout`` seconds in all when given."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> dict[str, float]:
            return {} if deadline is None else {
                "timeout": max(deadline - time.monotonic(), 0.0)}

        self.slurm.wait(**left())
        for names in self.containers.values():
            names.wait(**left())

