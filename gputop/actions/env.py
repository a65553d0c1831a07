"""What an action may touch on this host: the one type every action handler takes.

Its own module so that the handlers (kill, reservations, queue) and the dispatcher that
calls them all import it and none imports the dispatcher: tests/test_imports.py keeps
the handlers off ``gputop.actions.dispatch``.

Stdlib-only: shipped to remote hosts inside the SSH probe (docs/architecture.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputop.records import MutableRecord, record
from gputop.storedir import RESERVATIONS_DIR

if TYPE_CHECKING:
    from gputop.actions.kill import Processes
    from gputop.actions.reservations import GpuUuids, MigDevices


@record(frozen=False, slots=True)
class ActionEnv(MutableRecord):
    """What an action may touch on this host.

    ``sim``: the SimNvml of --demo (or a probe serving a scenario); then ``procs`` is its
    SimProcs and a kill changes only the simulation.  ``gpu_uuids``: index -> UUID of
    this host's GPUs, for reservations that name cards by UUID.
    """

    # The simulation itself (sim.SimNvml; only whether there is one matters here: the
    # actions layer does not know the sources layer's types).
    sim: object | None = None
    procs: Processes | None = None
    reservations_dir: str = RESERVATIONS_DIR
    readonly: bool = False
    gpu_uuids: GpuUuids | None = None
    # MIG UUID -> (card index, slot), refreshed from every snapshot (an admin
    # may re-split a card while we run)
    mig_devices: MigDevices | None = None
