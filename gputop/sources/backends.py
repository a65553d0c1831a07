"""The GPU backends, one ``BackendSpec`` each: the one list the opener and the probe read.

A backend is a module with a ``GpuBackend`` (sources/backend.py) and one line in
``BACKENDS``: its name (the snapshot's ``source``), its vendor's names (gputop/vendors.py:
visible-devices variable, device nodes, UUID prefixes), what its readings can hold
(``reads``, from ``READS``), the version facts it reports, and, for a backend that reads
this machine's own GPUs, ``opener``: "module:function" of its ``Opener``, which detects
and opens (raising ``NoDriverError`` when it finds nothing here; its str() is the
sentence the user sees).  Named, not imported: a backend's module (and its library) is
loaded only when it is tried.  The opener (this machine)
and the probe (a remote host) try the backends with ``open_local`` in this order and take
the first that opens; with none, the first one's sentence is the answer.

tests/test_backend_conformance.py runs one suite over every backend listed here.

Stdlib-only: shipped to remote hosts inside the SSH probe.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from gputop.records import Record, record
from gputop.sources.backend import NoDriverError
from gputop.vendors import NVIDIA, Vocabulary

if TYPE_CHECKING:
    from gputop.sources.hostsource import HostSource

# What a backend's readings may hold beyond the cards' basic facts (each name: the
# reading's part that only a backend declaring it fills; the conformance suite checks).
READS = (
    "processes",  # the processes the driver lists on each card
    "process_sm_util",  # per-process SM %
    "mig",  # MIG devices ("mig_devices" of a card)
    "topology",  # the GPU-GPU link matrix
    "xid_events",  # the driver's XID events
)
# The version facts a reading may carry (HostSnapshot fields, docs/json-schema.md).
VERSIONS = ("driver_version", "cuda_version", "nvml_version")


@record(frozen=True, slots=True)
class Opening(Record):
    """What the opener asks of a backend for this machine (as NvmlBackend's options)."""

    host: str = "localhost"
    reservations_dir: str | None = None
    lean: bool = False
    name_wait_s: float = 0.0
    topology: bool = True
    dashboard: bool = False
    # Inside the probe on a remote host: its pynvml may be any version, or the copy the
    # bundle shipped; a driver that sees no GPU still reports (zero GPUs, not an error).
    remote: bool = False


@record(frozen=True, slots=True)
class BackendSpec(Record):
    """One GPU backend, as the opener, the probe and the conformance suite see it."""

    name: str  # the snapshot's "source"
    vocabulary: Vocabulary
    reads: frozenset[str]  # of READS
    versions: tuple[str, ...]  # of VERSIONS: the ones its readings carry
    # "module:function" of the Opener of this machine's GPUs.  None: not a backend of a
    # host's own GPUs (the simulator runs for --demo, nvidia-smi's text comes over SSH
    # from hosts without python3).
    opener: str | None = None

    def open_local(self, opening: Opening) -> HostSource:
        """This machine's GPUs through this backend; NoDriverError when it finds none."""
        if self.opener is None:
            raise NoDriverError(f"the {self.name} backend does not read this machine")
        module, _, function = self.opener.partition(":")
        opener: Opener = getattr(importlib.import_module(module), function)
        return opener(opening)


# Detects and opens this machine's GPUs, or raises NoDriverError.
Opener = Callable[[Opening], "HostSource"]

_NVML_READS = frozenset({"processes", "process_sm_util", "mig", "topology", "xid_events"})

BACKENDS: tuple[BackendSpec, ...] = (
    BackendSpec("nvml", NVIDIA, _NVML_READS, VERSIONS,
                opener="gputop.sources.hostsource:open_nvml_host"),
    # The NVML backend over the simulator's NVML-shaped library (sources/sim/).
    BackendSpec("sim", NVIDIA, _NVML_READS, VERSIONS),
    BackendSpec("smi", NVIDIA, frozenset({"processes", "mig", "topology"}),
                ("driver_version", "cuda_version")),
)


def spec(name: str) -> BackendSpec:
    """The backend whose readings say ``source: name``; KeyError for none."""
    for found in BACKENDS:
        if found.name == name:
            return found
    raise KeyError(name)


def open_local(opening: Opening) -> HostSource:
    """This machine's GPUs, read by the first backend that finds them; NoDriverError
    (the first backend's) when none does."""
    first: NoDriverError | None = None
    for backend in BACKENDS:
        if backend.opener is None:
            continue
        try:
            return backend.open_local(opening)
        except NoDriverError as err:
            first = first or err
    raise first or NoDriverError("no GPU backend reads this machine's GPUs")
