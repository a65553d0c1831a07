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
from gputop.analysis.durations import format_duration
from gputop.commands import common
from gputop.commands.common import action_failed, usage_error
from gputop.exitcodes import EXIT_OK
from gputop.model import HostSnapshot
from gputop.options import SourceOptions
from gputop.policy import PolicyError, load_policy
from gputop.sources.opener import LOCAL_HOST
from gputop.text import visible


def run(options: SourceOptions, args: argparse.Namespace) -> int:
    if args.action == "cancel":
        return common.run("queue", lambda: _cancel(options, args))
    if args.action is not None:
        return common.run("queue", lambda: _bad(args.action))
    return common.run("queue", lambda: _list(options, args))


def _bad(action: str) -> int:
    raise usage_error(f"unknown action {action!r}: gputop queue [cancel ID]")


def _list(options: SourceOptions, args: argparse.Namespace) -> int:
    config = common.config(options)
    plan = common.plan(options, args.host is not None, args.host)
    collected = common.collect(options, config, plan)
    now = time.time()
    rows = [row for snap in collected.snapshots
            for row in queue_plan.listing(snap, _policy(snap), now)]
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
    return "\n".join(out)
