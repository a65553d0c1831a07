"""`gputop report --jobs`: one entry per `gputop run` job and per Slurm job of the period,
with its GPUs' use and the advice that applies (analysis/jobstats.py), in every format.
Untrusted text (users, job names, commands, hosts) is escaped in each."""

from __future__ import annotations

import csv
import html
import io
import json
from dataclasses import asdict
from typing import Any

from gputop.analysis.durations import format_duration
from gputop.analysis.jobstats import Job, recommendations
from gputop.commands.report_formats import csv_cell, md_escape
from gputop.ledger.report import when
from gputop.text import visible

GIB = 1024**3
JOBS_SCHEMA = 1


def build(jobs: list[Job], t_from: float, t_to: float) -> dict[str, Any]:
    return {"schema": JOBS_SCHEMA, "from": t_from, "to": t_to,
            "jobs": [dict(asdict(job), gpus=[asdict(g) for g in job.gpus],
                          recommendations=recommendations(job)) for job in jobs]}


def _dur(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} %"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / GIB:.1f} GiB"


def _head(job: dict[str, Any]) -> list[str]:
    """The job's fields as text cells (not yet escaped for a format)."""
    status = job["status"] or "-"
    if job.get("cancelled_by"):
        status += f" by {job['cancelled_by']}"
    return [job["kind"], job["id"], job["user"] or "?", job["host"], status,
            _dur(job["runtime_s"]), _dur(job["requested_s"]), _dur(job["wait_s"]),
            str(len(job["gpus"])), job["name"] or ""]


HEAD = ["kind", "job", "user", "host", "status", "ran", "limit", "waited", "GPUs", "name"]


def _gpu_cells(g: dict[str, Any]) -> list[str]:
    return [str(g["gpu"]), g["name"] or "-", _pct(g["mean_sm"]), _pct(g["peak_sm"]),
            _gib(g["mean_mem"]), _gib(g["peak_mem"]), _gib(g["mem_total"])]


GPU_HEAD = ["GPU", "model", "mean SM", "peak SM", "mean mem", "peak mem", "card"]


def render(doc: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    title = f"Jobs {when(doc['from'])} to {when(doc['to'])}"
    if fmt == "csv":
        return _csv(doc)
    if fmt == "md":
        return _md(doc, title)
    if fmt == "html":
        return _html(doc, title)
    return _text(doc, title)


def _text(doc: dict[str, Any], title: str) -> str:
    out = [title, ""]
    if not doc["jobs"]:
        out.append("(no jobs in this period)")
    for job in doc["jobs"]:
        kind, jid, user, host, status, ran, limit, waited, n, name = (
            visible(c) for c in _head(job))
        tries = f", {job['attempts']} attempts" if job["attempts"] > 1 else ""
        out.append(f"{kind} {jid[:16]}  {user[:20]} on {host[:24]}  {status}  ran {ran}"
                   f" (limit {limit}, waited {waited}), {n} GPU(s){tries}")
        if name:
            out.append(f"  {name[:96]}")
        for g in job["gpus"]:
            gpu, model, mean_sm, peak_sm, mean_mem, peak_mem, card = (
                visible(c) for c in _gpu_cells(g))
            out.append(f"  GPU {gpu:>2} {model[:22]:<22} SM mean {mean_sm:>5} peak {peak_sm:>5}"
                       f"  mem mean {mean_mem:>9} peak {peak_mem:>9} of {card}")
        out += [f"  -> {line}" for line in job["recommendations"]]
        out.append("")
    return "\n".join(line[:100] for line in out).rstrip("\n") + "\n"


def _md(doc: dict[str, Any], title: str) -> str:
    out = [f"# {md_escape(title)}", ""]
    if not doc["jobs"]:
        out.append("(no jobs in this period)")
    for job in doc["jobs"]:
        cells = [md_escape(visible(c)) for c in _head(job)]
        out += [f"## {cells[0]} {cells[1]}", "", "| " + " | ".join(HEAD) + " |",
                "|" + "|".join("---" for _ in HEAD) + "|", "| " + " | ".join(cells) + " |", ""]
        if job["gpus"]:
            out += ["| " + " | ".join(GPU_HEAD) + " |", "|" + "|".join("---" for _ in GPU_HEAD)
                    + "|"]
            out += ["| " + " | ".join(md_escape(visible(c)) for c in _gpu_cells(g)) + " |"
                    for g in job["gpus"]]
            out.append("")
        out += [f"- {md_escape(line)}" for line in job["recommendations"]]
        out.append("")
    return "\n".join(out)


def _csv(doc: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*HEAD, *GPU_HEAD, "recommendations"])
    for job in doc["jobs"]:
        head = [csv_cell(c) for c in _head(job)]
        advice = csv_cell(" | ".join(job["recommendations"]))
        for g in job["gpus"] or [None]:
            cells = [""] * len(GPU_HEAD) if g is None else [csv_cell(c) for c in _gpu_cells(g)]
            writer.writerow([*head, *cells, advice])
    return buf.getvalue()


def _e(text: str) -> str:
    return html.escape(visible(text), quote=True)


def _html(doc: dict[str, Any], title: str) -> str:
    from gputop.commands.report_html import CSS

    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{_e(title)}</h1>"]
    if not doc["jobs"]:
        parts.append("<p>(no jobs in this period)</p>")
    for job in doc["jobs"]:
        cells = _head(job)
        parts.append(f"<h2>{_e(cells[0])} {_e(cells[1])}</h2><table><tr>"
                     + "".join(f'<th class="s">{_e(h)}</th>' for h in HEAD) + "</tr><tr>"
                     + "".join(f'<td class="s">{_e(c)}</td>' for c in cells) + "</tr></table>")
        if job["gpus"]:
            parts.append("<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in GPU_HEAD)
                         + "</tr>" + "".join(
                             "<tr>" + "".join(f"<td>{_e(c)}</td>" for c in _gpu_cells(g))
                             + "</tr>" for g in job["gpus"]) + "</table>")
        if job["recommendations"]:
            parts.append("<ul>" + "".join(f"<li>{_e(line)}</li>"
                                          for line in job["recommendations"]) + "</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
