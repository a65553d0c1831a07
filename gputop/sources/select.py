"""From command-line arguments to snapshot sources.

``make_feeds`` gives the dashboard its long-lived feeds; ``collect_once`` gives the one-shot
commands (--once, --json, check, topo, pick, reserve...) one round of snapshots.

Both raise ``NoDriverError`` (local NVML cannot start: the caller prints ``str(err)`` and
exits cli.EXIT_NO_DRIVER) or ``SourceError`` (a bad scenario or hosts file: one line naming
the file, the caller exits cli.EXIT_USAGE).  Nothing here prints.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any

from gputop.model import HostSnapshot
from gputop.sources.nvml import Collector, NoDriverError, open_local

if TYPE_CHECKING:
    # The feeds pull in asyncio (~20 ms): the one-shot commands never need them.
    from gputop.sources.feed import Feed

__all__ = [
    "NoDriverError",
    "SourceError",
    "collect_once",
    "demo_reservations_dir",
    "make_feeds",
    "reservations_dir",
]

# In --demo collect_once reads the simulation twice, this far apart in simulated time, so
# that rates and per-process SM % have a window to be computed over.
DEMO_WARMUP_S = 0.2

DEFAULT_RESERVATIONS_DIR = "/var/tmp/gputop-reservations"


class SourceError(Exception):
    """A bad source argument (scenario file, hosts file); str() is one line for the user."""


def demo_reservations_dir(scenario: str) -> str:
    """Where --demo keeps reservations: per user and scenario, never the real store."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in os.path.basename(scenario))
    return os.path.join(tempfile.gettempdir(), f"gputop-demo-{os.getuid()}", safe, "reservations")


def reservations_dir(args: argparse.Namespace, config: dict | None = None) -> str:
    """The reservation store the local or demo source uses."""
    if getattr(args, "demo", None):
        return demo_reservations_dir(args.demo)
    configured = (config or {}).get("reservations_dir")
    return str(configured) if configured else DEFAULT_RESERVATIONS_DIR


def _wants_ssh(args: argparse.Namespace) -> bool:
    if getattr(args, "hosts", None) or getattr(args, "host_list", None):
        return True
    # $GPUTOP_HOSTS or ~/.config/gputop/hosts.yaml: plain `gputop` on a login node shows them.
    from gputop.hosts import find_hosts_file

    return find_hosts_file(None)[0] is not None


def _wants_local(args: argparse.Namespace) -> bool:
    return not _wants_ssh(args) or bool(getattr(args, "local", False))


# -- demo --------------------------------------------------------------------------------------


class _DemoParts:
    def __init__(self, name: str, clock: Any, reservations: str | None) -> None:
        # The simulator pulls in pyyaml for scenario files: imported only when asked for.
        from gputop.sources import sim

        try:
            scenario = sim.load_scenario(name)
        except sim.ScenarioError as err:
            raise SourceError(str(err)) from None
        self.scenario = scenario
        self.host = str(scenario.host.get("hostname") or name)
        self.nvml = sim.SimNvml(scenario, clock=clock)
        self.procs = sim.SimProcs(self.nvml)
        self.collector = Collector(
            self.nvml,
            self.procs,
            host=self.host,
            demo=True,
            reservations_dir=reservations,
            clock=clock,
        )


class _FrozenClock:
    """Simulated time that moves only when told to: collect_once needs no real sleep."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def _demo_once(args: argparse.Namespace, config: dict | None) -> HostSnapshot:
    clock = _FrozenClock(time.time())
    parts = _DemoParts(args.demo, clock, reservations_dir(args, config))
    parts.collector.collect()
    clock.now += DEMO_WARMUP_S
    return HostSnapshot.from_dict(parts.collector.collect())


def _action_env(args: argparse.Namespace, config: dict | None, **extra: Any) -> Any:
    from gputop.actions.dispatch import ActionEnv

    return ActionEnv(
        reservations_dir=reservations_dir(args, config),
        readonly=bool(getattr(args, "readonly", False)),
        **extra,
    )


# -- local -------------------------------------------------------------------------------------


def _local_once(args: argparse.Namespace, config: dict | None) -> HostSnapshot:
    collector = open_local(reservations_dir=reservations_dir(args, config))
    # One read: the driver hands its buffered per-process samples to a first call, so SM %
    # has values; host and process CPU % stay null rather than making every script wait.
    return HostSnapshot.from_dict(collector.collect())


# -- SSH hosts ---------------------------------------------------------------------------------
# >>> SSH engineer: wire gputop.sources.ssh here (hosts-file parsing, collect_once_hosts,
# SshFeed).  Called only when --hosts or -H is given; keep the imports lazy so local use never
# loads asyncssh.


def _ssh_specs(args: argparse.Namespace) -> list[Any]:
    from gputop.hosts import HostsFileError, specs_from_args

    try:
        return specs_from_args(args) or []
    except HostsFileError as err:
        raise SourceError(f"gputop: {err}") from None


def _ssh_once(args: argparse.Namespace, config: dict | None) -> list[HostSnapshot]:
    from gputop.sources.ssh import collect_once_hosts

    specs = _ssh_specs(args)
    return collect_once_hosts(specs, timeout=float(getattr(args, "timeout", None) or 10.0))


def _ssh_feeds(args: argparse.Namespace, config: dict | None) -> list[Feed]:
    from gputop.sources.ssh import SshFeed

    return [SshFeed(_ssh_specs(args), readonly=bool(getattr(args, "readonly", False)))]


# <<< SSH engineer


# -- public ------------------------------------------------------------------------------------


def collect_once(args: argparse.Namespace, config: dict | None = None) -> list[HostSnapshot]:
    """One round of snapshots for the one-shot commands."""
    if getattr(args, "demo", None):
        return [_demo_once(args, config)]
    snapshots: list[HostSnapshot] = []
    if _wants_local(args):
        snapshots.append(_local_once(args, config))
    if _wants_ssh(args):
        snapshots.extend(_ssh_once(args, config))
    return snapshots


def make_feeds(args: argparse.Namespace, config: dict | None = None) -> list[Feed]:
    """The dashboard's feeds.  Local NVML is opened here, so NoDriverError comes early."""
    from gputop.sources.feed import LocalFeed

    if getattr(args, "demo", None):
        parts = _DemoParts(args.demo, time.time, reservations_dir(args, config))
        env = _action_env(args, config, sim=parts.nvml, procs=parts.procs)
        return [LocalFeed(parts.collector, host=parts.host, dispatch_env=env)]
    feeds: list[Feed] = []
    if _wants_local(args):
        collector = open_local(reservations_dir=reservations_dir(args, config))
        env = _action_env(args, config, procs=collector.procs)
        feeds.append(LocalFeed(collector, host="localhost", dispatch_env=env))
    if _wants_ssh(args):
        feeds.extend(_ssh_feeds(args, config))
    return feeds
