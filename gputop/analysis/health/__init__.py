"""Health rules: warnings about broken, throttled or wasted GPUs (codes: docs/health.md).

Pure functions over a snapshot and its history (no I/O, no clock: ``now`` is passed in),
so every rule is tested against simulator scenarios and real captures.  The rules read
model fields that are None when a card does not report them; None never raises an alarm,
because a consumer card's "Not Supported" is not a fault.

Each rule is a ``registry.Rule`` declared once, in its family's module: ``gpu`` (the card
itself: XIDs, ECC, temperature, clocks, PCIe, NVLink, fans, persistence), ``memory``,
``processes``, ``reservations``, ``workloads``, ``mig``, ``host`` (a host that cannot be
seen); ``warnings`` here runs them all.
``tracker.WarningTracker`` turns the per-snapshot lists into what a person sees over time.
"""

from __future__ import annotations

from collections.abc import Mapping

from gputop.analysis import orphans, xid

# The families, imported for their rules: this order is the registry's (and the docs').
from gputop.analysis.health import (  # noqa: F401
    gpu,
    host,
    memory,
    mig,
    processes,
    reservations,
    workloads,
)
from gputop.analysis.health.common import HOST_STATE, sort_warnings, worst
from gputop.analysis.health.gpu import is_data_centre
from gputop.analysis.health.registry import (
    Context,
    HealthHistory,
    Rule,
    by_code,
    hint_of,
    orphan_rules,
    rules,
    rules_table,
    run,
)
from gputop.analysis.health.thresholds import Thresholds
from gputop.analysis.health.tracker import ClearedWarning, WarningTracker
from gputop.model import HealthWarning, HostSnapshot

__all__ = [
    "HOST_STATE",
    "ClearedWarning",
    "HealthHistory",
    "Rule",
    "Thresholds",
    "WarningTracker",
    "is_data_centre",
    "orphan_rules",
    "relayed",
    "rules",
    "rules_table",
    "sort_warnings",
    "warnings",
    "worst",
]


def warnings(
    snapshot: HostSnapshot,
    history: HealthHistory | None = None,
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
    found = run(Context(snapshot, history, thresholds, now, me, flags))
    if snapshot.ok:
        found.extend(_reported(snapshot, found))
    return sort_warnings(found)


def _reported(snapshot: HostSnapshot, found: list[HealthWarning]) -> list[HealthWarning]:
    """What the host's own gputop raised and the rules here could not see in the fields
    it exports (its history, processes, NVLinks): the host's verdict, passed on under its
    code, never a second copy of its rule.  A warning raised here too is shown once."""
    have = {(w.gpu, w.code) for w in found}
    return [w for w in snapshot.reported_warnings if (w.gpu, w.code) not in have]


def relayed(code: str, severity: str, hostname: str, index: int | None) -> HealthWarning:
    """A warning the host's gputop raised (its ``gputop_warning`` series), with the
    sentence and hint of the rule that raised it; a code no rule here knows (a newer
    gputop's) says only that it was reported."""
    number = code.removeprefix("xid-")
    found = by_code(code)
    hint: str | None
    if found is not None and found.code == "xid-N" and len(number) <= 6:
        message, hint = xid.describe(int(number)), xid.lookup(int(number)).hint
    elif found is not None:
        message, hint = found.summary, hint_of(found, index)
    else:
        message = f"gputop on the host reports {code}"
        hint = "reported by gputop on the host: `gputop check` there tells more"
    return HealthWarning(severity=severity, code=code, message=message, host=hostname,
                         gpu=index, hint=hint)
