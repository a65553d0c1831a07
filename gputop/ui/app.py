"""The dashboard: header, GPU panels, host line, process table; keys; feeds in workers.

How to add a screen (kill, reserve, topology, warnings log, cluster, reclaim...)
-------------------------------------------------------------------------------
The bindings are defined here, each with an ``id`` (remappable from the config's
``keys:`` section; add a new id to ``gputop.config.BINDING_IDS``).  Each action imports
its screen module when first used (so startup does not pay for it) and calls:

    key        binding id     calls
    k, F9      kill           gputop.ui.screens.kill.open_kill(app)
    o          reclaim        gputop.ui.screens.reclaim.open_reclaim(app)
    r          reserve        gputop.ui.screens.reserve.open_reserve(app)
    R          release        gputop.ui.screens.reserve.release(app)
    t          topology       gputop.ui.screens.topology.open_topology(app)
    w          warnings_log   gputop.ui.screens.log.open_log(app)
    c          cluster        gputop.ui.screens.cluster.open_cluster(app)
    p          all_processes  gputop.ui.screens.cluster.open_processes(app)
    Esc        back           (filters first) gputop.ui.screens.cluster.back(app)

kill/reserve/release are refused here already when ``app.state.readonly``.
A warnings panel ``gputop.ui.widgets.warnings.WarningsPanel()`` is mounted under the host
line when that module exists.

What you read: ``app.state`` (gputop/ui/state.py): latest HostSnapshot per host, the
History, current warnings, orphan flags, the selected row and tagged rows, the selected
GPU, ``readonly``, which feed serves which host.  ``app.state_changed`` is a Signal
published after every applied snapshot: ``app.state_changed.subscribe(self, callback)``.
``await app.request(host, request_dict)`` sends an action request to the feed of that
host.  ``app.show_host(host)`` switches the main screen to a host.  Push screens with
``app.push_screen``; the main screen stops redrawing while another screen is on top.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import queue
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.message import Message
from textual.screen import Screen
from textual.signal import Signal
from textual.widgets import Footer, Input
from textual.worker import Worker, WorkerState, get_current_worker

from gputop.analysis import health, orphans
from gputop.analysis.history import History
from gputop.config import Config, ConfigError, load_config
from gputop.model import HostSnapshot
from gputop.model import Warning as HealthWarning
from gputop.ui import table_model
from gputop.ui.state import UiState
from gputop.ui.widgets.gpu_panel import GpuPanel, PanelData
from gputop.ui.widgets.header import HeaderBar, HostLine
from gputop.ui.widgets.process_table import ProcessTable, TableHeader
from gputop.ui.widgets.warnings import WarningsPanel

SORT_ORDER = tuple(table_model.COLUMNS)
# The dashboard's own actions: they act on its table and host, so only while it shows.
DASHBOARD_ACTIONS = frozenset({
    "search", "sort_next", "sort_prev", "sort_reverse", "sort", "detail", "tag", "mine",
    "user_filter", "gpu_filter", "step_gpu", "back", "kill", "reclaim", "reserve", "release",
    "topology", "warnings_log", "cluster", "all_processes",
})


@dataclass
class Analysed:
    """One snapshot with what the analysis made of it (computed off the UI thread)."""

    snapshot: HostSnapshot
    warnings: list[HealthWarning] | None  # all hosts' current warnings; None: no health
    flags: dict[tuple[int, int], Any]


class SnapshotAnalysed(Message):
    def __init__(self, result: Analysed) -> None:
        super().__init__()
        self.result = result


class Analyser:
    """History, health warnings and orphan flags for each snapshot; runs in a thread."""

    def __init__(self, config: Config, history: History, me: str) -> None:
        self.history = history
        self.me = me
        self.thresholds = health.Thresholds.from_config(config.health)
        self.tracker = health.WarningTracker.from_thresholds(self.thresholds)
        self.rules = orphans.OrphanRules(
            idle_minutes=config.reclaim.idle_minutes,
            idle_min_mem_mib=int(config.reclaim.idle_min_mem_mib),
        )

    def __call__(self, snap: HostSnapshot) -> Analysed:
        self.history.add(snap)
        flags: dict[tuple[int, int], Any] = {}
        if snap.ok:
            flags = orphans.classify_snapshot(snap, self.history, self.rules, snap.time)
        fresh = health.warnings(snap, self.history, self.thresholds, snap.time,
                                self.me, self.shared_flags(flags))
        warnings = self.tracker.update(snap.host, fresh, snap.time)
        return Analysed(snap, warnings, flags)

    def shared_flags(self, flags: dict[tuple[int, int], Any]) -> dict[tuple[int, int], Any] | None:
        """The table's flags when the health rules would classify the same way, else None.

        Classifying is the costly part of the analysis, so it is done once per snapshot;
        only a config whose health: idle limits differ from reclaim:'s needs a second
        pass (inside health.warnings) to honour both.
        """
        if health.orphan_rules(self.thresholds) == self.rules:
            return flags
        return None


def freeze_startup_objects() -> None:
    """Move everything alive after the first full frame out of the collector's sight.

    The widget tree, the CSS and the imported modules live as long as the app; scanning
    them again in every full collection was what made the slow ticks (p95 twice the median
    at 8 x 2,000 processes).  Frozen objects are still freed by reference counting.
    """
    gc.collect()
    gc.freeze()


def history_for(config: Config) -> History:
    """A History long enough for the sparklines and for the slowest idle rule."""
    seconds = max(config.history_minutes * 60.0, 120.0)
    longest_rule = config.reclaim.idle_minutes
    health = config.health
    for key in ("idle_minutes", "input_bound_minutes"):
        value = health.get(key)
        if isinstance(value, (int, float)):
            longest_rule = max(longest_rule, float(value))
    return History(seconds=seconds, process_seconds=max(seconds, longest_rule * 60.0 + 300.0))


class GputopApp(App[int]):
    CSS_PATH = "gputop.tcss"
    TITLE = "gputop"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q,f10", "quit", "Quit", id="quit"),
        Binding("question_mark,f1", "help", "Help", id="help"),
        Binding("slash,f3", "search", "Search", id="search"),
        Binding("f6,greater_than_sign", "sort_next", "Sort", id="sort_next"),
        Binding("less_than_sign", "sort_prev", "Sort back", show=False, id="sort_prev"),
        Binding("I", "sort_reverse", "Invert sort", show=False, id="sort_reverse"),
        Binding("M", "sort('gpu_mem')", "Sort by GPU memory", show=False, id="sort_mem"),
        Binding("S", "sort('sm')", "Sort by SM %", show=False, id="sort_sm"),
        Binding("P", "sort('cpu')", "Sort by CPU %", show=False, id="sort_cpu"),
        Binding("T", "sort('time')", "Sort by running time", show=False, id="sort_time"),
        Binding("N", "sort('pid')", "Sort by PID", show=False, id="sort_pid"),
        Binding("enter", "detail", "Detail", id="detail"),
        Binding("space", "tag", "Tag", id="tag"),
        Binding("m", "mine", "Mine", id="mine"),
        Binding("u", "user_filter", "This user", show=False, id="user_filter"),
        Binding("g", "gpu_filter", "GPU", id="gpu_filter"),
        Binding("right_square_bracket", "step_gpu(1)", "Next GPU", show=False, id="next_gpu"),
        Binding("left_square_bracket", "step_gpu(-1)", "Prev GPU", show=False, id="prev_gpu"),
        Binding("escape", "back", "Clear filters / back", show=False, id="back"),
        Binding("k,f9", "kill", "Kill", id="kill"),
        Binding("o", "reclaim", "Reclaim", show=False, id="reclaim"),
        Binding("r", "reserve", "Reserve", id="reserve"),
        Binding("R", "release", "Release", show=False, id="release"),
        Binding("t", "topology", "Topology", show=False, id="topology"),
        Binding("w", "warnings_log", "Warnings log", show=False, id="warnings_log"),
        Binding("c", "cluster", "Cluster", show=False, id="cluster"),
        Binding("p", "all_processes", "All hosts' processes", show=False, id="all_processes"),
    ]

    def __init__(
        self,
        feeds: Iterable[Any] = (),
        config: Config | None = None,
        *,
        interval: float | None = None,
        readonly: bool = False,
        clock: Callable[[], float] = time.time,
        history: History | None = None,
        me: str | None = None,
    ) -> None:
        super().__init__()
        self.config = config or Config()
        self.interval = float(interval or self.config.interval)
        self.clock = clock
        self.feeds = list(feeds)
        state = UiState(config=self.config, history=history or history_for(self.config),
                        readonly=readonly)
        if me is not None:
            state.me = me
        self.state = state
        for feed in self.feeds:
            for host in feed.hosts:
                state.feeds[host] = feed
        if self.feeds and self.feeds[0].hosts:
            state.host = self.feeds[0].hosts[0]
        self.state_changed: Signal[UiState] = Signal(self, "state_changed")
        self.analyser = Analyser(self.config, state.history, state.me)
        # Filters and sort of the process table.
        self.mine = False
        self.user_filter: str | None = None
        self.search = ""
        self.sort_column = "gpu_mem"
        self.sort_reverse = True
        self._queue: queue.Queue[HostSnapshot | None] = queue.Queue()
        self._dirty = False
        self._compact: bool | None = None
        self._gc_frozen = False  # see freeze_startup_objects
        self._panel_gpus: tuple[int, ...] = ()
        self._panels: dict[int, GpuPanel] = {}
        if self.config.keys:
            self.set_keymap(self.config.keys)

    # -- layout --------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        yield HostLine(id="hostline")
        yield WarningsPanel()
        yield Container(id="gpus")
        yield TableHeader(self.config.columns, id="table-header")
        yield ProcessTable(self.config.columns, id="processes")
        yield Input(placeholder="search command or user; Enter keeps it, Esc clears",
                    id="search")
        yield Footer()

    @property
    def _main(self) -> Screen[Any]:
        """The dashboard's own screen, whatever is pushed on top of it."""
        return self.screen_stack[0]

    @property
    def table(self) -> ProcessTable:
        return self._main.query_one(ProcessTable)

    def on_mount(self) -> None:
        self.table.me = self.state.me
        self.table.focus()
        self._main.query_one(TableHeader).set_sort(self.sort_column, self.sort_reverse)
        if self.feeds:
            self.run_worker(self._analysis_loop, name="analysis", group="analysis",
                            thread=True, exit_on_error=False)
            for feed in self.feeds:
                self.run_worker(self._feed_loop(feed), name=f"feed {','.join(feed.hosts)}",
                                group="feeds", exit_on_error=False)
            if sum(len(feed.hosts) for feed in self.feeds) > 1:
                # A lab of hosts starts on the overview (gputop/ui/screens/cluster.py).
                self._open("cluster", "open_cluster")
        self.set_interval(self.interval, self._tick, name="refresh")

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

    # -- data in -------------------------------------------------------------------

    async def _feed_loop(self, feed: Any) -> None:
        await feed.run(self.interval, self._queue.put)

    def _analysis_loop(self) -> None:
        worker = get_current_worker()
        while not worker.is_cancelled:
            try:
                snap = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if snap is None:
                return
            self.post_message(SnapshotAnalysed(self.analyser(snap)))

    def ingest(self, snapshot: HostSnapshot) -> None:
        """Analyse and apply a snapshot synchronously (screenshots, tests, replays)."""
        self._apply_result(self.analyser(snapshot))

    def on_snapshot_analysed(self, message: SnapshotAnalysed) -> None:
        first = self.state.snapshot is None
        self._apply_result(message.result)
        if first:
            # The first frame should not wait up to one interval for the timer.
            self.refresh_view()

    def _apply_result(self, result: Analysed) -> None:
        state = self.state
        snap = result.snapshot
        state.snapshots[snap.host] = snap
        if state.host is None:
            state.host = snap.host
        if result.warnings is not None:
            state.warnings = result.warnings
        state.flags[snap.host] = result.flags
        state.version += 1
        self._dirty = True
        self.state_changed.publish(state)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # The one handler for worker errors: a broken feed is shown, the rest keep going.
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(f"{event.worker.name}: {type(error).__name__}: {error}",
                        title="collection stopped", severity="error", timeout=30)

    async def request(self, host: str, request: dict) -> dict:
        feed = self.state.feeds.get(host)
        if feed is None:
            return {"ok": False, "message": f"no source for host {host!r}"}
        return await feed.request(host, request)

    def show_host(self, host: str) -> None:
        self.state.host = host
        self.state.selected_gpu = None
        self.refresh_view()

    # -- drawing -------------------------------------------------------------------

    def _main_ready(self) -> bool:
        # Messages and timer ticks can arrive while the app is shutting down.
        return bool(self.screen_stack) and bool(self.screen_stack[0].query(HeaderBar))

    def _tick(self) -> None:
        if not self._main_ready() or self.screen is not self.screen_stack[0]:
            return  # shutting down, or a dialog is open: draw nothing behind it
        if self._dirty:
            self.refresh_view()
        else:
            self._main.query_one(HeaderBar).update_data(
                self.state.snapshot, self.interval, self.clock(), len(self.state.snapshots))

    def refresh_view(self) -> None:
        """Bring every widget of the main screen up to date with the state."""
        if not self._main_ready():
            return
        self._dirty = False
        state = self.state
        snap = state.snapshot
        now = self.clock()
        self._main.query_one(HeaderBar).update_data(snap, self.interval, now, len(state.snapshots))
        host_warnings = state.warnings_for(snap.host) if snap else []
        self._main.query_one(HostLine).update_data(snap, host_warnings, self.filter_status())
        if snap is None:
            return
        self._update_panels(snap, now)
        self._update_warnings_panel(now)
        rows = table_model.build_rows(
            snap.host, snap.processes, state.flags.get(snap.host),
            mine=state.me if self.mine else None, user=self.user_filter,
            gpu=state.selected_gpu, search=self.search,
        )
        rows = table_model.sort_rows(rows, self.sort_column, self.sort_reverse, now)
        table = self.table
        table.tagged = state.tagged
        table.set_rows(rows, now)
        state.selected = table.selected
        if not self._gc_frozen:
            self._gc_frozen = True
            self.call_after_refresh(freeze_startup_objects)

    def _update_panels(self, snap: HostSnapshot, now: float) -> None:
        box = self._main.query_one("#gpus", Container)
        indexes = tuple(g.index for g in snap.gpus)
        if indexes != self._panel_gpus:
            # Panels are kept and hidden, never removed: a removed panel keeps its id
            # until the removal completes, and the next host may need that id at once.
            for i in sorted(indexes):
                if i not in self._panels:
                    panel = GpuPanel(i, self.config.thresholds, self.config.colors,
                                     id=f"gpu-{i}", classes=f"gpu-{i}")
                    after = [p for j, p in self._panels.items() if j > i]
                    self._panels[i] = panel
                    box.mount(panel, before=min(after, key=lambda p: p.index) if after else None)
            for i, panel in self._panels.items():
                panel.display = i in indexes
            self._panel_gpus = indexes
            self._compact = None
        self._arrange_panels(len(indexes))
        history = self.state.history
        span = min(history.seconds, max(180.0, 60 * self.interval))
        for gpu in snap.gpus:
            panel = self._panels[gpu.index]
            panel.set_class(self.state.selected_gpu == gpu.index, "-selected")
            panel.update_data(PanelData(
                gpu=gpu,
                util_series=history.gpu_series(snap.host, gpu.index, "util_gpu"),
                mem_series=history.gpu_series(snap.host, gpu.index, "mem_percent"),
                warnings=self.state.warnings_for(snap.host, gpu.index),
                reservations=[r for r in snap.reservations
                              if r.gpu == gpu.index and r.active(now)],
                now=now,
                span=span,
                kept=history.seconds,
            ))

    def _update_warnings_panel(self, now: float) -> None:
        for panel in self._main.query(WarningsPanel):
            panel.show(self.state.warnings, self.analyser.tracker.clearing, now)
            # Warnings matter, but at 80x24 they must leave room for the processes.
            # Set only on change: a style write costs a layout pass.
            limit = max(2, self.size.height // 8)
            if panel.styles.max_height is None or panel.styles.max_height.value != limit:
                panel.styles.max_height = limit

    def _arrange_panels(self, count: int) -> None:
        width, height = self.size
        columns = 2 if width >= 200 and count >= 2 else 1
        rows_full = -(-count // columns) * 3
        compact = rows_full > (height - 6) * 0.55
        if compact == self._compact:
            return
        self._compact = compact
        box = self._main.query_one("#gpus", Container)
        box.styles.grid_size_columns = columns
        for panel in self._panels.values():
            panel.set_class(compact, "-compact")
        box.set_class(compact, "-compact")

    def gpu_panel(self, index: int) -> GpuPanel | None:
        """The panel of a GPU of the host on the main screen."""
        return self._panels.get(index) if index in self._panel_gpus else None

    def on_resize(self) -> None:
        self._compact = None
        self._dirty = True
        # Re-arrange once the new size is laid out, not a whole interval later.
        self.call_after_refresh(self.refresh_view)

    def filter_status(self) -> str:
        parts = []
        if self.mine:
            parts.append(f"mine ({self.state.me})")
        if self.user_filter is not None:
            parts.append(f"user {self.user_filter}")
        if self.state.selected_gpu is not None:
            parts.append(f"GPU {self.state.selected_gpu}")
        if self.search:
            parts.append(f"/{self.search}")
        if self.state.tagged:
            parts.append(f"{len(self.state.tagged)} tagged")
        if self.state.readonly:
            parts.append("READ-ONLY")
        return " · ".join(parts)

    # -- table events --------------------------------------------------------------

    @on(ProcessTable.Highlighted)
    def _highlighted(self, event: ProcessTable.Highlighted) -> None:
        self.state.selected = event.key

    @on(ProcessTable.Activated)
    def _activated(self, event: ProcessTable.Activated) -> None:
        self.state.selected = event.key
        self.action_detail()

    @on(TableHeader.SortRequested)
    def _sort_requested(self, event: TableHeader.SortRequested) -> None:
        if event.column == self.sort_column:
            self.action_sort_reverse()
        else:
            self.action_sort(event.column)

    @on(GpuPanel.Clicked)
    def _gpu_clicked(self, event: GpuPanel.Clicked) -> None:
        same = self.state.selected_gpu == event.index
        self.state.selected_gpu = None if same else event.index
        self.refresh_view()

    # -- actions: sorting and filtering -------------------------------------------

    def action_sort(self, column: str) -> None:
        self.sort_column = column
        self.sort_reverse = column in table_model.DESCENDING_BY_DEFAULT
        self._sorted()

    def action_sort_next(self, step: int = 1) -> None:
        shown = [c for c in SORT_ORDER if c in self.config.columns] or list(SORT_ORDER)
        index = shown.index(self.sort_column) if self.sort_column in shown else -1
        self.action_sort(shown[(index + step) % len(shown)])

    def action_sort_prev(self) -> None:
        self.action_sort_next(-1)

    def action_sort_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._sorted()

    def _sorted(self) -> None:
        self._main.query_one(TableHeader).set_sort(self.sort_column, self.sort_reverse)
        self.refresh_view()

    def action_mine(self) -> None:
        self.mine = not self.mine
        self.refresh_view()

    def action_user_filter(self) -> None:
        if self.user_filter is not None:
            self.user_filter = None
        else:
            proc = self.state.selected_process()
            if proc is None or not proc.user:
                self.notify("select a process of that user first", severity="warning")
                return
            self.user_filter = proc.user
        self.refresh_view()

    def action_gpu_filter(self) -> None:
        self.action_step_gpu(1)

    def action_step_gpu(self, step: int) -> None:
        snap = self.state.snapshot
        if snap is None or not snap.gpus:
            return
        choices: list[int | None] = [None, *(g.index for g in snap.gpus)]
        current = choices.index(self.state.selected_gpu) if self.state.selected_gpu in choices \
            else 0
        self.state.selected_gpu = choices[(current + step) % len(choices)]
        self.refresh_view()

    def action_search(self) -> None:
        box = self._main.query_one("#search", Input)
        box.add_class("-visible")
        box.focus()

    @on(Input.Changed, "#search")
    def _search_changed(self, event: Input.Changed) -> None:
        self.search = event.value
        self.refresh_view()

    @on(Input.Submitted, "#search")
    def _search_done(self, event: Input.Submitted) -> None:
        self._close_search(keep=True)

    def _close_search(self, keep: bool) -> None:
        box = self._main.query_one("#search", Input)
        if not keep:
            box.value = ""
            self.search = ""
        box.remove_class("-visible")
        self.table.focus()
        self.refresh_view()

    def action_back(self) -> None:
        if self._main.query_one("#search", Input).has_focus:
            self._close_search(keep=False)
            return
        if self.search or self.mine or self.user_filter or self.state.selected_gpu is not None:
            self.search = ""
            self._main.query_one("#search", Input).value = ""
            self.mine = False
            self.user_filter = None
            self.state.selected_gpu = None
            self.refresh_view()
            return
        self._open("cluster", "back")

    def action_tag(self) -> None:
        key = self.state.selected
        if key is None:
            return
        if key in self.state.tagged:
            self.state.tagged.discard(key)
        else:
            self.state.tagged.add(key)
        self.table.action_cursor_down()
        self.refresh_view()

    # -- actions: screens ----------------------------------------------------------

    def action_detail(self) -> None:
        if self.state.selected_process() is None:
            return
        from gputop.ui.screens.detail import DetailScreen

        self.push_screen(DetailScreen(self.state.selected))  # type: ignore[arg-type]

    def action_help(self) -> None:
        from gputop.ui.screens.help import HelpScreen

        own, navigation = self.help_sections()
        self.push_screen(HelpScreen(own, navigation))

    def binding_rows(self) -> list[tuple[str, str]]:
        """(keys, description) of every active binding, keys of one action merged."""
        own, navigation = self.help_sections()
        return own + navigation

    def help_sections(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """gputop's own actions (the app's and screen's bindings with an id), then the rest:
        the focused widgets' movement keys, remappable or not, and Textual's own."""
        merged: dict[tuple[int, str], list[str]] = {}
        has_id: dict[tuple[int, str], bool] = {}
        for key, active in self.screen.active_bindings.items():
            binding = active.binding
            if not binding.description:
                continue
            slot = (id(active.node), binding.description)
            merged.setdefault(slot, []).append(self.get_key_display(binding) or key)
            own_key = binding.id is not None and isinstance(active.node, (App, Screen))
            has_id[slot] = has_id.get(slot, False) or own_key
        own: list[tuple[str, str]] = []
        navigation: list[tuple[str, str]] = []
        for slot, keys in merged.items():
            (own if has_id[slot] else navigation).append((", ".join(dict.fromkeys(keys)), slot[1]))
        own.append(("ctrl+p", "Command palette"))
        return own, navigation

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if screen is not self._main:
            return
        # Every dashboard binding is also a palette command, for keys nobody remembers.
        seen = {"quit", "command_palette"}  # the system commands have these
        for bindings in self._bindings.key_to_bindings.values():
            for b in bindings:
                if b.description and b.action not in seen:
                    seen.add(b.action)
                    yield SystemCommand(b.description, f"key: {self.get_key_display(b)}",
                                        partial(self.run_action, b.action))
        for column in table_model.COLUMNS.values():
            yield SystemCommand(f"Sort by {column.title}", "also: click the column title",
                                partial(self.action_sort, column.id), discover=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The dashboard's keys act on the dashboard's table and host: on top of another
        # screen (cluster, topology...) they would act on something the user cannot see,
        # and the footer there would list them.  Screens keep their own bindings.
        # Other app actions (pop_screen, quit...) are what screens' own bindings call.
        if action not in DASHBOARD_ACTIONS or not self.screen_stack:
            return True
        return self.screen is self.screen_stack[0]

    def _open(self, module: str, function: str) -> None:
        """Call ``gputop.ui.screens.<module>.<function>(app)``, importing it on first use."""
        getattr(importlib.import_module(f"gputop.ui.screens.{module}"), function)(self)

    def _acting(self, what: str) -> bool:
        if self.state.readonly:
            self.notify(f"{what}: read-only mode (--readonly)", severity="warning")
            return False
        return True

    def action_kill(self) -> None:
        if self._acting("kill"):
            self._open("kill", "open_kill")

    def action_reclaim(self) -> None:
        self._open("reclaim", "open_reclaim")

    def action_reserve(self) -> None:
        if self._acting("reserve"):
            self._open("reserve", "open_reserve")

    def action_release(self) -> None:
        if self._acting("release"):
            self._open("reserve", "release")

    def action_topology(self) -> None:
        self._open("topology", "open_topology")

    def action_warnings_log(self) -> None:
        self._open("log", "open_log")

    def action_cluster(self) -> None:
        self._open("cluster", "open_cluster")

    def action_all_processes(self) -> None:
        self._open("cluster", "open_processes")

    def action_quit(self) -> None:  # type: ignore[override]
        self.exit(0)

    def export_screenshot(self, *, title: str | None = None, simplify: bool = False) -> str:
        svg = super().export_screenshot(title=title, simplify=simplify)
        # Rich writes each styled run as its own <text> with spaces as &#160;; librsvg (and
        # so every PNG made from our screenshots) drops a run's leading spaces unless told
        # to keep them, which glued "16%" to "of 48" in every picture.
        return svg.replace("<svg ", '<svg xml:space="preserve" ', 1)


# -- entry point -----------------------------------------------------------------------


def config_for_sources(config: Config) -> dict[str, Any]:
    """The plain dict gputop.sources.select reads."""
    return {"reservations_dir": config.reservations.dir, "interval": config.interval}


def run_app(args: argparse.Namespace) -> int:
    from gputop.cli import EXIT_NO_DRIVER, EXIT_USAGE

    try:
        config = load_config(args.config)
    except ConfigError as err:
        print(f"gputop: {err}", file=sys.stderr)
        return EXIT_USAGE
    interval = args.interval if args.interval is not None else config.interval
    if not 0.1 <= interval <= 3600:
        print(f"gputop: --interval {interval:g}: expected 0.1 to 3600 seconds", file=sys.stderr)
        return EXIT_USAGE
    from gputop.sources.select import NoDriverError, SourceError
    from gputop.ui.feeds import make_feeds

    try:
        feeds = make_feeds(args, config_for_sources(config))
    except NoDriverError as err:
        print(f"gputop: {err}", file=sys.stderr)
        return EXIT_NO_DRIVER
    except SourceError as err:
        text = str(err)
        print(text if text.startswith("gputop") else f"gputop: {text}", file=sys.stderr)
        return EXIT_USAGE
    app = GputopApp(feeds, config, interval=interval, readonly=args.readonly)
    result = app.run()
    return int(result or 0)
