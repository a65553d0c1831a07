"""`gputop record`: the usage ledger's one writer, a small daemon.

It reads whatever sources the options name (this machine, SSH hosts, the simulator, or
any other feed the opener knows) through their feeds, and appends one transaction per
host per interval.  A full disk pauses recording with one message and resumes when space
returns; raw samples older than --raw-days are deleted once an hour (their hourly rollups,
kept current with every interval, stay).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sqlite3
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gputop.analysis.durations import format_duration
from gputop.analysis.pipeline import Settings, warnings_once
from gputop.commands import common
from gputop.commands.arguments import add_ledger
from gputop.exitcodes import EXIT_OK
from gputop.ledger import paths, publish, store
from gputop.ledger.engine import Connection
from gputop.ledger.writer import LedgerFull, Recorder, expire_raw
from gputop.model import HostSnapshot
from gputop.options import SourceOptions
from gputop.sources.feed import Feed
from gputop.sources.opener import LOCAL_HOST, reservations_dir

if TYPE_CHECKING:
    from gputop.commands.idle import IdleEnforcer
    from gputop.ledger.collect import Collector

MIB = 1024 * 1024
DAY = 86400.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Record GPU and process usage into the ledger until stopped."
    add_ledger(p)
    p.add_argument("--interval", type=float, default=10.0, metavar="S",
                   help="seconds between samples (default %(default)g)")
    p.add_argument("--raw-days", type=float, default=7.0, metavar="D",
                   help="keep raw samples D days, then hourly rollups (default %(default)g)")
    p.add_argument("--import", dest="import_csv", metavar="CSV",
                   help="add past usage from CSV in the ledger's columns (docs/ledger.md)"
                        " into the ledger, then exit (default: record)")
    p.add_argument("--dry-run", action="store_true",
                   help="the policy's idle section only says what it would do"
                        " (default: it acts)")


def run(options: SourceOptions, args: argparse.Namespace) -> int:
    return common.run("record", lambda: _record(options, args))


def _record(options: SourceOptions, args: argparse.Namespace) -> int:
    if not args.interval > 0:
        raise common.usage_error("--interval must be more than 0 seconds")
    if not args.raw_days > 0:
        raise common.usage_error("--raw-days must be more than 0")
    path = args.db or lab_ledger("record") or paths.default_path()
    if getattr(args, "import_csv", None):
        return _import(path, args.import_csv)
    config = common.config(options)
    settings = common.settings(config)
    # Sources first: no driver or a bad hosts file leaves no ledger file behind.
    feeds = common.feeds(options, config)
    lock, conn, publisher = _open_live(path)
    idle_mem = int(settings.thresholds.idle_memory_mib * MIB)
    loop = RecordLoop(Recorder(conn, args.interval, idle_mem), settings, path, args.raw_days,
                      publisher)
    loop.enforcer = _idle_enforcer(idle_mem, conn, feeds, args.dry_run, args.interval)
    loop.collector = _collector(options, config, conn, _live(path), feeds)
    print(f"gputop record: recording {', '.join(h for f in feeds for h in f.hosts)} "
          f"every {args.interval:g} s into {store.engine.shown(path)}", file=sys.stderr,
          flush=True)
    try:
        asyncio.run(_stream(feeds, args.interval, loop.emit, loop.drain))
    finally:
        _close_live(conn, publisher, path)
        lock.release()
    return EXIT_OK


def _open_live(path: str) -> tuple[store.WriterLock, Connection, publish.Publisher | None]:
    """The writer's lock and live database in their private directory, and the readers'
    first copy at ``path`` (docs/ledger.md, "Who can read what").  A PostgreSQL ledger
    has no files to keep private or copy: its server decides who reads (issue 38.3)."""
    lock = store.WriterLock(_live(path))
    try:
        if store.engine.is_url(path):
            return lock, store.open_writer(path), None
        live = publish.private_place(path)
        lock.acquire()
        publish.adopt(path, live)
        conn = store.open_writer(live)
        publisher = publish.Publisher(path, conn)
        publisher.publish()
    except store.LedgerError as err:
        lock.release()
        raise common.usage_error(str(err)) from None
    return lock, conn, publisher


def _live(path: str) -> str:
    """The database the recorder writes: a URL's is itself."""
    return path if store.engine.is_url(path) else paths.live_path(path)


def _close_live(conn: Connection, publisher: publish.Publisher | None, path: str) -> None:
    try:
        if publisher is not None:
            publisher.publish()  # the readers' copy has the last interval
    except store.LedgerError as err:
        common.say("record", str(err))
    finally:
        conn.close()


def lab_ledger(command: str) -> str | None:
    """Root's default ledger where the policy names the lab's (issue 38.3): its passfile
    is root's alone, so a user's default stays their own file."""
    return common.accounting(command).ledger if os.geteuid() == 0 else None


def _import(path: str, csv_path: str) -> int:
    """`record --import CSV`: past usage in one transaction, under the writer's lock."""
    from gputop.ledger.importer import load_csv

    lock, conn, publisher = _open_live(path)
    try:
        count = load_csv(conn, csv_path)
        _close_live(conn, publisher, path)  # the readers' copy has it, under the lock
    except store.LedgerError as err:
        conn.close()
        raise common.usage_error(str(err)) from None
    finally:
        lock.release()
    common.say("record", f"{store.engine.shown(path)}: imported {count} rows from {csv_path}")
    return EXIT_OK


def _idle_enforcer(idle_mem: int, conn: Any, feeds: list[Feed], dry_run: bool,
                   interval: float) -> IdleEnforcer | None:
    """The policy's idle section (opt-in, issue 28.7), or None."""
    from gputop.commands.idle import IdleEnforcer

    accounting = common.accounting("record")
    if accounting.idle is None:
        if dry_run:
            common.say("record", "--dry-run: the policy has no idle section; nothing to show")
        return None
    p = accounting.idle
    common.say("record", f"idle policy{' (dry run)' if dry_run else ''}: warn after "
               f"{format_duration(p.warn_after_s)}, {p.action} after"
               f" {format_duration(p.release_after_s)}")
    return IdleEnforcer(p, idle_mem, conn, {h: f for f in feeds for h in f.hosts}, dry_run,
                        interval)


def _collector(options: SourceOptions, config: Any, conn: Any, path: str,
               feeds: list[Feed]) -> Collector | None:
    """Root's recorder of this machine takes every user's finished jobs from the line
    (issue 38.1); a user's recorder has only its own, which `gputop run` writes itself."""
    if os.geteuid() != 0 or options.demo or not any(
            LOCAL_HOST in feed.hosts for feed in feeds):
        return None
    from gputop.ledger.collect import Collector

    return Collector(conn, reservations_dir(options, config), path)


class RecordLoop:
    """What happens to each snapshot: warnings, the write, disk-full, retention."""

    def __init__(self, recorder: Recorder, settings: Settings, path: str, raw_days: float,
                 publisher: publish.Publisher | None = None):
        self.recorder, self.settings, self.path = recorder, settings, path
        # Snapshots a busy database could not take wait here, in order (issue 41.5).
        self.backlog = publish.Backlog(recorder, lambda line: common.say("record",
                                                                         f"{path}: {line}"))
        self.publisher = publisher
        self.raw_s = raw_days * DAY
        self.paused = False
        self.expired_hour: int | None = None
        self.enforcer: IdleEnforcer | None = None
        self.collector: Collector | None = None

    async def drain(self) -> None:
        if self.enforcer is not None:
            await self.enforcer.drain()

    def emit(self, snap: HostSnapshot) -> None:
        warnings = warnings_once(snap, self.settings, None, snap.time) if snap.ok else []
        try:
            # False: held until the database is free; the idle policy still looks.
            written = self.backlog.record(snap, warnings)
            if written and self.publisher is not None:
                self.publisher.maybe()
            hour = int(snap.time // 3600)
            if written and hour != self.expired_hour:
                self.expired_hour = hour
                expire_raw(self.recorder.conn, snap.time - self.raw_s)
        except LedgerFull as err:
            if not self.paused:
                self.paused = True
                common.say("record", f"{self.path}: {err}; recording paused until space returns")
            return
        except store.LedgerError as err:
            common.say("record", f"{self.path}: {err}")
            return
        if self.paused:
            self.paused = False
            common.say("record", f"{self.path}: space is back; recording resumed")
        if self.enforcer is not None:
            self.enforcer.observe(snap)
        if self.collector is not None and snap.host == LOCAL_HOST:
            try:
                self.collector.observe(snap.time)
            except sqlite3.Error as err:
                common.say("record", f"{self.path}: users' jobs not copied ({err})")


async def _stream(feeds: list[Feed], interval: float, emit: Callable[[HostSnapshot], None],
                  drain: Callable[[], Awaitable[None]] | None = None) -> None:
    """Every feed's stream until SIGTERM or SIGINT; then the feeds are closed."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(feed.run(interval, emit)) for feed in feeds]
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait([*tasks, waiter], return_when=asyncio.FIRST_COMPLETED)
    if drain is not None:
        await drain()  # a kill under way ends, and is logged, before the ledger closes
    for feed in feeds:
        await feed.close()
    for task in [*tasks, waiter]:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
