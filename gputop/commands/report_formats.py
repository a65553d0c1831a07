"""The report document (gputop.ledger.report.build) as text, Markdown, CSV or JSON; HTML
is report_html.  Untrusted text (users, commands, hosts) is escaped in every format."""

from __future__ import annotations

import csv
import io
import json
import textwrap
from typing import Any

from gputop.analysis.durations import format_duration
from gputop.ledger.report import HOUR, amount, when
from gputop.text import visible

WIDTH = 100
GIB = 1024**3

# (title, key in the document, columns: (heading, field, width, format))
_Column = tuple[str, str, int, str]
_GROUP_COLUMNS: list[_Column] = [
    ("#", "rank", 3, "d"), ("{by}", "name", 16, "s"), ("GPU-h held", "gpu_hours_held", 10, "h"),
    ("busy", "gpu_hours_busy", 7, "h"), ("idle", "gpu_hours_held_idle", 7, "h"),
    ("proc GPU-h", "process_gpu_hours_held", 10, "h"),
    ("SM %", "mean_sm_pct_held", 5, ".1f"), ("peak mem", "peak_mem_bytes", 9, "mem"),
    ("procs", "processes", 5, "d"), ("kWh", "energy_kwh", 7, "h"),
]
# Under the groups table: what its hour columns count.
GROUP_NOTE = ("GPU-h held, busy, idle: card-hours, a card counted once however many of the"
              " group's processes were on it; proc GPU-h: summed per process.")
_HOLD_COLUMNS: list[_Column] = [
    ("user", "user", 12, "s"), ("host", "host", 14, "s"), ("GPU", "gpu", 3, "d"),
    ("pid", "pid", 8, "d"), ("idle", "idle_hours", 7, "dur"), ("held", "held_hours", 7, "dur"),
    ("peak mem", "peak_mem_bytes", 9, "mem"), ("command", "command", 33, "s"),
]
_GPU_COLUMNS: list[_Column] = [
    ("host", "host", 16, "s"), ("GPU", "gpu", 3, "d"), ("name", "name", 16, "s"),
    ("hours", "hours_recorded", 7, "h"), ("busy %", "busy_pct", 6, ".1f"),
    ("idle-held %", "held_idle_pct", 11, ".1f"), ("free %", "free_pct", 6, ".1f"),
    ("kWh", "energy_kwh", 7, "h"), ("warn", "warnings", 4, "d"), ("XID", "xids", 4, "d"),
]
_HOST_COLUMNS: list[_Column] = [
    ("host", "host", 22, "s"), ("GPUs", "gpus", 4, "d"),
    ("GPU-hours", "gpu_hours_recorded", 9, "h"), ("busy %", "busy_pct", 6, ".1f"),
    ("idle-held %", "held_idle_pct", 11, ".1f"), ("free %", "free_pct", 6, ".1f"),
    ("kWh", "energy_kwh", 8, "h"), ("warn", "warnings", 4, "d"), ("XID", "xids", 4, "d"),
]


_COST_COLUMN: _Column = ("cost", "cost", 9, "money")
_COST_ROWS: list[_Column] = [("name", "name", 24, "s"),
                             ("GPU-h charged", "gpu_hours_charged", 13, "h"), _COST_COLUMN]
_MODEL_COLUMNS: list[_Column] = [
    ("GPU model", "model", 24, "s"), ("GPUs", "gpus", 4, "d"),
    ("GPU-h charged", "gpu_hours_charged", 13, "h"), ("per GPU-h", "per_gpu_hour", 9, ".2f"),
    _COST_COLUMN,
]


def sections(doc: dict[str, Any]) -> list[tuple[str, str, list[_Column]]]:
    by = doc["by"]
    columns: list[_Column] = [(h.format(by=by), *rest)  # type: ignore[misc]
                              for h, *rest in _GROUP_COLUMNS]
    costed = "cost" in doc
    extra = [_COST_COLUMN] if costed else []
    out = [
        (f"By {by}", "groups", columns + extra),
        ("Worst idle holds", "idle_holds", _HOLD_COLUMNS),
        ("Per GPU", "gpus", _GPU_COLUMNS + extra),
        ("Per host", "hosts", _HOST_COLUMNS + extra),
    ]
    if costed:
        currency = doc["cost"]["currency"]
        out += [
            (f"Cost per user ({currency})", "cost_by_user", _COST_ROWS),
            (f"Cost per Unix group ({currency})", "cost_by_unix_group", _COST_ROWS),
            (f"Cost per GPU model ({currency})", "cost_by_model", _MODEL_COLUMNS),
        ]
    return out


def cell(value: Any, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "mem":
        return f"{value / GIB:.1f} GiB"
    if kind == "dur":
        return format_duration(value * HOUR)
    if kind == "h":
        return amount(value)
    if kind == "money":
        return f"{value:.2f}"
    if kind == "s":
        return visible(str(value))
    return format(value, kind)


def render(doc: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    if fmt == "csv":
        return _csv(doc)
    if fmt == "md":
        return _markdown(doc)
    if fmt == "html":
        from gputop.commands.report_html import render_html

        return render_html(doc)
    return _text(doc)


def _title(doc: dict[str, Any]) -> str:
    return f"GPU usage {when(doc['from'])} to {when(doc['to'])}"


def _text(doc: dict[str, Any]) -> str:
    out = [_title(doc), "", *textwrap.wrap(doc["summary"], WIDTH)]
    for title, key, columns in sections(doc):
        out += ["", title]
        rows = doc[key]
        if not rows:
            out.append("  (none)")
            continue
        out.append(" ".join(_fit(h, w, k) for h, _f, w, k in columns).rstrip())
        for row in rows:
            out.append(" ".join(_fit(cell(row[f], k), w, k) for _h, f, w, k in columns).rstrip())
        if key == "groups":
            out += textwrap.wrap(GROUP_NOTE, WIDTH)
    return "\n".join(line[:WIDTH] for line in out) + "\n"


def _fit(text: str, width: int, kind: str) -> str:
    text = text if len(text) <= width else text[: width - 1] + "…"
    return text.ljust(width) if kind == "s" else text.rjust(width)


def _markdown(doc: dict[str, Any]) -> str:
    out = [f"# {_title(doc)}", "", md_escape(doc["summary"])]
    for title, key, columns in sections(doc):
        out += ["", f"## {title}", ""]
        if not doc[key]:
            out.append("(none)")
            continue
        out.append("| " + " | ".join(h for h, *_ in columns) + " |")
        out.append("|" + "|".join("---" for _ in columns) + "|")
        for row in doc[key]:
            out.append("| " + " | ".join(md_escape(cell(row[f], k))
                                         for _h, f, _w, k in columns) + " |")
        if key == "groups":
            out += ["", md_escape(GROUP_NOTE)]
    return "\n".join(out) + "\n"


def md_escape(text: str) -> str:
    """Markdown's own characters escaped; & < > as entities, so that no renderer (nor a
    mail client showing the source as HTML) sees a tag in a user's or a command's text."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for ch in "\\|*_`[]#":
        text = text.replace(ch, "\\" + ch)
    return text


def _csv(doc: dict[str, Any]) -> str:
    """Every table with every number: a ``section`` column first, one header per section."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["section", "name", "value"])
    for name, value in doc["totals"].items():
        writer.writerow(["totals", name, value])
    if "cost" in doc:
        writer.writerow(["totals", "currency", csv_cell(doc["cost"]["currency"])])
    for key in ("groups", "idle_holds", "gpus", "hosts", "hourly", "events", "cost_by_user",
                "cost_by_unix_group", "cost_by_model"):
        rows = doc.get(key)
        if not rows:
            continue
        writer.writerow([])
        fields = list(rows[0])
        writer.writerow(["section", *fields])
        for row in rows:
            writer.writerow([key, *(csv_cell(row[f]) for f in fields)])
    return buf.getvalue()


def csv_cell(value: Any) -> Any:
    # A cell starting with = + - @ is a formula to a spreadsheet: commands are untrusted.
    if isinstance(value, str):
        value = visible(value)
        if value[:1] in ("=", "+", "-", "@"):
            return "'" + value
    return value
