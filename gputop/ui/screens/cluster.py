"""The cluster overview: every host on one screen, one compact cell per GPU.

``open_cluster(app)`` (key ``c``) pushes it; ``back(app)`` (Esc on the host dashboard,
after the filters) returns to it.  Enter on a host opens that host's dashboard; ``p``
lists the processes of all hosts (screens/cluster_processes.py); ``/`` filters hosts
(name or label).

A host line (ui/cluster_cells.py): name, state (a stale host with its age), then per GPU
``util`` and ``memory %`` coloured by how busy the card is, ``!`` for a warning on it,
``R`` for an active reservation of the card; a host without data shows its error instead
(e.g. the host-key fingerprint and the command to trust it).  With more hosts than rows
the list wraps into columns: 64 hosts x 8 GPUs fit a 200x60 terminal.

Hosts with problems first (cluster_cells.ProblemOrder: down, CRITICAL, WARNING, then the
rest, each in the hosts file's order); the header counts the hosts above and below the
fold, and the cursor stays on its host when the order changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.screen import Screen
from textual.widgets import Footer, Static

from gputop import model
from gputop.analysis import workload_groups
from gputop.model import HostSnapshot
from gputop.ui.cluster_cells import (
    NAME_WIDTH,
    ProblemOrder,
    cut_reasons,
    fold_text,
    host_line,
    host_matches,
    host_width,
    multi_host_jobs_text,
    name_width,
    reasons_text,
    totals,
    worst_warnings,
)
from gputop.ui.keys import bindings
from gputop.ui.widgets.filter_input import FilterInput
from gputop.ui.widgets.text_lines import LazyRows, TextLines

if TYPE_CHECKING:
    from textual import getters

    from gputop.ui.app import GputopApp


def _warned(app: GputopApp) -> set[tuple[str, int]]:
    return {(w.host, w.gpu) for w in app.state.warnings if w.gpu is not None and w.host}


class ClusterScreen(Screen[None]):
    """All hosts at a glance."""

    BINDINGS: ClassVar[list[BindingType]] = bindings("cluster")
    DEFAULT_CSS = """
    ClusterScreen #cluster-totals { height: auto; padding: 0 1; background: $boost; }
    ClusterScreen #cluster-jobs { height: auto; max-height: 8; padding: 0 1; }
    ClusterScreen #cluster-hosts { height: 1fr; }
    ClusterScreen #cluster-reasons { height: auto; max-height: 9; padding: 0 1; }
    """

    if TYPE_CHECKING:
        app = getters.app(GputopApp)

    def __init__(self) -> None:
        super().__init__()
        self.needle = ""
        self.order: list[str] = []
        self.problems = ProblemOrder()
        self._shown: list[HostSnapshot] = []
        self._narrow = False

    def compose(self) -> ComposeResult:
        yield Static(id="cluster-totals")
        yield Static(id="cluster-jobs")  # jobs that span hosts
        yield TextLines(NAME_WIDTH, id="cluster-hosts")
        yield Static(id="cluster-reasons")  # reasons the host lines cut, in full
        yield FilterInput(placeholder="host name or label; Enter keeps it, Esc clears",
                          id="cluster-filter")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_data()
        lines = self.query_one(TextLines)
        lines.focus()
        # The header counts the hosts off screen: it follows the list as it scrolls.
        self.watch(lines, "scroll_y", lambda _old, _new: self._show_totals(), init=False)
        # A fixed redraw rate, not one per snapshot: 64 hosts must not mean 64 redraws a second.
        self.set_interval(self.app.interval, self.refresh_data)

    def snapshots(self) -> list[HostSnapshot]:
        state = self.app.state
        names = list(state.feeds) or list(state.snapshots)
        for name in state.snapshots:
            if name not in names:
                names.append(name)
        out = []
        for name in names:
            snap = state.snapshots.get(name)
            if snap is None:
                snap = model.error_snapshot(name, 0.0, model.HOST_CONNECTING, "connecting")
            out.append(snap)
        return out

    def refresh_data(self) -> None:
        app = self.app
        now = app.clock()
        warned = _warned(app)
        worst = worst_warnings(app.state.warnings)
        # Problems first (down, CRITICAL, WARNING), each group in the hosts file's order.
        snaps = self.problems.sort(self.snapshots(), worst, now)
        shown = [s for s in snaps if host_matches(s, self.needle)]
        lines = self.query_one(TextLines)
        chosen = self.order[lines.cursor] if lines.cursor < len(self.order) else None
        self.order = [s.host for s in shown]
        self._shown = shown
        most = max((len(s.gpus) for s in shown), default=1)
        # Every card must show: when the full cells do not fit, drop the memory figure.
        screen = self.size.width or app.size.width
        narrow = self._narrow = host_width(most) > screen
        names = name_width(self.order, screen - host_width(most, narrow, 0))
        width = host_width(most, narrow, names)
        # Built as they are drawn: a 1,000-host overview shows a screenful of them.
        rows = LazyRows(len(shown), lambda n: host_line(shown[n], now, warned, width, narrow,
                                                        names))
        lines.label_width = names
        self._show_jobs(shown)
        lines.set_rows(rows, width)
        if lines.cursor and chosen in self.order and self.order.index(chosen) != lines.cursor:
            # The cursor stays on its host when the order changes under it; on the top
            # row it stays there, on whichever host is worst.
            lines.cursor = self.order.index(chosen)
            lines.action_move(0)
        self._show_totals()
        cut = cut_reasons(shown, screen, names)
        reasons = self.query_one("#cluster-reasons", Static)
        reasons.display = bool(cut)
        if cut:
            reasons.update(reasons_text(cut, screen - 2))  # its padding

    def _show_totals(self) -> None:
        app, shown = self.app, self._shown
        above, below = self.query_one(TextLines).hidden()
        worst = worst_warnings(app.state.warnings)
        fold = fold_text([shown[n] for n in above], [shown[n] for n in below], worst)
        summary = totals(shown, app.state.flags, app.clock(), _warned(app)).text(
            self._narrow, fold)
        if self.needle:
            summary.append(f"   filter: {self.needle}", "italic")
        self.query_one("#cluster-totals", Static).update(summary)

    def _show_jobs(self, snaps: list[HostSnapshot]) -> None:
        """One line per Slurm job running on several hosts, with all its hosts."""
        box = self.query_one("#cluster-jobs", Static)
        spread = [j for j in workload_groups.cluster_jobs(snaps) if len(j.hosts) > 1]
        box.display = bool(spread)
        if spread:
            box.update(multi_host_jobs_text(spread))

    def on_resize(self) -> None:
        self.refresh_data()

    @on(TextLines.Chosen)
    def _chosen(self, event: TextLines.Chosen) -> None:
        if 0 <= event.index < len(self.order):
            host = self.order[event.index]
            self.dismiss(None)
            self.app.show_host(host)

    def action_leave(self) -> None:
        box = self.query_one("#cluster-filter", FilterInput)
        if box.is_open or self.needle:
            box.close(keep=False)
            return
        self.dismiss(None)

    def action_processes(self) -> None:
        # Imported here: that screen checks for this one when it takes the user to a host.
        from gputop.ui.screens import cluster_processes

        cluster_processes.open_processes(self.app)

    def action_filter(self) -> None:
        self.query_one("#cluster-filter", FilterInput).open()

    @on(FilterInput.Filtered, "#cluster-filter")
    def _filter_changed(self, event: FilterInput.Filtered) -> None:
        self.needle = event.value
        self.refresh_data()

    @on(FilterInput.Closed, "#cluster-filter")
    def _filter_closed(self, event: FilterInput.Closed) -> None:
        self.needle = event.value
        self.query_one(TextLines).focus()
        self.refresh_data()


# -- opened from the dashboard --------------------------------------------------------


def open_cluster(app: GputopApp) -> None:
    if isinstance(app.screen, ClusterScreen):
        return
    app.focus_feeds(None)  # the overview: no host read in full
    app.push_screen(ClusterScreen())


def back(app: GputopApp) -> None:
    """Esc on the host dashboard: back to the overview when there is more than one host."""
    hosts = set(app.state.feeds) | set(app.state.snapshots)
    if len(hosts) > 1:
        open_cluster(app)
