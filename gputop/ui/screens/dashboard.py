"""The dashboard of one host: header, GPU panels, warnings, host line, process table.

The app's default screen.  It owns what is about the view (filters, sort, the search
box, which panels exist) and reads everything else from ``app.state``; its keys come
from the registry (``gputop.keymap``, scope "dashboard") and act only while it is on
screen, because a screen's bindings are active only while it is.  Other screens are
opened from here with ``app.push_screen``.

It talks to the app as the other screens do: it hears of new data from
``app.state_changed`` and of another host, tags or GPU filter from ``app.view_changed``,
and asks for a change of the tags or the GPU filter by posting the messages below, which
the app applies to the state.  The row under the table's cursor it writes itself
(ui/state.py says who writes what).  It redraws on its own timer.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, ClassVar, NamedTuple

from textual import events, on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Container
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer

from gputop.analysis import hostview
from gputop.model import NO_PROCESS_LIST, NO_PROCESS_LIST_TEXT, HostSnapshot
from gputop.ui import table_model, tree
from gputop.ui.keys import bindings
from gputop.ui.state import RowKey, UiState
from gputop.ui.widgets.filter_input import FilterInput
from gputop.ui.widgets.gpu_panel import GpuPanel, PanelData
from gputop.ui.widgets.header import HeaderBar, HostHistory, HostLine
from gputop.ui.widgets.process_table import ProcessTable, TableHeader
from gputop.ui.widgets.warnings import WarningsPanel

if TYPE_CHECKING:
    from textual import getters

    from gputop.ui.app import GputopApp

SORT_ORDER = tuple(table_model.COLUMNS)
LARGE_SCREEN = (240, 70)

# The history lines' windows: this session's, then the usage ledger's 24 h and 7 d.
HISTORY_RANGES: tuple[float | None, ...] = (None, 86400.0, 7 * 86400.0)



class NarrowFooter(Footer):
    """At 80 columns the footer ended in "r Re" and never reached "? Help": narrow, its
    keys go closer together and the palette's entry (Ctrl+P still opens it) gives way."""

    WIDE = 120

    def on_resize(self, event: events.Resize) -> None:
        self.compact = event.size.width < self.WIDE
        self.show_command_palette = event.size.width >= self.WIDE

class Widgets(NamedTuple):
    """The dashboard's widgets, in the order they are composed (the footer follows)."""

    header: HeaderBar
    hostline: HostLine
    warnings: WarningsPanel
    gpus: Container
    table_header: TableHeader
    table: ProcessTable
    search: FilterInput


class DashboardScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = bindings("dashboard")

    if TYPE_CHECKING:
        app = getters.app(GputopApp)

    # -- what it asks of the app (they bubble up to it) --------------------------------

    class TagToggled(Message):
        """Tag this row, or untag it when it is tagged."""

        def __init__(self, key: RowKey) -> None:
            super().__init__()
            self.key = key

    class GpuChosen(Message):
        """The GPU under focus, which the table is filtered by (None: every GPU)."""

        def __init__(self, index: int | None) -> None:
            super().__init__()
            self.index = index

    class SelectionCleared(Message):
        """No tagged rows any more; with ``gpu``, no GPU under focus either."""

        def __init__(self, gpu: bool) -> None:
            super().__init__()
            self.gpu = gpu

    class FirstDrawn(Message):
        """The first snapshot is on screen (the app then tunes the garbage collector)."""

    def __init__(self) -> None:
        super().__init__()
        # Filters and sort of the process table.
        self.mine = False
        self.user_filter: str | None = None
        self.search = ""
        self.fold_jobs = False
        self.expanded: set[RowKey] = set()
        self.sort_column = "gpu_mem"
        self.sort_reverse = True
        self.tree_view = False  # the process tree (gputop/ui/tree.py) instead of a flat list
        self._dirty = False
        self._compact: bool | None = None
        self._panel_gpus: tuple[int, ...] = ()
        self._panels: dict[int, GpuPanel] = {}
        self._drawn_host: str | None = None  # the host whose snapshot was drawn last
        self._widgets: Widgets | None = None
        self._reads: dict[tuple[str, int, str, float], list[tuple[float, float]]] = {}
        self.history_range: float | None = None  # None: this session; else seconds of ledger

    # -- layout ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        config = self.app.config
        # Kept, not looked up: a query walks the screen's DOM, and a refresh asked for
        # six widgets four times a second at 0.25 s.
        self._widgets = Widgets(
            header=HeaderBar(id="header"),
            hostline=HostLine(id="hostline"),
            warnings=WarningsPanel(),
            gpus=Container(id="gpus"),
            table_header=TableHeader(config.columns, id="table-header"),
            table=ProcessTable(config.columns, id="processes"),
            search=FilterInput(placeholder="search command or user; Enter keeps it, Esc "
                               "clears", id="search"),
        )
        yield from self._widgets
        yield NarrowFooter()

    @property
    def table(self) -> ProcessTable:
        return self._composed().table

    @property
    def search_box(self) -> FilterInput:
        return self._composed().search

    def _composed(self) -> Widgets:
        widgets = self._widgets
        if widgets is None:
            raise NoMatches("the dashboard is not composed yet")
        return widgets

    def on_mount(self) -> None:
        app = self.app
        self.table.me = app.state.me
        self.table.focus()
        self._composed().table_header.set_sort(self.sort_column, self.sort_reverse)
        # Immediate: drawn in the same turn as the change, as the app's caller expects.
        app.state_changed.subscribe(self, self._data_changed, immediate=True)
        app.view_changed.subscribe(self, self._view_changed, immediate=True)
        self.set_interval(app.interval, self.tick, name="refresh")
        if app.state.snapshots:
            # Applied before this screen was (the start-up snapshot, a replay): drawn in
            # the first frame, not a refresh interval later.
            self.refresh_view(mounting=True)

    # -- data in -----------------------------------------------------------------------

    def _data_changed(self, state: UiState) -> None:
        """The app applied a snapshot: a host not drawn yet is drawn at once (the first
        frame should not wait up to one interval for the timer), the rest on the tick."""
        self._dirty = True
        if state.snapshot is not None and state.host != self._drawn_host:
            self.refresh_view()

    def _view_changed(self, _state: UiState) -> None:
        self.refresh_view()

    def _ready(self, mounting: bool = False) -> bool:
        # Snapshots and ticks can arrive before the widgets exist or while they go away.
        # In on_mount the widgets are composed, though Textual says mounted only after.
        widgets = self._widgets
        return (mounting or self.is_mounted) and widgets is not None and (
            widgets.header.is_attached)

    def tick(self) -> None:
        """The refresh timer: while this screen is on top, redraw only what aged (nothing
        is drawn behind another screen; this one catches up when it shows)."""
        if self.app.screen is not self or not self._ready():
            return
        if self._dirty:
            self.refresh_view()
        else:
            state = self.app.state
            self._composed().header.update_data(
                state.snapshot, self.app.interval, self.app.clock(), len(state.snapshots))

    # -- drawing -----------------------------------------------------------------------

    def refresh_view(self, mounting: bool = False) -> None:
        """Bring every widget up to date with the state."""
        if not self._ready(mounting):
            return
        self._dirty = False
        self._reads.clear()
        app = self.app
        state = app.state
        snap = state.snapshot
        now = app.clock()
        widgets = self._composed()
        widgets.header.update_data(snap, app.interval, now, len(state.snapshots))
        host_warnings = state.warnings_for(snap.host) if snap else []
        widgets.hostline.update_data(
            snap, host_warnings, self.filter_status(),
            self._host_history(snap.host, now) if snap else None)
        if snap is None:
            return
        self._update_panels(snap, now)
        self._update_warnings_panel(snap.host, now)
        rows = table_model.build_rows(
            snap.host, snap.processes, state.flags.get(snap.host),
            mine=state.me if self.mine else None, user=self.user_filter,
            gpu=state.selected_gpu, search=self.search,
        )
        rows = table_model.sort_rows(rows, self.sort_column, self.sort_reverse, now)
        if self.fold_jobs:
            rows = table_model.fold_rows(snap.host, rows, self.expanded)
        elif self.tree_view:
            rows = tree.tree_rows(rows)
        table = widgets.table
        columns = table_model.shown_columns(app.config.columns, snap.processes)
        table.set_columns(columns)
        widgets.table_header.set_columns(columns)
        table.tagged = state.tagged
        table.empty_text = (NO_PROCESS_LIST_TEXT if NO_PROCESS_LIST in snap.missing
                            and not snap.processes else "")
        table.set_rows(rows, now)
        # Written here, not posted: a dialog opened in the same turn reads it.
        state.selected = table.selected
        if self._drawn_host is None:
            self.post_message(self.FirstDrawn())
        self._drawn_host = snap.host

    def _span(self) -> float:
        """The window the histories show: three minutes, or 60 samples when slower; on a
        large screen (240x70 and more) everything kept, its cells being that much wider."""
        kept = self.app.state.history.seconds
        width, height = self.size
        if width >= LARGE_SCREEN[0] and height >= LARGE_SCREEN[1]:
            return kept
        return min(kept, max(180.0, 60 * self.app.interval))

    def _host_history(self, host: str, now: float) -> HostHistory:
        return HostHistory(partial(self._host_series, host), now, self._span())

    def _host_series(self, host: str, name: str, since: float) -> list[tuple[float, float]]:
        """The host line's "cpu" or "mem" history (percent) from ``since`` on."""
        history = self.app.state.history
        if name == "cpu":
            return history.host_series(host, "cpu_percent", since)
        total = dict(history.host_series(host, "mem_total", since))
        return [(t, 100.0 * (1 - avail / total[t]))
                for t, avail in history.host_series(host, "mem_available", since)
                if total.get(t)]

    def _update_panels(self, snap: HostSnapshot, now: float) -> None:
        box = self._composed().gpus
        config = self.app.config
        indexes = tuple(g.index for g in snap.gpus)
        if indexes != self._panel_gpus:
            # Panels are kept and hidden, never removed: a removed panel keeps its id
            # until the removal completes, and the next host may need that id at once.
            for i in sorted(indexes):
                if i not in self._panels:
                    panel = GpuPanel(i, config.thresholds, config.colors,
                                     id=f"gpu-{i}", classes=f"gpu-{i}")
                    after = [p for j, p in self._panels.items() if j > i]
                    self._panels[i] = panel
                    box.mount(panel, before=min(after, key=lambda p: p.index) if after else None)
            for i, panel in self._panels.items():
                panel.display = i in indexes
            self._panel_gpus = indexes
            self._compact = None
        self._arrange_panels(len(indexes), sum(len(g.mig_devices) for g in snap.gpus))
        state = self.app.state
        history = state.history
        shown = hostview.view(snap, now)
        span = self._span()
        kept = history.seconds
        recorded = None
        if self.history_range is not None and self.app.ledger_series is not None:
            recorded = self.app.ledger_series(snap.host, self.history_range)
            span = kept = self.history_range
        for gpu in snap.gpus:
            panel = self._panels[gpu.index]
            panel.set_class(state.selected_gpu == gpu.index, "-selected")
            util_series: list[tuple[float, float]] = []
            mem_series: list[tuple[float, float]] = []
            read = None
            if recorded is not None:
                util_series, mem_series = recorded.get(gpu.index, ([], []))
            else:
                # The panel reads what it has not seen yet (and a new line the samples
                # it draws), however long the history kept.
                read = partial(self._gpu_series, snap.host, gpu.index)
            panel.update_data(PanelData(
                gpu=gpu,
                util_series=util_series,
                mem_series=mem_series,
                read=read,
                warnings=state.warnings_for(snap.host, gpu.index),
                card=shown.card(gpu.index),
                now=now,
                span=span,
                kept=kept,
                appending=recorded is None,
                host=snap.host,
            ))

    def _update_warnings_panel(self, host: str, now: float) -> None:
        app = self.app
        mine = app.state.warnings_for(host)
        # This host's warnings (the same the host line counts); the others as a count.
        others = len(app.state.warnings) - len(mine)
        panel = self._composed().warnings
        panel.show(mine, app.analyser.tracker.clearing, now, others=others)
        # Warnings matter, but at 80x24 they must leave room for the processes.
        # Set only on change: a style write costs a layout pass.
        # A warning folded onto a second line (its reason would be cut at 80
        # columns) gets that line, up to one more per 24 rows of terminal.
        limit = max(2, self.size.height // 8) + min(
            panel.folded_lines(), max(1, self.size.height // 24))
        if panel.styles.max_height is None or panel.styles.max_height.value != limit:
            panel.styles.max_height = limit

    def _gpu_series(self, host: str, index: int, name: str,
                    since: float) -> list[tuple[float, float]]:
        """A GPU panel's "util" or "mem" history (percent) from ``since`` on; a panel's
        lines and figures that saw the same samples ask for the same part once a
        refresh (``_reads``, emptied by ``refresh_view``)."""
        key = (host, index, name, since)
        series = self._reads.get(key)
        if series is None:
            field = "util_gpu" if name == "util" else "mem_percent"
            series = self._reads[key] = self.app.state.history.gpu_series(
                host, index, field, since)
        return series

    def _arrange_panels(self, count: int, mig_rows: int = 0) -> None:
        width, height = self.size
        columns = 2 if width >= 200 and count >= 2 else 1
        rows_full = -(-count // columns) * 3 + mig_rows // columns
        compact = rows_full > (height - 6) * 0.55
        if compact == self._compact:
            return
        self._compact = compact
        box = self._composed().gpus
        box.styles.grid_size_columns = columns
        for panel in self._panels.values():
            panel.set_class(compact, "-compact")
        box.set_class(compact, "-compact")

    def gpu_panel(self, index: int) -> GpuPanel | None:
        """The panel of a GPU of the host shown."""
        return self._panels.get(index) if index in self._panel_gpus else None

    def on_resize(self) -> None:
        self._compact = None
        self._dirty = True
        # Re-arrange once the new size is laid out, not a whole interval later.
        self.call_after_refresh(self.refresh_view)

    def filter_status(self) -> str:
        state = self.app.state
        parts = []
        if self.mine:
            parts.append(f"mine ({state.me})")
        if self.user_filter is not None:
            parts.append(f"user {self.user_filter}")
        if state.selected_gpu is not None:
            parts.append(f"GPU {state.selected_gpu}")
        if self.search:
            parts.append(f"/{self.search}")
        if self.tree_view:
            parts.append("tree")
        if state.tagged:
            parts.append(f"{len(state.tagged)} tagged")
        if state.readonly:
            parts.append("READ-ONLY")
        return " · ".join(parts)

    # -- table and panel events --------------------------------------------------------

    @on(ProcessTable.Highlighted)
    def _highlighted(self, event: ProcessTable.Highlighted) -> None:
        self.app.state.selected = event.key

    @on(ProcessTable.Activated)
    def _activated(self, event: ProcessTable.Activated) -> None:
        self.app.state.selected = event.key
        self.action_detail()

    @on(TableHeader.SortRequested)
    def _sort_requested(self, event: TableHeader.SortRequested) -> None:
        if event.column == self.sort_column:
            self.action_sort_reverse()
        else:
            self.action_sort(event.column)

    @on(GpuPanel.Clicked)
    def _gpu_clicked(self, event: GpuPanel.Clicked) -> None:
        chosen = self.app.state.selected_gpu
        self.post_message(self.GpuChosen(None if chosen == event.index else event.index))

    # -- actions: the usage ledger ----------------------------------------------------

    def action_history_range(self) -> None:
        """Cycle the history lines: this session, the ledger's last 24 h, its last 7 d."""
        series = self.app.ledger_series
        if series is None:
            self.notify("no usage ledger here: `gputop record` keeps one (docs/ledger.md)",
                        severity="warning")
            return
        order = HISTORY_RANGES
        self.history_range = order[(order.index(self.history_range) + 1) % len(order)]
        if self.history_range is not None and series.problem:
            self.notify(series.problem, severity="warning")
        self.refresh_view()

    # -- actions: sorting and filtering ------------------------------------------------

    def action_sort(self, column: str) -> None:
        self.sort_column = column
        self.sort_reverse = column in table_model.DESCENDING_BY_DEFAULT
        self._sorted()

    def action_sort_next(self, step: int = 1) -> None:
        shown = [c for c in SORT_ORDER if c in self.app.config.columns] or list(SORT_ORDER)
        index = shown.index(self.sort_column) if self.sort_column in shown else -1
        self.action_sort(shown[(index + step) % len(shown)])

    def action_sort_prev(self) -> None:
        self.action_sort_next(-1)

    def action_sort_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._sorted()

    def _sorted(self) -> None:
        self._composed().table_header.set_sort(self.sort_column, self.sort_reverse)
        self.refresh_view()

    def action_mine(self) -> None:
        self.mine = not self.mine
        self.refresh_view()

    def action_user_filter(self) -> None:
        if self.user_filter is not None:
            self.user_filter = None
        else:
            proc = self.app.state.selected_process()
            if proc is None or not proc.user:
                self.notify("select a process of that user first", severity="warning")
                return
            self.user_filter = proc.user
        self.refresh_view()

    def action_gpu_filter(self) -> None:
        """g: the selected row's GPU (as u takes its user), again to clear; ] and [ step."""
        state = self.app.state
        proc = state.selected_process()
        if state.selected_gpu is not None:
            self.post_message(self.GpuChosen(None))
        elif proc is not None:
            self.post_message(self.GpuChosen(proc.gpu))
        else:
            self.action_step_gpu(1)

    def action_step_gpu(self, step: int) -> None:
        state = self.app.state
        snap = state.snapshot
        if snap is None or not snap.gpus:
            return
        choices: list[int | None] = [None, *(g.index for g in snap.gpus)]
        current = choices.index(state.selected_gpu) if state.selected_gpu in choices else 0
        self.post_message(self.GpuChosen(choices[(current + step) % len(choices)]))

    def action_search(self) -> None:
        self.search_box.open()

    @on(FilterInput.Filtered, "#search")
    def _search_changed(self, event: FilterInput.Filtered) -> None:
        self.search = event.value
        self.refresh_view()

    @on(FilterInput.Closed, "#search")
    def _search_closed(self, event: FilterInput.Closed) -> None:
        self.search = event.value
        self.table.focus()
        self.refresh_view()

    def action_back(self) -> None:
        """Esc: close the search box, else clear the tags and filters, else leave for the
        cluster overview (several hosts)."""
        state = self.app.state
        if self.search_box.has_focus:
            self.search_box.close(keep=False)
            return
        selection = bool(state.tagged) or state.selected_gpu is not None
        if self.search or self.mine or self.user_filter or selection:
            self.search = ""
            self.search_box.clear()
            self.mine = False
            self.user_filter = None
            if selection:
                self.post_message(self.SelectionCleared(gpu=True))  # redrawn when applied
            else:
                self.refresh_view()
            return
        from gputop.ui.screens import cluster

        cluster.back(self.app)

    def action_tag(self) -> None:
        state = self.app.state
        key = state.selected
        if key is None or state.process(key) is None:  # a tree's group row: no process
            return
        self.post_message(self.TagToggled(key))
        self.table.action_cursor_down()

    def action_tree(self) -> None:
        self.tree_view = not self.tree_view
        self.refresh_view()

    def action_untag_all(self) -> None:
        self.post_message(self.SelectionCleared(gpu=False))

    # -- actions: other screens --------------------------------------------------------

    def action_fold_jobs(self) -> None:
        """One line per Slurm job, container or pod; Enter opens one."""
        self.fold_jobs = not self.fold_jobs
        self.expanded.clear()
        self.refresh_view()

    def action_detail(self) -> None:
        state = self.app.state
        if self.fold_jobs and state.selected is not None and state.selected[3] < 0:
            # A group's line (gpu -1): Enter opens or closes it.
            self.expanded ^= {state.selected}
            self.refresh_view()
            return
        if state.selected is None or state.selected_process() is None:
            return
        from gputop.ui.screens.detail import DetailScreen

        self.app.push_screen(DetailScreen(state.selected))

    def _may(self, what: str, capability: str) -> bool:
        """Whether the shown host's source can do ``what``; says why not."""
        app = self.app
        if app.state.readonly:
            self.notify(f"{what}: read-only mode (--readonly)", severity="warning")
            return False
        host = app.state.host
        if host is not None:
            caps = app.capabilities(host)
            if not getattr(caps, capability):
                self.notify(f"{what}: {caps.why_not or 'not possible for this source'}",
                            severity="warning")
                return False
        return True

    def action_kill(self) -> None:
        if self._may("kill", "kill"):
            from gputop.ui.screens import kill

            kill.open_kill(self.app)

    def action_reclaim(self) -> None:
        from gputop.ui.screens import reclaim

        reclaim.open_reclaim(self.app)

    def action_reserve(self) -> None:
        if self._may("reserve", "reserve"):
            from gputop.ui.screens import reserve

            reserve.open_reserve(self.app)

    def action_release(self) -> None:
        if self._may("release", "reserve"):
            from gputop.ui.screens import reserve

            reserve.release(self.app)

    def action_topology(self) -> None:
        from gputop.ui.screens import topology

        topology.open_topology(self.app)

    def action_warnings_log(self) -> None:
        from gputop.ui.screens import log

        log.open_log(self.app)

    def action_cluster(self) -> None:
        from gputop.ui.screens import cluster

        cluster.open_cluster(self.app)

    def action_all_processes(self) -> None:
        from gputop.ui.screens import cluster_processes

        cluster_processes.open_processes(self.app)

    def action_queue(self) -> None:
        from gputop.ui.screens import queue

        queue.open_queue(self.app)

    def palette_commands(self) -> list[tuple[str, str, Callable[[], None]]]:
        """(title, help, callback) of the sort commands the palette adds for this screen."""
        return [(f"Sort by {column.title}", "also: click the column title",
                 partial(self.action_sort, column.id))
                for column in table_model.COLUMNS.values()]
