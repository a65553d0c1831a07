"""`gputop queue`: the `gputop run` jobs of each host, and `gputop queue cancel ID`.

Reads the same snapshots as every command (the queue travels in ``HostSnapshot.queue``);
a cancel goes through the host's feed like a reservation does, so it works over SSH.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from gputop.analysis import queue_plan
from gputop.analysis.durations import format_duration, parse_duration
from gputop.analysis.quota import Hold
from gputop.commands import common
from gputop.commands.arguments import add_host, add_json
from gputop.commands.common import action_failed, usage_error
from gputop.exitcodes import EXIT_OK
from gputop.model import HostSnapshot
from gputop.options import SourceOptions
from gputop.policy import PolicyError, load_policy
from gputop.sources.opener import LOCAL_HOST
from gputop.text import visible


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "List the `gputop run` jobs of each host; 'cancel ID' removes one."
    p.add_argument("action", nargs="?", metavar="cancel",
                   help="cancel a waiting job (default: list the jobs)")
    p.add_argument("id", nargs="?", metavar="ID", help="the job to cancel (with cancel)")
    add_host(p)
    add_json(p)
    p.add_argument("--history", action="store_true", help="the jobs that ended, newest"
                   " first (this host's, as far as I may read them)")
    p.add_argument("--since", metavar="DURATION", help="with --history: e.g. 7d, 24h"
                   " (default 7d)")
    p.add_argument("--user", metavar="U", help="with --history: only U's jobs"
                   " (default: everyone's I may read)")


def run(options: SourceOptions, args: argparse.Namespace) -> int:
    if args.action == "cancel":
        return common.run("queue", lambda: _cancel(options, args))
    if args.action is not None:
        return common.run("queue", lambda: _bad(args.action))
    if getattr(args, "history", False):
        return common.run("queue", lambda: _history(args))
    if getattr(args, "since", None) or getattr(args, "user", None):
        return common.run("queue", lambda: _bad_history())
    return common.run("queue", lambda: _list(options, args))


def _bad_history() -> int:
    raise usage_error("--since and --user go with --history")


def _history(args: argparse.Namespace) -> int:
    from gputop.ledger import jobs

    try:
        since_s = parse_duration(args.since) if args.since else 7 * 86400.0
    except ValueError as exc:
        raise usage_error(f"--since: {exc}") from None
    problems: list[str] = []
    rows = jobs.read(jobs.read_paths(), time.time() - since_s, args.user, problems)
    for problem in problems:
        common.say("queue", problem)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif rows:
        print(history_table(rows))
    else:
        common.say("queue", f"no jobs ended in the last {format_duration(since_s)}")
    return EXIT_OK


def history_table(rows: list[dict[str, Any]]) -> str:
    header = ("JOB", "TRY", "USER", "STATUS", "WHY", "EXIT", "GPUS", "ENDED", "WAITED", "RAN",
              "PEAK MEM", "SM%", "COMMAND")
    lines = [header]
    for row in rows:
        code = (str(row["exit_code"]) if row["exit_code"] is not None
                else f"sig {row['signal']}" if row["signal"] else "-")
        ended = (time.strftime("%m-%d %H:%M", time.localtime(row["ended"]))
                 if row["ended"] else "-")
        peak = f"{row['peak_mem'] / 2**30:.1f}G" if row["peak_mem"] is not None else "-"
        sm = f"{row['mean_sm']:.0f}" if row["mean_sm"] is not None else "-"
        ran = format_duration(row["ran_s"]) if row["ran_s"] is not None else "-"
        lines.append((row["id"], str(row["attempt"]), row["user"], row["status"],
                      _why(row), code, ",".join(map(str, row["gpus"])) or "-",
                      ended, format_duration(max(0.0, row["waited_s"])), ran, peak, sm,
                      str(row["command"])[:50]))
    cells = [[visible(str(c)) for c in line] for line in lines]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in cells)


def _why(row: dict[str, Any]) -> str:
    """Why it ended; a cancel says who cancelled (the owner or root, issue 38.1)."""
    by = row.get("cancelled_by")
    return f"{row['reason']} by {by}" if by and row["reason"] else row["reason"] or "-"


def _bad(action: str) -> int:
    raise usage_error(f"unknown action {action!r}: gputop queue [cancel ID]")


def _list(options: SourceOptions, args: argparse.Namespace) -> int:
    config = common.config(options)
    plan = common.plan(options, args.host is not None, args.host)
    collected = common.collect(options, config, plan)
    now = time.time()
    rows = []
    for snap in collected.snapshots:
        policy = _policy(snap)
        rows += queue_plan.listing(snap, policy, now, _usage(policy), _quota(snap))
    if args.json:
        print(json.dumps(rows, indent=2))
    elif rows:
        print(table(rows))
    else:
        common.say("queue", "no jobs in line")
    return EXIT_OK


def _cancel(options: SourceOptions, args: argparse.Namespace) -> int:
    if not args.id:
        raise usage_error("which job? gputop queue cancel ID")
    config = common.config(options)
    plan = common.plan(options, True, args.host)

    async def cancel() -> tuple[str, dict[str, Any]]:
        async with common.session(options, config, plan) as session:
            (snapshot,) = session.snapshots
            running = queue_plan.running_jobs(snapshot, time.time())
            if args.id in running:
                raise action_failed(
                    f"job {args.id} is running: stop it in its terminal (Ctrl+C), or send"
                    " SIGTERM to its gputop run process")
            return snapshot.host, await session.request(
                snapshot.host, {"op": "queue_cancel", "id": args.id})

    host, reply = asyncio.run(cancel())
    if not reply.get("ok"):
        raise action_failed(f"{host}: {reply.get('message', 'refused')}")
    common.say("queue", f"{host}: {reply.get('message')}")
    return EXIT_OK


def _policy(snapshot: HostSnapshot) -> queue_plan.Policy:
    # This machine's rules are readable here; a remote host's are not (positions there
    # follow the default rules).
    if snapshot.host != LOCAL_HOST or snapshot.demo:
        return queue_plan.Policy()
    try:
        return load_policy()[0]
    except PolicyError:
        return queue_plan.Policy()


def _quota(snapshot: HostSnapshot) -> dict[str, Hold] | None:
    """Whose GPU-hour quota is spent among this machine's line (issue 38.2)."""
    if snapshot.host != LOCAL_HOST or snapshot.demo or not snapshot.queue:
        return None
    from gputop.ledger import quota_usage

    held, warning = quota_usage.holds(common.accounting(None).quotas,
                                      {job.user for job in snapshot.queue})
    if warning:
        common.say("queue", warning)
    return held


def _usage(policy: queue_plan.Policy) -> dict[str, float] | None:
    if not policy.fair_share_half_life_s:
        return None
    from gputop.ledger import share_usage

    hours, warning = share_usage.recent_hours(policy.fair_share_ledger,
                                              policy.fair_share_half_life_s)
    if warning:
        common.say("queue", warning)
    return hours


def table(rows: list[dict[str, Any]]) -> str:
    header = ("HOST", "JOB", "USER", "PRI", "STATE", "WAITED", "ASKS", "COMMAND")
    lines = [header]
    for row in rows:
        request = row["request"]
        asks = (",".join(map(str, request["gpu_ids"])) if request["gpu_ids"]
                else f"{request['gpus']} GPU")
        if row["state"] == "running":
            state = "on " + ",".join(map(str, row["gpus_held"]))
        elif row["position"] is None:
            state = "never"
        else:
            state = f"#{row['position']}"
        lines.append((row["host"], row["id"], row["user"], row["priority"], state,
                      format_duration(row["waited_s"]), asks, row["command"][:60]))
    cells = [[visible(str(c)) for c in line] for line in lines]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]

    def fmt(line: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()

    out = [fmt(cells[0])]
    for row, line in zip(rows, cells[1:], strict=True):
        out.append(fmt(line))
        if row["why"]:
            out.append(f"    {visible(row['why'])}")
        if row.get("share"):
            out.append(f"    fair share: {visible(row['share']['why'])}")
    return "\n".join(out)
