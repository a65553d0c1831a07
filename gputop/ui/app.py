"""The Textual app: feeds in workers, the analysis thread, the shared state, the keymap.

The dashboard of one host is a screen (``gputop/ui/screens/dashboard.py``) returned by
``get_default_screen``; every other view is a screen pushed on top of it.  Screens read
``app.state`` (gputop/ui/state.py: the latest HostSnapshot per host, History, current
warnings, orphan flags, selection), subscribe to ``app.state_changed`` (a Signal
published after every applied snapshot) and ``app.view_changed`` (another host shown, or
the selection changed), ask ``app.capabilities(host)`` and ``app.identity(host)`` what may
be offered on a host, and send action requests with ``await app.request(host, request)``.
The app writes the state (ui/state.py lists the one exception): the dashboard posts its
tags and GPU filter as messages (``DashboardScreen.TagToggled`` ...) that the handlers
here apply.

Data flows one way: feeds -> queue -> analysis thread (``gputop.analysis.pipeline``) ->
``SnapshotAnalysed`` message -> state -> screens.
"""

from __future__ import annotations

import asyncio
import gc
import os
import queue
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from platformdirs import user_downloads_path
from textual import on
from textual.app import App, SystemCommand
from textual.binding import BindingType
from textual.message import Message
from textual.screen import Screen
from textual.signal import Signal
from textual.worker import Worker, WorkerState, get_current_worker

from gputop.analysis.history import History
from gputop.analysis.pipeline import Analysed, Analyser, Settings
from gputop.config import Config, analysis_settings
from gputop.model import HostSnapshot
from gputop.sources.feed import REPLAY, Capabilities, Feed, Focuses, ProcessDetails
from gputop.sources.identity import Identity, named_identity
from gputop.text import visible
from gputop.ui.faults import FaultLog, restart_delay
from gputop.ui.keys import bindings
from gputop.ui.screens.dashboard import DashboardScreen
from gputop.ui.state import UiState

if TYPE_CHECKING:
    from gputop.ledger.query import LedgerSeries


class SnapshotAnalysed(Message):
    """One or more analysed snapshots, in arrival order: a feed of 1,000 hosts (Prometheus)
    hands in a refresh at once, and one message per host kept the app a refresh behind."""

    def __init__(self, *results: Analysed) -> None:
        super().__init__()
        self.results = results


GC_GEN0_AFTER_START = 20_000
ANALYSIS_BATCH = 2000  # snapshots in one SnapshotAnalysed message, at most


def freeze_startup_objects() -> None:
    """Move everything alive after the first full frame out of the collector's sight.

    The widget tree, the CSS and the imported modules live as long as the app; scanning
    them again in every full collection was what made the slow ticks (p95 twice the median
    at 8 x 2,000 processes).  Frozen objects are still freed by reference counting.
    """
    gc.collect()
    gc.freeze()
    # A tick allocates thousands of short-lived objects (rows, strips, segments): at the
    # default 700 the young generation was collected several times per tick.
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_AFTER_START, gen1, gen2)


class GputopApp(App[int]):
    CSS_PATH = "gputop.tcss"
    TITLE = "gputop"

    BINDINGS: ClassVar[list[BindingType]] = bindings("app")
    # The usage ledger's long history lines (launch.run_app sets it when a ledger exists).
    ledger_series: LedgerSeries | None = None

    def __init__(
        self,
        feeds: Iterable[Feed] = (),
        config: Config | None = None,
        *,
        interval: float | None = None,
        readonly: bool = False,
        clock: Callable[[], float] = time.time,
        history: History | None = None,
        me: str | None = None,
        settings: Settings | None = None,
        first: HostSnapshot | None = None,
    ) -> None:
        """``first``: the feeds' first snapshot, taken before the app was built (the
        start-up skeleton's, gputop/ui/launch.py); applied before the first frame."""
        super().__init__()
        self.config = config or Config()
        self.interval = float(interval or self.config.interval)
        self.clock = clock
        self.feeds = list(feeds)
        settings = settings or analysis_settings(self.config)
        state = UiState(config=self.config, history=history or settings.history(),
                        readonly=readonly)
        for feed in self.feeds:
            for host in feed.hosts:
                state.feeds[host] = feed
        if self.feeds and self.feeds[0].hosts:
            state.host = self.feeds[0].hosts[0]
            if me is None:
                me = self.feeds[0].identity(state.host).user
        if me is not None:
            state.me = me
        self.state = state
        self.state_changed: Signal[UiState] = Signal(self, "state_changed")
        self.view_changed: Signal[UiState] = Signal(self, "view_changed")
        self.analyser = Analyser(settings, state.history, self._user_on)
        self._queue: queue.Queue[HostSnapshot | None] = queue.Queue()
        self._gc_frozen = False  # see freeze_startup_objects
        self.faults = FaultLog()
        self.restart_base_s = 1.0  # first restart delay of a failed worker; it doubles
        self._first = first
        self.started = False  # mounted: Textual owns the terminal
        self.dashboard = DashboardScreen()
        if self.config.keys:
            self.set_keymap(self.config.keys)

    def get_default_screen(self) -> Screen[Any]:
        return self.dashboard

    def on_mount(self) -> None:
        self.started = True
        if not self.is_headless:
            self._keep_the_terminal()
        if self._first is not None:
            # Before the analysis thread runs and before the dashboard is composed: its
            # first frame shows this snapshot, not "waiting for the first snapshot".
            self.ingest(self._first)
            self._first = None
        if self.feeds:
            self.run_worker(self._analysis_loop, name="analysis", group="analysis",
                            thread=True, exit_on_error=False)
            for feed in self.feeds:
                self.run_worker(self._feed_loop(feed), name=f"feed {','.join(feed.hosts)}",
                                group="feeds", exit_on_error=False)
            if sum(len(feed.hosts) for feed in self.feeds) != 1:
                # A lab of hosts starts on the overview; so does a feed that learns its
                # hosts as they come (Prometheus: none known yet).
                from gputop.ui.screens import cluster

                cluster.open_cluster(self)

    def _keep_the_terminal(self) -> None:
        """SIGTERM and SIGHUP end the app as `q` does, so that Textual gives the terminal
        back (alternate screen left, cursor shown, mouse reporting off), with the exit
        status a shell reports for the signal.  A terminal that goes away without a
        SIGHUP (no controlling tty, a pty master closed) ends it too: its input then
        reads end-of-file forever, and Textual's input thread spins on that."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, self.exit, 128 + sig)
        stdin = sys.__stdin__
        if stdin is None:
            return
        poller = select.poll()
        poller.register(stdin.fileno(), 0)  # no events asked: hang-ups are always told

        def check() -> None:
            if any(mask & (select.POLLHUP | select.POLLERR | select.POLLNVAL)
                   for _fd, mask in poller.poll(0)):
                self.exit(128 + signal.SIGHUP)  # as on a real hangup

        self.set_interval(1.0, check, name="terminal gone?")

    async def on_unmount(self) -> None:
        self._queue.put(None)
        if self._gc_frozen:
            # Hand the frozen objects back to the collector: the widget tree is cyclic
            # garbage now, and a process can run another app (tests, screenshots).
            gc.unfreeze()
        for feed in self.feeds:
            try:
                await feed.close()
            except Exception as err:  # closing must not hide why the app ended
                self.log.error(f"closing feed: {err}")

    # -- what a host's source offers -----------------------------------------------

    def capabilities(self, host: str) -> Capabilities:
        feed = self.state.feeds.get(host)
        return feed.capabilities(host) if feed is not None else REPLAY

    def identity(self, host: str) -> Identity:
        """Who acts on ``host``; snapshots handed in without a feed (screenshots, tests)
        are the app's user's, so what they show does not depend on who runs them."""
        feed = self.state.feeds.get(host)
        return feed.identity(host) if feed is not None else named_identity(self.state.me)

    def _user_on(self, host: str) -> str | None:
        return self.identity(host).reservation_owner

    def process_details(self, host: str, pid: int, start_ticks: int | None) -> ProcessDetails:
        """One process's facts and parent chain, where its source can read them
        (blocking: call it from a thread worker)."""
        feed = self.state.feeds.get(host)
        if feed is None or not feed.capabilities(host).process_details:
            return ProcessDetails(None, None)
        return feed.process_details(host, pid, start_ticks)

    async def request(self, host: str, request: dict[str, Any]) -> dict[str, Any]:
        feed = self.state.feeds.get(host)
        if feed is None:
            return {"ok": False, "message": f"no source for host {host!r}"}
        return await feed.request(host, request)

    # -- data in -------------------------------------------------------------------

    async def _feed_loop(self, feed: Feed) -> None:
        name = f"feed {','.join(feed.hosts)}"
        failures = 0

        def emit(snap: HostSnapshot) -> None:
            # A Prometheus feed learns its hosts as they appear.
            self.state.feeds.setdefault(snap.host, feed)
            self._queue.put(snap)

        while True:
            try:
                await feed.run(self.interval, emit)
                return
            except Exception as err:  # any fault: logged, shown once, the feed restarted
                failures += 1
                self._fault(name, err)
                await asyncio.sleep(restart_delay(failures, self.restart_base_s))

    def _analysis_loop(self) -> None:
        worker = get_current_worker()
        failures = 0
        while not worker.is_cancelled:
            try:
                batch = [self._queue.get(timeout=0.5)]
            except queue.Empty:
                continue
            # What else is waiting goes in the same message (at most a refresh's worth).
            while len(batch) < ANALYSIS_BATCH and batch[-1] is not None:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            results = []
            for snap in batch:
                if snap is None:
                    break
                try:
                    results.append(self.analyser(snap))
                except Exception as err:  # the snapshot is dropped, not the thread
                    failures += 1
                    self.call_from_thread(self._fault, "analysis", err)
                    time.sleep(restart_delay(failures, self.restart_base_s))
                    continue
                failures = 0
            if results:
                self.post_message(SnapshotAnalysed(*results))
            if batch[-1] is None:
                return

    def _fault(self, worker: str, err: BaseException) -> None:
        if self.faults.record(worker, err):
            self.notify(visible(f"{worker}: {type(err).__name__}: {err} (restarting; details "
                                f"in {self.faults.path})"), title="worker restarted",
                        severity="error", timeout=30, markup=False)

    def ingest(self, snapshot: HostSnapshot) -> None:
        """Analyse and apply a snapshot synchronously (screenshots, tests, replays)."""
        self._apply_result(self.analyser(snapshot))

    def on_snapshot_analysed(self, message: SnapshotAnalysed) -> None:
        for result in message.results:
            self._apply_result(result, publish=result is message.results[-1])

    def _apply_result(self, result: Analysed, publish: bool = True) -> None:
        state = self.state
        snap = result.snapshot
        state.snapshots[snap.host] = snap
        if state.host is None:
            state.host = snap.host
        state.warnings = result.warnings
        state.flags[snap.host] = result.flags
        state.version += 1
        if publish:  # once per message: the screens redraw from the state as it is then
            self.state_changed.publish(state)

    # -- tags and the GPU filter, as the dashboard asks for them ---------------------------

    @on(DashboardScreen.TagToggled)
    def _tag_toggled(self, message: DashboardScreen.TagToggled) -> None:
        self.state.tagged ^= {message.key}
        self.view_changed.publish(self.state)

    @on(DashboardScreen.GpuChosen)
    def _gpu_chosen(self, message: DashboardScreen.GpuChosen) -> None:
        self.state.selected_gpu = message.index
        self.view_changed.publish(self.state)

    @on(DashboardScreen.SelectionCleared)
    def _selection_cleared(self, message: DashboardScreen.SelectionCleared) -> None:
        self.state.tagged.clear()
        if message.gpu:
            self.state.selected_gpu = None
        self.view_changed.publish(self.state)

    def show_host(self, host: str) -> None:
        """Switch the dashboard to ``host``."""
        self.state.host = host
        self.state.selected_gpu = None
        self.focus_feeds(host)
        self.view_changed.publish(self.state)

    def focus_feeds(self, host: str | None) -> None:
        """Tell the feeds which host is opened (None: the overview): a feed that reads
        a view of many hosts (Prometheus) then reads that one in full, the rest in brief."""
        for feed in self.feeds:
            if isinstance(feed, Focuses):  # most feeds read hosts whole
                feed.focus(host if host is not None and self.state.feeds.get(host) is feed
                           else None)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # The one handler for worker errors: a broken feed is shown, the rest keep going.
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(visible(f"{event.worker.name}: {type(error).__name__}: {error}"),
                        title="collection stopped", severity="error", timeout=30)

    # -- drawing -------------------------------------------------------------------

    @on(DashboardScreen.FirstDrawn)
    def _first_drawn(self) -> None:
        if not self._gc_frozen:
            self._gc_frozen = True
            self.call_after_refresh(freeze_startup_objects)

    # -- help and palette ----------------------------------------------------------

    def action_help(self) -> None:
        from gputop.ui.screens.help import HelpScreen

        own, navigation = self.help_sections()
        self.push_screen(HelpScreen(own, navigation))

    def help_sections(self) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
        """(keys, description, binding id) of gputop's own actions (bindings with an id:
        the app's and the screen's), then the rest: the focused widgets' movement keys,
        remappable or not, and Textual's own."""
        merged: dict[tuple[int, str], list[str]] = {}
        ids: dict[tuple[int, str], str] = {}
        own_slots: set[tuple[int, str]] = set()
        for key, active in self.screen.active_bindings.items():
            binding = active.binding
            if not binding.description:
                continue
            slot = (id(active.node), binding.description)
            merged.setdefault(slot, []).append(self.get_key_display(binding) or key)
            if binding.id is not None:
                ids[slot] = binding.id
                if isinstance(active.node, (App, Screen)):
                    own_slots.add(slot)
        own: list[tuple[str, str, str]] = []
        navigation: list[tuple[str, str, str]] = []
        # Quit and help (the app's) first, then the screen's own, then navigation.
        app_first = sorted(merged, key=lambda slot: slot[0] != id(self))
        for slot in app_first:
            row = (", ".join(dict.fromkeys(merged[slot])), slot[1], ids.get(slot, ""))
            (own if slot in own_slots else navigation).append(row)
        own.append(("ctrl+p", "Command palette", ""))
        return own, navigation

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if not isinstance(screen, DashboardScreen):
            return
        # Every dashboard binding is also a palette command, for keys nobody remembers.
        seen = {"quit", "command_palette"}  # the system commands have these
        for key_bindings in (self._bindings, screen._bindings):
            for group in key_bindings.key_to_bindings.values():
                for b in group:
                    if b.description and b.action not in seen:
                        seen.add(b.action)
                        yield SystemCommand(b.description, f"key: {self.get_key_display(b)}",
                                            partial(screen.run_action, b.action))
        for title, help_text, callback in screen.palette_commands():
            yield SystemCommand(title, help_text, callback, discover=False)

    def action_quit(self) -> None:  # type: ignore[override]
        self.exit(0)

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        # Textual saves to ~/Downloads even where there is none (most servers); Textual's
        # notification then names the file.
        return super().deliver_screenshot(filename, path or str(screenshot_directory()),
                                          time_format)

    def export_screenshot(self, *, title: str | None = None, simplify: bool = False) -> str:
        svg = super().export_screenshot(title=title, simplify=simplify)
        # Rich writes each styled run as its own <text> with spaces as &#160;; librsvg (and
        # so every PNG made from our screenshots) drops a run's leading spaces unless told
        # to keep them, which glued "16%" to "of 48" in every picture.
        return svg.replace("<svg ", '<svg xml:space="preserve" ', 1)


def screenshot_directory(env: Mapping[str, str] | None = None,
                         downloads: Path | None = None) -> Path:
    """~/Downloads where it exists, else $XDG_STATE_HOME/gputop, else the current
    directory (where the user is looking)."""
    env = os.environ if env is None else env
    downloads = user_downloads_path() if downloads is None else downloads
    if downloads.is_dir():
        return downloads
    state = env.get("XDG_STATE_HOME", "")
    if os.path.isabs(state):
        target = Path(state) / "gputop"
        try:
            target.mkdir(parents=True, exist_ok=True)
            return target
        except OSError:
            pass  # an unusable state directory: the current one still works
    return Path.cwd()
