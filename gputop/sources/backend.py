"""The GPU-backend seam: what a source of GPUs must answer, and what the assembler adds.

A host snapshot is made in two steps (docs/architecture.md, "Where does X go"):

1. a **GPU backend** reads the host's GPUs and the processes the driver lists on them,
   now (``GpuBackend.read``): NVML (``sources/nvml.py``, also over the simulator's
   NVML-shaped library) or nvidia-smi's text (``sources/smi.py``);
2. the **host assembler** (``sources/assembler.py``) adds what no GPU backend knows:
   process facts from a ``ProcessReader`` (/proc, the simulation, or a ``ps`` listing),
   Slurm jobs and containers, reservations, the queue and the ``/dev/nvidia*`` holders.

``sources/hostsource.py`` is the one factory that pairs a backend with its process reader.
Backends import neither each other nor the assembler (an import-linter contract).

Stdlib-only: shipped to remote hosts inside the SSH probe.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

if TYPE_CHECKING:
    # Typed for mypy only: a TypedDict class costs ~0.3 ms to build, which every
    # one-shot would pay for a name used only in annotations; at run time it is a dict.
    class Reading(TypedDict, total=False):
        """A backend's part of a snapshot: HostSnapshot's fields (model.py) by name, as
        the assembler and --json carry them.  No "gpus" key: the host could not be read
        at all ("state" and "error" say why).  Which versions a backend fills:
        sources/backends.py."""

        state: str
        error: str | None
        driver_version: str | None
        cuda_version: str | None
        nvml_version: str | None
        gpus: list[dict[str, Any]]  # Gpu dicts
        # GpuProcess dicts with what the driver knows: pid, gpu, type, gpu_mem, sm_util, MIG
        # device; the assembler adds the process facts.
        processes: list[dict[str, Any]]
        topology: list[dict[str, Any]]  # Link dicts
        xid_watched: bool | None
        xid_events: list[dict[str, Any]]
        missing: list[str]  # what this backend can never read (HostSnapshot.missing)
else:
    Reading = dict


class NoDriverError(RuntimeError):
    """No GPU backend can start here; str() is one sentence for the user."""


class GpuBackend(Protocol):
    """Reads one host's GPUs and their processes (docs/architecture.md)."""

    @property
    def source(self) -> str:
        """The snapshot's ``source``: "nvml", "sim" or "smi"."""
        ...

    def read(self, now: float, cpu_count: int | None = None) -> Reading:
        """The GPUs and their processes now.  Never raises for one bad card or field: a
        card that cannot be read is a GPU with a state and an error, a field that cannot
        be read is None.  ``cpu_count``: the host's CPUs, for affinity masks."""
        ...


class Workloads(Protocol):
    """Slurm job, container and pod per process (``workload.WorkloadResolver``, or the
    simulation's ``SimWorkloads``); docs/workloads.md."""

    def resolve(self, pid: int, start_ticks: int) -> dict[str, Any] | None:
        """The process's workload ids (cached per process lifetime), None outside one."""
        ...

    def forget_except(self, keys: Iterable[tuple[int, int]]) -> None:
        """Drop the cache of every (pid, start ticks) not in ``keys``."""
        ...

    def name_all(self, workloads: Iterable[dict[str, Any]]) -> None:
        """Add the names known so far (squeue, the container engine) in place; lookups
        of new ids start in the background."""
        ...

    def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for background lookups."""
        ...

    def notes(self) -> list[str]:
        """Name sources that failed, once each."""
        ...

    def own(self) -> dict[str, Any] | None:
        """gputop's own workload (its container), if any."""
        ...


class ProcessReader(Protocol):
    """What the assembler and the actions know about processes: /proc (``ProcFs``), the
    simulation (``SimProcs``) or a ``ps`` listing (``smi.PsListing``)."""

    @property
    def workloads(self) -> Workloads | None:
        """Slurm job, container and pod per process; None where the reader cannot tell."""
        ...

    def host_info(self) -> dict[str, Any]:
        """Host-level HostSnapshot fields: CPU count and load, memory, boot time."""
        ...

    def process_info(self, pids: list[int]) -> dict[int, dict[str, Any]]:
        """GpuProcess fields per pid; a pid missing from the answer is not visible here
        (another PID namespace, or gone)."""
        ...

    def process(self, pid: int) -> dict[str, Any] | None:
        """One process in detail (the detail view), None when it is gone."""
        ...

    def parent_chain(self, pid: int) -> list[dict[str, Any]]:
        """The process's ancestors, nearest first."""
        ...

    def device_holders(self) -> tuple[list[dict[str, Any]], str | None]:
        """Processes holding ``/dev/nvidia*`` open, and a note when the scan was partial."""
        ...
