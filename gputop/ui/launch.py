"""Starting the dashboard: the skeleton first, then Textual.

``run_app`` reads the configuration, opens the feeds and, for this machine alone, takes
the first snapshot and writes it as a skeleton (gputop/ui/skeleton.py) before importing
Textual and the screens, which take longer than the snapshot itself.  The app is then
handed that snapshot and applies it before its first frame.  Nothing here imports
Textual at module level: ``gputop`` reaches this module before any of it is loaded.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gputop.config import Config, ConfigError, analysis_settings, load_config
from gputop.exitcodes import EXIT_NO_DRIVER, EXIT_USAGE
from gputop.model import MAX_INTERVAL_S, MIN_INTERVAL_S, HostSnapshot
from gputop.options import SourceOptions

# How long the start waits for this machine's first snapshot before it loads the UI
# without one (which then shows "waiting for the first snapshot"): a normal read of 8
# cards takes 0.03-0.1 s, a card that stopped answering can take seconds per call.
FIRST_POLL_WAIT_S = 1.0

if TYPE_CHECKING:
    from gputop.analysis.history import History
    from gputop.analysis.pipeline import Settings
    from gputop.ledger.query import LedgerSeries
    from gputop.sources.feed import Feed


def no_terminal(env: Mapping[str, str] | None = None) -> str | None:
    """Why the dashboard cannot be drawn here; None: it can.  Textual reads keys from
    stdin and draws on stderr; stdout that is no terminal (`gputop > f`, a pipe) wants
    text, as nvitop reads it; TERM=dumb understands no cursor movement."""
    env = os.environ if env is None else env
    for name, stream in (("stdout", sys.stdout), ("stdin", sys.__stdin__),
                         ("stderr", sys.__stderr__)):
        isatty = getattr(stream, "isatty", None)
        if not (isatty and isatty()):
            return f"{name} is not a terminal"
    if env.get("TERM") == "dumb":
        return "TERM=dumb"
    return None


def run_app(options: SourceOptions, interval: float | None) -> int:
    try:
        config = load_config(options.config_path)
    except ConfigError as err:
        print(f"gputop: {err}", file=sys.stderr)
        return EXIT_USAGE
    interval = interval if interval is not None else config.interval
    if not MIN_INTERVAL_S <= interval <= MAX_INTERVAL_S:
        print(f"gputop: --interval {interval:g}: expected {MIN_INTERVAL_S:g} to "
              f"{MAX_INTERVAL_S:g} seconds", file=sys.stderr)
        return EXIT_USAGE
    from gputop.sources.opener import NoDriverError, SourceError, open_feeds

    try:
        feeds = open_feeds(options, config, dashboard=True)
    except NoDriverError as err:
        print(str(err), file=sys.stderr)
        return EXIT_NO_DRIVER
    except SourceError as err:
        text = str(err)
        print(text if text.startswith("gputop") else f"gputop: {text}", file=sys.stderr)
        return EXIT_USAGE
    # Until the app takes these signals over (GputopApp._keep_the_terminal), SIGTERM and
    # SIGHUP end the start as Ctrl+C does, so that the skeleton's screen is left.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stopped)
    first = first_snapshot(feeds)
    painted = first is not None and paint_skeleton(first, interval, config)
    app = None
    try:
        try:
            # After the skeleton: the analysis rules are what it does not wait for.
            settings = analysis_settings(config)
        except ConfigError as err:
            if painted:
                _leave_skeleton()
                painted = False
            print(f"gputop: {err}", file=sys.stderr)
            return EXIT_USAGE
        from gputop.ui.app import GputopApp

        app = GputopApp(feeds, config, interval=interval, readonly=options.readonly,
                        settings=settings, history=_history(settings), first=first)
        app.ledger_series = _ledger_series()
        result = app.run()
    finally:
        if painted and (app is None or not app.started):
            # Textual never took the terminal over (an error, Ctrl+C while loading).
            _leave_skeleton()
    return int(result or 0)


def _stopped(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _leave_skeleton() -> None:
    """Back from the skeleton's alternate screen, cursor shown, as Textual leaves it."""
    from gputop.ui.skeleton import LEAVE

    if sys.__stderr__ is not None:
        sys.__stderr__.write(LEAVE)
        sys.__stderr__.flush()


def first_snapshot(feeds: list[Feed]) -> HostSnapshot | None:
    """This machine's first snapshot, when it is the only host shown (a lab of hosts
    starts on the overview, whose hosts answer in their own time)."""
    from gputop.sources.feed import LocalFeed

    if len(feeds) != 1 or not isinstance(feeds[0], LocalFeed):
        return None
    return feeds[0].first_snapshot(FIRST_POLL_WAIT_S)


def paint_skeleton(snap: HostSnapshot, interval: float, config: Config) -> bool:
    """Write the skeleton where Textual will draw (its driver writes to stderr), when
    that is a terminal; whether it did."""
    out = sys.__stderr__
    if out is None or not out.isatty() or os.environ.get("TERM") in (None, "", "dumb"):
        return False
    import shutil

    from gputop.ui import skeleton

    size = shutil.get_terminal_size()  # as Textual sizes its screen
    skeleton.paint(out, snap, (size.columns, size.lines), interval, time.time(),
                   config.columns)
    return True


def _history(settings: Settings) -> History:
    """The session's history; idle runs reach back before it when a ledger is there."""
    from gputop.ledger.paths import existing_path

    history = settings.history()
    ledger = existing_path()
    if ledger is not None:
        # Only then: the query module brings sqlite3 (about 1 MiB of the dashboard's RSS).
        from gputop.ledger.query import RecordedIdle

        history.recorded_idle = RecordedIdle(ledger)
    return history


def _ledger_series() -> LedgerSeries | None:
    from gputop.ledger.paths import existing_path

    ledger = existing_path()
    if ledger is None:
        return None
    from gputop.ledger.query import LedgerSeries

    return LedgerSeries(ledger)
