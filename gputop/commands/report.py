"""`gputop report`: who used which GPUs, how well, and how much was held idle, from the
ledger that `gputop record` keeps (docs/ledger.md)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

from gputop.analysis.cost import CostRates
from gputop.analysis.durations import parse_duration
from gputop.commands import common
from gputop.commands.arguments import add_ledger
from gputop.exitcodes import EXIT_OK
from gputop.options import SourceOptions

FORMATS = ("text", "md", "csv", "json", "html")
DEFAULT_SINCE = "7d"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Who used which GPUs, how well, and how much was held idle."
    add_ledger(p)
    p.add_argument("--since", metavar="DURATION", help=f"e.g. 7d, 24h (default {DEFAULT_SINCE})")
    p.add_argument("--from", dest="start", metavar="DATE",
                   help="e.g. 2026-11-30 (default: --since before --to)")
    p.add_argument("--to", dest="end", metavar="DATE", help="(default: now)")
    p.add_argument("--by", choices=("user", "workload", "gpu", "host"), default="user",
                   help="one row per (default: %(default)s)")
    p.add_argument("--format", choices=FORMATS, default="text", help="(default: %(default)s)")
    p.add_argument("--out", metavar="FILE", help="write here instead of stdout (default: stdout)")
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="how many of the worst idle holds (default %(default)d)")
    p.add_argument("--jobs", action="store_true",
                   help="one entry per `gputop run` and Slurm job: GPUs, runtime, limit,"
                        " wait, SM %% and memory per GPU, advice (default: usage)")


def run(options: SourceOptions, args: argparse.Namespace) -> int:
    return common.run("report", lambda: _report(args))


def period(since: str | None, start: str | None, end: str | None,
           now: float) -> tuple[float, float]:
    """[from, to) in epoch seconds from --since or --from/--to; CommandError when bad."""
    if since is not None and (start is not None or end is not None):
        raise common.usage_error("--since and --from/--to: give one or the other")
    if start is None:
        if end is not None:
            raise common.usage_error("--to needs --from")
        try:
            seconds = parse_duration(since or DEFAULT_SINCE)
        except ValueError as err:
            raise common.usage_error(f"--since {_shown(since or '')}: {err}") from None
        if seconds > MAX_SPAN_S:
            raise common.usage_error(f"--since {_shown(since or '')}: at most 100 years")
        return max(now - seconds, 0.0), now
    t_from = _date("--from", start)
    t_to = _date("--to", end) if end is not None else now
    if t_to <= t_from:
        raise common.usage_error("--to must be after --from")
    return t_from, t_to


MAX_SPAN_S = 100 * 365.25 * 86400
_LAST_T = dt.datetime(9999, 1, 1, tzinfo=dt.timezone.utc).timestamp()


def _shown(text: str) -> str:
    """A flag's value quoted in a message: escaped, and cut (it may be a megabyte)."""
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def _date(flag: str, text: str) -> float:
    try:
        t = dt.datetime.fromisoformat(text.strip()).timestamp()
    except (ValueError, OverflowError, OSError):
        raise common.usage_error(
            f"{flag} {_shown(text)}: not a date (e.g. 2026-11-30 or 2026-11-30T18:00)"
        ) from None
    if not 0 <= t < _LAST_T:
        raise common.usage_error(f"{flag} {_shown(text)}: a date from 1970 to 9998, please")
    return t


def _cost() -> tuple[CostRates | None, dict[str, set[str]]]:
    """The policy's cost rates (issue 28.6) and the Unix groups to add cost up by."""
    from gputop.ledger.quota_usage import memberships

    accounting = common.accounting("report")
    if accounting.cost is None:
        return None, {}
    return accounting.cost, memberships()


def _report(args: argparse.Namespace) -> int:
    from gputop.commands import report_formats
    from gputop.ledger import paths, query, report, store

    if args.top < 0:
        raise common.usage_error("--top must be 0 or more")
    t_from, t_to = period(args.since, args.start, args.end, time.time())
    from gputop.commands.record import lab_ledger

    path = args.db or lab_ledger("report") or paths.default_path()
    if args.jobs:
        return _jobs(path, t_from, t_to, args)
    try:
        conn = store.open_reader(path)
        try:
            usage = query.load(conn, t_from, t_to)
        finally:
            conn.close()
    except store.LedgerError as err:
        message = str(err)
        if not message.startswith(path):
            message = (f"{path}: {message} ({report.when(t_from)} to {report.when(t_to)})")
        raise common.usage_error(message) from None
    cost, members = _cost()
    doc = report.build(usage, args.by, args.top, cost, members)
    _write(report_formats.render(doc, args.format), args.out)
    return EXIT_OK


def _jobs(path: str, t_from: float, t_to: float, args: argparse.Namespace) -> int:
    """`gputop report --jobs`: per job, its GPUs' use and the advice (issue 28.10)."""
    from gputop.commands import report_jobs
    from gputop.ledger import job_report, store

    try:
        conn = store.open_reader(path)
        try:
            found = job_report.load_jobs(conn, path, t_from, t_to, time.time())
        finally:
            conn.close()
    except store.LedgerError as err:
        raise common.usage_error(str(err)) from None
    _write(report_jobs.render(report_jobs.build(found, t_from, t_to), args.format), args.out)
    return EXIT_OK


def _write(text: str, out: str | None) -> None:
    if out:
        try:
            tmp = f"{out}.tmp{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, out)
        except OSError as err:
            raise common.usage_error(f"{out}: {err.strerror or err}") from None
    else:
        sys.stdout.write(text)
