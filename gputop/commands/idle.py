"""The idle policy's hands (issue 28.7): what `gputop record` does when
``analysis.idle_policy`` says a step is due.

Telling the owner: a line to each of their terminals with write(1) (this machine's users,
not the simulator's), and the policy's ``notify`` command, run without a shell, its
arguments filled only with checked values, the message (which quotes the process's
command line, untrusted) on its stdin.  Releasing: SIGTERM, then SIGKILL after the grace,
through the feed's kill request, the path the dashboard's kill takes (pid and start time
checked, pidfd where the kernel has them; the simulation under --demo).  Every step goes
into the ledger's ``actions`` table with its evidence; ``--dry-run`` only says and logs
what it would do.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import Any

from gputop.actions.kill import STILL_ALIVE
from gputop.analysis.durations import format_duration
from gputop.analysis.idle_policy import Due, IdlePolicy, IdleProcess, IdleTracker, merge, why_not
from gputop.commands import common
from gputop.ledger import query
from gputop.ledger.writer import log_action
from gputop.model import HostSnapshot
from gputop.sources.feed import Feed, LocalFeed
from gputop.text import visible

GIB = 1024**3
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_TTY = re.compile(r"(pts/\d{1,6}|tty\d{1,4})")
COMMAND_TIMEOUT_S = 30.0
SPARED = "spared"  # the kill's outcome when the look after SIGTERM stopped the SIGKILL


def message(due: Due, policy: IdlePolicy, outcome: str | None = None) -> str:
    """What the owner reads (one paragraph)."""
    p = due.proc
    gpus = ",".join(str(g) for g in p.gpus)
    what = (f"gputop: your process {p.pid} ({visible(p.command)[:120]}) on {visible(p.host)}"
            f" GPU {gpus} has held {p.mem / GIB:.1f} GiB at 0 % SM for"
            f" {format_duration(due.idle_for_s)}.")
    deadline = time.strftime("%a %H:%M", time.localtime(due.idle_since + policy.release_after_s))
    if due.step != "release":
        then = ("it will be stopped (SIGTERM)" if policy.action == "kill"
                else "you will be reminded")
        return (f"{what} The host's idle policy: {then} after"
                f" {format_duration(policy.release_after_s)} idle, at {deadline}."
                " Free the GPU if you are done with it.")
    if policy.action == "kill":
        return f"{what} It was stopped with SIGTERM under the host's idle policy: {outcome}."
    return (f"{what} That is past the host's idle limit of"
            f" {format_duration(policy.release_after_s)}: please end it.")


def terminals(user: str) -> list[str]:
    """The user's terminals on this machine, from who(1)."""
    try:
        out = subprocess.run(["who"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    ttys = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == user and _TTY.fullmatch(parts[1]):
            ttys.append(parts[1])
    return ttys


def fill(argv: tuple[str, ...], due: Due) -> list[str] | None:
    """The notify command with its fields filled in; None when a value fails its check."""
    p = due.proc
    if p.user is None or not _USER.fullmatch(p.user):
        return None
    host = p.host if _HOST.fullmatch(p.host) else "host"
    values = {"{user}": p.user, "{host}": host, "{pid}": str(p.pid),
              "{gpu}": ",".join(str(g) for g in p.gpus), "{step}": due.step}
    out = []
    for arg in argv:
        for key, value in values.items():
            arg = arg.replace(key, value)
        out.append(arg)
    return out


def _run(argv: list[str], text: str) -> str:
    try:
        done = subprocess.run(argv, input=text, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, env={"PATH": "/usr/bin:/bin"},
                              cwd="/")
    except (OSError, subprocess.SubprocessError) as err:
        return f"{argv[0]}: {err}"
    return "ok" if done.returncode == 0 else f"{argv[0]}: exit {done.returncode}"


class IdleEnforcer:
    """The idle policy in the recorder's loop; acts in tasks so that recording goes on."""

    def __init__(self, policy: IdlePolicy, idle_mem: int, conn: Any,
                 feeds: Mapping[str, Feed], dry_run: bool,
                 interval: float = 10.0, clock: Callable[[], float] = time.time) -> None:
        # Live snapshots only: --demo's seeded past (a minute apart, the last one half a
        # minute old or more) is for the ledger, not to act upon.
        self.live_s = 2 * interval + 5.0
        self.clock = clock
        self.policy, self.conn, self.feeds, self.dry_run = policy, conn, feeds, dry_run
        self.tracker = IdleTracker(policy, idle_mem)
        self.idle_mem = idle_mem
        # The last look at each process, and each host's last snapshot: what a KILL after
        # the SIGTERM's grace is decided on (issue 38.6).
        self.latest: dict[tuple[str, int, int], IdleProcess] = {}
        self.host_seen: dict[str, float] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self._seeded: set[str] = set()

    def observe(self, snap: HostSnapshot) -> None:
        if not snap.ok or snap.time < self.clock() - self.live_s:
            return
        procs = merge(snap.host, snap.processes)
        self.host_seen[snap.host] = snap.time
        for key in [k for k in self.latest if k[0] == snap.host]:
            del self.latest[key]
        self.latest.update((proc.key, proc) for proc in procs)
        if snap.host not in self._seeded:
            self._seeded.add(snap.host)
            self._seed(snap.host, snap.time)
        for due in self.tracker.observe(snap.host, procs, snap.time):
            self.tracker.taken(due, snap.time)
            task = asyncio.get_running_loop().create_task(self._act(due, snap.time))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def _seed(self, host: str, now: float) -> None:
        """A restarted recorder picks up idle runs and steps taken from the ledger."""
        try:
            runs = query.idle_runs(self.conn, host, now)
            taken = query.actions_taken(self.conn, host)
        except query.LedgerError:
            return
        for (pid, start), since in runs.items():
            done = {step: t for step, t in taken.get((pid, start), {}).items() if t >= since}
            self.tracker.seed((host, pid, start), since, done)

    async def _act(self, due: Due, now: float) -> None:
        p = due.proc
        kills = due.step == "release" and self.policy.action == "kill"
        evidence: dict[str, Any] = {
            "idle_since": due.idle_since, "idle_for_s": round(due.idle_for_s, 1),
            "gpus": list(p.gpus), "mem_bytes": p.mem, "sm_pct": p.sm,
            "start_ticks": p.start_ticks, "command": visible(p.command)[:300],
            "workload": p.workload, "policy": {"warn_after_s": self.policy.warn_after_s,
                                               "release_after_s": self.policy.release_after_s,
                                               "action": self.policy.action}}
        verb = "SIGTERM" if kills else "tell"
        if self.dry_run:
            common.say("record", f"dry run: would {verb} {visible(p.user or '?')}'s pid {p.pid}"
                       f" on {visible(p.host)} GPU {','.join(map(str, p.gpus))} ({due.step},"
                       f" idle {format_duration(due.idle_for_s)})")
            self._log(due, now, query.DRY_RUN, evidence)
            return
        outcome = "told"
        if kills:
            result = await self._kill(due)
            evidence["kill"] = {k: result.get(k) for k in ("ok", "outcome", "message")}
            outcome = str(result.get("outcome") or result.get("message") or "failed")
        text = message(due, self.policy, outcome) + "\n"
        evidence["told"] = await asyncio.to_thread(self._tell, due, text)
        self._log(due, time.time(), outcome, evidence)
        common.say("record", f"idle policy: {due.step} {visible(p.user or '?')}'s pid {p.pid}"
                   f" on {visible(p.host)}: {outcome}")

    async def _kill(self, due: Due) -> dict[str, Any]:
        """SIGTERM; after the grace, SIGKILL only if the process is still there and still
        idle in a snapshot taken since (one that got busy again, or let go of its GPUs,
        is spared and said so)."""
        p = due.proc
        feed = self.feeds.get(p.host)
        if feed is None or p.start_ticks is None:
            return {"ok": False, "message": "no way to act on that host"}
        sent = self.clock()
        first = await feed.request(p.host, {"op": "kill", "pid": p.pid,
                                            "start_ticks": p.start_ticks, "signal": "TERM",
                                            "grace": self.policy.grace_s, "escalate": False})
        if first.get("outcome") != STILL_ALIVE:
            return first
        why = await self._looked_again(p, sent)
        if why is not None:
            return {"ok": False, "outcome": SPARED, "pid": p.pid, "signal": "TERM",
                    "message": f"pid {p.pid} is still alive after SIGTERM but {why}:"
                               " not killed"}
        return await feed.request(p.host, {"op": "kill", "pid": p.pid,
                                           "start_ticks": p.start_ticks, "signal": "KILL",
                                           "grace": 0.0})

    async def _looked_again(self, proc: IdleProcess, since: float) -> str | None:
        """Why the process may not be SIGKILLed now, from a snapshot taken after
        ``since``; None when it is still idle there."""
        deadline = self.clock() + self.live_s
        while self.host_seen.get(proc.host, 0.0) <= since:
            if self.clock() >= deadline:
                return "its host was not seen since"
            await asyncio.sleep(0.1)
        now = self.latest.get(proc.key)
        if now is None:
            return "it no longer holds a GPU"
        why = why_not(now, self.policy, self.idle_mem)
        return None if why is None else f"it is {why} now" if why == "busy" else why

    def _tell(self, due: Due, text: str) -> dict[str, Any]:
        p = due.proc
        told: dict[str, Any] = {}
        # This machine's own processes: the local feed's (its snapshots say "localhost",
        # never this host's name, issue 38.6); an SSH host's users are not ours to write to.
        if not p.simulated and p.user and _USER.fullmatch(p.user) and \
                isinstance(self.feeds.get(p.host), LocalFeed):
            told["write"] = {tty: _run(["write", p.user, tty], text) for tty in terminals(p.user)}
        if self.policy.notify:
            argv = fill(self.policy.notify, due)
            told["notify"] = "not run: the owner's name failed its check" if argv is None \
                else _run(argv, text)
        return told

    def _log(self, due: Due, t: float, outcome: str, evidence: dict[str, Any]) -> None:
        p = due.proc
        try:
            log_action(self.conn, p.host, t, p.pid, p.start, p.gpus[0] if p.gpus else None,
                       p.user, due.step, outcome, evidence)
        except query.LedgerError as err:
            common.say("record", f"idle policy: not logged: {err}")
        except Exception as err:  # a full disk must not stop the policy or the recorder
            common.say("record", f"idle policy: not logged: {type(err).__name__}: {err}")

    async def drain(self) -> None:
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
