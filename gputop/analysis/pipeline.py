"""The per-snapshot analysis: history, orphan flags and health warnings, in one place.

Every consumer goes through here, so they all honour the same settings: the dashboard
feeds an ``Analyser`` one snapshot at a time (it keeps history and tracks warnings over
time); ``--once``, ``check``, ``pick`` and ``reserve`` call ``warnings_once`` on each
snapshot of their single round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gputop.analysis import health, orphans
from gputop.model import SOURCE_SIMULATED_PAST, HealthWarning, HostSnapshot
from gputop.records import MutableRecord, Record, field, record

if TYPE_CHECKING:  # the dashboard's; a one-shot (warnings_once) keeps no history
    from gputop.analysis.history import History

Flags = dict[tuple[int, int], orphans.ProcessFlags]


@record(frozen=True, slots=True)
class Settings(Record):
    """What the user's config decides for the analysis (``gputop.config.analysis_settings``)."""

    thresholds: health.Thresholds = field(default_factory=health.Thresholds)
    rules: orphans.OrphanRules = field(default_factory=orphans.OrphanRules)  # reclaim:
    history_minutes: float = 10.0  # sparklines and the detail view

    def history(self) -> History:
        """A History long enough for the sparklines and for the slowest idle rule."""
        from gputop.analysis.history import History

        seconds = max(self.history_minutes * 60.0, 120.0)
        th = self.thresholds
        longest_rule = max(self.rules.idle_minutes, th.idle_minutes, th.input_bound_minutes)
        return History(seconds=seconds, process_seconds=max(seconds, longest_rule * 60.0 + 300.0))


@record(frozen=False, slots=True)
class Analysed(MutableRecord):
    """One snapshot with what the analysis made of it (computed off the UI thread)."""

    snapshot: HostSnapshot
    warnings: list[HealthWarning]  # every host's current warnings, worst first
    flags: Flags


class Analyser:
    """History, orphan flags and tracked health warnings, one snapshot at a time.

    ``me_on(host)`` names the user acting on a host (the rules about "my" reservations).
    Not thread-safe: one analysis thread calls it.
    """

    def __init__(
        self, settings: Settings, history: History, me_on: Callable[[str], str | None]
    ) -> None:
        self.settings = settings
        self.history = history
        self.me_on = me_on
        self.tracker = health.WarningTracker.from_thresholds(settings.thresholds)
        # Classifying is the costly part, so it is done once per snapshot; only a config
        # whose health: idle limits differ from reclaim:'s needs a second pass (inside
        # health.warnings) to honour both.
        self.shares_flags = health.orphan_rules(settings.thresholds) == settings.rules

    def __call__(self, snap: HostSnapshot) -> Analysed:
        self.history.add(snap)
        if snap.source == SOURCE_SIMULATED_PAST:
            # The demo's made-up past feeds the charts and the idle streaks; its warnings
            # were never seen in this session, so they are neither current nor "cleared".
            return Analysed(snap, self.tracker.current(), {})
        flags: Flags = {}
        if snap.ok:
            flags = orphans.classify_snapshot(snap, self.history, self.settings.rules, snap.time)
        fresh = health.warnings(snap, self.history, self.settings.thresholds, snap.time,
                                self.me_on(snap.host), flags if self.shares_flags else None)
        return Analysed(snap, self.tracker.update(snap.host, fresh, snap.time), flags)


def warnings_once(
    snap: HostSnapshot, settings: Settings, me: str | None, now: float | None = None
) -> list[HealthWarning]:
    """The warnings of one snapshot without history (the rules that need minutes of
    observation stay silent), for the one-shot commands."""
    return health.warnings(snap, None, settings.thresholds, now, me)
