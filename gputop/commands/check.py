"""`gputop check`: the health warnings of every host; exit 0 ok, 1 warning, 2 critical.

Made for cron and monitoring scripts: one round of snapshots, no Textual.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import TextIO

from gputop.commands import common
from gputop.commands.arguments import add_json
from gputop.exitcodes import EXIT_CRITICAL, EXIT_NO_DRIVER, EXIT_OK, EXIT_WARNING
from gputop.model import CRITICAL, INFO, WARNING, HealthWarning, HostSnapshot
from gputop.options import SourceOptions
from gputop.text import visible

_COLOURS = {CRITICAL: "\x1b[1;31m", WARNING: "\x1b[33m", INFO: "\x1b[36m"}
_RESET = "\x1b[0m"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Print health warnings; exit 0 ok, 1 warning, 2 critical."
    add_json(p)


def run(options: SourceOptions, args: argparse.Namespace) -> int:
    return common.run("check", lambda: _check(options, args.json))


def _check(options: SourceOptions, as_json: bool) -> int:
    from gputop.analysis import health
    from gputop.analysis.pipeline import warnings_once
    from gputop.sources.promql import OVERVIEW

    config = common.config(options)
    settings = common.settings(config)
    # From Prometheus: what the rules read, healthy values left on the server.
    collected = common.collect(options, config, prometheus_view=OVERVIEW)
    snapshots = collected.snapshots
    found = health.sort_warnings(
        w for snap in snapshots
        for w in warnings_once(snap, settings, collected.me(snap.host), snap.time)
    )
    code = exit_code(found)
    with common.reader_may_leave():
        if as_json:
            doc = {
                "schema": 1,
                "status": {EXIT_OK: "ok", EXIT_WARNING: WARNING, EXIT_CRITICAL: CRITICAL}[code],
                "hosts": [s.host for s in snapshots],
                "warnings": [w.to_dict() for w in found],
            }
            print(json.dumps(doc, indent=2))
        else:
            write_report(found, snapshots, sys.stdout, colour=common.use_colour(sys.stdout))
    return EXIT_NO_DRIVER if common.nothing_to_show(snapshots) else code


def exit_code(found: Iterable[HealthWarning]) -> int:
    severities = {w.severity for w in found}
    if CRITICAL in severities:
        return EXIT_CRITICAL
    if WARNING in severities:
        return EXIT_WARNING
    return EXIT_OK


def write_report(
    found: list[HealthWarning], snapshots: list[HostSnapshot], out: TextIO, colour: bool
) -> None:
    gpus = sum(len(s.gpus) for s in snapshots)
    demo = " (DEMO)" if any(s.demo for s in snapshots) else ""
    hosts = len(snapshots)
    counts = {sev: sum(1 for w in found if w.severity == sev) for sev in (CRITICAL, WARNING, INFO)}
    summary = ", ".join(f"{n} {sev}" for sev, n in counts.items() if n) or "no warnings"
    out.write(f"{hosts} host(s), {gpus} GPU(s){demo}: {summary}\n")
    if not found:
        return
    host_w = max(len(visible(w.host)) for w in found)
    for w in found:
        label = w.severity.upper().ljust(8)
        if colour:
            label = f"{_COLOURS.get(w.severity, '')}{label}{_RESET}"
        where = "GPU " + str(w.gpu) if w.gpu is not None else "host"
        host = visible(w.host).ljust(host_w)
        out.write(f"{label}  {host}  {where:<6}  {visible(w.message)}\n")
        if w.hint:
            out.write(f"{'':8}  {'':{host_w}}  {'':6}  hint: {visible(w.hint)}\n")
