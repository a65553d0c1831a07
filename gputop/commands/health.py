"""`gputop check` (health warnings, exit 0/1/2 for cron) and `gputop topo` (the matrix).

Both take one round of snapshots from ``gputop.sources.select.collect_once`` and never
import Textual.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from gputop.cli import EXIT_CRITICAL, EXIT_NO_DRIVER, EXIT_OK, EXIT_USAGE, EXIT_WARNING
from gputop.model import CRITICAL, HOST_NO_GPU, INFO, WARNING, HostSnapshot
from gputop.model import Warning as HealthWarning

_COLOURS = {CRITICAL: "\x1b[1;31m", WARNING: "\x1b[33m", INFO: "\x1b[36m"}
_RESET = "\x1b[0m"


def run_check(args: argparse.Namespace) -> int:
    from gputop.analysis import health

    try:
        config = _config(args)
        thresholds = _thresholds(config)
        snapshots = _collect(args, config)
    except _Failure as exc:
        _error("check", str(exc))
        return exc.code
    me = _me()
    found: list[HealthWarning] = []
    for snap in snapshots:
        found.extend(health.warnings(snap, None, thresholds, snap.time, me))
    found = health.sort_warnings(found)
    code = exit_code(found)
    if getattr(args, "json", False):
        doc = {
            "schema": 1,
            "status": {EXIT_OK: "ok", EXIT_WARNING: WARNING, EXIT_CRITICAL: CRITICAL}[code],
            "hosts": [s.host for s in snapshots],
            "warnings": [w.to_dict() for w in found],
        }
        print(json.dumps(doc, indent=2))
    else:
        write_report(found, snapshots, sys.stdout, colour=_use_colour(sys.stdout))
    return code


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
    host_w = max(len(_clean(w.host or "")) for w in found)
    for w in found:
        label = w.severity.upper().ljust(8)
        if colour:
            label = f"{_COLOURS.get(w.severity, '')}{label}{_RESET}"
        where = "GPU " + str(w.gpu) if w.gpu is not None else "host"
        host = _clean(w.host or "").ljust(host_w)
        out.write(f"{label}  {host}  {where:<6}  {_clean(w.message)}\n")
        if w.hint:
            out.write(f"{'':8}  {'':{host_w}}  {'':6}  hint: {_clean(w.hint)}\n")


def run_topo(args: argparse.Namespace) -> int:
    from gputop.analysis import topology

    try:
        snapshots = _collect(args, _config(args))
    except _Failure as exc:
        _error("topo", str(exc))
        return exc.code
    wanted = getattr(args, "host", None)
    if wanted:
        chosen = [s for s in snapshots if s.host == wanted]
        if not chosen:
            names = ", ".join(s.host for s in snapshots) or "none"
            print(f"gputop topo: no host {wanted!r} (hosts: {names})", file=sys.stderr)
            return EXIT_USAGE
        snapshots = chosen
    usable = [s for s in snapshots if s.ok]
    for snap in snapshots:
        if not snap.ok:
            reason = f"{snap.state}" + (f": {snap.error}" if snap.error else "")
            print(f"gputop topo: {_clean(snap.host)}: {_clean(reason)}", file=sys.stderr)
    if getattr(args, "json", False):
        doc = {"schema": 1, "hosts": [topology.snapshot_dict(s) for s in usable]}
        print(json.dumps(doc, indent=2))
    else:
        for n, snap in enumerate(usable):
            if n:
                print()
            if len(usable) > 1:
                print(f"== {_clean(snap.host)} ==")
            if snap.demo:
                print("DEMO (simulated GPUs)")
            for line in topology.render_text(snap).splitlines():
                print(_clean(line))
    if usable:
        return EXIT_OK
    if snapshots and all(s.state == HOST_NO_GPU for s in snapshots):
        return EXIT_NO_DRIVER
    return EXIT_WARNING


class _Failure(Exception):
    """One line for stderr and the exit code that goes with it."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def _config(args: argparse.Namespace) -> Any:
    from gputop.config import ConfigError, load_config

    try:
        return load_config(getattr(args, "config", None))
    except ConfigError as exc:
        raise _Failure(str(exc)) from None


def _thresholds(config: Any) -> Any:
    from gputop.analysis.health import Thresholds

    try:
        return Thresholds.from_config(config.health)
    except ValueError as exc:
        # The config loader checks only value types here; the rules own the names.
        raise _Failure(f"{config.path or 'config'}: {exc}") from None


def _collect(args: argparse.Namespace, config: Any) -> list[HostSnapshot]:
    from gputop.sources.select import NoDriverError, SourceError, collect_once

    try:
        return list(collect_once(args, {"reservations_dir": config.reservations.dir}))
    except NoDriverError as exc:
        raise _Failure(str(exc), EXIT_NO_DRIVER) from None
    except SourceError as exc:
        raise _Failure(str(exc)) from None


def _error(command: str, message: str) -> None:
    # Sources word some errors for the user already ("gputop: no NVIDIA driver ...").
    prefix = "" if message.startswith("gputop") else f"gputop {command}: "
    print(f"{prefix}{message}", file=sys.stderr)


def _me() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def _use_colour(stream: TextIO) -> bool:
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def _clean(text: str) -> str:
    """Untrusted text (commands, user names, remote errors) must not drive the terminal."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)
