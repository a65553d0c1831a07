"""Health rules: warnings about broken, throttled or wasted GPUs (codes: docs/health.md).

Pure functions over a snapshot and its history (no I/O, no clock: ``now`` is passed in),
so every rule is tested against simulator scenarios and real captures.  The rules read
model fields that are None when a card does not report them; None never raises an alarm,
because a consumer card's "Not Supported" is not a fault.

One module per family of rules, and ``warnings`` here runs them all: ``gpu`` (the card
itself: XIDs, ECC, temperature, clocks, PCIe, NVLink, fans, persistence), ``memory``,
``processes``, ``reservations``, ``workloads``, ``mig``.  ``tracker.WarningTracker``
turns the per-snapshot lists into what a person sees over time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gputop import model
from gputop.analysis import orphans
from gputop.analysis.health import gpu, memory, mig, processes, reservations, workloads
from gputop.analysis.health.common import HOST_STATE, Adder, sort_warnings, worst
from gputop.analysis.health.gpu import is_data_centre
from gputop.analysis.health.processes import orphan_rules
from gputop.analysis.health.thresholds import Thresholds
from gputop.analysis.health.tracker import ClearedWarning, WarningTracker
from gputop.model import WARNING, HealthWarning, HostSnapshot

__all__ = [
    "HOST_STATE",
    "ClearedWarning",
    "Thresholds",
    "WarningTracker",
    "is_data_centre",
    "orphan_rules",
    "sort_warnings",
    "warnings",
    "worst",
]


def warnings(
    snapshot: HostSnapshot,
    history: Any = None,
    thresholds: Thresholds | None = None,
    now: float | None = None,
    me: str | None = None,
    flags: Mapping[tuple[int, int], orphans.ProcessFlags] | None = None,
) -> list[HealthWarning]:
    """Every warning for one host, most severe first.

    ``history`` is a ``gputop.analysis.history.History`` (or None for one-shot commands,
    which then skip the rules that need minutes of observation: idle memory, input
    bound); ``me`` is the user name for the reservation rules.  ``flags`` are the
    snapshot's ``orphans.classify_snapshot`` verdicts, classified with
    ``orphan_rules(thresholds)``, when the caller has them already (the dashboard shows
    them in the process table); without them they are computed here, once.
    """
    th = thresholds or Thresholds()
    now = snapshot.time if now is None else now
    out: list[HealthWarning] = []
    add = Adder(out, snapshot.host, now)
    if not snapshot.ok:
        if snapshot.state != model.HOST_CONNECTING:
            add(
                WARNING,
                HOST_STATE,
                f"host {snapshot.state}" + (f": {snapshot.error}" if snapshot.error else ""),
                hint="gputop cannot see this host's GPUs; check the host and the connection",
            )
        return sort_warnings(out)
    gpu.xid_rules(snapshot, add)
    up = gpu.any_nvlink_up(snapshot.gpus)
    for card in snapshot.gpus:
        gpu.card_rules(card, th, add, any_nvlink_up=up)
        if card.state == model.GPU_OK:
            memory.rules(snapshot.host, card, history, th, add)
    gpu.persistence_rule(snapshot.gpus, add)
    processes.rules(snapshot, history, th, add, flags)
    out.extend(reservations.warnings(snapshot, now, me))
    out.extend(workloads.warnings(snapshot, now))
    out.extend(mig.warnings(snapshot, now))
    out.extend(_reported(snapshot, out))
    return sort_warnings(out)


def _reported(snapshot: HostSnapshot, found: list[HealthWarning]) -> list[HealthWarning]:
    """What the host's own gputop raised and the rules here could not see in the fields
    it exports (its history, processes, NVLinks): the host's verdict, passed on under its
    code, never a second copy of its rule.  A warning raised here too is shown once."""
    have = {(w.gpu, w.code) for w in found}
    return [w for w in snapshot.reported_warnings if (w.gpu, w.code) not in have]
