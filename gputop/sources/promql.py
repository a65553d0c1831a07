"""What gputop asks a Prometheus server, per view (pure: text in, text out).

The engine does the work: each query names one field of the snapshot model, converts the
exporters' units in PromQL (MiB to bytes, ratios to percent), keeps only the labels the
pivot needs (``max by``/``group by``) and, for the health fields, only the series that are
not healthy (``> 0``): at 1,000 hosts x 8 GPUs a refresh reads a few MiB, not 57.
A view asks only for what it shows; the queries run in parallel (prometheus.py), and
prompivot.py turns their answers into HostSnapshots.

Exporters understood: dcgm-exporter (``DCGM_FI_*``, labels gpu, UUID, modelName,
Hostname or hostname, GPU_I_ID for a MIG instance, pod/namespace/container and hpc_job
when it maps jobs), nvidia_gpu_exporter (``nvidia_smi_*``, lowercase ``uuid``) and
``gputop serve`` (DCGM's names plus ``gputop_*``; names from commands/exposition.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gputop.analysis.health.gpu import POWER_CAPPED_SHARE  # power-capped's own number
from gputop.records import Record, record

if TYPE_CHECKING:
    from gputop.analysis.health.registry import Rule

MIB = 1024**2

# What a value query keeps: enough to place a value on its host, card and MIG instance.
KEY = "Hostname, hostname, instance, gpu, uuid, GPU_I_ID"
HOST_KEY = "Hostname, hostname, instance"
# The identity of a card, and the jobs dcgm-exporter names on its series.
IDENTITY = (f"{KEY}, UUID, modelName, pci_bus_id, GPU_I_PROFILE, DCGM_FI_DRIVER_VERSION, "
            "pod, namespace, container, hpc_job")
# What the brief views keep of it: no view of many hosts shows a card's PCI address (the
# opened host, read in full, has it), and at 8,000 cards it is a tenth of an answer.
BRIEF_IDENTITY = IDENTITY.replace(" pci_bus_id,", "")

# The series that carry a card's identity labels, one per exporter.
IDENTITY_NAMES = '__name__=~"gputop_gpu_ok|nvidia_smi_gpu_info"'

# A dead target is a GPU host only if it had GPU series within this window.
DEAD_LOOKBACK = "30d"
# A card seen within this window and gone now, its exporter up, is lost (as a card the
# driver lost is locally): dcgm-exporter drops a card that fell off the bus.
LOST_LOOKBACK = "1h"
# What says a card was there (one series per card or MIG instance, per exporter), and
# what says it still is: any of its usual series.
CARD_SEEN = "DCGM_FI_DEV_FB_USED|nvidia_smi_gpu_info"
CARD_NOW = "DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_TEMP|nvidia_smi_gpu_info"
# A rate of a violation counter over this window above 0: the card is being slowed now.
VIOLATION_WINDOW = "2m"

SUMMARY = "summary"  # --once: its table's columns, health where unhealthy
# The dashboard's overview and `check`: a card's util and memory (its cell), and what a
# health rule can read through Prometheus; temperature, power and fan only where the
# fan-stopped rule can fire (fan at 0).  At 1,000 x 8 that is 32,000 series fewer for
# Prometheus to select per refresh than the summary.
OVERVIEW = "overview"
FULL = "full"  # --json and one opened host
VIEWS = (SUMMARY, OVERVIEW, FULL)
BRIEF = (SUMMARY, OVERVIEW)  # the views that leave healthy values on the server


@record(frozen=True, slots=True)
class Field(Record):
    """One snapshot field and where each exporter has it: (metric, scale) pairs."""

    name: str
    sources: tuple[tuple[str, float], ...]
    views: tuple[str, ...] = VIEWS
    unhealthy_only: bool = False  # only series above 0 come back: the rest is healthy
    # "rate": a counter of time spent slowed; "mask": clock-event bits; "lost": only 0;
    # "<METRIC" / ">METRIC": in the summary, only where below / above that metric
    op: str = ""
    by: str = KEY  # the labels kept
    # In the overview: "" as in the summary, "zero" only where 0, "fan-zero" only on
    # cards whose fan is at 0 or that run hot, "capped" only on cards the power cap
    # holds down, "skip" not asked.
    overview: str = ""
    # In both brief views: "hot" only on cards within HOT_MARGIN_C of a temperature
    # limit, "capped" only on cards the power cap holds down (see _hot and _capped).
    brief: str = ""
    # The snapshot fields the pivot makes of a "_" field (its own name otherwise).
    gives: tuple[str, ...] = ()

    @property
    def fills(self) -> tuple[str, ...]:
        return self.gives or ((self.name,) if self.name[0] != "_" else ())


DCGM_SPARE = "DCGM_FI_DEV_FB_FREE|DCGM_FI_DEV_FB_RESERVED"

# The snapshot fields read per card (and per MIG instance where GPU_I_ID is set).
FIELDS: tuple[Field, ...] = (
    Field("util_gpu", (("DCGM_FI_DEV_GPU_UTIL", 1), ("nvidia_smi_utilization_gpu_ratio", 100))),
    # The card's identity labels ride on its memory: no query of their own at 8,000 cards.
    Field("mem_used", (("DCGM_FI_DEV_FB_USED", MIB), ("nvidia_smi_memory_used_bytes", 1)),
          by=IDENTITY),
    Field("mem_total", (("gputop_gpu_memory_total_bytes", 1),
                        ("nvidia_smi_memory_total_bytes", 1))),
    # DCGM has no total: used + free + reserved.  The summary asks for free + reserved
    # summed by the server (one query, no vector matching), the pivot adds used.
    Field("_mem_spare", ((DCGM_SPARE, MIB),), views=BRIEF, gives=("mem_total",)),
    Field("_mem_free", (("DCGM_FI_DEV_FB_FREE", MIB),), views=(FULL,), gives=("mem_total",)),
    Field("mem_reserved", (("DCGM_FI_DEV_FB_RESERVED", MIB),
                           ("nvidia_smi_memory_reserved_bytes", 1)), views=(FULL,)),
    # The overview asks for a temperature only where a rule can fire: a stopped fan, or
    # a card close to its own limits (dcgm-exporter gives them where its counters list
    # DCGM_FI_DEV_SLOWDOWN_TEMP / SHUTDOWN_TEMP); power only where the cap holds it.
    Field("temp", (("DCGM_FI_DEV_GPU_TEMP", 1), ("nvidia_smi_temperature_gpu", 1)),
          overview="fan-zero"),
    Field("temp_slowdown", (("DCGM_FI_DEV_SLOWDOWN_TEMP", 1),), brief="hot"),
    Field("temp_shutdown", (("DCGM_FI_DEV_SHUTDOWN_TEMP", 1),), brief="hot"),
    Field("power_draw", (("DCGM_FI_DEV_POWER_USAGE", 1), ("nvidia_smi_power_draw_watts", 1)),
          overview="capped"),
    # What power-capped compares the draw with: the card's default limit, else its
    # maximum (a lowered DCGM_FI_DEV_POWER_MGMT_LIMIT is what it looks for).
    Field("power_default_limit", (("DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF", 1),), brief="capped"),
    Field("power_max_limit", (("DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", 1),), brief="capped"),
    Field("power_limit", (("DCGM_FI_DEV_POWER_MGMT_LIMIT", 1),
                          ("nvidia_smi_enforced_power_limit_watts", 1)), overview="capped"),
    Field("fan", (("DCGM_FI_DEV_FAN_SPEED", 1), ("nvidia_smi_fan_speed_ratio", 100)),
          overview="zero"),
    # The activity of a MIG instance (a card's own is its utilization).
    Field("_sm_active", (("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 100),), op="mig"),
    # gputop serve's verdict on a card: only the lost ones (value 0) matter.
    Field("_lost", (("gputop_gpu_ok", 1),), op="lost", gives=("state",)),
    # -- health: what the rules of analysis/health read, only where it is not healthy
    Field("_xid", (("DCGM_FI_DEV_XID_ERRORS", 1),), unhealthy_only=True,
          gives=("xid_events",)),
    Field("ecc_volatile_uncorrected", (("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1),),
          unhealthy_only=True),
    Field("ecc_volatile_corrected", (("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 1),),
          unhealthy_only=True, views=(FULL,)),
    Field("ecc_aggregate_uncorrected", (("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 1),),
          unhealthy_only=True, views=(FULL,)),
    Field("ecc_aggregate_corrected", (("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 1),),
          unhealthy_only=True, views=(FULL,)),
    Field("retired_pages_sbe", (("DCGM_FI_DEV_RETIRED_SBE", 1),), unhealthy_only=True,
          views=(FULL,)),
    Field("retired_pages_dbe", (("DCGM_FI_DEV_RETIRED_DBE", 1),), unhealthy_only=True,
          views=(FULL,)),
    Field("retired_pages_pending", (("DCGM_FI_DEV_RETIRED_PENDING", 1),), unhealthy_only=True),
    Field("remapped_correctable", (("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 1),),
          unhealthy_only=True, views=(FULL,)),
    Field("remapped_uncorrectable", (("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 1),),
          unhealthy_only=True, views=(FULL,)),
    Field("remap_failure", (("DCGM_FI_DEV_ROW_REMAP_FAILURE", 1),), unhealthy_only=True),
    Field("remap_pending", (("DCGM_FI_DEV_ROW_REMAP_PENDING", 1),), unhealthy_only=True),
    # The NVML clock-event mask (renamed in DCGM 3.3), decoded by nvmlcodes' one table;
    # a brief view asks for masks with a bit above sw_power_cap (0x4), and for the cap
    # alone only where it holds the card down (power-capped): the rest stay on the server.
    Field("clock_event_mask", (("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 1),
                               ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 1)), op="mask",
          gives=("clock_event_reasons",)),
    Field("_thermal_violation", (("DCGM_FI_DEV_THERMAL_VIOLATION", 1),), op="rate",
          gives=("clock_event_reasons",)),
    Field("_power_violation", (("DCGM_FI_DEV_POWER_VIOLATION", 1),), op="rate",
          views=(FULL,), gives=("clock_event_reasons",)),
    # -- what only the full view shows
    Field("util_mem", (("DCGM_FI_DEV_MEM_COPY_UTIL", 1),
                       ("nvidia_smi_utilization_memory_ratio", 100)), views=(FULL,)),
    Field("util_enc", (("DCGM_FI_DEV_ENC_UTIL", 1),), views=(FULL,)),
    Field("util_dec", (("DCGM_FI_DEV_DEC_UTIL", 1),), views=(FULL,)),
    Field("clock_sm", (("DCGM_FI_DEV_SM_CLOCK", 1),
                       ("nvidia_smi_clocks_current_sm_clock_hz", 1e-6)), views=(FULL,)),
    Field("clock_mem", (("DCGM_FI_DEV_MEM_CLOCK", 1),
                        ("nvidia_smi_clocks_current_memory_clock_hz", 1e-6)), views=(FULL,)),
    Field("pstate", (("nvidia_smi_pstate", 1),), views=(FULL,)),
    # The PCIe link: in the summary only the cards whose link is below what it can do.
    Field("pcie_gen", (("DCGM_FI_DEV_PCIE_LINK_GEN", 1),), op="<DCGM_FI_DEV_PCIE_MAX_LINK_GEN"),
    Field("pcie_gen_max", (("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", 1),),
          op=">DCGM_FI_DEV_PCIE_LINK_GEN"),
    Field("pcie_width", (("DCGM_FI_DEV_PCIE_LINK_WIDTH", 1),),
          op="<DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"),
    Field("pcie_width_max", (("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", 1),),
          op=">DCGM_FI_DEV_PCIE_LINK_WIDTH"),
)
FIELD_NAMES = frozenset(f.name for f in FIELDS)
_FAN = next(f for f in FIELDS if f.name == "fan")
IDENTITY_FIELDS = frozenset(f.name for f in FIELDS if f.by == IDENTITY)

# What every view has of a host and its cards besides FIELDS: the pivot's own verdicts,
# the identity labels, and what the host queries below give (gputop serve's).
HOST_GIVES = frozenset({"state", "error", "index", "uuid", "name", "mig_mode", "workloads",
                        "processes", "reservations"})
# The views whose answers the health rules judge: the dashboard's overview and `check`,
# and one opened host.
JUDGED = (OVERVIEW, FULL)


def asked(view: str) -> frozenset[str]:
    """The snapshot fields ``view``'s answers can fill."""
    return HOST_GIVES.union(*(f.fills for f in FIELDS if view in f.views
                              and not (view == OVERVIEW and f.overview == "skip")))


def unasked(rules: Iterable[Rule]) -> list[str]:
    """"CODE: FIELD (VIEW)" for each field a health rule reads that a judged view does not
    ask for.  A rule that declares some of its fields unexported is judged on the host
    alone (its gputop_warning is relayed with its sentence), so its others need no query.
    tests/test_health_registry.py keeps this empty."""
    views = {view: asked(view) for view in JUDGED}
    return [f"{r.code}: {name} ({view})" for r in rules if not r.unexported
            for name in r.reads for view in JUDGED if name not in views[view]]


# The metric whose presence makes a host a GPU host, one per exporter.
GPU_METRICS = "DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_GPU_UTIL|gputop_up|nvidia_smi_gpu_info"


def complete(view: str) -> frozenset[str]:
    """The fields ``view`` asks for with every value, healthy or not: only those can be
    said to be missing where no card has them (the overview does not ask for power)."""
    if view == FULL:
        return FIELD_NAMES
    return frozenset(f.name for f in FIELDS if view in f.views and not f.unhealthy_only
                     and f.op in ("", "mig") and not f.brief
                     and not (view == OVERVIEW and f.overview))


# A brief view asks for temperatures and their limits on cards this close (C) to one:
# the rules judge with their own margins (health: temp_slowdown_margin, 5 C by default;
# temp_shutdown_margin, 2 C), any of them up to this is honoured.
HOT_MARGIN_C = 15


def _by_name(name: str) -> Field:
    return next(f for f in FIELDS if f.name == name)


# What the hot and capped filters compare with: not among dcgm-exporter's default
# counters, so most sites export none.  PromQL evaluates both sides of an `and`, so a
# filter comparing with nothing would still cost Prometheus every card's temperature or
# power: a refresh first asks which of these the server has (present_query), and a brief
# view leaves out what would compare with nothing.
HOT_LIMITS = {"DCGM_FI_DEV_SLOWDOWN_TEMP": "temp_slowdown",
              "DCGM_FI_DEV_SHUTDOWN_TEMP": "temp_shutdown"}
CAP_LIMITS = {"DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF": "power_default_limit",
              "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX": "power_max_limit"}


def present_query(selector: str) -> str:
    """Which of HOT_LIMITS and CAP_LIMITS the server has: one series per metric name."""
    names = "|".join((*HOT_LIMITS, *CAP_LIMITS))
    return f"count by (__name__) ({_sel('', selector, f'__name__=~{chr(34)}{names}{chr(34)}')})"


def _limits(table: dict[str, str], present: frozenset[str] | None) -> list[str]:
    return [field for metric, field in table.items() if present is None or metric in present]


def _hot(selector: str, present: frozenset[str] | None = None) -> str:
    """The cards within HOT_MARGIN_C of their slowdown or shutdown temperature."""
    temp = field_query(_by_name("temp"), selector, FULL)
    limits = [field_query(_by_name(name), selector, FULL)
              for name in _limits(HOT_LIMITS, present)]
    return " or ".join(f"(({temp}) >= ({limit}) - {HOT_MARGIN_C})" for limit in limits)


def _capped(selector: str, present: frozenset[str] | None = None) -> str:
    """The cards whose clock-event mask has sw_power_cap (or a bit above) while they
    draw under the power-capped rule's share of their default (else maximum) limit."""
    mask = field_query(_by_name("clock_event_mask"), selector, FULL)
    power = field_query(_by_name("power_draw"), selector, FULL)
    limit = " or ".join(f"({field_query(_by_name(name), selector, FULL)})"
                        for name in _limits(CAP_LIMITS, present))
    return (f"(({mask}) > 3) and on ({KEY}) "
            f"(({power}) < ({limit}) * {POWER_CAPPED_SHARE:g})")


def _filter(spec: Field, view: str) -> str:
    """"hot" or "capped" where ``spec`` is asked in ``view`` only on such cards."""
    if view not in BRIEF:
        return ""
    if spec.brief:
        return spec.brief
    return spec.overview if view == OVERVIEW and spec.overview == "capped" else ""


def _compares(kind: str, present: frozenset[str] | None) -> bool:
    """Whether the server has anything a "hot" or "capped" filter compares with."""
    return bool(_limits(HOT_LIMITS if kind == "hot" else CAP_LIMITS, present))


def _sel(metric: str, selector: str, extra: str = "") -> str:
    inner = ", ".join(part for part in (selector, extra) if part)
    return f"{metric}{{{inner}}}" if inner else metric


def field_query(spec: Field, selector: str, view: str = SUMMARY,
                present: frozenset[str] | None = None) -> str:
    """The PromQL of one field; the summary view leaves healthy values on the server,
    the full one has them all (0 is a fact --json shows).  ``present``: the limit
    metrics the server has (present_query; None: all)."""
    brief = view in BRIEF
    by = BRIEF_IDENTITY if brief and spec.by == IDENTITY else spec.by
    parts = []
    for metric, scale in spec.sources:
        extra = 'GPU_I_ID!=""' if spec.op == "mig" else ""
        if "|" in metric:  # several series that add up to the field
            series = _sel("", selector, ", ".join(p for p in (f'__name__=~"{metric}"', extra)
                                                   if p))
            part = f"sum by ({KEY}) ({series})"
        else:
            series = _sel(metric, selector, extra)
            if spec.op == "rate":
                series = f"rate({series}[{VIOLATION_WINDOW}])"
            part = f"max by ({by}) ({series})"
        if scale != 1:
            part = f"{part} * {scale:.12g}"
        parts.append(f"({part})")
    expr = " or ".join(parts)
    base = f"({expr})"
    if view == OVERVIEW and spec.overview == "zero":
        expr = f"({expr}) == 0"
    elif view == OVERVIEW and spec.overview == "fan-zero":
        hot = f" or {_hot(selector, present)}" if _compares("hot", present) else ""
        expr = f"({expr}) and on ({KEY}) (({field_query(_FAN, selector, view)}){hot})"
    elif _filter(spec, view) == "capped":
        expr = f"({expr}) and on ({KEY}) ({_capped(selector, present)})"
    elif _filter(spec, view) == "hot":
        expr = f"({expr}) and on ({KEY}) ({_hot(selector, present)})"
    if brief and (spec.unhealthy_only or spec.op == "rate"):
        expr = f"({expr}) > 0"
    elif brief and spec.op == "mask":
        expr = f"({expr}) > 7"
        if _compares("capped", present):
            expr = f"({expr}) or ({base} and on ({KEY}) ({_capped(selector, present)}))"
    elif brief and spec.op[:1] in "<>" and spec.op:
        other = f"max by ({KEY}) ({_sel(spec.op[1:], selector)})"
        expr = f"({expr}) {spec.op[0]} ({other})"
    elif spec.op == "lost":
        expr = f"({expr}) == 0"
    return expr


def queries(view: str, selector: str, host: str | None = None,
            present: frozenset[str] | None = None) -> dict[str, str]:
    """name -> PromQL for one refresh of ``view``; ``host``: that host's series only
    (the full view of one opened host); ``present``: the limit metrics the server has
    (present_query; None: all), a brief view asks for no field it could not filter."""
    if host is not None:
        quoted = host.replace("\\", "\\\\").replace('"', '\\"')
        # The host's name may be on Hostname, hostname or (no name label) instance.
        selectors = [f'{selector + ", " if selector else ""}{label}="{quoted}"'
                     for label in ("Hostname", "hostname", "instance")]
    else:
        selectors = [selector]
    out: dict[str, str] = {}
    for spec in FIELDS:
        if view in spec.views and not (view == OVERVIEW and spec.overview == "skip"):
            kind = _filter(spec, view)
            if kind and not _compares(kind, present):
                continue  # only on hot or capped cards, and none can be told here
            out[spec.name] = " or ".join(f"({field_query(spec, s, view, present)})"
                                         for s in selectors)
    per_selector = [_host_queries(s) for s in selectors]
    for name in per_selector[0]:
        out[name] = " or ".join(f"({q[name]})" for q in per_selector)
    return out


def _host_queries(selector: str) -> dict[str, str]:
    def m(metric: str) -> str:
        return _sel(metric, selector)

    def names(pattern: str) -> str:
        return _sel("", selector, f'__name__=~"{pattern}"')

    up = m("up")
    return {
        # The identity of the cards DCGM's memory does not carry (nvidia_gpu_exporter's,
        # gputop serve's lost ones); one selector, no `or` of two big vectors.
        "_identity": (f"group by ({IDENTITY}, index, name, driver_version) "
                      f"({_sel('', selector, IDENTITY_NAMES)})"),
        "_host_info": (f"group by ({HOST_KEY}, driver_version, cuda_version) "
                       f"({m('gputop_host_info')})"),
        "_gputop_up": f"max by ({HOST_KEY}) ({m('gputop_up')})",
        "_age": f"max by ({HOST_KEY}) ({m('gputop_snapshot_age_seconds')})",
        "_warning": f"max by ({HOST_KEY}, severity, code, gpu) ({m('gputop_warning')} == 1)",
        "_proc_mem": (f"max by ({HOST_KEY}, gpu, pid, user, command, workload) "
                      f"({m('gputop_process_gpu_memory_bytes')})"),
        "_proc_sm": f"max by ({HOST_KEY}, gpu, pid) ({m('gputop_process_sm_util')})",
        "_reserved": (f"max by ({HOST_KEY}, gpu, owner, UUID, GPU_I_ID) "
                      f"({m('gputop_gpu_reserved_until_timestamp_seconds')})"),
        # The cards seen within LOST_LOOKBACK and gone now, by instance, gpu and UUID
        # only: a renamed host label (Hostname to hostname) is the same card.  A dead
        # exporter's cards are not lost: the host is unreachable (host-state).
        "_vanished": (
            f"group by ({HOST_KEY}, gpu, uuid, UUID, modelName) "
            f"(last_over_time({names(CARD_SEEN)}[{LOST_LOOKBACK}])) "
            f"unless on (instance, gpu, UUID, uuid) {names(CARD_NOW)} "
            f"and on (instance) ({up} == 1)"),
        # Every target (a dead one is a host only if it had GPU series) and when each
        # was last scraped; one host's view asks for its own targets only.
        "_up": f'label_replace(timestamp({up}), "_scraped", "1", "", "") or {up}',
    }


def dead_query(instances: list[str], selector: str) -> str:
    """Which of these dead targets had GPU series lately, and under which host name."""
    pattern = "|".join(_regex_quote(i) for i in instances)
    extra = f'instance=~"{pattern}"'
    inner = ", ".join(p for p in (selector, extra) if p)
    return (f"group by ({HOST_KEY}) (last_over_time("
            f'{{__name__=~"{GPU_METRICS}", {inner}}}[{DEAD_LOOKBACK}]))')


def _regex_quote(text: str) -> str:
    out = []
    for c in text:
        if c in "\\.^$*+?()[]{}|":
            out.append("\\\\" + c)  # a regex escape, itself escaped for the string
        elif c == '"':
            out.append('\\"')
        else:
            out.append(c)
    return "".join(out)


# What the sparklines draw, per field, for the dashboard's backfill (query_range).
HISTORY_FIELDS = ("util_gpu", "mem_used", "_mem_free", "mem_reserved", "mem_total")


def history_queries(selector: str) -> dict[str, str]:
    by_name = {f.name: f for f in FIELDS}
    return {name: field_query(by_name[name], selector, FULL) for name in HISTORY_FIELDS}
