"""`gputop run`: wait in this host's line for free cards, reserve them, run CMD on them,
and give them back however CMD ends (docs/queue.md).

The line has no server: this process puts a job file in the reservation store, and every
waiting `gputop run` computes the same plan (``gputop.analysis.queue_plan``) whenever the
store changes (a stat of the directory every POLL_S) or every RECHECK_S (cards freed by
processes that never reserved). The plan says who starts; only that job reserves.

CMD runs in our process group, so Ctrl+C at the terminal reaches it directly; this
process ignores SIGINT while CMD runs and frees the cards when it ends. SIGTERM and
SIGHUP are passed on to CMD. If this process is killed with SIGKILL, CMD gets SIGTERM
from the kernel (PR_SET_PDEATHSIG) and the job's reservation stops counting at once,
because it names this process (``gputop.actions.liveness``).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gputop.actions import queue, reservations
from gputop.actions.reservations import ReservationError
from gputop.analysis import queue_plan
from gputop.analysis.durations import format_duration, parse_duration
from gputop.analysis.pipeline import warnings_once
from gputop.commands import common
from gputop.commands.common import CommandError, action_failed, usage_error
from gputop.commands.reserve import card_filters
from gputop.exitcodes import EXIT_CANNOT_RUN, EXIT_TIME_LIMIT, EXIT_WAIT_EXPIRED
from gputop.model import HostSnapshot, mig_map
from gputop.options import SourceOptions
from gputop.policy import PolicyError, load_policy
from gputop.text import visible

if TYPE_CHECKING:
    from gputop.analysis.pipeline import Settings
    from gputop.sources.feed import LocalFeed

POLL_S = 0.2  # a stat of the store: what wakes a waiting job within a second
RECHECK_S = 5.0  # a full look at the GPUs even when the store did not change
LEASE_S = 600.0  # the reservation's end, renewed while CMD runs...
RENEW_S = 60.0  # ...this often; the process check frees the cards sooner if we die
GRACE_S = 10.0  # between SIGTERM and SIGKILL for CMD
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Request:
    gpus: int | None
    gpu_ids: tuple[int, ...] | None
    min_free_mem: int | None
    max_util: float | None
    for_s: float | None
    wait_s: float | None  # None: wait as long as it takes; 0: --no-wait
    priority: str
    note: str
    command: tuple[str, ...]
    share: bool = False  # may run beside another user's process
    whole: bool = False  # whole cards, never a MIG device

    @property
    def count(self) -> int:
        return len(self.gpu_ids) if self.gpu_ids else (self.gpus or 1)


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
    user = _user()
    why = queue_plan.refusal(user, request.count, request.priority, request.for_s, policy)
    if why:
        raise action_failed(f"refused: {why}")
    from gputop.commands.quota import held_request  # GPU-hour quotas (issue 28.5)

    request = held_request(user, request)
    from gputop.sources.feed import LocalFeed
    from gputop.sources.opener import SourcePlan, open_feeds, reservations_dir

    plan = SourcePlan(demo=options.demo, local=not options.demo, ssh_hosts=())
    with common.source_errors():
        (feed,) = open_feeds(options, config, plan=plan)
    assert isinstance(feed, LocalFeed)
    directory = reservations_dir(options, config)
    runner = Runner(feed, directory, request, policy, common.settings(config), user)
    return runner.main()


def parse_request(args: argparse.Namespace) -> Request:
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
    min_free, max_util = card_filters(args)
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
    return Request(gpus, gpu_ids, min_free, max_util, for_s, wait_s, args.priority, note,
                   tuple(command), bool(getattr(args, "share", False)),
                   bool(getattr(args, "whole", False)))


class Runner:
    """One `gputop run`: in line, then running, then gone, whatever happens."""

    def __init__(self, feed: LocalFeed, directory: str, request: Request,
                 policy: queue_plan.Policy, settings: Settings, user: str) -> None:
        self.feed, self.directory, self.request = feed, directory, request
        self.policy, self.settings, self.user = policy, settings, user
        self.status = Status(sys.stderr)
        self.cards: tuple[int | str, ...] = ()  # card indexes, or one MIG device's UUID
        self.gpu_uuids: dict[int, str | None] = {}
        self.mig_devices: dict[str, tuple[int, int]] = {}
        self.started = 0.0
        self.kill_at: float | None = None  # SIGKILL for CMD after a SIGTERM we sent
        self.child: subprocess.Popen[bytes] | None = None
        # A SIGTERM/SIGHUP before CMD runs is noted here and acted on at the next safe
        # point: raised from the handler it could land inside a store lock or be taken
        # for a failed poll, and the job would go on.
        self.stopped_by: int | None = None

    def main(self) -> int:
        job = self._submit()
        # One handler from here to the end, so that no SIGTERM falls between waiting and
        # running: before CMD starts it ends us through the ``finally``; after, it is
        # passed on to CMD.
        old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM,
                                                                     signal.SIGHUP)}
        try:
            snapshot = self._wait_turn(job)
            return self._run_cmd(job, snapshot)
        except _Stop as exc:
            signum = exc.args[0]
            raise CommandError(f"stopped by {signal.Signals(signum).name} while waiting",
                               128 + signum) from None
        finally:
            self.status.done()
            if self.cards:
                reservations.release(self.directory, list(self.cards),
                                     gpu_uuids=self.gpu_uuids, mig_devices=self.mig_devices)
            queue.withdraw(job)
            for sig, handler in old.items():
                signal.signal(sig, handler)

    # -- in line ------------------------------------------------------------------------

    def _submit(self) -> queue.Job:
        r = self.request
        record = {
            "gpus": r.gpus, "gpu_ids": list(r.gpu_ids) if r.gpu_ids else None,
            "min_free_mem": r.min_free_mem, "max_util": r.max_util, "for_s": r.for_s,
            "priority": r.priority, "note": r.note, "user": self.user,
            "share": r.share, "whole": r.whole,
            "command": visible(" ".join(r.command))[:queue.MAX_COMMAND_CHARS],
        }
        try:
            return queue.submit(self.directory, record)
        except (ReservationError, OSError) as exc:
            raise action_failed(f"cannot join the line: {exc}") from None

    def _wait_turn(self, job: queue.Job) -> HostSnapshot:
        wait_s = self.request.wait_s
        deadline = None if wait_s is None else job.submitted + wait_s
        mark = _store_mark(self.directory)
        while True:
            self._check_stop()
            if not queue.in_line(job):
                raise action_failed(f"job {job.id} was cancelled")
            snapshot = self.feed.poll()
            if not snapshot.ok:
                raise action_failed(f"{snapshot.host}: {snapshot.state}: {snapshot.error}")
            now = time.time()
            warnings = warnings_once(snapshot, self.settings, self.user, now)
            plan = queue_plan.plan(snapshot, self.policy, now, warnings)
            cards = plan.starts.get(job.id)
            if cards and self._reserve(job, snapshot, cards):
                return snapshot
            why = plan.waiting.get(job.id, "waiting for the line to move")
            if deadline is not None and time.time() >= deadline:
                waited = "no" if not wait_s else f"after {format_duration(wait_s)}, no"
                raise CommandError(f"{waited} cards for job {job.id}: {why}",
                                   EXIT_WAIT_EXPIRED)
            self.status.show(f"job {job.id}: {why}")
            mark = self._sleep_until_change(mark, deadline)

    def _sleep_until_change(self, mark: int | None, deadline: float | None) -> int | None:
        """Sleep until the store changes, RECHECK_S passes or the deadline comes."""
        until = time.time() + RECHECK_S
        if deadline is not None:
            until = min(until, deadline)
        while time.time() < until and self.stopped_by is None:
            time.sleep(POLL_S)
            now = _store_mark(self.directory)
            if now != mark:
                return now
        return mark

    def _reserve(self, job: queue.Job, snapshot: HostSnapshot,
                 cards: tuple[int | str, ...]) -> bool:
        self.gpu_uuids = {gpu.index: gpu.uuid for gpu in snapshot.gpus}
        self.mig_devices = mig_map(snapshot.gpus)
        self.started = time.time()
        if not self._take(job, cards):
            return False  # lost to someone faster (a manual reservation): plan again
        self.cards = cards
        return True

    def _take(self, job: queue.Job, cards: tuple[int | str, ...]) -> bool:
        """Reserve (or renew) ``cards`` for the job, for LEASE_S or up to its --for."""
        end = time.time() + LEASE_S
        if self.request.for_s is not None:
            end = min(end, self.started + self.request.for_s + 2 * GRACE_S)
        text = f"gputop run {job.id}: {self.request.note or job.record['command']}"
        reply = reservations.reserve(
            self.directory, list(cards), end, text[:reservations.MAX_NOTE_CHARS],
            gpu_uuids=self.gpu_uuids, mig_devices=self.mig_devices,
            job={"id": job.id, "pid": os.getpid(), "pid_start": job.record["pid_start"]},
        )
        if not reply.get("ok") and self.cards:
            common.say("run", f"could not renew the reservation: {reply.get('message')}")
        return bool(reply.get("ok"))

    # -- running ------------------------------------------------------------------------

    def _run_cmd(self, job: queue.Job, snapshot: HostSnapshot) -> int:
        self.status.done()
        devices = ",".join(str(i) for i in self.cards)
        uuids = ",".join((i if isinstance(i, str) else self.gpu_uuids.get(i)) or ""
                         for i in self.cards)
        common.say("run", f"job {job.id}: running on GPU {devices} of {snapshot.host}")
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=devices, CUDA_DEVICE_ORDER="PCI_BUS_ID",
                   GPUTOP_JOB_ID=job.id, GPUTOP_GPU_UUIDS=uuids)
        # Ctrl+C reaches CMD through the terminal (same process group): we wait for it.
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self._check_stop()
            try:
                child = subprocess.Popen(self.request.command, env=env,
                                         preexec_fn=_die_with_parent)
            except OSError as exc:
                raise CommandError(f"{self.request.command[0]}: {exc.strerror or exc}",
                                   EXIT_CANNOT_RUN) from None
            self.child = child
            if self.stopped_by is not None:  # came while CMD was starting: pass it on
                self._on_signal(self.stopped_by, None)
            return self._supervise(job, child)
        finally:
            signal.signal(signal.SIGINT, old_int)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.child is None:
            self.stopped_by = signum
            return
        self.child.send_signal(signum)
        if self.kill_at is None:
            self.kill_at = time.time() + GRACE_S

    def _check_stop(self) -> None:
        if self.stopped_by is not None:
            raise _Stop(self.stopped_by)

    def _supervise(self, job: queue.Job, child: subprocess.Popen[bytes]) -> int:
        for_s = self.request.for_s
        cap = None if for_s is None else self.started + for_s
        renew_at = time.time() + RENEW_S
        while True:
            try:
                code = child.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                code = None
            if code is not None:
                if cap is not None and time.time() >= cap:
                    return EXIT_TIME_LIMIT
                return code if code >= 0 else 128 - code
            now = time.time()
            if cap is not None and now >= cap and self.kill_at is None:
                common.say("run", f"job {job.id}: --for {format_duration(for_s or 0)} is up:"
                           f" stopping CMD (SIGTERM, then SIGKILL after {GRACE_S:g} s)")
                child.terminate()
                self.kill_at = now + GRACE_S
            elif self.kill_at is not None and now >= self.kill_at:
                child.kill()
            if now >= renew_at:
                self._take(job, self.cards)
                renew_at = now + RENEW_S


class Status:
    """The waiting line: rewritten in place on a terminal, one line per change otherwise."""

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

    def done(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()
        self.last = ""


class _Stop(Exception):
    pass


def _store_mark(directory: str) -> int | None:
    try:
        info = os.stat(directory)
    except OSError:
        return None
    return info.st_mtime_ns


def _user() -> str:
    return reservations.user_name(os.geteuid())


def _die_with_parent() -> None:
    # In the child before exec: CMD gets Ctrl+C as usual (we ignore it, and an ignored
    # signal stays ignored across exec), and if `gputop run` dies (even by SIGKILL), CMD
    # gets SIGTERM rather than running on cards that are no longer reserved for it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
