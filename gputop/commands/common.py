"""What every command shares: the config, the sources, one-line errors with their exit
code, the colour decision and untrusted text made safe.

A command's body raises ``CommandError`` for anything the user must be told; ``run``
prints it as one line on stderr (``gputop CMD: problem``) and returns its exit code, so
no command prints a traceback for a mistake in its input.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, TextIO

from gputop.config import Config, ConfigError, analysis_settings, load_config
from gputop.exitcodes import EXIT_ACTION_FAILED, EXIT_NO_DRIVER, EXIT_USAGE
from gputop.options import SourceOptions
from gputop.text import visible

if TYPE_CHECKING:
    from gputop.analysis.pipeline import Settings
    from gputop.model import HostSnapshot
    from gputop.policy import Accounting
    from gputop.sources.feed import Feed
    from gputop.sources.oneshot import Session
    from gputop.sources.opener import Round, SourcePlan


class CommandError(Exception):
    """One line for the user and the exit code that goes with it."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def usage_error(message: str) -> CommandError:
    return CommandError(message, EXIT_USAGE)


def action_failed(message: str) -> CommandError:
    return CommandError(message, EXIT_ACTION_FAILED)


def run(command: str, body: Callable[[], int]) -> int:
    """``body()``'s exit code; a CommandError becomes its one line and its code."""
    try:
        return body()
    except CommandError as err:
        say(command, str(err))
        return err.code


def say(command: str, message: str) -> None:
    """One line on stderr, prefixed ``gputop CMD:`` unless the source worded it already."""
    prefix = "gputop: " if not command else f"gputop {command}: "
    text = visible(message)
    print(text if text.startswith("gputop") else prefix + text, file=sys.stderr)


def config(options: SourceOptions) -> Config:
    try:
        return load_config(options.config_path)
    except ConfigError as err:
        raise usage_error(str(err)) from None


def accounting(command: str | None) -> Accounting:
    """The policy file's accounting sections (quotas, cost, idle); a bad file is its one
    line and exit 2; its warning said as ``command`` (None: the caller's policy read
    already said it)."""
    from gputop.policy import PolicyError, load_accounting

    try:
        found, warning = load_accounting()
    except PolicyError as err:
        raise usage_error(str(err)) from None
    if warning and command is not None:
        say(command, warning)
    return found


def settings(config: Config) -> Settings:
    try:
        return analysis_settings(config)
    except ConfigError as err:
        raise usage_error(str(err)) from None


@contextlib.contextmanager
def source_errors() -> Iterator[None]:
    from gputop.sources.opener import NoDriverError, SourceError

    try:
        yield
    except NoDriverError as err:
        raise CommandError(str(err), EXIT_NO_DRIVER) from None
    except SourceError as err:
        raise usage_error(str(err)) from None


def plan(options: SourceOptions, one_host: bool = False, host: str | None = None) -> SourcePlan:
    """The sources the options name; ``one_host``: the one a command acts on (--host)."""
    from gputop.sources import opener

    with source_errors():
        found = opener.plan_sources(options)
        return opener.narrow_to_one(found, host) if one_host else found


def collect(
    options: SourceOptions, config: Config, plan: SourcePlan | None = None, lean: bool = False,
    topology: bool = True, prometheus_view: str | None = None,
) -> Round:
    """One round of snapshots of the sources the options (or ``plan``) name; ``lean``:
    without what a plain table never shows (topology, XID watch, device scan);
    ``topology`` False: without NVLink remote ends and topology; ``prometheus_view``:
    what a Prometheus source asks for (sources/promql.py)."""
    from gputop.sources.opener import collect_once

    with source_errors():
        return collect_once(options, config, plan, lean=lean, topology=topology,
                            prometheus_view=prometheus_view)


@contextlib.asynccontextmanager
async def session(
    options: SourceOptions, config: Config, plan: SourcePlan, need_driver: bool = True
) -> AsyncIterator[Session]:
    """The planned hosts' feeds, held open for requests after their first snapshots."""
    from gputop.sources.oneshot import Session
    from gputop.sources.opener import open_feeds

    with source_errors():
        feeds = open_feeds(options, config, one_shot=True, plan=plan, need_driver=need_driver)
    async with Session(feeds, options.timeout) as opened:
        yield opened


@contextlib.contextmanager
def reader_may_leave() -> Iterator[None]:
    """Around a command's output: `gputop check | head -1` closes the pipe early, which
    is no error and must not change the exit code the script reads (a critical stays 2).
    Later writes, the interpreter's last flush included, go to /dev/null."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def use_colour(stream: TextIO) -> bool:
    """Colour only for a terminal, and never when NO_COLOR is set (no-color.org) or the
    terminal says it has none (TERM=dumb: an editor's shell buffer, a serial console)."""
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def feeds(options: SourceOptions, config: Config, history: bool = True) -> list[Feed]:
    """The feeds of the sources the options name, as streams (the recorder's, --watch's);
    ``history``: with the demo's seeded past."""
    from gputop.sources.opener import open_feeds

    with source_errors():
        return open_feeds(options, config, history=history)


def nothing_to_show(snapshots: list[HostSnapshot]) -> bool:
    """Every host unreachable or without a driver: the command exits EXIT_NO_DRIVER, so a
    script never reads the host states as a success (README, exit codes)."""
    return bool(snapshots) and not any(snap.ok for snap in snapshots)
