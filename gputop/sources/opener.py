"""From the command line's ``SourceOptions`` to feeds: the one place that decides.

``open_feeds`` gives the dashboard and every command their feeds (the simulator in
--demo; this machine; SSH hosts from -H, --hosts, $GPUTOP_HOSTS or the default hosts
file).  ``collect_once`` is one round of snapshots for the one-shot commands; acting
commands keep the feeds open in a ``gputop.sources.oneshot.Session``.

Both raise ``NoDriverError`` (local NVML cannot start: the caller prints ``str(err)``
and exits EXIT_NO_DRIVER) or ``SourceError`` (a bad scenario or hosts file: one line
naming the file, exit EXIT_USAGE).  Nothing here prints.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gputop.config import Config, analysis_settings
from gputop.model import SOURCE_SIMULATED_PAST, HostSnapshot, error_snapshot
from gputop.options import SourceOptions, find_hosts_file
from gputop.records import Record, record, replace
from gputop.sources.backend import NoDriverError
from gputop.sources.identity import Identity, local_identity, named_identity

if TYPE_CHECKING:
    from gputop.actions.dispatch import ActionEnv
    from gputop.hosts import HostSpec
    from gputop.sources.assembler import HostAssembler
    from gputop.sources.feed import Collects, Feed, LocalFeed
    from gputop.sources.hostsource import HostSource
    from gputop.sources.sim.scenario import Scenario

__all__ = [
    "NoDriverError",
    "Round",
    "SourceError",
    "SourcePlan",
    "collect_once",
    "demo_reservations_dir",
    "narrow_to_one",
    "open_feeds",
    "plan_sources",
    "reservations_dir",
    "reservations_dir_from",
]

# In a one-shot --demo the simulation is read twice, this far apart in simulated time, so
# that rates and per-process SM % have a window to be computed over.
DEMO_WARMUP_S = 0.2
# A one-shot command waits at most this long for Slurm job and container names.
ONE_SHOT_NAME_WAIT_S = 2.0


class SourceError(Exception):
    """A bad source argument (scenario file, hosts file); str() is one line for the user."""


@record(frozen=True, slots=True)
class SourcePlan(Record):
    """Which sources the options name; every command and the dashboard follow it."""

    demo: str | None
    local: bool
    ssh_hosts: tuple[HostSpec, ...]
    prometheus: str | None = None  # --prometheus URL
    demo_host: str | None = None  # --demo cluster --host H: only that machine


def plan_sources(options: SourceOptions) -> SourcePlan:
    """-H wins over a hosts file; a hosts file (--hosts, $GPUTOP_HOSTS, the default one)
    means SSH, plus this machine with --local.  Raises SourceError for a bad hosts file."""
    if options.demo:
        return SourcePlan(demo=options.demo, local=False, ssh_hosts=())
    if options.prometheus and options.hosts_file is None and options.host_list is None:
        # --prometheus alone: no default hosts file, no local NVML (nor hosts.py to load)
        return SourcePlan(demo=None, local=options.local, ssh_hosts=(),
                          prometheus=options.prometheus)
    path = None
    if options.host_list is None:
        path, _where = find_hosts_file(options.hosts_file)
        if path is None:  # this machine alone: the hosts file's reader stays unloaded
            return SourcePlan(demo=None, local=True, ssh_hosts=(), prometheus=None)
    from gputop.hosts import HostsFileError, load, parse_host_list

    try:
        specs = (parse_host_list(options.host_list) if options.host_list is not None
                 else load(path) if path is not None else [])
    except HostsFileError as err:
        raise SourceError(f"gputop: {err}") from None
    local = (not specs and not options.prometheus) or options.local
    return SourcePlan(demo=None, local=local, ssh_hosts=tuple(specs),
                      prometheus=options.prometheus)


LOCAL_HOST = "localhost"  # this machine's name in views and --host


def narrow_to_one(plan: SourcePlan, host: str | None) -> SourcePlan:
    """The one host a command acts on: ``host`` (--host), else the only one, else this
    machine when it is among the sources.  Raises SourceError naming the choices."""
    if _is_cluster(plan.demo):
        from gputop.sources.simcluster import CLUSTER_HOSTS

        names = [h[1] for h in CLUSTER_HOSTS]
        if host in names:
            return replace(plan, demo_host=host)
        shown = ", ".join(names)
        if host is None:
            raise SourceError(f"several hosts ({shown}): choose one with --host")
        raise SourceError(f"no host {host!r} (hosts: {shown})")
    if plan.demo:
        return plan
    names = ([LOCAL_HOST] if plan.local else []) + [s.name for s in plan.ssh_hosts]
    if host is None:
        if plan.local:
            return SourcePlan(demo=None, local=True, ssh_hosts=())
        if len(plan.ssh_hosts) == 1:
            return plan
        raise SourceError(f"several hosts ({', '.join(names)}): choose one with --host")
    chosen = tuple(s for s in plan.ssh_hosts if s.name == host)
    if chosen:
        return SourcePlan(demo=None, local=False, ssh_hosts=chosen)
    if host == LOCAL_HOST and plan.local:
        return SourcePlan(demo=None, local=True, ssh_hosts=())
    raise SourceError(f"no host {host!r} (hosts: {', '.join(names) or 'none'})")


def _is_cluster(demo: str | None) -> bool:
    if not demo:
        return False  # the simulator is imported only for --demo, never for real GPUs
    from gputop.sources.simcluster import CLUSTER

    return demo == CLUSTER


def demo_reservations_dir(scenario: str) -> str:
    """Where --demo keeps reservations: per user and scenario, never the real store."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in os.path.basename(scenario))
    import tempfile  # the demo's store only: tempfile pulls in random and hashlib

    return os.path.join(tempfile.gettempdir(), f"gputop-demo-{os.getuid()}", safe, "reservations")


def reservations_dir(options: SourceOptions, config: Config) -> str:
    """The reservation store of the local or demo source."""
    return reservations_dir_from(options, config)[0]


def reservations_dir_from(options: SourceOptions, config: Config) -> tuple[str, str]:
    """(the store of the local or demo source, where that came from): store.py's rule.
    A simulation never takes the config's directory, which names a real store."""
    from gputop.actions.store import store_directory

    if options.demo:
        return store_directory(None, demo_reservations_dir(options.demo))
    res = config.reservations
    return store_directory(res.dir if res.dir_from else None, res.dir,
                           res.dir_from or "config")


def _cluster_feeds(options: SourceOptions, config: Config, one_shot: bool, lean: bool,
                   topology: bool, history: bool, only: str | None) -> list[Feed]:
    """--demo cluster: one simulated feed per machine, each with its own store, and the
    hosts that are down."""
    from gputop.sources.feed import LocalFeed
    from gputop.sources.simcluster import CLUSTER_DOWN, CLUSTER_HOSTS

    feeds: list[Feed] = []
    for scenario, hostname, seed, labels in CLUSTER_HOSTS:
        if only is None or only == hostname:
            feeds.append(_demo_feed(scenario, options, config, one_shot, lean,
                                    topology=topology, history=history,
                                    machine=(hostname, seed, labels)))
    for host, state, error, labels in CLUSTER_DOWN if only is None else ():
        down = _Down(host, state, error, labels)
        feeds.append(LocalFeed(down, host=host, identity=local_identity()))
    return feeds


class _Down:
    """A host of the demo cluster that is down: its state, as the SSH feed gives it."""

    def __init__(self, host: str, state: str, error: str, labels: tuple[str, ...]) -> None:
        self.host, self.state, self.error, self.labels = host, state, error, labels

    def collect(self) -> dict[str, Any]:
        return error_snapshot(self.host, time.time(), self.state, self.error, source="probe",
                              labels=self.labels).to_dict()


# -- the feeds ---------------------------------------------------------------------------------


def open_feeds(
    options: SourceOptions, config: Config, *, one_shot: bool = False,
    plan: SourcePlan | None = None, need_driver: bool = True, lean: bool = False,
    topology: bool = True, prometheus_view: str | None = None, history: bool = True,
    dashboard: bool = False,
) -> list[Feed]:
    """The feeds of the planned sources (``plan``: default ``plan_sources(options)``).
    Local NVML is opened here, so NoDriverError comes early, unless ``need_driver`` is
    False (commands that only touch the reservation store: this machine is then a "no
    GPU/driver" host whose store still answers).  ``one_shot``: a single round for a
    command (no SSH retries, a frozen simulated clock), not the dashboard's stream.
    ``lean``: local collectors skip topology and the device scan (never the XIDs), and
    read only what a one-shot table shows; ``topology`` False: they skip the topology and
    NVLink remote ends.  ``prometheus_view``: what a Prometheus feed asks for
    (sources/promql.py); by default the overview for the dashboard, the summary for lean
    one-shots, the full view otherwise.  ``history``: the demo seeds the past it would have
    had (the dashboard's charts and idle rules); a plain redraw (`--watch`) shows only the
    present.  ``dashboard``: this machine's NVML skips what the dashboard shows nowhere."""
    plan = plan or plan_sources(options)
    feeds: list[Feed] = []
    if _is_cluster(plan.demo):
        feeds.extend(_cluster_feeds(options, config, one_shot, lean, topology, history,
                                    plan.demo_host))
    elif plan.demo:
        feeds.append(_demo_feed(plan.demo, options, config, one_shot, lean,
                                topology=topology, history=history))
    elif plan.local:
        feeds.append(_local_feed(options, config, need_driver, lean,
                                 ONE_SHOT_NAME_WAIT_S if one_shot else 0.0, topology,
                                 dashboard))
    ssh_hosts = tuple(spec for spec in plan.ssh_hosts if spec.url is None)
    if ssh_hosts:
        from gputop.sources.ssh import SshFeed

        if one_shot:
            feeds.append(SshFeed(ssh_hosts, readonly=options.readonly, retry=False,
                                 warmup=DEMO_WARMUP_S))
        else:
            feeds.append(SshFeed(ssh_hosts, readonly=options.readonly))
    url_hosts = [spec for spec in plan.ssh_hosts if spec.url is not None]
    if url_hosts:  # `url:` entries: gputop serve's snapshot API
        from gputop.sources.serveapi import ServeFeed

        feeds.append(ServeFeed(url_hosts, options.timeout))
    if plan.prometheus:
        from gputop.sources import promql

        view = prometheus_view or (promql.OVERVIEW if not one_shot
                                   else promql.SUMMARY if lean else promql.FULL)
        feeds.append(_prometheus_feed(plan.prometheus, options, config, one_shot, view))
    return feeds


def _prometheus_feed(url: str, options: SourceOptions, config: Config, one_shot: bool,
                     view: str) -> Feed:
    from gputop.sources.prometheus import PrometheusFeed

    # The dashboard's sparklines start from Prometheus' history; a one-shot needs none.
    history_s = 0.0 if one_shot else config.history_minutes * 60.0
    try:
        return PrometheusFeed(url, config.prometheus, options.timeout, history_s=history_s,
                              view=view)
    except (ValueError, OSError) as err:  # a bad URL, an unreadable CA file
        raise SourceError(f"gputop: {err}") from None


def _action_env(options: SourceOptions, config: Config, source: HostSource) -> ActionEnv:
    return source.action_env(reservations_dir(options, config), options.readonly)


def _local_feed(
    options: SourceOptions, config: Config, need_driver: bool = True, lean: bool = False,
    name_wait_s: float = 0.0, topology: bool = True, dashboard: bool = False,
) -> LocalFeed:
    from gputop.sources import backends
    from gputop.sources.feed import LocalFeed
    from gputop.sources.hostsource import action_env

    store = reservations_dir(options, config)
    try:
        source = backends.open_local(backends.Opening(
            host=LOCAL_HOST, reservations_dir=store, lean=lean, name_wait_s=name_wait_s,
            topology=topology, dashboard=dashboard))
    except NoDriverError as err:
        if need_driver:
            raise
        from gputop.sources.procfs import ProcFs

        failure = err

        def no_driver() -> HostAssembler:  # each poll: a "no GPU/driver" snapshot
            raise failure

        # A lean one-shot only reads: no action env, and none of the action modules.
        env = None if lean else action_env(ProcFs(), store, options.readonly)
        return LocalFeed(no_driver, host=LOCAL_HOST, identity=local_identity(),
                         dispatch_env=env)
    env = None if lean else _action_env(options, config, source)
    return LocalFeed(source.collector, host=LOCAL_HOST, identity=local_identity(),
                     dispatch_env=env)


class _FrozenClock:
    """Simulated time that moves only when told to: a one-shot needs no real sleep."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class _Labelled:
    """A demo cluster machine's collector, with the labels a hosts file would give it."""

    def __init__(self, collector: Collects, labels: tuple[str, ...]) -> None:
        self.collector, self.labels = collector, labels

    def collect(self) -> dict[str, Any]:
        return {**self.collector.collect(), "labels": list(self.labels)}


class _WarmedUp:
    """A demo collector whose first read is two reads DEMO_WARMUP_S apart in simulated
    time, so that a one-shot has rates and SM % as the dashboard's second tick does."""

    def __init__(self, collector: Collects, clock: _FrozenClock) -> None:
        self.collector, self.clock, self.warm = collector, clock, False

    def collect(self) -> dict[str, Any]:
        if not self.warm:
            self.warm = True
            first = self.collector.collect()
            self.clock.now += DEMO_WARMUP_S
            # The XIDs the warm-up read took from the driver's queue are this read's too.
            data = self.collector.collect()
            data["xid_events"] = [*first.get("xid_events", ()), *data.get("xid_events", ())]
            return data
        return self.collector.collect()


# --demo seeds the history it would have had: one sample a minute over the idle rules'
# window (a kernel idle for days is flagged at once, not after 30 minutes), and over the
# charts' window one every DEMO_SEED_DENSE_S, finer than a chart cell at any width
# (the detail view: 600 s over 216 cells at 240 columns), so no chart has gaps.
DEMO_SEED_STEP_S = 60.0
DEMO_SEED_DENSE_S = 2.0


def _demo_seed(scenario: Callable[[], Scenario], host: str, seconds: float, now: float,
               dense_seconds: float = 0.0) -> Callable[[], list[dict]]:
    """The snapshots of the ``seconds`` before ``now``, the live simulation's start, and
    on to the present; over the last ``dense_seconds`` one every DEMO_SEED_DENSE_S,
    before that one a minute.  Each is marked SOURCE_SIMULATED_PAST.  Each call goes on
    from where the last one stopped, to the present as it is then, and returns nothing
    once caught up: the feed calls it again while emitting the past took time (seconds on
    a loaded machine), so the first live sample follows the last seeded one without a gap.

    The past is read from a simulation started at the same moment as the live one, its
    clock then turned back: its processes have the live ones' start times, so a recorder
    sees one process, not a seeded one and a live one (issue 28.8).  A process that had
    not started yet at a past moment is left out of that moment."""
    clock = _FrozenClock(now - seconds)
    dense_from = now - dense_seconds
    collectors: list[Collects] = []

    def seed() -> list[dict[str, Any]]:
        if not collectors:
            from gputop.sources.hostsource import open_simulation

            # Its own simulation: the simulator's values are pure functions of time, so
            # the past reads as the live one would have; actions never touch this one.
            clock.now = now
            collectors.append(open_simulation(scenario(), host=host, clock=clock).collector)
            clock.now = now - seconds
        collector = collectors[0]
        out = []
        while clock.now < max(now, time.time()) - DEMO_SEED_DENSE_S / 2:
            data = collector.collect()
            data["processes"] = [p for p in data.get("processes", ())
                                 if (p.get("start_time") or 0.0) <= clock.now]
            data["source"] = SOURCE_SIMULATED_PAST  # made up: never "observed"
            out.append(data)
            step = DEMO_SEED_DENSE_S if clock.now >= dense_from else DEMO_SEED_STEP_S
            clock.now = min(clock.now + step, max(clock.now + DEMO_SEED_DENSE_S, dense_from))
        return out

    return seed


def _demo_feed(
    name: str, options: SourceOptions, config: Config, one_shot: bool, lean: bool = False,
    topology: bool = True, history: bool = True,
    machine: tuple[str, int | None, tuple[str, ...]] | None = None,
) -> LocalFeed:
    """The simulated host of scenario ``name``; ``machine``: (host name, seed, labels) of
    one machine of --demo cluster, with a store of its own."""
    # The simulator pulls in pyyaml for scenario files: imported only when asked for.
    from gputop.sources import sim
    from gputop.sources.feed import LocalFeed
    from gputop.sources.hostsource import open_simulation
    from gputop.sources.simcluster import CLUSTER
    from gputop.sources.simcluster import machine as cluster_machine

    def load() -> Scenario:
        if machine is None:
            return sim.load_scenario(name, also=(CLUSTER,))
        return cluster_machine(name, machine[0], machine[1])

    try:
        scenario = load()
    except sim.ScenarioError as err:
        raise SourceError(str(err)) from None
    if one_shot:  # it ends before a scenario's timed XIDs and lost GPUs would come
        scenario = sim.squeezed(scenario, DEMO_WARMUP_S)
    clock: Callable[[], float] = _FrozenClock(time.time()) if one_shot else time.time
    host = str(scenario.host.get("hostname") or name)
    store = (reservations_dir(options, config) if machine is None
             else demo_reservations_dir(f"{CLUSTER}-{host}"))
    source = open_simulation(scenario, host=host, reservations_dir=store, clock=clock,
                             lean=lean, topology=topology)
    collector: Collects = source.collector
    if machine is not None and machine[2]:
        collector = _Labelled(collector, machine[2])
    if isinstance(clock, _FrozenClock):
        collector = _WarmedUp(collector, clock)
    env = None if lean else source.action_env(store, options.readonly)
    identity = replace(named_identity(scenario.me), reserves_as=local_identity().user)
    seed = None
    if history and not one_shot:
        # The whole window the idle rules look back over, less the sample live data adds.
        window = analysis_settings(config).history()
        seed = _demo_seed(load, host, window.process_seconds - DEMO_SEED_STEP_S,
                          source.sim.t0 if source.sim is not None else time.time(),
                          dense_seconds=min(window.seconds, 600.0))
    return LocalFeed(collector, host=host, identity=identity, dispatch_env=env, seed=seed)


# -- one round ---------------------------------------------------------------------------------


@record(frozen=True, slots=True)
class Round(Record):
    """One snapshot of every host, and who acts there (for the rules about "my" cards)."""

    snapshots: list[HostSnapshot]
    identities: dict[str, Identity]

    def me(self, host: str) -> str | None:
        """Who "my" reservations on ``host`` belong to, for the rules about them."""
        identity = self.identities.get(host)
        return identity.reservation_owner if identity is not None else None

    def user(self, host: str) -> str | None:
        """Whose processes on ``host`` are "mine" (--demo: the scenario's user)."""
        identity = self.identities.get(host)
        return identity.user if identity is not None else None


def file_order(plan: SourcePlan) -> Callable[[HostSnapshot], int]:
    """A sort key for snapshots: the hosts file's (or -H's) order, whichever answered
    first and whatever kind of feed reads it; the hosts it does not list (this machine,
    the demo's, a Prometheus server's) stay first, in their own order (a stable sort)."""
    rank = {spec.name: i for i, spec in enumerate(plan.ssh_hosts)}
    return lambda snapshot: rank.get(snapshot.host, -1)


def collect_once(
    options: SourceOptions, config: Config, plan: SourcePlan | None = None, lean: bool = False,
    topology: bool = True, prometheus_view: str | None = None,
) -> Round:
    """One round of snapshots for the one-shot commands.

    This machine and the simulator are read in this thread, without an event loop
    (asyncio costs `gputop --once` tens of ms); SSH hosts in parallel on one loop.
    """
    from gputop.sources.feed import LocalFeed

    plan = plan or plan_sources(options)
    feeds = open_feeds(options, config, one_shot=True, plan=plan, lean=lean,
                       topology=topology, prometheus_view=prometheus_view)
    local = [feed for feed in feeds if isinstance(feed, LocalFeed)]
    snapshots = [feed.poll() for feed in local]
    identities = {feed.host: feed.identity(feed.host) for feed in local}
    # Prometheus and `gputop serve`'s API: blocking HTTP, no event loop (and their
    # modules are not imported to ask).
    blocking: list[Any] = [feed for feed in feeds if getattr(feed, "blocking_poll", False)]
    for http in blocking:
        found = http.poll()
        snapshots.extend(found)
        identities.update({snap.host: http.identity(snap.host) for snap in found})
    remote = [feed for feed in feeds
              if not isinstance(feed, LocalFeed) and feed not in blocking]
    if remote:
        import asyncio

        from gputop.sources.oneshot import first_round

        found, who = asyncio.run(first_round(remote, options.timeout))
        snapshots.extend(found)
        identities.update(who)
    return Round(sorted(snapshots, key=file_order(plan)), identities)
