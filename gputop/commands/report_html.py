"""The report as one self-contained HTML file: inline CSS and SVG charts, no scripts, no
fonts, no external references, so that it reads the same when mailed."""

from __future__ import annotations

import html
import time
from collections import defaultdict
from typing import Any

from gputop.commands.report_formats import cell, sections
from gputop.ledger.report import amount, when

CSS = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}
td,th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}
td.s,th.s{text-align:left}
.summary{background:#f4f6f8;padding:10px 14px;border-radius:4px}
svg text{font-family:sans-serif;font-size:11px;fill:#333}
"""
_HOST_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf")
_BUSY, _IDLE, _HELD = "#2ca02c", "#d62728", "#bbbbbb"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def render_html(doc: dict[str, Any]) -> str:
    title = f"GPU usage {when(doc['from'])} to {when(doc['to'])}"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>", f'<p class="summary">{_e(doc["summary"])}</p>',
        "<h2>Utilisation over time, per host (hourly mean)</h2>", _util_chart(doc),
        f"<h2>GPU-hours held per {_e(doc['by'])}: busy, idle-held, other</h2>",
        _stacked_bars(doc),
        "<h2>Mean utilisation by GPU and hour of the week</h2>", _heatmap(doc),
    ]
    for heading, key, columns in sections(doc):
        parts.append(f"<h2>{_e(heading)}</h2>")
        if not doc[key]:
            parts.append("<p>(none)</p>")
            continue
        head = "".join(f'<th class="{"s" if k == "s" else "n"}">{_e(h)}</th>'
                       for h, _f, _w, k in columns)
        rows = "".join(
            "<tr>" + "".join(f'<td class="{"s" if k == "s" else "n"}">{_e(cell(row[f], k))}</td>'
                             for _h, f, _w, k in columns) + "</tr>"
            for row in doc[key])
        parts.append(f"<table><tr>{head}</tr>{rows}</table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _util_chart(doc: dict[str, Any]) -> str:
    """Hourly means per host as steps (each hour drawn across its width), over the hours
    that have samples: eight minutes of data is one hour wide, not a dot in a week."""
    series: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    for h in doc["hourly"]:
        acc = series[h["host"]][int(h["hour"])]
        acc[0] += h["mean_util_pct"] * h["seconds"]
        acc[1] += h["seconds"]
    hours = [hour for by_hour in series.values() for hour, (_s, d) in by_hour.items() if d > 0]
    if not hours:
        return "<p>(no samples)</p>"
    w, ht, left, top = 900, 200, 40, 10
    t0, t1 = min(hours), max(hours) + 3600
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w + left + 10}" '
           f'height="{ht + 48}" role="img" aria-label="utilisation over time">']
    for pct in (0, 50, 100):
        y = top + ht - ht * pct / 100
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{pct}%</text>')

    def x(t: float) -> str:
        return f"{left + w * (t - t0) / (t1 - t0):.1f}"

    for n, (host, by_hour) in enumerate(sorted(series.items())):
        steps = []
        for hour, (s, d) in sorted(by_hour.items()):
            if d > 0:
                level = f"{top + ht - ht * (s / d) / 100:.1f}"
                steps.append(f"{x(hour)},{level} {x(hour + 3600)},{level}")
        colour = _HOST_COLOURS[n % len(_HOST_COLOURS)]
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                   f'points="{" ".join(steps)}"/>')
        out.append(f'<text x="{left + 10 + 160 * n}" y="{top + ht + 30}" fill="{colour}">'
                   f"■ {_e(host)}</text>")
    out.append(f'<text x="{left}" y="{top + ht + 15}">{_e(when(t0))}</text>'
               f'<text x="{left + w}" y="{top + ht + 15}" text-anchor="end">{_e(when(t1))}</text>')
    out.append("</svg>")
    return "".join(out)


def _stacked_bars(doc: dict[str, Any]) -> str:
    groups = doc["groups"][:20]
    if not groups:
        return "<p>(no processes)</p>"
    top = max(g["gpu_hours_held"] for g in groups) or 1.0
    label_w, w, bar = 160, 640, 18
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + w + 120}" '
           f'height="{len(groups) * (bar + 6) + 30}" role="img" aria-label="GPU-hours per group">']
    for n, g in enumerate(groups):
        y = n * (bar + 6)
        busy, idle = g["gpu_hours_busy"], g["gpu_hours_held_idle"]
        other = max(g["gpu_hours_held"] - busy - idle, 0.0)
        x = label_w
        out.append(f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end">'
                   f"{_e(cell(g['name'], 's'))}</text>")
        for value, colour in ((busy, _BUSY), (idle, _IDLE), (other, _HELD)):
            width = w * value / top
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{bar}" '
                       f'fill="{colour}"><title>{amount(value)} GPU-h</title></rect>')
            x += width
        out.append(f'<text x="{x + 6:.1f}" y="{y + 13}">{amount(g["gpu_hours_held"])} GPU-h'
                   "</text>")
    y = len(groups) * (bar + 6) + 16
    out.append(f'<text x="{label_w}" y="{y}"><tspan fill="{_BUSY}">■</tspan> busy '
               f'<tspan fill="{_IDLE}">■</tspan> held idle '
               f'<tspan fill="{_HELD}">■</tspan> held, other</text>')
    out.append("</svg>")
    return "".join(out)


def _shade(util: float) -> str:
    """A card's hour from light grey-blue (0 %, still visibly a sample) to dark blue."""
    f = max(0.0, min(util, 100.0)) / 100.0
    r, g, b = (round(a + (z - a) * f) for a, z in ((205, 8), (216, 48), (232, 160)))
    return f"rgb({r},{g},{b})"


def _heatmap(doc: dict[str, Any]) -> str:
    cells: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    for h in doc["hourly"]:
        local = time.localtime(h["hour"])
        acc = cells[f"{h['host']}:{h['gpu']}"][local.tm_wday * 24 + local.tm_hour]
        acc[0] += h["mean_util_pct"] * h["seconds"]
        acc[1] += h["seconds"]
    if not cells:
        return "<p>(no samples)</p>"
    label_w, cw, ch = 160, 5, 14
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + 168 * cw + 10}" '
           f'height="{len(cells) * ch + 56}" role="img" aria-label="GPU by hour of week">']
    for n, (gpu, hours) in enumerate(sorted(cells.items())):
        y = n * ch
        out.append(f'<text x="{label_w - 6}" y="{y + 11}" text-anchor="end">{_e(gpu)}</text>'
                   f'<rect x="{label_w}" y="{y}" width="{168 * cw}" height="{ch - 1}" '
                   'fill="none" stroke="#eee"/>')
        for slot, (s, d) in sorted(hours.items()):
            if d <= 0:
                continue
            util = s / d
            out.append(f'<rect x="{label_w + slot * cw}" y="{y}" width="{cw}" height="{ch - 1}" '
                       f'fill="{_shade(util)}"><title>{util:.0f}%</title></rect>')
    y = len(cells) * ch + 14
    for day, name in enumerate(("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")):
        out.append(f'<text x="{label_w + day * 24 * cw}" y="{y}">{name}</text>')
    # The colour legend: 0 % to 100 % in steps, and what a blank hour means.
    y += 10
    out.append(f'<text x="{label_w - 6}" y="{y + 11}" text-anchor="end">mean util</text>')
    for n, pct in enumerate(range(0, 101, 10)):
        out.append(f'<rect x="{label_w + n * 24}" y="{y}" width="24" height="{ch - 1}" '
                   f'fill="{_shade(pct)}"/>')
        if pct % 50 == 0:
            out.append(f'<text x="{label_w + n * 24}" y="{y + ch + 10}">{pct}%</text>')
    out.append(f'<text x="{label_w + 11 * 24 + 12}" y="{y + 11}">blank: no samples in that'
               " hour</text>")
    out.append("</svg>")
    return "".join(out)
