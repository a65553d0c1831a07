"""`gputop --once --watch S`: the `--once` table redrawn every S seconds, plainly, as
`gpustat -i` and `watch(1)` do, for a terminal where the dashboard is too much (a tmux
pane, a serial console, a log).

The feeds stream as the dashboard's do (SSH connections stay open, the simulator's clock
runs), and each frame is exactly `--once`'s text of the newest snapshot of every host.
Plain text and plain ANSI: no Textual, no rich.  Ctrl+C ends it with exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TextIO

from gputop.commands import common, once
from gputop.exitcodes import EXIT_OK
from gputop.model import HostSnapshot
from gputop.options import SourceOptions
from gputop.sources.opener import file_order

if TYPE_CHECKING:
    from gputop.analysis.pipeline import Settings
    from gputop.sources.feed import Feed

# Home, then clear to the end of the screen: the frame is redrawn in place, without the
# flash of a full clear.  Only on a terminal that moves its cursor; a pipe or TERM=dumb
# gets frames one after the other.
_HOME_CLEAR = "\x1b[H\x1b[J"
MIN_INTERVAL_S = 0.1


def run(options: SourceOptions, interval: float, frames: int | None = None) -> int:
    """Redraw until Ctrl+C (or ``frames`` frames, for tests and scripts)."""
    return common.run("", lambda: _watch(options, interval, frames))


def _watch(options: SourceOptions, interval: float, frames: int | None) -> int:
    if not interval >= MIN_INTERVAL_S:  # also NaN
        raise common.usage_error(f"--watch {interval:g}: expected at least "
                                 f"{MIN_INTERVAL_S:g} seconds")
    config = common.config(options)
    settings = common.settings(config)
    feeds = common.feeds(options, config, history=False)
    order = file_order(common.plan(options))
    out = sys.stdout
    try:
        with common.reader_may_leave():
            asyncio.run(_loop(feeds, interval, settings, options, out, frames, order))
    except KeyboardInterrupt:
        pass  # the way out of a watch, not an error
    return EXIT_OK


async def _loop(feeds: Sequence[Feed], interval: float, settings: Settings,
                options: SourceOptions, out: TextIO, frames: int | None,
                order: Callable[[HostSnapshot], int]) -> None:
    from gputop.analysis.pipeline import warnings_once

    latest: dict[str, HostSnapshot] = {}  # each host's last answer

    def emit(snapshot: HostSnapshot) -> None:
        latest[snapshot.host] = snapshot

    tasks = [asyncio.create_task(feed.run(interval, emit)) for feed in feeds]
    hosts = {host for feed in feeds for host in feed.hosts}
    try:
        # The first frame when every host has answered (or --timeout has passed), so
        # that it does not show a half-connected cluster.
        deadline = time.monotonic() + options.timeout
        while time.monotonic() < deadline and not (latest and hosts <= latest.keys()):
            await asyncio.sleep(0.05)
        # TERM=dumb (an editor's shell buffer, a serial console) moves no cursor: frames
        # follow one another there, as on a pipe (issue 39.4).
        terminal = bool(getattr(out, "isatty", None) and out.isatty()) and (
            os.environ.get("TERM") != "dumb")
        shown = 0
        while frames is None or shown < frames:
            snapshots = sorted(latest.values(), key=order)  # the hosts file's order
            now = time.time()
            warnings = {s.host: warnings_once(s, settings, _me(feeds, s.host), now)
                        for s in snapshots}
            text = once.render_text(snapshots, warnings, width=once.terminal_width(out),
                                    color=common.use_colour(out), now=now)
            header = f"gputop --watch {interval:g}  {time.strftime('%H:%M:%S')}  Ctrl+C quits"
            lead = _HOME_CLEAR if terminal else ("\n" if shown else "")
            out.write(f"{lead}{header}\n\n{text}")
            out.flush()
            shown += 1
            if frames is None or shown < frames:
                await asyncio.sleep(interval)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for feed in feeds:
            with contextlib.suppress(Exception):
                await feed.close()


def _me(feeds: Sequence[Feed], host: str) -> str | None:
    """Who "my" reservations on ``host`` belong to, as for --once (opener.Round.me)."""
    for feed in feeds:
        if host in feed.hosts:
            return feed.identity(host).reservation_owner
    return None
