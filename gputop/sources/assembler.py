"""The host assembler: any GPU backend's reading plus what only the host knows.

``HostAssembler(backend, procs, ...).collect()`` returns one HostSnapshot dict: the
backend's GPUs and processes (``sources/backend.py``), each process with its user,
command line and parent from the ``ProcessReader``, its Slurm job or container, and the
host's reservations, queue and ``/dev/nvidia*`` holders.  Every source of GPUs goes
through here, so a rule about processes or the store is written once.

Stdlib-only: shipped to remote hosts inside the SSH probe.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from gputop.sources.backend import GpuBackend, ProcessReader

# The /dev/nvidia* scan walks every fd of every process (95-220 ms at 1,000-8,000
# processes): it runs only while NVML shows memory the listed processes do not account
# for, and at most once in this many seconds.
DEVSCAN_EVERY_S = 60.0
# Used memory beyond the listed processes' that opens the gate.  Below the orphan rules'
# floor (analysis/orphans.py: the larger of 512 MiB and 1 % of the card), so the scan runs
# whenever they could report something; not imported from there, because the probe never
# loads the model's dataclasses.
DEVSCAN_UNACCOUNTED = 256 * 1024 * 1024

# What a ProcessReader's answer adds to a process row.
_PROCESS_KEYS = (
    "user",
    "uid",
    "command",
    "cmdline",
    "ppid",
    "state",
    "start_time",
    "start_ticks",
    "cpu_percent",
    "rss",
    "parent_command",
    "parent_user",
    "kernel_file",
    "kernel_file_exists",
)


class HostAssembler:
    """One host's snapshots: ``collect()`` returns a HostSnapshot dict (gputop/model.py).

    ``simulated``: the processes are the simulation's (--demo), so actions on them touch
    only the simulation.  ``reservations_dir``: the store whose reservations and queue the
    snapshot carries (None: neither).  ``lean`` (a one-shot table): no ``/dev/nvidia*``
    scan.  ``name_wait_s``: how long a one-shot waits for job and container names.
    """

    def __init__(
        self,
        backend: GpuBackend,
        procs: ProcessReader,
        host: str = "localhost",
        simulated: bool = False,
        reservations_dir: str | None = None,
        clock: Callable[[], float] = time.time,
        lean: bool = False,
        name_wait_s: float = 0.0,
    ) -> None:
        self.backend = backend
        self.procs = procs
        self.host = host
        self.simulated = simulated
        self.reservations_dir = reservations_dir
        self.clock = clock
        self.lean = lean
        # A one-shot command waits this long for job and container names (squeue, the
        # Engine API); the dashboard never waits: names arrive with a later refresh.
        self.name_wait_s = name_wait_s
        self._scanned_at: float | None = None
        self._holders: tuple[list[dict[str, Any]], str | None] = ([], None)

    def collect(self) -> dict[str, Any]:
        now = self.clock()
        host_info = self.procs.host_info()
        reading = self.backend.read(now, host_info.get("cpu_count"))
        snap: dict[str, Any] = {
            "host": self.host,
            "time": now,
            "state": "ok",
            "error": None,
            "source": self.backend.source,
            "demo": self.simulated,
            **reading,
            **host_info,
        }
        if "gpus" not in reading:
            return snap  # the host could not be read: its state and error say why
        snap["processes"] = self._add_process_facts(reading.get("processes", []))
        self._add_workloads(snap, snap["processes"])
        if not self.lean:
            snap["device_holders"], snap["device_scan_note"] = self._device_holders(
                snap["gpus"], snap["processes"], now)
        snap["reservations"] = self._reservations(now, snap["gpus"])
        snap["queue"] = self._queue()
        return snap

    # -- processes ---------------------------------------------------------------------------

    def _add_process_facts(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        pids = sorted({row["pid"] for row in rows})
        facts = self.procs.process_info(pids) if pids else {}
        for row in rows:
            info = facts.get(row["pid"])
            if info is None:
                # Listed by the driver but not in our PID namespace (container) or just
                # exited.
                row["visible"] = False
            else:
                row["visible"] = True
                for key in _PROCESS_KEYS:
                    if key in info:
                        row[key] = info[key]
            row["simulated"] = self.simulated
        rows.sort(key=lambda r: (r["gpu"], r["pid"]))
        return rows

    def _add_workloads(self, snap: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        """Each process's Slurm job, container or pod, and the host's notes."""
        workloads = self.procs.workloads
        if workloads is None:
            return
        keys = []
        found = []
        for row in rows:
            ticks = row.get("start_ticks")
            if not row.get("visible") or ticks is None:
                continue
            keys.append((row["pid"], ticks))
            parsed = workloads.resolve(row["pid"], ticks)
            if parsed is not None:
                # A copy per row: names are added in place and the cache keeps ids only.
                row["workload"] = dict(parsed)
                found.append(row["workload"])
        workloads.forget_except(keys)
        workloads.name_all(found)
        if found and self.name_wait_s > 0:
            workloads.wait(self.name_wait_s)
            workloads.name_all(found)
        snap["workload_notes"] = workloads.notes()
        snap["own_workload"] = workloads.own()

    def _device_holders(
        self, gpus: list[dict[str, Any]], processes: list[dict[str, Any]], now: float
    ) -> tuple[list[dict[str, Any]], str | None]:
        if not memory_unaccounted(gpus, processes):
            # Nothing to explain: last scan's holders would only be stale.
            self._holders = ([], None)
            self._scanned_at = None
        elif self._scanned_at is None or not 0 <= now - self._scanned_at < DEVSCAN_EVERY_S:
            self._scanned_at = now
            self._holders = self.procs.device_holders()
        return self._holders

    # -- the store -----------------------------------------------------------------------------

    def _reservations(self, now: float, gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self.reservations_dir:
            return []
        from gputop.actions import reservations  # stdlib-only; shipped in the probe bundle

        # Only this host's cards' claims are read: junk under other names costs nothing.
        uuids = {g["index"]: g.get("uuid") for g in gpus}
        migs: dict[str, tuple[int, int]] | None = {
            m["uuid"]: (g["index"], m.get("index")) for g in gpus
            for m in g.get("mig_devices") or () if m.get("uuid")}
        if any(g.get("mig_note") for g in gpus):
            migs = None  # some MIG devices unlisted: their claims are read under any name
        try:
            return reservations.list_active(self.reservations_dir, now, uuids, migs)
        except (OSError, ValueError):
            # A broken reservation store must not cost the user the GPU view.
            return []

    def _queue(self) -> list[dict[str, Any]]:
        if not self.reservations_dir or not _has_job_files(self.reservations_dir):
            return []
        from gputop.actions import queue  # stdlib-only; shipped in the probe bundle

        try:
            return list(queue.list_jobs(self.reservations_dir)["jobs"])
        except (OSError, ValueError):
            return []


def _has_job_files(directory: str) -> bool:
    """Whether the store holds a `gputop run` job file: most hosts have none, and then a
    one-shot need not load the queue code (an unreadable store: let the queue say so)."""
    from gputop.actions.store import JOB_PREFIX

    try:
        return any(name.startswith(JOB_PREFIX) for name in os.listdir(directory))
    except FileNotFoundError:
        return False
    except OSError:
        return True


def memory_unaccounted(gpus: list[dict[str, Any]], processes: list[dict[str, Any]]) -> bool:
    """Whether a GPU counts more memory as used than its listed processes hold (beyond the
    driver's own share): only then can a /dev/nvidia* scan explain something."""
    listed: dict[Any, int] = {}
    for row in processes:
        mem = row.get("gpu_mem")
        if mem is None:
            return True  # a process of unknown size: the difference cannot be ruled out
        listed[row["gpu"]] = listed.get(row["gpu"], 0) + mem
    for gpu in gpus:
        used = gpu.get("mem_used")
        if used is not None and used - listed.get(gpu["index"], 0) > DEVSCAN_UNACCOUNTED:
            return True
    return False
