"""A scenario-driven simulated NVML, for ``--demo`` and for tests.

``SimNvml`` behaves like the ``pynvml`` module (nvidia-ml-py): the same function names,
argument orders, return shapes (objects with the same attribute names as pynvml's
structs), ``NVMLError`` subclasses chosen by ``NVMLError.__new__`` and ``NVML_*`` constants
with the same values.  The collector is handed either ``pynvml`` or a ``SimNvml`` and
cannot tell them apart.  ``SimProcs`` is the matching fake of ``procfs.ProcFs`` for the
simulated processes, plus ``signal()`` which acts only on the simulation.

Values are pure functions of (seed, clock time): a frozen clock gives frozen values, so
tests and screenshots are reproducible, and a running clock makes them move like real
ones (utilization wanders in a band, temperature lags it, power and fans follow).

One job per module:

- ``api``: pynvml's names that are not functions: ``NVML_*`` constants, ``NVMLError`` and
  its subclasses, the structs calls return, device handles, event sets;
- ``scenario``: scenario files read, checked and completed (``load_scenario``); its
  docstring describes the file format;
- ``dynamics``: the deterministic noise every changing value is made of;
- ``library``: ``SimNvml``, pynvml's functions answered from a scenario and the clock;
- ``procs``: ``SimProcs``, the fake /proc of the simulated processes.

Everything public is re-exported here, so callers write ``sim.SimNvml``,
``sim.load_scenario``, ``sim.NVMLError_GpuIsLost`` or ``sim.NVML_CLOCK_SM`` as they would
on the pynvml module.

Standard library only at module level: these modules are shipped to remote test hosts
(sources/bundle.py).  PyYAML is imported lazily, only to read scenario files.
"""

from __future__ import annotations

# All of pynvml's names, as the pynvml module has them (the NVMLError_* classes are made
# at import time, so they cannot be listed here).
from gputop.sources.sim.api import *  # noqa: F403
from gputop.sources.sim.dynamics import wander
from gputop.sources.sim.library import SimNvml
from gputop.sources.sim.procs import SimProcs
from gputop.sources.sim.scenario import (
    Scenario,
    ScenarioError,
    list_scenarios,
    load_scenario,
    normalize_field,
    parse_cpulist,
    parse_duration,
    scenario_dir,
    scenario_from_dict,
    squeezed,
    synthetic_scenario,
)

__all__ = [
    "Scenario",
    "ScenarioError",
    "SimNvml",
    "SimProcs",
    "list_scenarios",
    "load_scenario",
    "normalize_field",
    "parse_cpulist",
    "parse_duration",
    "scenario_dir",
    "scenario_from_dict",
    "squeezed",
    "synthetic_scenario",
    "wander",
]
