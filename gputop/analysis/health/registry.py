"""The catalogue of health rules: every rule declared once, as a ``Rule``.

A rule declares its code, the severities it can raise, its family, the snapshot fields it
reads, its thresholds, a fixed sentence and hint, and its check: one function with one
signature, ``check(ctx) -> Iterable[Finding]``.  ``health.warnings`` runs the registry;
docs/health.md's table, the Prometheus relay of a host's verdicts (sources/prompivot.py),
the field check of sources/promql.py and the shipped alert rules' agreement test all read
it.  A family's module declares its rules with ``@rule(...)``; health/__init__.py imports
the families, in the order their rules are listed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from gputop.analysis.health.thresholds import Thresholds
from gputop.model import GPU_OK, SEVERITY_ORDER, Gpu, HealthWarning, HostSnapshot
from gputop.records import Record, record

if TYPE_CHECKING:
    from gputop.analysis import orphans
    from gputop.analysis.history import ProcessSample

# Where a rule runs: once per host that cannot be seen, once per host that can, once per
# readable card (``ctx.card`` set), once per card that is lost or unreadable.
HOST_DOWN = "host-down"
HOST = "host"
CARD = "card"
BROKEN_CARD = "broken-card"
SCOPES = (HOST_DOWN, HOST, CARD, BROKEN_CARD)


class HealthHistory(Protocol):
    """What the rules read of ``gputop.analysis.history.History``."""

    def gpu_series(
        self, host: str, gpu: int, field: str, since: float | None = None
    ) -> list[tuple[float, Any]]: ...

    def process_streak(
        self, host: str, pid: int, start_ticks: int | None,
        predicate: Callable[[ProcessSample], bool], key: Hashable | None = None,
    ) -> float | None: ...

    def simulated(self, host: str, when: float) -> bool: ...


@record(frozen=True, slots=True)
class Finding(Record):
    """One thing a check found; the rule fills in what is not set: the message (its
    summary), hint, severity and code."""

    message: str | None = None
    gpu: int | None = None
    pid: int | None = None
    since: float | None = None  # None: now
    hint: str | None = None  # None: the rule's hint
    severity: str | None = None  # None: the rule's first severity
    code: str | None = None  # None: the rule's code (xid-N names its XID)


class Context:
    """What a check is given: the snapshot and its history, the thresholds, the time,
    the user, and (for a card rule) the card.  The process flags are classified once per
    snapshot, when a rule first asks."""

    __slots__ = ("_flags", "card", "history", "me", "now", "snapshot", "thresholds")

    def __init__(
        self,
        snapshot: HostSnapshot,
        history: HealthHistory | None = None,
        thresholds: Thresholds | None = None,
        now: float | None = None,
        me: str | None = None,
        flags: Mapping[tuple[int, int], orphans.ProcessFlags] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.history = history
        self.thresholds = thresholds or Thresholds()
        self.now = snapshot.time if now is None else now
        self.me = me
        self._flags = flags
        # The card a CARD or BROKEN_CARD rule judges (a host rule has none: AttributeError).
        self.card: Gpu

    def flags(self) -> Mapping[tuple[int, int], orphans.ProcessFlags]:
        """Every process's ``orphans`` verdict, classified with the health thresholds."""
        procs = self.snapshot.processes
        if self._flags is None or any(p.key not in self._flags for p in procs):
            from gputop.analysis import orphans

            # One pass over all processes: classifying each row on its own rescans the
            # snapshot per row, which is what made 2,000 processes cost a quarter second.
            self._flags = orphans.classify_snapshot(
                self.snapshot, self.history, orphan_rules(self.thresholds), self.now)
        return self._flags


def orphan_rules(thresholds: Thresholds) -> orphans.OrphanRules:
    """The orphan/idle rules the health warnings use: the ``flags`` ``warnings`` expects."""
    from gputop.analysis import orphans

    return orphans.OrphanRules(
        idle_minutes=thresholds.idle_minutes, idle_min_mem_mib=int(thresholds.idle_memory_mib)
    )


Check = Callable[[Context], Iterable[Finding]]


@record(frozen=True, slots=True)
class Rule(Record):
    code: str  # "xid-N": one rule for every XID code
    severities: tuple[str, ...]  # what it can raise; the first is its default
    family: str  # the module it is declared in
    summary: str  # the fixed sentence a relayed warning carries
    hint: str  # "": none; "{gpu}" stands for the card's index
    when: str  # docs/health.md: when it fires
    check: Check
    scope: str = CARD
    reads: tuple[str, ...] = ()  # the Gpu (CARD rules) or HostSnapshot fields it reads
    thresholds: tuple[str, ...] = ()  # the Thresholds it uses
    # Of ``reads``, what no exporter gives, so the rule cannot judge a card read through
    # Prometheus: its verdict comes from the host's gputop serve (gputop_warning).
    unexported: tuple[str, ...] = ()
    alert: str | None = None  # the shipped Prometheus alert (examples/) that raises it


_RULES: list[Rule] = []

# The shipped alerts (gputop/examples/alert-rules*.yaml) that no rule raises, and why.
ALERTS_OF_NO_RULE = {
    # The Prometheus source shows such a host as host-state, whose alert is
    # GputopCollectorStuck; this one has host-state's severity (tests/test_alert_rules.py).
    "GpuExporterDown": "Prometheus cannot scrape a GPU exporter: no host's gputop says so",
}


def rule(
    code: str,
    severities: str | tuple[str, ...],
    *,
    summary: str,
    hint: str,
    when: str,
    scope: str = CARD,
    reads: tuple[str, ...] = (),
    thresholds: tuple[str, ...] = (),
    unexported: tuple[str, ...] = (),
    alert: str | None = None,
) -> Callable[[Check], Check]:
    """Declare the decorated check as a rule (its module is its family)."""
    levels = (severities,) if isinstance(severities, str) else severities
    # A mistake in a declaration stops the import, under python -O too.
    for wrong, problem in (
        (not levels or not set(levels) <= set(SEVERITY_ORDER), "unknown severity"),
        (scope not in SCOPES, f"unknown scope {scope!r}"),
        (not set(unexported) <= set(reads), "unexported names a field it does not read"),
        (not set(thresholds) <= set(Thresholds._names), "unknown threshold"),
        (code in {r.code for r in _RULES}, "declared twice"),
    ):
        if wrong:
            raise ValueError(f"health rule {code}: {problem}")

    def add(check: Check) -> Check:
        family = check.__module__.rsplit(".", 1)[-1]
        _RULES.append(Rule(code, levels, family, summary, hint, when, check, scope, reads,
                           thresholds, unexported, alert))
        return check

    return add


def rules() -> tuple[Rule, ...]:
    """Every declared rule, in the order the families were imported."""
    return tuple(_RULES)


def by_code(code: str) -> Rule | None:
    """The rule that raises ``code`` (xid-79 is the xid-N rule's)."""
    if code.startswith("xid-") and code[4:].isdigit():
        code = "xid-N"
    return next((r for r in _RULES if r.code == code), None)


def run(ctx: Context, family: str | None = None) -> list[HealthWarning]:
    """The warnings of every rule (or one family's) for one snapshot, in rule order."""
    by_scope = _by_scope(family)
    snap = ctx.snapshot
    out: list[HealthWarning] = []
    if not snap.ok:
        _judge(by_scope[HOST_DOWN], ctx, out)
        return out
    _judge(by_scope[HOST], ctx, out)
    card_rules, broken_rules = by_scope[CARD], by_scope[BROKEN_CARD]
    for card in snap.gpus:
        ctx.card = card
        _judge(card_rules if card.state == GPU_OK else broken_rules, ctx, out)
    return out


# The rules of each scope, per family (None: all), made once per registry size: the
# dashboard runs them every refresh for every host.
_SCOPED: dict[str | None, tuple[int, dict[str, list[Rule]]]] = {}


def _by_scope(family: str | None) -> dict[str, list[Rule]]:
    cached = _SCOPED.get(family)
    if cached is not None and cached[0] == len(_RULES):
        return cached[1]
    scoped: dict[str, list[Rule]] = {scope: [] for scope in SCOPES}
    for r in _RULES:
        if family is None or r.family == family:
            scoped[r.scope].append(r)
    _SCOPED[family] = (len(_RULES), scoped)
    return scoped


def hint_of(r: Rule, gpu: int | None) -> str | None:
    return r.hint.replace("{gpu}", "N" if gpu is None else str(gpu)) or None


def _judge(selected: list[Rule], ctx: Context, out: list[HealthWarning]) -> None:
    host = ctx.snapshot.host
    for r in selected:
        for f in r.check(ctx):
            out.append(HealthWarning(
                severity=f.severity or r.severities[0], code=f.code or r.code,
                message=r.summary if f.message is None else f.message,
                host=host, gpu=f.gpu, pid=f.pid,
                hint=hint_of(r, f.gpu) if f.hint is None else f.hint,
                since=ctx.now if f.since is None else f.since))


def run_family(family: str, ctx: Context) -> list[HealthWarning]:
    return run(ctx, family)


def rules_table() -> str:
    """docs/health.md's table of codes (tests/test_health_registry.py keeps it current)."""
    lines = ["| severity | code | when |", "|---|---|---|"]
    for r in _RULES:
        lines.append(f"| {'/'.join(r.severities)} | `{r.code}` | {r.when} |")
    return "\n".join(lines) + "\n"
