"""The one factory of host sources: a GPU backend paired with its process reader.

The opener (this machine, --demo), the remote probe (its host, or a scenario it serves),
the screenshots and the tests all build their collectors here, so a backend is wired in
one place:

- ``open_local``: NVML on this machine over /proc (``open_nvml_host``: the same, as the
  backend registry, sources/backends.py, opens it for the opener and the probe);
- ``assemble``: any ``GpuBackend`` over /proc, what a registered backend's opener returns;
- ``open_simulation``: the simulator's NVML-shaped library over its simulated processes;
- ``nvml_collector``: any NVML-shaped library over any process reader (tests, benches);
(``sources/fallback.py``: one poll of nvidia-smi and ps text from a host without python3.)

Adding a backend is one module (a ``GpuBackend``, sources/backend.py, whose opener
returns ``assemble(its backend, opening)``) and one line in sources/backends.py.

Stdlib-only: shipped to remote hosts inside the SSH probe (the sim is imported lazily).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gputop.records import MutableRecord, record
from gputop.sources.assembler import HostAssembler
from gputop.sources.backend import NoDriverError, ProcessReader

if TYPE_CHECKING:
    from gputop.actions.dispatch import ActionEnv
    from gputop.sources.backend import GpuBackend
    from gputop.sources.backends import Opening
    from gputop.sources.sim import Scenario, SimNvml

__all__ = [
    "HostSource",
    "NoDriverError",
    "action_env",
    "assemble",
    "nvml_collector",
    "open_local",
    "open_nvml_host",
    "open_simulation",
]


@record(frozen=False, slots=True)
class HostSource(MutableRecord):
    """One host's collector, and what the actions on that host act through."""

    collector: HostAssembler
    procs: ProcessReader
    # The simulation a kill changes (--demo, a probe serving a scenario); None: real
    # processes, signalled for real.
    sim: SimNvml | None = None

    def action_env(self, reservations_dir: str, readonly: bool) -> ActionEnv:
        return action_env(self.procs, reservations_dir, readonly, sim=self.sim)


def action_env(
    procs: ProcessReader, reservations_dir: str, readonly: bool, sim: SimNvml | None = None
) -> ActionEnv:
    """What actions on a host may touch: its processes (or simulation) and its store."""
    from gputop.actions.dispatch import ActionEnv

    return ActionEnv(sim=sim, procs=procs, reservations_dir=reservations_dir,
                     readonly=readonly)


def open_local(
    host: str = "localhost", reservations_dir: str | None = None, lean: bool = False,
    name_wait_s: float = 0.0, topology: bool = True, dashboard: bool = False,
) -> HostSource:
    """This machine: NVML over /proc.  NoDriverError when there is no GPU to read.
    ``lean``, ``topology``, ``dashboard``: as NvmlBackend's."""
    from gputop.sources.backends import Opening

    return open_nvml_host(Opening(host=host, reservations_dir=reservations_dir, lean=lean,
                                  name_wait_s=name_wait_s, topology=topology,
                                  dashboard=dashboard))


def open_nvml_host(opening: Opening) -> HostSource:
    """The NVML backend's opener (sources/backends.py): this machine's pynvml over /proc.
    NoDriverError without pynvml or a driver, or (not ``opening.remote``) with zero GPUs."""
    from gputop.sources import nvml

    if not opening.remote:
        return assemble(nvml.open_nvml(lean=opening.lean, topology=opening.topology,
                                       dashboard=opening.dashboard), opening)
    try:
        import pynvml
    except ImportError:
        raise NoDriverError("no pynvml on this host and none shipped") from None
    # The host's own pynvml, of any version: not FastPynvml, which knows ours; a host
    # whose driver sees no GPU still reports (zero GPUs).
    return assemble(nvml.NvmlBackend(pynvml, lean=opening.lean, topology=opening.topology),
                    opening)


def assemble(backend: GpuBackend, opening: Opening) -> HostSource:
    """``backend`` over this machine's /proc, with the opening's store and options."""
    from gputop.sources.procfs import ProcFs

    procs = ProcFs()
    return HostSource(HostAssembler(backend, procs, host=opening.host,
                                    reservations_dir=opening.reservations_dir,
                                    lean=opening.lean, name_wait_s=opening.name_wait_s),
                      procs)


def open_simulation(
    scenario: Scenario | str, host: str | None = None, reservations_dir: str | None = None,
    clock: Callable[[], float] = time.time, lean: bool = False, topology: bool = True,
) -> HostSource:
    """A simulated host (a scenario, or its name or file): the NVML backend reads the
    simulator's library; actions change only the simulation.  Raises sim.ScenarioError."""
    from gputop.sources import sim

    if isinstance(scenario, str):
        scenario = sim.load_scenario(scenario)
    nvml = sim.SimNvml(scenario, clock=clock)
    procs = sim.SimProcs(nvml)
    name = host or str(scenario.host.get("hostname") or scenario.name)
    return HostSource(nvml_collector(nvml, procs, host=name, demo=True,
                                     reservations_dir=reservations_dir, clock=clock,
                                     lean=lean, topology=topology), procs, sim=nvml)


def nvml_collector(
    nvml: Any,
    procs: ProcessReader,
    host: str = "localhost",
    demo: bool = False,
    reservations_dir: str | None = None,
    clock: Callable[[], float] = time.time,
    lean: bool = False,
    name_wait_s: float = 0.0,
    topology: bool = True,
) -> HostAssembler:
    """The NVML backend over ``nvml`` (pynvml or an NVML-shaped library; ``demo``: the
    simulator's) with ``procs``.  Raises NoDriverError when nvmlInit fails."""
    from gputop.sources.nvml import NvmlBackend

    return HostAssembler(NvmlBackend(nvml, simulated=demo, lean=lean, topology=topology),
                         procs, host=host,
                         simulated=demo, reservations_dir=reservations_dir, clock=clock,
                         lean=lean, name_wait_s=name_wait_s)
