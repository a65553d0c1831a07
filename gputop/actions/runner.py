"""`gputop run`'s machinery: wait in this host's line for free cards, reserve them, run
CMD on them, and give them back however CMD ends (docs/queue.md).  The command
(``gputop.commands.run``) parses the request, prints, and turns ``RunError`` into its exit
code; everything that runs processes is here: the subreaper, CMD's session behind a gate,
its cgroup, signals passed on, the output tee, retries, the job's history rows.

The line has no server: this process puts a job file in the reservation store, and every
waiting `gputop run` computes the same plan (``gputop.analysis.queue_plan``) whenever the
store changes (a stat of the directory every POLL_S) or every RECHECK_S (cards freed by
processes that never reserved). The plan says who starts; only that job reserves.

CMD runs in its own session; Ctrl+C at the terminal reaches us and is passed on, and
this process frees the cards when CMD ends. SIGTERM and SIGHUP are passed on to CMD. If
this process is killed with SIGKILL, CMD gets SIGTERM from the kernel (PR_SET_PDEATHSIG)
and the job's reservation stops counting at once, because it names this process
(``gputop.actions.liveness``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from gputop.actions import liveness, queue, reservations
from gputop.actions.reservations import ReservationError
from gputop.actions.store import user_name
from gputop.analysis import queue_plan
from gputop.analysis.durations import format_duration
from gputop.analysis.pick import Want
from gputop.analysis.pipeline import warnings_once
from gputop.analysis.quota import Hold, Quotas
from gputop.exitcodes import EXIT_ACTION_FAILED, EXIT_CANNOT_RUN, EXIT_TIME_LIMIT, EXIT_WAIT_EXPIRED
from gputop.ledger import jobs, quota_usage, share_usage
from gputop.model import HostSnapshot, QueueJob, mig_map
from gputop.records import Record, record
from gputop.text import visible
from gputop.vendors import visible_devices_env

if TYPE_CHECKING:
    from gputop.analysis.pipeline import Settings

POLL_S = 0.2  # a stat of the store: what wakes a waiting job within a second
RECHECK_S = 5.0  # a full look at the GPUs even when the store did not change
LEASE_S = 600.0  # the reservation's end, renewed while CMD runs...
RENEW_S = 60.0  # ...this often; the process check frees the cards sooner if we die
GRACE_S = 10.0  # between SIGTERM and SIGKILL for CMD
MAX_BACKOFF_S = 600.0
SAMPLE_S = 10.0  # a look at the job's cards while it runs: history's peak memory and SM %
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
# CMD starts behind a gate: a shell in CMD's new session waits for one byte on a pipe
# (sent once the cards are reserved in the session's name), then becomes CMD.  EOF (we
# died, or the cards went to someone faster) ends it before CMD ever runs.
_GATE = 'read -r _ <&{fd} || exit 125; exec {fd}<&-; exec "$@"'


@record(frozen=True, slots=True)
class Request(Record):
    """One `gputop run`, as its command line asks (``commands.run.parse_request``)."""

    gpus: int | None
    gpu_ids: tuple[int, ...] | None
    want: Want  # what the cards must be: pick's one request record (analysis/pick.py)
    for_s: float | None
    wait_s: float | None  # None: wait as long as it takes; 0: --no-wait
    priority: str
    note: str
    command: tuple[str, ...]
    log: str | None = None  # CMD's stdout and stderr also go here (--log)
    quiet: bool = False  # ...and only there (--quiet)
    retries: int = 0
    retry_delay_s: float = 10.0  # the first back-off; doubled each time, at most MAX_BACKOFF_S
    hang_s: float | None = None  # stop CMD when its cards sit at 0 % SM holding memory this long

    @property
    def count(self) -> int:
        return self.want.count


class RunError(Exception):
    """Why the job ended without CMD's own exit status: one line, and the exit code."""

    def __init__(self, message: str, code: int = EXIT_ACTION_FAILED) -> None:
        super().__init__(message)
        self.code = code


class Feed(Protocol):
    """This host's GPUs, looked at again on every call (``sources.feed.LocalFeed``)."""

    def poll(self) -> HostSnapshot: ...


class Reporter(Protocol):
    """Where the runner speaks (the command's printing): ``say`` one line, ``show`` the
    waiting line (rewritten in place), ``done`` with it."""

    def say(self, text: str) -> None: ...

    def show(self, text: str) -> None: ...

    def done(self) -> None: ...


class Runner:
    """One `gputop run`: in line, then running, then gone, whatever happens."""

    def __init__(self, feed: Feed, directory: str, request: Request,
                 policy: queue_plan.Policy, settings: Settings, user: str,
                 out: Reporter) -> None:
        self.feed, self.directory, self.request = feed, directory, request
        self.policy, self.settings, self.user = policy, settings, user
        self.status = out
        self.cards: tuple[int | str, ...] = ()  # card indexes, or one MIG device's UUID
        self.gpu_uuids: dict[int, str | None] = {}
        self.mig_devices: dict[str, tuple[int, int]] = {}
        self.started = 0.0
        self.kill_at: float | None = None  # SIGKILL for CMD after a SIGTERM we sent
        self.child: subprocess.Popen[bytes] | None = None
        self.shim: subprocess.Popen[bytes] | None = None  # CMD's session, behind the gate
        self.gate = -1  # the gate's write end
        self.session: dict[str, Any] = {}  # the job's session, and cgroup if one was made
        self.attempt_no = 0
        self.signalled: int | None = None  # a signal we passed on to CMD
        self.hung = False  # --hang stopped this attempt
        self.ran = False  # CMD ran at least once
        self.gave_up: str | None = None  # why the job ended without running, for history
        self.attempt: jobs.Attempt | None = None
        self.log_fd = -1
        self.tees: list[threading.Thread] = []
        self.share_warned = False
        self.quotas: Quotas | None = None  # the policy's GPU-hour quotas, re-read as it waits
        self.quota_warned = False
        self.demo = False
        # A SIGTERM/SIGHUP before CMD runs is noted here and acted on at the next safe
        # point: raised from the handler it could land inside a store lock or be taken
        # for a failed poll, and the job would go on.
        self.stopped_by: int | None = None

    def main(self) -> int:
        why = _runnable(self.request.command)
        if why:
            raise RunError(why, EXIT_CANNOT_RUN)
        self._refuse_impossible()
        self.open_log()
        _become_subreaper()
        liveness.sweep_job_cgroups()  # what a SIGKILLed run of ours left, now empty
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
            self.gave_up = self.gave_up or "killed"
            raise RunError(f"stopped by {signal.Signals(signum).name} while waiting",
                               128 + signum) from None
        except KeyboardInterrupt:
            self.gave_up = self.gave_up or "killed"
            raise
        finally:
            self.status.done()
            self._close_gate()
            self._release()
            queue.withdraw(job)
            if not self.ran:
                self._record_unstarted(job)
            if self.log_fd >= 0:
                os.close(self.log_fd)
            for sig, handler in old.items():
                signal.signal(sig, handler)

    # -- in line ------------------------------------------------------------------------

    def _refuse_impossible(self) -> None:
        """A request this host can never meet is refused before it joins the line."""
        snapshot = self.feed.poll()
        if not snapshot.ok:
            raise RunError(f"{snapshot.host}: {snapshot.state}: {snapshot.error}")
        r = self.request
        asked = QueueJob(id="", user=self.user, submitted=time.time(), gpus=r.gpus,
                         gpu_ids=r.gpu_ids, min_free_mem=r.want.min_free_mem)
        self.demo = snapshot.demo
        why = queue_plan.impossible(snapshot, asked)
        if why:
            raise RunError(f"refused: {why}")

    def _submit(self) -> queue.Job:
        r = self.request
        record = {
            "gpus": r.gpus, "gpu_ids": list(r.gpu_ids) if r.gpu_ids else None,
            "min_free_mem": r.want.min_free_mem, "max_util": r.want.max_util,
            "for_s": r.for_s, "priority": r.priority, "note": r.note, "user": self.user,
            "share": r.want.share, "whole": r.want.whole,
            "command": visible(" ".join(r.command))[:queue.MAX_COMMAND_CHARS],
            # Where this job's history goes: a recorder run by root copies it from there
            # into the host's ledger once the job has left the line (ledger/collect.py).
            "history": jobs.write_path(),
        }
        try:
            return queue.submit(self.directory, record)
        except (ReservationError, OSError) as exc:
            raise RunError(f"cannot join the line: {exc}") from None

    def _wait_turn(self, job: queue.Job, retrying: bool = False) -> HostSnapshot:
        wait_s = None if retrying else self.request.wait_s
        deadline = None if wait_s is None else job.submitted + wait_s
        mark = _store_mark(self.directory)
        turns = queue_plan.Turns(job.id, lambda other: queue.stall_note(other.pid))
        while True:
            self._check_stop()
            if not queue.in_line(job):
                self.gave_up = "cancelled"
                raise RunError(f"job {job.id} was cancelled")
            snapshot = self.feed.poll()
            if not snapshot.ok:
                raise RunError(f"{snapshot.host}: {snapshot.state}: {snapshot.error}")
            now = time.time()
            warnings = warnings_once(snapshot, self.settings, self.user, now)
            plan = turns.plan(snapshot, self.policy, now, warnings, usage=self._usage(),
                              quota=self._quota(snapshot),
                              avoid=reservations.locked_cards(self.directory))
            for line in turns.news:
                self.status.say(line)
            turns.news.clear()
            cards = plan.starts.get(job.id)
            if cards and self._reserve(job, snapshot, cards):
                return snapshot
            why = plan.waiting.get(job.id, "waiting for the line to move")
            if deadline is not None and time.time() >= deadline:
                waited = "no" if not wait_s else f"after {format_duration(wait_s)}, no"
                self.gave_up = "wait expired"
                raise RunError(f"{waited} cards for job {job.id}: {why}",
                                   EXIT_WAIT_EXPIRED)
            if not self.request.quiet:
                self.status.show(f"job {job.id}: {why}")
            mark = self._sleep_until_change(mark, deadline)

    def _usage(self) -> dict[str, float] | None:
        """Each user's recent GPU-hours, when the policy orders by fair share."""
        half_life = self.policy.fair_share_half_life_s
        if not half_life:
            return None
        hours, warning = share_usage.recent_hours(self.policy.fair_share_ledger, half_life)
        if warning and not self.share_warned:
            self.status.say(warning)
            self.share_warned = True
        return hours

    def _quota(self, snapshot: HostSnapshot) -> dict[str, Hold] | None:
        """Whose quota is spent among the users in line: a job that went over while it
        waited waits at low priority, or does not start (issue 38.2)."""
        if self.quotas is None or not self.quotas.any:
            return None
        held, warning = quota_usage.holds(self.quotas, {j.user for j in snapshot.queue})
        if warning and not self.quota_warned:
            self.status.say(warning)
            self.quota_warned = True
        return held

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
        self.started = self.started or time.time()  # the job's start: --for counts from it
        # CMD's session exists before the cards are reserved, so the reservation can name
        # it: were we killed, the cards stay held while anything of the job runs.
        self._spawn_gated(job, cards)
        if not self._take(job, cards):
            self._close_gate()  # lost to someone faster (a manual reservation): plan again
            return False
        self.cards = cards
        return True

    def _spawn_gated(self, job: queue.Job, cards: tuple[int | str, ...]) -> None:
        devices = ",".join(str(i) for i in cards)
        uuids = ",".join((i if isinstance(i, str) else self.gpu_uuids.get(i)) or ""
                         for i in cards)
        env = dict(os.environ, **visible_devices_env(devices), GPUTOP_JOB_ID=job.id,
                   GPUTOP_GPU_UUIDS=uuids)
        read_fd, self.gate = os.pipe()
        out: Any = None
        if self.log_fd >= 0:
            # --quiet: straight into the log; else through us, to the terminal and the log.
            out = self.log_fd if self.request.quiet else subprocess.PIPE
        try:
            self.shim = subprocess.Popen(
                ["/bin/sh", "-c", _GATE.format(fd=read_fd), "sh", *self.request.command],
                env=env, pass_fds=(read_fd,), start_new_session=True,
                preexec_fn=_die_with_parent, stdout=out, stderr=out)
        except OSError as exc:
            os.close(self.gate)
            raise RunError(f"/bin/sh: {exc.strerror or exc}", EXIT_CANNOT_RUN) from None
        finally:
            os.close(read_fd)
        self.session = {"sid": self.shim.pid}
        # A cgroup too where one can be made (root, a delegated cgroup): nothing leaves
        # it, not even a process that starts a session of its own.
        self.attempt_no += 1
        cgroup = liveness.make_job_cgroup(job.id, self.attempt_no)
        if cgroup is not None:
            if liveness.enter_cgroup(cgroup, self.shim.pid):
                self.session["cgroup"] = cgroup
            else:
                liveness.remove_cgroup(cgroup)
        if out is subprocess.PIPE:
            assert self.shim.stdout is not None and self.shim.stderr is not None
            self.tees = [_tee(self.shim.stdout, sys.stdout.buffer, self.log_fd),
                         _tee(self.shim.stderr, sys.stderr.buffer, self.log_fd)]

    def _close_gate(self) -> None:
        """CMD never starts: EOF on the gate ends the waiting shell."""
        if self.gate >= 0:
            os.close(self.gate)
            self.gate = -1
        if self.shim is not None:
            self.shim.wait()
            self.shim = None
            self._drop_cgroup()

    def _take(self, job: queue.Job, cards: tuple[int | str, ...]) -> bool:
        """Reserve (or renew) ``cards`` for the job, for LEASE_S or up to its --for."""
        end = time.time() + LEASE_S
        if self.request.for_s is not None:
            end = min(end, self.started + self.request.for_s + 2 * GRACE_S)
        text = f"gputop run {job.id}: {self.request.note or job.record['command']}"
        reply = reservations.reserve(
            self.directory, list(cards), end, text[:reservations.MAX_NOTE_CHARS],
            gpu_uuids=self.gpu_uuids, mig_devices=self.mig_devices,
            job={"id": job.id, "pid": os.getpid(), "pid_start": job.record["pid_start"],
                 **self.session},
        )
        if not reply.get("ok") and self.cards:
            self.status.say(f"could not renew the reservation: {reply.get('message')}")
        return bool(reply.get("ok"))

    # -- running ------------------------------------------------------------------------

    def _run_cmd(self, job: queue.Job, snapshot: HostSnapshot) -> int:
        attempt = 1
        while True:
            code, reason = self._attempt(job, snapshot, attempt)
            if not self.cards:  # given back: no retry
                return code
            delay = min(self.request.retry_delay_s * 2 ** (attempt - 1), MAX_BACKOFF_S)
            self.status.say(f"job {job.id}: attempt {attempt} {reason} (exit {code});"
                       f" attempt {attempt + 1} of {self.request.retries + 1} in"
                       f" {format_duration(delay)}")
            if not self._back_off(job, delay):
                return code
            attempt += 1
            if not self._respawn(job):
                # The cards went to someone faster between attempts: back in line, at
                # the job's own place (its file and arrival never changed).
                self.cards = ()
                snapshot = self._wait_turn(job, retrying=True)

    def _attempt(self, job: queue.Job, snapshot: HostSnapshot, attempt: int
                 ) -> tuple[int, str]:
        """Run CMD once on the reserved cards; its exit status and why it ended."""
        self.status.done()
        devices = ",".join(str(i) for i in self.cards)
        self.status.say(f"job {job.id}: running on GPU {devices} of {snapshot.host}"
                   + (f" (attempt {attempt} of {self.request.retries + 1})"
                      if self.request.retries else ""))
        self.signalled, self.hung, self.kill_at = None, False, None
        self._check_stop()
        self._log_line(f"gputop run: job {job.id} attempt {attempt} started"
                       f" {time.strftime('%Y-%m-%d %H:%M:%S')} on GPU {devices}")
        row = self._history(job, snapshot, attempt)
        # CMD has its own session (so that all of it can be found and ended), hence is
        # not in the terminal's foreground group: Ctrl+C reaches us, and we pass it on.
        old_int = signal.signal(signal.SIGINT, self._on_signal)
        code: int | None = None
        reason = "failed"
        try:
            assert self.shim is not None
            self.child, self.shim = self.shim, None
            self.ran = True
            os.write(self.gate, b"\n")
            self._close_gate()
            # Recorded once CMD runs: the history's fsync is not on the hand-off's path.
            # --demo plans on simulated cards: its jobs are no part of the user's history.
            self.attempt = None if self.demo else jobs.begin(row)
            if self.stopped_by is not None:  # came while CMD was starting: pass it on
                self._on_signal(self.stopped_by, None)
            code = self._supervise(job, self.child)
        finally:
            signal.signal(signal.SIGINT, old_int)
            if self.child is not None:
                self._end_job_tree(job)
                self._join_tees()
                reason, status = self._why_ended(code)
                if not self._will_retry(reason, attempt):
                    # Nothing of the job runs any more: the next job need not wait for
                    # the history to be written (a job file left in line without its
                    # cards would look first in line to every other plan).
                    self._release()
                    queue.withdraw(job)
                self._record_end(status, reason, self.child.returncode)
                self._log_line(f"gputop run: job {job.id} attempt {attempt}: {reason}"
                               f" (exit {code})")
        return (code if code is not None else 1), reason

    def _will_retry(self, reason: str, attempt: int) -> bool:
        return (reason in ("failed", "hang") and attempt <= self.request.retries
                and self.signalled is None and self.stopped_by is None
                and not self._past_cap())

    def _record_end(self, status: str, reason: str, raw: int | None) -> None:
        if self.attempt is None:
            return
        self.attempt.end(status, reason, raw if raw is not None and raw >= 0 else None,
                         -raw if raw is not None and raw < 0 else None)
        self.attempt = None

    def _release(self) -> None:
        if self.cards:
            reservations.release(self.directory, list(self.cards),
                                 gpu_uuids=self.gpu_uuids, mig_devices=self.mig_devices)
            self.cards = ()

    def _why_ended(self, code: int | None) -> tuple[str, str]:
        """(reason, status) of the attempt that just ended, for history."""
        if self.hung:
            return "hang", "failed"
        if code == EXIT_TIME_LIMIT and self._past_cap():
            return "time cap", "failed"
        if self.signalled is not None or self.stopped_by is not None:
            return "killed", "cancelled"
        if code == 0:
            return "done", "success"
        return "failed", "failed"

    def _past_cap(self) -> bool:
        for_s = self.request.for_s
        return for_s is not None and time.time() >= self.started + for_s

    def _back_off(self, job: queue.Job, delay: float) -> bool:
        """Wait before the next attempt, cards kept and renewed; False when stopped."""
        until, renew_at = time.time() + delay, time.time() + RENEW_S
        while time.time() < until:
            if self.stopped_by is not None:
                return False
            time.sleep(min(POLL_S, max(0.0, until - time.time())))
            if time.time() >= renew_at:
                self._take(job, self.cards)
                renew_at = time.time() + RENEW_S
        return not self._past_cap()

    def _respawn(self, job: queue.Job) -> bool:
        """A new session for the next attempt, and the cards reserved in its name (a
        reservation names one session, so it is made again)."""
        cards = self.cards
        self.child = None
        self._spawn_gated(job, cards)
        self._release()
        if not self._take(job, cards):
            self._close_gate()
            return False
        self.cards = cards
        return True

    def _history(self, job: queue.Job, snapshot: HostSnapshot, attempt: int
                 ) -> dict[str, Any]:
        r = self.request
        return {
            "id": job.id, "attempt": attempt, "user": self.user, "uid": os.geteuid(),
            "host": snapshot.host, "command": job.record["command"],
            "request": {"gpus": r.gpus, "gpu_ids": list(r.gpu_ids) if r.gpu_ids else None,
                        "min_free_mem": r.want.min_free_mem, "max_util": r.want.max_util,
                        "for_s": r.for_s, "priority": r.priority, "note": r.note,
                        "retries": r.retries, "hang_s": r.hang_s},
            "gpus": list(self.cards), "submitted": job.submitted, "started": time.time(),
            "status": "running", "log": r.log, "pid": os.getpid(),
            "pid_start": job.record["pid_start"],
        }

    def _record_unstarted(self, job: queue.Job) -> None:
        """A job that ended without running leaves a row too: cancelled, given up."""
        if self.demo:
            return
        reason = self.gave_up or "never ran"
        row = {"id": job.id, "attempt": 1, "user": self.user, "uid": os.geteuid(),
               "host": self.feed_host(), "command": job.record["command"],
               "request": {"gpus": self.request.gpus, "for_s": self.request.for_s,
                           "gpu_ids": list(self.request.gpu_ids or ()) or None},
               "gpus": [], "submitted": job.submitted, "started": None,
               "status": "cancelled", "log": self.request.log, "pid": os.getpid(),
               "pid_start": job.record["pid_start"],
               "cancelled_by": queue.cancelled_by(job) if reason == "cancelled" else None}
        jobs.begin(row).end("cancelled", reason, None, None)

    def feed_host(self) -> str:
        return str(getattr(self.feed, "host", None) or os.uname().nodename)

    def _log_line(self, text: str) -> None:
        if self.log_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(self.log_fd, (text + "\n").encode())

    def open_log(self) -> None:
        path = self.request.log
        if not path:
            return
        try:
            self.log_fd = open_log_file(path)
        except OSError as exc:
            raise RunError(f"--log {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise RunError(f"--log {path}: {exc}") from None

    def _join_tees(self) -> None:
        for thread in self.tees:
            thread.join(timeout=GRACE_S)
        self.tees = []

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.child is None:
            self.stopped_by = signum
            return
        self.signalled = signum
        self._signal_session(signum)
        if self.kill_at is None and signum != signal.SIGINT:
            self.kill_at = time.time() + GRACE_S

    def _signal_session(self, signum: int) -> None:
        assert self.child is not None
        try:
            os.killpg(self.child.pid, signum)
        except OSError:
            # The leader's group is gone; its session's members may not be.
            for pid in liveness.job_processes(self.child.pid, os.geteuid()):
                _signal(pid, signum)

    def _end_job_tree(self, job: queue.Job) -> None:
        """Before the cards are given back, everything CMD started ends: the processes of
        its session and everything below us (we are the subreaper of what it orphaned).
        SIGTERM, then SIGKILL after GRACE_S; the reservation is renewed meanwhile, so the
        cards are never free while any of it runs."""
        assert self.child is not None
        sid, me = self.child.pid, os.getpid()
        cgroup = self.session.get("cgroup")

        def job_left() -> list[int]:
            found = set(liveness.job_processes(sid, os.geteuid(), below=me))
            return sorted(found | set(liveness.cgroup_pids(cgroup)) - {me})

        # We are the subreaper: all that is left of the job is below us, or in its
        # cgroup. No child and an empty cgroup (the usual end) need no walk of /proc.
        if not liveness.has_children() and not liveness.cgroup_pids(cgroup):
            self._drop_cgroup()
            return
        left = job_left()
        if not left:
            _reap_orphans(me)
            self._drop_cgroup()
            return
        self.status.say(f"job {job.id}: CMD ended; stopping the {len(left)} process(es)"
                   f" it left (SIGTERM, then SIGKILL after {GRACE_S:g} s)")
        for pid in left:
            _signal(pid, signal.SIGTERM)
        kill_at, renew_at, said = time.time() + GRACE_S, time.time() + RENEW_S, False
        while left:
            time.sleep(0.1)
            _reap_orphans(me)
            left = job_left()
            now = time.time()
            if now >= kill_at:
                if not (cgroup and liveness.kill_cgroup(cgroup)):
                    for pid in left:
                        _signal(pid, signal.SIGKILL)
                if not said and left and now >= kill_at + GRACE_S:
                    self.status.say(f"job {job.id}: still waiting for pid"
                               f" {', '.join(map(str, left[:5]))} to end; the cards stay"
                               " reserved until then")
                    said = True
            if now >= renew_at:
                self._take(job, self.cards)
                renew_at = now + RENEW_S
        _reap_orphans(me)
        self._drop_cgroup()

    def _drop_cgroup(self) -> None:
        cgroup = self.session.get("cgroup")
        if cgroup:
            # An emptied cgroup may take a moment to say so.
            for _ in range(20):
                if liveness.remove_cgroup(cgroup):
                    break
                time.sleep(0.05)

    def _check_stop(self) -> None:
        if self.stopped_by is not None:
            raise _Stop(self.stopped_by)

    def _supervise(self, job: queue.Job, child: subprocess.Popen[bytes]) -> int:
        for_s = self.request.for_s
        cap = None if for_s is None else self.started + for_s
        renew_at = time.time() + RENEW_S
        hang_s = self.request.hang_s
        every = SAMPLE_S if hang_s is None else max(1.0, min(SAMPLE_S, hang_s / 4))
        sample_at, idle_since = time.time() + min(every, 2.0), None
        while True:
            try:
                code = child.wait(timeout=min(1.0, every))
            except subprocess.TimeoutExpired:
                code = None
            if code is not None:
                if cap is not None and time.time() >= cap:
                    return EXIT_TIME_LIMIT
                return code if code >= 0 else 128 - code
            now = time.time()
            if cap is not None and now >= cap and self.kill_at is None:
                self.status.say(f"job {job.id}: --for {format_duration(for_s or 0)} is up:"
                           f" stopping CMD (SIGTERM, then SIGKILL after {GRACE_S:g} s)")
                self._signal_session(signal.SIGTERM)
                self.kill_at = now + GRACE_S
            elif self.kill_at is not None and now >= self.kill_at:
                self._signal_session(signal.SIGKILL)
            if now >= renew_at:
                self._take(job, self.cards)
                renew_at = now + RENEW_S
            if now >= sample_at:
                sample_at = now + every
                idle_since = self._sample(job, child, idle_since, now)

    def _sample(self, job: queue.Job, child: subprocess.Popen[bytes],
                idle_since: float | None, now: float) -> float | None:
        """One look at the job's cards, for history and --hang: the memory the job's
        processes hold there, the cards' SM %. Returns since when they sit idle."""
        try:
            snapshot = self.feed.poll()
        except Exception:  # a failed look costs one sample, never the job
            return idle_since
        if not snapshot.ok:
            return idle_since
        mine = set(liveness.job_processes(child.pid, os.geteuid(), below=os.getpid()))
        mine |= set(liveness.cgroup_pids(self.session.get("cgroup")))
        mem = sum(p.gpu_mem or 0 for p in snapshot.processes
                  if p.pid in mine and p.gpu in self.cards)
        cards = [g for g in snapshot.gpus if g.index in self.cards]
        utils = [g.util_gpu for g in cards if g.util_gpu is not None]
        sm = sum(utils) / len(utils) if utils else None
        if self.attempt is not None:
            self.attempt.sample(mem, sm)
        hang_s = self.request.hang_s
        if hang_s is None:
            return None
        if not (mem > 0 and utils and max(utils) == 0):
            return None
        idle_since = idle_since or now
        if now - idle_since >= hang_s and self.kill_at is None:
            self.status.say(f"job {job.id}: its GPUs sat at 0 % SM holding"
                       f" {mem / 2**30:.1f} GiB for {format_duration(now - idle_since)}"
                       f" (--hang {format_duration(hang_s)}): stopping CMD (SIGTERM, then"
                       f" SIGKILL after {GRACE_S:g} s)")
            self.hung = True
            self._signal_session(signal.SIGTERM)
            self.kill_at = now + GRACE_S
        return idle_since


class _Stop(Exception):
    pass


MAX_LINKS = 40  # as the kernel's own limit on links followed in one path


def open_log_file(path: str) -> int:
    """``--log``'s file, opened for appending as the ledger opens its own: never through
    a link someone else owns (in any component, not only the last), never a FIFO or
    device (which would hang or leak), never another user's file (planted beforehand to
    read the job's output), never a second name of a file (a hard link). Links owned
    by this user or by root (``logs -> /scratch/me``, ``/var/run``) are followed, each
    checked the same way. A new file is made 0600. Raises OSError or ValueError."""
    me = os.geteuid()
    pending = [p for p in os.path.abspath(path).split("/") if p][::-1]
    if not pending:
        raise ValueError("not a file")
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    links = 0
    try:
        while True:
            name = pending.pop()
            last = not pending
            try:
                info: os.stat_result | None = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not last:
                    raise
                info = None
            if info is not None and stat.S_ISLNK(info.st_mode):
                owner = info.st_uid
                if owner not in (me, 0):
                    raise ValueError(f"{name!r} is a link of {user_name(owner)}'s; not followed")
                links += 1
                if links > MAX_LINKS:
                    raise ValueError("too many links")
                target = os.readlink(name, dir_fd=fd)
                pending.extend([p for p in target.split("/") if p][::-1])
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                if not pending:
                    raise ValueError("a link to no file")
                continue
            if not last:
                step = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                               | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = step
                continue
            problem = None if info is None else _log_problem(info, me)
            if problem:
                raise ValueError(problem)
            # O_NONBLOCK: a FIFO put there since must not hang us (no reader: ENXIO).
            out = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                          | os.O_NONBLOCK | os.O_CLOEXEC, 0o600, dir_fd=fd)
            problem = _log_problem(os.fstat(out), me)
            if problem:
                os.close(out)
                raise ValueError(problem)
            os.set_blocking(out, True)
            return out
    finally:
        os.close(fd)


def _log_problem(info: os.stat_result, me: int) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file (a FIFO or a device?); not used"
    if info.st_uid != me:
        return f"{user_name(info.st_uid)}'s file, not yours; not used"
    if info.st_nlink != 1:
        return f"a file with {info.st_nlink} names (a hard link); not used"
    return None


def _store_mark(directory: str) -> int | None:
    try:
        info = os.stat(directory)
    except OSError:
        return None
    return info.st_mtime_ns


def user() -> str:
    """Who runs the job: the reservation store's name for this process's user."""
    return reservations.user_name(os.geteuid())


def _die_with_parent() -> None:
    # In the child before exec: CMD gets SIGINT as usual (an ignored signal would stay
    # ignored across exec), and if `gputop run` dies (even by SIGKILL), CMD gets SIGTERM
    # rather than running on cards that are no longer reserved for it.  What CMD started
    # does not get it: the reservation names CMD's session, and the cards stay held
    # while anything in it runs.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _become_subreaper() -> None:
    # What CMD orphans is reparented to us, not to pid 1: we can still find and end it.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signum)


def _reap_orphans(me: int) -> None:
    """Collect the exit status of orphans reparented to us (never CMD's own, which
    subprocess waits for)."""
    for pid in liveness.child_zombies(me):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _tee(source: Any, terminal: Any, log_fd: int) -> threading.Thread:
    """Copy CMD's output to the terminal and the log as it comes."""
    def copy() -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := os.read(source.fileno(), 65536):
                with contextlib.suppress(OSError, ValueError):
                    terminal.write(chunk)
                    terminal.flush()
                with contextlib.suppress(OSError):
                    os.write(log_fd, chunk)
        with contextlib.suppress(OSError):
            source.close()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread


def _runnable(command: tuple[str, ...]) -> str | None:
    """Why CMD cannot be started (it is started by a shell, which would only say 127)."""
    name = command[0]
    if "/" in name:
        if not os.path.isfile(name):
            return f"{name}: No such file or directory"
        if not os.access(name, os.X_OK):
            return f"{name}: Permission denied"
        return None
    return None if shutil.which(name) else f"{name}: command not found"
