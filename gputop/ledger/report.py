"""The report's numbers from a period's usage: pure, no I/O.

``build(usage, by)`` is the JSON document (docs/ledger.md); every other format is drawn
from it, so csv and json carry every number the text shows.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from typing import Any

from gputop.analysis.cost import CostRates
from gputop.analysis.durations import format_duration
from gputop.ledger.query import HolderUsage, ProcUsage, Usage

REPORT_SCHEMA = 1
GROUPINGS = ("user", "workload", "gpu", "host")
HOUR = 3600.0
KWH = 3.6e6  # joules


def _hours(seconds: float) -> float:
    return round(seconds / HOUR, 3)


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 1) if whole > 0 else 0.0


_KEYS: dict[str, Callable[[ProcUsage], str]] = {
    "user": lambda p: p.user or "(unknown)",
    "workload": lambda p: p.workload or "(none)",
    "gpu": lambda p: f"{p.host}:{p.gpu}",
    "host": lambda p: p.host,
}


def build(usage: Usage, by: str = "user", top: int = 10, cost: CostRates | None = None,
          members: Mapping[str, Collection[str]] | None = None) -> dict[str, Any]:
    """The document; with ``cost`` (the policy's rates) it carries what the period cost per
    group, user, Unix group (``members``: group -> users) and GPU model."""
    groups = _groups(usage, by)
    gpus = _gpus(usage)
    hosts = _hosts(gpus)
    totals = _totals(usage, gpus)
    doc: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "from": usage.t_from,
        "to": usage.t_to,
        "idle_mem_bytes": usage.idle_mem,
        "by": by,
        "totals": totals,
        "groups": groups,
        "idle_holds": _idle_holds(usage, top),
        "gpus": gpus,
        "hosts": hosts,
        "hourly": [
            {"host": h, "gpu": g, "hour": hour * 3600, "seconds": dur,
             "mean_util_pct": round(util_s / dur, 1) if dur else 0.0}
            for h, g, hour, dur, util_s in usage.hourly
        ],
        "events": [
            {"host": e.host, "gpu": e.gpu, "time": e.t, "kind": e.kind, "code": e.code,
             "severity": e.severity, "message": e.message}
            for e in usage.events
        ],
    }
    if cost is not None:
        _add_cost(doc, usage, by, cost, members or {})
    doc["summary"] = summary(doc)
    return doc


def _add_cost(doc: dict[str, Any], usage: Usage, by: str, cost: CostRates,
              members: Mapping[str, Collection[str]]) -> None:
    """One rule for what is charged, the quotas' (issue 38.5): a user pays for the cards
    they held, by their processes or their reservations, each card once per moment for
    them (holder rows of kind 'quota', what ``query.charged_seconds`` sums), at the card's
    rate.  A GPU, a host, a GPU model and the total are the sums of what was charged on
    them, so that every table adds up to the same total; each figure is rounded once,
    from the exact sum."""
    per: dict[str, dict[str, list[float]]] = {k: defaultdict(lambda: [0.0, 0.0])
                                               for k in ("user", "model", "gpu", "host",
                                                         "workload")}
    cards: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for h in usage.holders:
        hours, rate = h.held_s / HOUR, cost.rate(h.gpu_name)
        if h.kind == "workload":
            _acc(per["workload"][h.name or "(none)"], hours, rate)
        if h.kind != "quota":
            continue
        model = cost.model(h.gpu_name)
        _acc(per["user"][h.name or "(unknown)"], hours, rate)
        _acc(per["model"][model], hours, rate)
        _acc(per["gpu"][f"{h.host}:{h.gpu}"], hours, rate)
        _acc(per["host"][h.host], hours, rate)
        cards[model].add((h.host, h.gpu))
    group_of = {"user": per["user"], "workload": per["workload"], "gpu": per["gpu"],
                "host": per["host"]}[by]
    for g in doc["groups"]:
        g["cost"] = round(group_of[g["name"]][1], 2)
    for g in doc["gpus"]:
        g["cost"] = round(per["gpu"][f"{g['host']}:{g['gpu']}"][1], 2)
    for h in doc["hosts"]:
        h["cost"] = round(per["host"][h["host"]][1], 2)
    users = per["user"]
    unix_groups = {group: [sum(users[u][i] for u in set(names) if u in users) for i in (0, 1)]
                   for group, names in members.items()}
    doc["cost"] = {"currency": cost.currency, "default_per_gpu_hour": cost.default,
                   "per_gpu_hour": dict(cost.per_gpu_hour),
                   "total": round(sum(v[1] for v in users.values()), 2)}
    doc["totals"]["cost"] = doc["cost"]["total"]
    doc["totals"]["gpu_hours_charged"] = _hours(sum(v[0] for v in users.values()) * HOUR)
    doc["cost_by_user"] = _cost_rows(users)
    doc["cost_by_unix_group"] = [r for r in _cost_rows(unix_groups)
                                 if r["gpu_hours_charged"] > 0]
    doc["cost_by_model"] = [
        {"model": model, "gpus": len(cards[model]), "gpu_hours_charged": _hours(hours * HOUR),
         "per_gpu_hour": cost.per_gpu_hour.get(model, cost.default), "cost": round(amount_, 2)}
        for model, (hours, amount_) in sorted(per["model"].items(), key=lambda kv: -kv[1][1])]


def _acc(acc: list[float], hours: float, rate: float) -> None:
    acc[0] += hours
    acc[1] += hours * rate


def _cost_rows(sums: Mapping[str, list[float]]) -> list[dict[str, Any]]:
    return [{"name": name, "gpu_hours_charged": _hours(hours * HOUR), "cost": round(spent, 2)}
            for name, (hours, spent) in sorted(sums.items(), key=lambda kv: (-kv[1][1], kv[0]))]


# Which holder rows (query.HolderUsage) a grouping counts, and their group's name.
_HOLDER_KIND = {"user": "user", "workload": "workload", "gpu": "card", "host": "card"}
_HOLDER_KEYS: dict[str, Callable[[HolderUsage], str]] = {
    "user": lambda h: h.name or "(unknown)",
    "workload": lambda h: h.name or "(none)",
    "gpu": lambda h: f"{h.host}:{h.gpu}",
    "host": lambda h: h.host,
}


def _groups(usage: Usage, by: str) -> list[dict[str, Any]]:
    """Per group: card-hours held (a card counted once per moment, however many of the
    group's processes were on it), and beside them the per-process sums."""
    key = _KEYS[by]
    sums: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"held_s": 0.0, "busy_s": 0.0, "idle_s": 0.0, "sm_s": 0.0, "mem_max": 0,
                 "energy_j": 0.0, "procs": set(), "proc_held_s": 0.0})
    for p in usage.procs:
        s = sums[key(p)]
        s["proc_held_s"] += p.held_s
        s["mem_max"] = max(s["mem_max"], p.mem_max or 0)
        s["energy_j"] += p.energy_j
        s["procs"].add((p.host, p.pid, p.start))
    kind, holder_key = _HOLDER_KIND[by], _HOLDER_KEYS[by]
    for h in usage.holders:
        if h.kind == kind:
            s = sums[holder_key(h)]
            s["held_s"] += h.held_s
            s["busy_s"] += h.busy_s
            s["idle_s"] += h.idle_s
            s["sm_s"] += h.sm_s
    ranked = sorted(sums.items(), key=lambda kv: (-kv[1]["held_s"], kv[0]))
    return [
        {
            "rank": n,
            "name": name,
            "gpu_hours_held": _hours(s["held_s"]),
            "gpu_hours_busy": _hours(s["busy_s"]),
            "gpu_hours_held_idle": _hours(s["idle_s"]),
            "mean_sm_pct_held": round(s["sm_s"] / s["held_s"], 1) if s["held_s"] else 0.0,
            "peak_mem_bytes": s["mem_max"],
            "processes": len(s["procs"]),
            "process_gpu_hours_held": _hours(s["proc_held_s"]),
            "energy_kwh": round(s["energy_j"] / KWH, 4),
        }
        for n, (name, s) in enumerate(ranked, 1)
    ]


def _idle_holds(usage: Usage, top: int) -> list[dict[str, Any]]:
    worst = sorted((p for p in usage.procs if p.idle_s > 0),
                   key=lambda p: (-p.idle_s, p.host, p.gpu, p.pid))[:top]
    return [
        {"user": p.user, "host": p.host, "gpu": p.gpu, "pid": p.pid, "workload": p.workload,
         "command": p.command, "idle_hours": _hours(p.idle_s), "held_hours": _hours(p.held_s),
         "peak_mem_bytes": p.mem_max, "first_seen": p.first, "last_seen": p.last}
        for p in worst
    ]


def _gpus(usage: Usage) -> list[dict[str, Any]]:
    counts: dict[tuple[str, int | None, str], int] = defaultdict(int)
    for e in usage.events:
        counts[(e.host, e.gpu, e.kind)] += 1
    rows = []
    for g in sorted(usage.gpus, key=lambda g: (g.host, g.gpu)):
        free = max(g.recorded_s - g.busy_s - g.held_idle_s, 0.0)
        rows.append({
            "host": g.host, "gpu": g.gpu, "name": g.name,
            "hours_recorded": _hours(g.recorded_s),
            "busy_pct": _pct(g.busy_s, g.recorded_s),
            "held_idle_pct": _pct(g.held_idle_s, g.recorded_s),
            "free_pct": _pct(free, g.recorded_s),
            "gpu_hours_busy": _hours(g.busy_s),
            "gpu_hours_held_idle": _hours(g.held_idle_s),
            "gpu_hours_free": _hours(free),
            "mean_util_pct": round(g.util_s / g.recorded_s, 1) if g.recorded_s else 0.0,
            "peak_mem_bytes": g.mem_max,
            "energy_kwh": round(g.energy_j / KWH, 4),
            "warnings": counts[(g.host, g.gpu, "warning")],
            "xids": counts[(g.host, g.gpu, "xid")],
        })
    return rows


def _hosts(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for g in gpus:
        by_host[g["host"]].append(g)
    rows = []
    for host, cards in sorted(by_host.items()):
        recorded = sum(g["hours_recorded"] for g in cards)
        busy = sum(g["gpu_hours_busy"] for g in cards)
        idle = sum(g["gpu_hours_held_idle"] for g in cards)
        rows.append({
            "host": host, "gpus": len(cards), "gpu_hours_recorded": round(recorded, 3),
            "busy_pct": _pct(busy, recorded), "held_idle_pct": _pct(idle, recorded),
            "free_pct": _pct(max(recorded - busy - idle, 0.0), recorded),
            "energy_kwh": round(sum(g["energy_kwh"] for g in cards), 4),
            "warnings": sum(g["warnings"] for g in cards),
            "xids": sum(g["xids"] for g in cards),
        })
    return rows


def _totals(usage: Usage, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "hosts": len({g["host"] for g in gpus}),
        "gpus": len(gpus),
        "gpu_hours_recorded": _hours(sum(g.recorded_s for g in usage.gpus)),
        "gpu_hours_busy": _hours(sum(g.busy_s for g in usage.gpus)),
        "gpu_hours_held_idle": _hours(sum(g.held_idle_s for g in usage.gpus)),
        "gpu_hours_held": _hours(sum(h.held_s for h in usage.holders if h.kind == "card")),
        "process_gpu_hours_held": _hours(sum(p.held_s for p in usage.procs)),
        "process_gpu_hours_held_idle": _hours(sum(p.idle_s for p in usage.procs)),
        "energy_kwh": round(sum(g.energy_j for g in usage.gpus) / KWH, 4),
        "processes": len({(p.host, p.pid, p.start) for p in usage.procs}),
        "users": len({p.user for p in usage.procs if p.user}),
        "warnings": sum(1 for e in usage.events if e.kind == "warning"),
        "xids": sum(1 for e in usage.events if e.kind == "xid"),
    }


def amount(value: float) -> str:
    """Hours and kWh with the digits their size needs: a tenth of a kWh split over five
    users is 0.02 each, not five times 0.0; a non-zero amount never shows as 0."""
    if value == 0:
        return "0"
    if abs(value) < 0.01:
        return "<0.01"
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def money(value: float, currency: str) -> str:
    return f"{value:.2f} {currency}".rstrip()


def when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def summary(doc: dict[str, Any]) -> str:
    """The one paragraph at the top of every format."""
    t = doc["totals"]
    recorded = t["gpu_hours_recorded"]
    text = (
        f"From {when(doc['from'])} to {when(doc['to'])}, {t['gpus']} GPU(s) on "
        f"{t['hosts']} host(s) were recorded for {amount(recorded)} GPU-hours: "
        f"{_pct(t['gpu_hours_busy'], recorded)} % busy, "
        f"{_pct(t['gpu_hours_held_idle'], recorded)} % held by processes doing nothing. "
        f"{t['users']} user(s) ran {t['processes']} GPU process(es) using "
        f"{amount(t['energy_kwh'])} kWh."
    )
    if doc["idle_holds"]:
        w = doc["idle_holds"][0]
        text += (
            f" The longest idle hold: {w['user'] or 'an unknown user'}'s pid {w['pid']} on "
            f"{w['host']} GPU {w['gpu']}, idle {format_duration(w['idle_hours'] * HOUR)}."
        )
    if t["xids"] or t["warnings"]:
        text += f" {t['xids']} XID event(s) and {t['warnings']} new warning(s)."
    if "cost" in doc:
        text += f" Cost: {money(doc['cost']['total'], doc['cost']['currency'])}."
    return text
