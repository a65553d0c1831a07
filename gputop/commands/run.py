"""`gputop run`: wait in this host's line for free cards, reserve them, run CMD on them,
and give them back however CMD ends (docs/queue.md).

This is the command: the request from the command line, the policy's and the quota's
word before joining the line, the printing, the exit codes. What runs the job (the line,
CMD's session, signals, cgroups, retries, history) is ``gputop.actions.runner``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from gputop.actions import reservations, runner
from gputop.actions.reservations import ReservationError
from gputop.analysis import queue_plan
from gputop.analysis.durations import parse_duration
from gputop.commands import common
from gputop.commands.arguments import add_card_filters
from gputop.commands.common import CommandError, action_failed, usage_error
from gputop.commands.reserve import wanted
from gputop.options import SourceOptions
from gputop.policy import PolicyError, load_policy
from gputop.sources.feed import LocalFeed
from gputop.sources.opener import SourcePlan, open_feeds, reservations_dir
from gputop.text import visible
from gputop.vendors import VISIBLE_DEVICES_NAME

MAX_RETRIES = 100


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Wait in this host's line for free GPUs, reserve them, run CMD with"
                     f" {VISIBLE_DEVICES_NAME} set, and release them when it ends.")
    p.usage = "gputop run [options] -- CMD [ARGS...]"
    which = p.add_mutually_exclusive_group()
    which.add_argument("--gpus", type=int, metavar="N", help="how many GPUs (default 1)")
    which.add_argument("--gpu-ids", metavar="LIST",
                       help="these GPUs, e.g. 0,2 (default: any free ones)")
    add_card_filters(p)
    p.add_argument("--for", dest="duration", metavar="DURATION", help="stop CMD after this "
                   "long (SIGTERM, then SIGKILL), e.g. 8h (default: no limit)")
    p.add_argument("--note", default="", help="why; shown to everyone (default: none)")
    p.add_argument("--priority", choices=("low", "normal", "high"), default="normal",
                   help="place in the line, as policy allows (default: %(default)s)")
    wait = p.add_mutually_exclusive_group()
    wait.add_argument("--wait", metavar="DURATION",
                      help="give up after waiting this long (default: wait until cards free)")
    wait.add_argument("--no-wait", action="store_true", help="run now or give up "
                      "(default: off)")
    p.add_argument("--log", metavar="FILE", help="also write CMD's stdout and stderr to FILE"
                   " (appended; default: the terminal only)")
    p.add_argument("--quiet", action="store_true", help="CMD's output to --log FILE only,"
                   " and no waiting line (default: off)")
    p.add_argument("--retries", type=int, default=0, metavar="N", help="run CMD again up to"
                   " N times when it fails, after a back-off (default: %(default)s)")
    p.add_argument("--retry-delay", metavar="DURATION", help="the first back-off, doubled"
                   " each retry (default: 10s)")
    p.add_argument("--hang", metavar="DURATION", help="stop CMD (SIGTERM, then SIGKILL) when"
                   " its GPUs sit at 0%% SM holding memory this long, e.g. 30m; it counts as"
                   " failed, or is retried (default: off)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")


def run(options: SourceOptions, args: argparse.Namespace) -> int:
    return common.run("run", lambda: _run(options, args))


def _run(options: SourceOptions, args: argparse.Namespace) -> int:
    request = parse_request(args)
    if options.hosts_file or options.host_list:
        raise usage_error("run starts CMD on this machine: log in to the host with the"
                          " cards and run it there")
    try:
        policy, warning = load_policy()
    except PolicyError as exc:
        raise usage_error(str(exc)) from None
    if warning:
        common.say("run", warning)
    config = common.config(options)
    user = runner.user()
    why = queue_plan.refusal(user, request.count, request.priority, request.for_s, policy)
    if why:
        raise action_failed(f"refused: {why}")
    # GPU-hour quotas (issue 28.5): the quota command's module loads the ledger's.
    from gputop.commands.quota import held_request

    request = held_request(user, request)
    plan = SourcePlan(demo=options.demo, local=not options.demo, ssh_hosts=())
    with common.source_errors():
        (feed,) = open_feeds(options, config, plan=plan)
    assert isinstance(feed, LocalFeed)
    directory = reservations_dir(options, config)
    job = runner.Runner(feed, directory, request, policy, common.settings(config), user,
                        Status(sys.stderr))
    job.quotas = common.accounting(None).quotas  # held while it waits too (issue 38.2)
    try:
        return job.main()
    except runner.RunError as exc:
        raise CommandError(str(exc), exc.code) from None


def parse_request(args: argparse.Namespace) -> runner.Request:
    command = list(args.cmd or [])
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise usage_error("nothing to run: gputop run [options] -- CMD [ARGS...]")
    gpu_ids: tuple[int, ...] | None = None
    if args.gpu_ids is not None:
        if args.gpus is not None:
            raise usage_error("give --gpus or --gpu-ids, not both")
        try:
            gpu_ids = tuple(int(part) for part in args.gpu_ids.split(","))
        except ValueError:
            raise usage_error(f"--gpu-ids: expected indexes like 0,2, got {args.gpu_ids!r}"
                              ) from None
        if len(set(gpu_ids)) != len(gpu_ids) or any(i < 0 for i in gpu_ids):
            raise usage_error(f"--gpu-ids: {args.gpu_ids!r}: each index once, 0 or more")
    if args.gpus is not None and not 1 <= args.gpus <= reservations.MAX_GPUS:
        raise usage_error(f"--gpus must be 1..{reservations.MAX_GPUS}, got {args.gpus}")
    try:
        for_s = parse_duration(args.duration) if args.duration else None
        wait_s = 0.0 if args.no_wait else parse_duration(args.wait) if args.wait else None
    except ValueError as exc:
        raise usage_error(f"--for/--wait: {exc}") from None
    if for_s is not None and for_s > reservations.MAX_RESERVATION_S:
        raise usage_error("--for: at most 31 days")
    try:
        note = reservations.check_note(args.note or "")
    except ReservationError as exc:
        raise usage_error(f"--note: {exc}") from None
    gpus = None if gpu_ids is not None else args.gpus if args.gpus is not None else 1
    want = wanted(args, len(gpu_ids) if gpu_ids else gpus or 1)  # pick's and reserve's path
    log = getattr(args, "log", None)
    quiet = bool(getattr(args, "quiet", False))
    if quiet and not log:
        raise usage_error("--quiet sends CMD's output only to --log FILE: give --log")
    retries = getattr(args, "retries", 0) or 0
    if not 0 <= retries <= MAX_RETRIES:
        raise usage_error(f"--retries must be 0..{MAX_RETRIES}, got {retries}")
    try:
        delay = parse_duration(args.retry_delay) if getattr(args, "retry_delay", None) else 10.0
        hang_s = parse_duration(args.hang) if getattr(args, "hang", None) else None
    except ValueError as exc:
        raise usage_error(f"--retry-delay/--hang: {exc}") from None
    if hang_s is not None and hang_s < 1:
        raise usage_error("--hang: at least 1s")
    return runner.Request(gpus, gpu_ids, want, for_s, wait_s, args.priority, note,
                          tuple(command), log=os.path.abspath(log) if log else None,
                          quiet=quiet, retries=retries, retry_delay_s=delay, hang_s=hang_s)


class Status:
    """Where the runner speaks: one line for each thing it says, and the waiting line,
    rewritten in place on a terminal, one line per change otherwise."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.last = ""

    def show(self, text: str) -> None:
        text = visible(text)
        if text == self.last:
            return
        self.last = text
        if self.tty:
            self.stream.write(f"\r\x1b[Kgputop run: {text}")
        else:
            self.stream.write(f"gputop run: {text}\n")
        self.stream.flush()

    def say(self, text: str) -> None:
        common.say("run", text)

    def done(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()
        self.last = ""
