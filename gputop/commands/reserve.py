"""`gputop pick`, `reserve`, `release`, `reservations`: cards for scripts and people.

stdout carries only what a script consumes (`CUDA_VISIBLE_DEVICES=0,2`, the chosen
indexes, the table or JSON); every message for a person goes to stderr as one line.
Exit codes: 0 ok, 2 bad arguments or config, 3 no driver, 4 the action failed (a race
lost, a release refused, not enough free cards).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import getpass
import json
import os
import pwd
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from gputop import cli, model
from gputop.actions.reservations import ReservationError, check_note
from gputop.analysis import pick as picking
from gputop.analysis.durations import format_duration, parse_size, parse_until
from gputop.model import HostSnapshot

# A picked card can be taken by someone else between our look and our reserve: try the
# next best ones a few times before giving up.
PICK_ATTEMPTS = 3


class UsageError(Exception):
    """A bad option value; str() is one line."""


class ActionFailed(Exception):
    """The action ran and failed (lost race, refused, nothing free); str() is one line."""


def run(command: str, args: argparse.Namespace) -> int:
    try:
        config = _config(args)
        if command == "pick":
            return _pick(args, config)
        if command == "reserve":
            return _reserve(args, config)
        if command == "release":
            return _release(args, config)
        if command == "reservations":
            return _reservations(args, config)
        raise UsageError(f"unknown command {command!r}")
    except UsageError as exc:
        _say(f"gputop {command}: {exc}")
        return cli.EXIT_USAGE
    except ActionFailed as exc:
        _say(f"gputop {command}: {exc}")
        return cli.EXIT_ACTION_FAILED
    except _SourceProblem as exc:
        _say(str(exc))
        return exc.code


# ---------------------------------------------------------------------------------------
# the commands


def _pick(args: argparse.Namespace, config: dict[str, Any]) -> int:
    count = _count(args.count)
    min_free, max_util = _filters(args)
    with _target(args, config) as target:
        snapshot = target.snapshot
    now = time.time()
    me = _me(args)
    ranking = picking.rank(snapshot, now, me, min_free, max_util, _health(snapshot, now, me))
    chosen = ranking.chosen[:count]
    if len(chosen) < count:
        raise ActionFailed(f"{snapshot.host}: {ranking.shortfall(count)}")
    if getattr(args, "json", False):
        rows = [
            {
                "host": snapshot.host,
                "index": gpu.index,
                "uuid": gpu.uuid,
                "name": gpu.name,
                "mem_free": gpu.mem_free,
                "util_gpu": gpu.util_gpu,
            }
            for gpu in chosen
        ]
        print(json.dumps(rows, indent=2))
    else:
        _print_devices([gpu.index for gpu in chosen], args.export)
    return cli.EXIT_OK


def _reserve(args: argparse.Namespace, config: dict[str, Any]) -> int:
    now = time.time()
    try:
        until = parse_until(args.duration, now)
    except ValueError as exc:
        raise UsageError(f"--for: {exc}") from None
    note = args.note or ""
    try:
        check_note(note)
    except ReservationError as exc:
        raise UsageError(f"--note: {exc}") from None
    gpus = _gpu_list(args.gpus) if args.gpus else None
    if gpus is not None and args.count is not None:
        raise UsageError("give --gpus or --count, not both")
    if gpus is not None and (args.min_free_mem or args.max_util is not None):
        raise UsageError("--min-free-mem and --max-util choose cards: use them with --count")
    count = _count(args.count) if gpus is None else 0
    min_free, max_util = _filters(args)
    with _target(args, config) as target:
        # The snapshot also tells the store which indexes and UUIDs this host has.
        snapshot = target.snapshot
        if gpus is not None:
            _check_gpus(gpus, snapshot)
            reply = target.request({"op": "reserve", "gpus": gpus, "until": until, "note": note})
            if not reply.get("ok"):
                raise ActionFailed(_reply_message(reply, target.host))
            indexes = [r["gpu"] for r in reply.get("reservations", [])]
        else:
            indexes = _reserve_best(
                target, snapshot, count, until, note, _me(args), min_free, max_util
            )
            reply = target.last_reply
    _say(f"gputop reserve: {target.host}: {reply.get('message', 'reserved')}")
    _print_devices(indexes, args.export)
    return cli.EXIT_OK


def _reserve_best(
    target: _Target,
    snapshot: HostSnapshot,
    count: int,
    until: float,
    note: str,
    me: str,
    min_free: int | None,
    max_util: float | None,
) -> list[int]:
    now = time.time()
    warnings = _health(snapshot, now, me)
    lost: set[int] = set()
    last = ""
    for _attempt in range(PICK_ATTEMPTS):
        ranking = picking.rank(snapshot, now, me, min_free, max_util, warnings, exclude=lost)
        chosen = [gpu.index for gpu in ranking.chosen[:count]]
        if len(chosen) < count:
            detail = f"; last try: {last}" if last else ""
            raise ActionFailed(f"{snapshot.host}: {ranking.shortfall(count)}{detail}")
        reply = target.request({"op": "reserve", "gpus": chosen, "until": until, "note": note})
        if reply.get("ok"):
            return chosen
        taken = {r.get("gpu") for r in reply.get("reservations", [])}
        if "holder" not in reply or not taken & set(chosen):
            raise ActionFailed(_reply_message(reply, target.host))
        # Someone was faster on one of our picks: try the next best cards.
        lost |= taken & set(chosen)
        last = _reply_message(reply, target.host)
    raise ActionFailed(last)


def _release(args: argparse.Namespace, config: dict[str, Any]) -> int:
    gpus = _gpu_list(args.gpus) if args.gpus else None
    with _target(args, config) as target:
        if gpus is not None and any(isinstance(g, str) for g in gpus):
            target.snapshot  # noqa: B018  (UUIDs need the host's GPU list)
        reply = target.request({"op": "release", "gpus": gpus})
    if not reply.get("ok"):
        raise ActionFailed(_reply_message(reply, target.host))
    _say(f"gputop release: {target.host}: {reply.get('message', 'released')}")
    return cli.EXIT_OK


def _reservations(args: argparse.Namespace, config: dict[str, Any]) -> int:
    now = time.time()
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    if _wants_ssh(args) and not args.host:
        # All hosts asked for: their snapshots carry the reservations.
        snapshots = _snapshots(args, config)
        for snapshot in snapshots:
            if not snapshot.ok:
                problems.append(f"{snapshot.host}: {snapshot.state}: {snapshot.error or ''}")
            rows.extend({**r.to_dict(), "host": snapshot.host} for r in snapshot.reservations)
        if snapshots and not any(s.ok for s in snapshots):
            # Not one host could be read: "none" would be a lie.
            raise ActionFailed("; ".join(problems))
    else:
        with _target(args, config) as target:
            reply = target.request({"op": "reservations"})
        if not reply.get("ok"):
            raise ActionFailed(_reply_message(reply, target.host))
        rows = [{**r, "host": target.host} for r in reply.get("reservations", [])]
        problems = [str(p) for p in reply.get("problems", [])]
    rows = [r for r in rows if r.get("until", 0) > now]
    for problem in problems:
        _say(f"gputop reservations: {problem}")
    if args.json:
        print(json.dumps(rows, indent=2))
    elif rows:
        print(_table(rows, now))
    else:
        _say("gputop reservations: none")
    return cli.EXIT_OK


@contextlib.contextmanager
def _target(args: argparse.Namespace, config: dict[str, Any]) -> Iterator[_Target]:
    target = _open_target(args, config)
    try:
        yield target
    finally:
        target.close()


# ---------------------------------------------------------------------------------------
# where requests go: the local store (dispatch) or a remote probe (the SSH feed)


class _Target:
    """One host: its snapshot (read when needed) and its action endpoint."""

    host: str
    last_reply: dict[str, Any]

    @property
    def snapshot(self) -> HostSnapshot:
        raise NotImplementedError

    def request(self, request: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _LocalTarget(_Target):
    """This machine (or --demo): snapshots from select.collect_once, actions through
    dispatch.handle on the same reservation store the collector reads."""

    def __init__(self, args: argparse.Namespace, config: dict[str, Any]) -> None:
        self.args = args
        self.config = config
        self.host = "localhost"
        self.last_reply = {}
        self._snapshot: HostSnapshot | None = None
        if getattr(args, "demo", None):
            # The simulated host's name (and GPU list) costs nothing to read: use it.
            self.snapshot  # noqa: B018

    @property
    def snapshot(self) -> HostSnapshot:
        if self._snapshot is None:
            self._snapshot = _one_snapshot(_snapshots(self.args, self.config), None)
            self.host = self._snapshot.host
        return self._snapshot

    def request(self, request: dict[str, Any]) -> dict[str, Any]:
        from gputop.actions import dispatch
        from gputop.sources import select

        uuids = {g.index: g.uuid for g in self._snapshot.gpus} if self._snapshot else None
        env = dispatch.ActionEnv(
            reservations_dir=select.reservations_dir(self.args, self.config), gpu_uuids=uuids
        )
        self.last_reply = dispatch.handle(request, env)
        return self.last_reply


class _RemoteTarget(_Target):
    """One SSH host: one connection and one probe for the whole command. The feed is
    asyncio; it runs on a private loop in a thread so the command logic stays plain."""

    def __init__(self, spec: Any, timeout: float) -> None:
        self.host = spec.name
        self.last_reply = {}
        self.timeout = timeout
        self._spec = spec
        self._snapshot: HostSnapshot | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._feed: Any = None
        self._runner: asyncio.Task[None] | None = None
        try:
            self._call(self._start(), timeout + 5)
        except BaseException:
            self.close()
            raise

    def _call(self, coro: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ActionFailed(f"{self.host}: no answer within {timeout:g} s") from None

    async def _start(self) -> None:
        from gputop.sources import ssh

        arrived = asyncio.Event()

        def emit(snapshot: HostSnapshot) -> None:
            if snapshot.state == model.HOST_CONNECTING:
                return
            self._snapshot = snapshot
            # retry=False: an error state is as final for this one command as a snapshot.
            arrived.set()

        self._feed = ssh.SshFeed([self._spec], retry=False, warmup=0.2)
        self._runner = asyncio.create_task(self._feed.run(1.0, emit))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(arrived.wait(), self.timeout)

    @property
    def snapshot(self) -> HostSnapshot:
        snapshot = self._snapshot
        if snapshot is None:
            raise ActionFailed(f"{self.host}: no answer within {self.timeout:g} s")
        return _one_snapshot([snapshot], None)

    def request(self, request: dict[str, Any]) -> dict[str, Any]:
        self.snapshot  # noqa: B018  (raises when the host never answered)
        self.last_reply = self._call(self._feed.request(self.host, request), self.timeout + 35)
        return self.last_reply

    async def _stop(self) -> None:
        if self._feed is not None:
            await self._feed.close()
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)

    def close(self) -> None:
        if self._loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._loop.close()


def _open_target(args: argparse.Namespace, config: dict[str, Any]) -> _Target:
    if not _wants_ssh(args) or (getattr(args, "local", False) and not args.host):
        return _LocalTarget(args, config)
    from gputop import hosts

    try:
        specs = hosts.specs_from_args(args) or []
    except (hosts.HostsFileError, OSError) as exc:
        raise _SourceProblem(f"gputop: {exc}", cli.EXIT_USAGE) from None
    wanted = getattr(args, "host", None)
    if wanted:
        chosen = [s for s in specs if s.name == wanted]
        if not chosen:
            names = ", ".join(s.name for s in specs) or "none"
            raise UsageError(f"no host {wanted!r} (hosts: {names})")
    elif len(specs) == 1:
        chosen = specs
    else:
        names = ", ".join(s.name for s in specs)
        raise UsageError(f"several hosts ({names}): choose one with --host")
    return _RemoteTarget(chosen[0], args.timeout)


# ---------------------------------------------------------------------------------------
# snapshots, config, identity


class _SourceProblem(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _config(args: argparse.Namespace) -> dict[str, Any]:
    from gputop.config import ConfigError, load_config

    try:
        loaded = load_config(getattr(args, "config", None))
    except ConfigError as exc:
        raise _SourceProblem(f"gputop: {exc}", cli.EXIT_USAGE) from None
    except OSError as exc:
        raise _SourceProblem(f"gputop: {exc.filename}: {exc.strerror}", cli.EXIT_USAGE) from None
    reservations = getattr(loaded, "reservations", None)
    directory = getattr(reservations, "dir", None)
    return {"reservations_dir": directory} if directory else {}


def _snapshots(args: argparse.Namespace, config: dict[str, Any]) -> list[HostSnapshot]:
    from gputop.sources import select

    try:
        return select.collect_once(args, config)
    except select.NoDriverError as exc:
        raise _SourceProblem(_prefixed(str(exc)), cli.EXIT_NO_DRIVER) from None
    except select.SourceError as exc:
        raise _SourceProblem(_prefixed(str(exc)), cli.EXIT_USAGE) from None


def _one_snapshot(snapshots: list[HostSnapshot], wanted: str | None) -> HostSnapshot:
    if wanted:
        found = [s for s in snapshots if s.host == wanted]
        if not found:
            names = ", ".join(s.host for s in snapshots) or "none"
            raise UsageError(f"no host {wanted!r} (hosts: {names})")
        snapshot = found[0]
    elif len(snapshots) == 1:
        snapshot = snapshots[0]
    else:
        names = ", ".join(s.host for s in snapshots)
        raise UsageError(f"several hosts ({names}): choose one with --host")
    if not snapshot.ok:
        raise ActionFailed(f"{snapshot.host}: {snapshot.state}: {snapshot.error or ''}".rstrip())
    return snapshot


def _health(snapshot: HostSnapshot, now: float, me: str) -> list[Any]:
    from gputop.analysis import health

    try:
        return list(health.warnings(snapshot, None, None, now, me))
    except Exception:  # a bug in a health rule must not stop anyone from picking cards
        return []


def _me(args: argparse.Namespace) -> str:
    if _wants_ssh(args) and not getattr(args, "local", False):
        # Over SSH the reservations belong to the remote login, by default our name.
        return getpass.getuser()
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


def _wants_ssh(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "hosts", None) or getattr(args, "host_list", None))


# ---------------------------------------------------------------------------------------
# parsing and printing


def _count(value: int | None) -> int:
    count = 1 if value is None else value
    if count < 1:
        raise UsageError(f"--count must be 1 or more, got {count}")
    return count


def _filters(args: argparse.Namespace) -> tuple[int | None, float | None]:
    min_free = None
    if args.min_free_mem:
        try:
            min_free = parse_size(args.min_free_mem)
        except ValueError as exc:
            raise UsageError(f"--min-free-mem: {exc}") from None
    max_util = args.max_util
    if max_util is not None and not 0 <= max_util <= 100:
        raise UsageError(f"--max-util must be 0..100, got {max_util:g}")
    return min_free, max_util


def _gpu_list(text: str) -> list[int | str]:
    items: list[int | str] = []
    for part in text.split(","):
        item = part.strip()
        if not item:
            raise UsageError(f"--gpus: empty item in {text!r}")
        if item.isdigit():
            items.append(int(item))
        elif item.startswith(("GPU-", "MIG-")):
            items.append(item)
        else:
            raise UsageError(f"--gpus: {item!r} is neither an index nor a GPU-... UUID")
    return items


def _check_gpus(gpus: list[int | str], snapshot: HostSnapshot) -> None:
    """Name a GPU the host does not have before asking its store (which checks again)."""
    indexes = {gpu.index for gpu in snapshot.gpus}
    uuids = {gpu.uuid for gpu in snapshot.gpus if gpu.uuid}
    for gpu in gpus:
        if gpu not in indexes and gpu not in uuids:
            have = ", ".join(str(i) for i in sorted(indexes)) or "none"
            raise UsageError(f"--gpus: {snapshot.host} has no GPU {gpu} (it has {have})")


def _print_devices(indexes: list[int], export: bool) -> None:
    devices = ",".join(str(i) for i in indexes)
    print(f"export CUDA_VISIBLE_DEVICES={devices}" if export else f"CUDA_VISIBLE_DEVICES={devices}")


def _reply_message(reply: dict[str, Any], host: str) -> str:
    message = str(reply.get("message") or "failed")
    return f"{host}: {message}"


def _table(rows: list[dict[str, Any]], now: float) -> str:
    header = ("HOST", "GPU", "USER", "UNTIL", "LEFT", "NOTE")
    lines = [header]
    for row in sorted(rows, key=lambda r: (str(r.get("host")), r.get("gpu", 0))):
        lines.append(
            (
                str(row.get("host") or ""),
                str(row.get("gpu")),
                _printable(str(row.get("user") or "")),
                time.strftime("%Y-%m-%d %H:%M", time.localtime(row["until"])),
                format_duration(row["until"] - now),
                _printable(str(row.get("note") or "")),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True))
        + "  "
        + line[-1]
        for line in lines
    )


def _printable(text: str) -> str:
    # The store refuses control characters, but a remote probe is not ours to trust.
    return "".join(c if c.isprintable() else "?" for c in text)


def _prefixed(message: str) -> str:
    return message if message.startswith("gputop") else f"gputop: {message}"


def _say(message: str) -> None:
    print(_printable(message), file=sys.stderr)
