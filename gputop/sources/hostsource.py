"""The one factory of host sources: a GPU backend paired with its process reader.

The opener (this machine, --demo), the remote probe (its host, or a scenario it serves),
the screenshots and the tests all build their collectors here, so a backend is wired in
one place:

- ``open_local``: NVML on this machine over /proc;
- ``open_simulation``: the simulator's NVML-shaped library over its simulated processes;
- ``nvml_collector``: any NVML-shaped library over any process reader (tests, benches);
- ``fallback_snapshot``: one poll of nvidia-smi and ps text from a host without python3.

Adding a backend is one module (a ``GpuBackend``, sources/backend.py) and one function
here that pairs it with its process reader.

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
    from gputop.sources.sim import Scenario, SimNvml

__all__ = [
    "HostSource",
    "NoDriverError",
    "action_env",
    "fallback_snapshot",
    "nvml_collector",
    "open_local",
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
    from gputop.sources.nvml import open_nvml
    from gputop.sources.procfs import ProcFs

    backend = open_nvml(lean=lean, topology=topology, dashboard=dashboard)
    procs = ProcFs()
    return HostSource(HostAssembler(backend, procs, host=host,
                                    reservations_dir=reservations_dir, lean=lean,
                                    name_wait_s=name_wait_s), procs)


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


def fallback_snapshot(
    host: str, output: str, now: float, reason: str | None = None, xml: bool = False,
    mode: Any = None, extras: Any = None,
) -> dict[str, Any]:
    """One poll of a host without python3 (the output of ``mode``'s commands, an
    ``smi.Mode``; ``xml`` is short for ``Mode(xml=True)``) with the host's last
    ``smi.Extras`` (-L, topo -m, nvlink -s) -> a HostSnapshot dict."""
    from gputop.sources import smi

    mode = mode or smi.Mode(xml=xml)
    backend, listing = smi.read_fallback(output, now, reason or smi.NO_PYTHON, mode, extras)
    return HostAssembler(backend, listing, host=host, clock=lambda: now, lean=True).collect()
