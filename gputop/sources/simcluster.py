"""``--demo cluster``: several simulated machines in one process, so that the cluster
overview, the processes of all hosts and the states of hosts that are down can be tried
without SSH.  The same machines make the cluster screenshots (ui/screenshots.py).

Each machine is a built-in scenario under another host name, with its own seed (its
values wander differently) and labels; two more hosts are down, with the states and
texts the SSH feed gives.
"""

from __future__ import annotations

from gputop.sources.sim.scenario import Scenario, load_scenario

CLUSTER = "cluster"  # the pseudo-scenario of several simulated hosts
DESCRIPTION = ("several machines (2x DGX H100, a faulty A100 node, 2 lab boxes, a MIG "
               "node) and 2 hosts that are down")

# (scenario, host name, seed, labels): machines of the built-in kinds under other names.
CLUSTER_HOSTS: list[tuple[str, str, int | None, tuple[str, ...]]] = [
    ("dgx-h100", "dgx-h100-07", None, ("h100", "train")),
    ("dgx-h100", "dgx-h100-08", 8, ("h100", "train")),
    ("faulty", "a100-node-12", None, ("a100",)),
    ("lab", "lab-gpu-03", None, ("rtx3090", "lab")),
    ("lab", "lab-gpu-04", 4, ("rtx3090", "lab")),
    ("mig", "mig-h100-01", None, ("h100", "mig")),  # cards split with MIG
]
# Hosts without data, as the SSH feed reports them: (host, state, why, labels).
CLUSTER_DOWN: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("lab-gpu-05", "unreachable", "connection refused by lab-gpu-05:22: no SSH server "
     "listens there; check the port and that the SSH server runs", ("rtx3090", "lab")),
    ("gpu-old-01", "host key unknown",
     "host key not in known_hosts: ssh-keyscan gpu-old-01 >> ~/.ssh/known_hosts", ("old",)),
]


def machine(scenario: str, hostname: str | None, seed: int | None) -> Scenario:
    """A built-in scenario as one machine of the cluster: its host name and seed."""
    found = load_scenario(scenario)
    if hostname is not None:
        found.host["hostname"] = hostname
    if seed is not None:
        found.seed = seed
    return found
