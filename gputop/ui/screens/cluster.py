"""The cluster overview: every host on one screen, one compact cell per GPU.

``open_cluster(app)`` (key ``c``) pushes it; ``back(app)`` (Esc on the host dashboard,
after the filters) returns to it.  Enter on a host opens that host's dashboard; ``p``
lists the processes of all hosts in one table with a HOST column, filterable by host,
user and label; ``/`` filters hosts (name or label).

A host line: name, state (a stale host with its age), then per GPU ``util`` and
``memory %`` coloured by how busy the card is, ``!`` for a warning on it, ``R`` for an
active reservation; a host without data shows its error instead (e.g. the host-key
fingerprint and the command to trust it).  With more hosts than rows the list wraps into
columns: 64 hosts x 8 GPUs fit a 200x60 terminal.

Host names, users, labels and commands are untrusted text: built as ``rich.text.Text``,
never parsed as markup.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.screen import Screen
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Footer, Static

from gputop import model
from gputop.analysis import pick as picking
from gputop.analysis import workload_groups
from gputop.model import Gpu, GpuProcess, HostSnapshot
from gputop.ui import fmt
from gputop.ui.keys import bindings
from gputop.ui.table_model import FLAG_SHORT
from gputop.ui.widgets.filter_input import FilterInput

if TYPE_CHECKING:
    from textual import getters

    from gputop.ui.app import GputopApp

GIB = 1024**3
NAME_WIDTH = 13
STATE_WIDTH = 11
COLUMN_GAP = 1
CELL_WIDTH = 8  # "100 93!R" is 8 cells; one space between GPU cells
NARROW_CELL_WIDTH = 5  # "100!R": util only, when the full cells do not fit the terminal
FREE_UTIL = 5  # % SM at or below which a card counts as free...
FREE_MEM = 5.0  # ...when also at most this % of its memory is used

ROW_BACKGROUND = Style(bgcolor="grey27")  # the cursor's row; cells keep their colours

FREE, BUSY, BROKEN, RESERVED, UNKNOWN = "free", "busy", "broken", "reserved", "unknown"

# Short forms so that a state fits its column; the full error is on the totals' detail.
STATE_LABELS = {
    model.HOST_KEY_UNKNOWN: "key unknown",
    model.HOST_KEY_CHANGED: "KEY CHANGED",
    model.HOST_NO_GPU: "no GPU",
}
STATE_STYLES = {
    model.HOST_OK: "green",
    model.HOST_FALLBACK: "yellow",
    model.HOST_STALE: "yellow",
    model.HOST_CONNECTING: "dim",
}
GPU_STYLES = {
    FREE: "black on green",
    BUSY: "black on yellow",
    RESERVED: "black on cyan",
    BROKEN: "white on red",
    UNKNOWN: "dim",
}


def gpu_class(gpu: Gpu, snap: HostSnapshot, now: float, warned: bool = False) -> str:
    """free / busy / reserved / broken / unknown for one card."""
    if gpu.state != model.GPU_OK:
        return BROKEN
    if warned and gpu.ecc_volatile_uncorrected:
        return BROKEN
    if any(r.active(now) and r.mig_uuid is None and picking.reserves(r, gpu)
           for r in snap.reservations):
        return RESERVED
    if picking.unknown(gpu):
        return UNKNOWN  # unknown is never free
    busy_util = gpu.util_gpu is not None and gpu.util_gpu > FREE_UTIL
    busy_mem = gpu.mem_percent is not None and gpu.mem_percent > FREE_MEM
    held = any(p.gpu == gpu.index for p in snap.processes)
    return BUSY if busy_util or busy_mem or held else FREE


def _idle(proc: GpuProcess, flags: dict[tuple[int, int], Any] | None) -> bool:
    flag = (flags or {}).get(proc.key)
    if flag is not None:
        return bool(getattr(flag, "idle", False) or getattr(flag, "orphan", False)
                    or getattr(flag, "zombie", False))
    return False


@dataclass
class Totals:
    hosts: int = 0
    states: dict[str, int] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)
    idle_mem: int = 0  # bytes held by processes the orphan rules call idle/orphan/zombie
    idle_procs: int = 0

    def text(self, narrow: bool = False) -> Text:
        out = Text()
        out.append(fmt.count(self.hosts, "host"), "bold")
        parts = sorted(self.states.items(), key=lambda kv: (kv[0] != model.HOST_OK, kv[0]))
        for state, count in parts:
            out.append("  ")
            out.append(f"{count} {state}", STATE_STYLES.get(state, "red"))
        out.append("   GPUs: ", "bold")
        for name in (FREE, BUSY, RESERVED, BROKEN, UNKNOWN):
            count = self.gpus.get(name, 0)
            if count or name in (FREE, BUSY, BROKEN):
                out.append(f"{count} {name}", GPU_STYLES[name])
                out.append(" ")
        out.append("  idle processes hold ", "bold")
        out.append(f"{self.idle_mem / GIB:.1f} GiB", "magenta" if self.idle_mem else "")
        out.append(f" ({self.idle_procs})")
        out.append("\ncell: util%  " if narrow else "\ncell: util% mem%  ", "dim")
        out.append("!", "bold red")
        out.append(" warning  ", "dim")
        out.append("R", "bold cyan")
        out.append(" reserved   Enter: host  p: all processes  /: filter  Esc: back", "dim")
        return out


def totals(
    snapshots: Iterable[HostSnapshot],
    flags: dict[str, dict[tuple[int, int], Any]],
    now: float,
    warned: set[tuple[str, int]] | None = None,
) -> Totals:
    result = Totals()
    warned = warned or set()
    for snap in snapshots:
        result.hosts += 1
        result.states[snap.state] = result.states.get(snap.state, 0) + 1
        for gpu in snap.gpus:
            kind = gpu_class(gpu, snap, now, (snap.host, gpu.index) in warned)
            result.gpus[kind] = result.gpus.get(kind, 0) + 1
        host_flags = flags.get(snap.host)
        for proc in snap.processes:
            if _idle(proc, host_flags):
                result.idle_procs += 1
                result.idle_mem += proc.gpu_mem or 0
    return result


def host_width(max_gpus: int, narrow: bool = False) -> int:
    cell = NARROW_CELL_WIDTH if narrow else CELL_WIDTH
    return NAME_WIDTH + 1 + STATE_WIDTH + 1 + max(1, max_gpus) * (cell + 1)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _cells(untrusted: str, width: int) -> str:
    """Untrusted text shown safely in exactly `width` terminal cells: wide or zero-width
    characters must not push the columns after it out of line."""
    text = fmt.visible(untrusted)
    if cell_len(text) > width:
        return set_cell_size(text, width - 1) + "…"
    return set_cell_size(text, width)


def gpu_cell(gpu: Gpu, kind: str, warned: bool, reserved: bool, narrow: bool = False) -> Text:
    util = "  -" if gpu.util_gpu is None else f"{min(gpu.util_gpu, 100):>3}"
    mem = "  -" if gpu.mem_percent is None else f"{min(round(gpu.mem_percent), 100):>3}"
    if kind == BROKEN and gpu.state != model.GPU_OK:
        body = "OFF" if narrow else f"{gpu.state.upper():^6}"
    elif gpu.mig_devices:
        body = _mig_body(gpu, narrow)
    else:
        body = util if narrow else f"{util}{mem}"
    # The card's colour on its numbers only: as the Text's base style it would also paint
    # the markers, and a cyan "R" on a reserved (cyan) card disappeared.
    cell = Text()
    cell.append(body, GPU_STYLES[kind])
    cell.append("!" if warned else " ", "bold red" if warned else "")
    cell.append("R" if reserved else " ", "bold cyan" if reserved else "")
    return cell


_FILL = "·▁▂▃▄▅▆▇█"  # "·": an instance nobody uses


def _mig_body(gpu: Gpu, narrow: bool) -> str:
    """A MIG card's cell, "M" and one bar per MIG device's memory; with more
    devices than the cell has room for (or narrow), the devices' memory together in
    percent.  Always the width of a card's cell: columns of hosts stay aligned."""
    room = (NARROW_CELL_WIDTH if narrow else CELL_WIDTH) - 3  # "M", then the "!R" marks
    if len(gpu.mig_devices) <= room and not narrow:
        return "M" + "".join(
            _FILL[min(round(8 * d.mem_used / d.mem_total), 8)]
            if d.mem_used is not None and d.mem_total else "?"
            for d in gpu.mig_devices
        ).ljust(room)
    used, total = model.mig_memory(gpu)
    pct = f"{min(round(100 * used / total), 99)}" if used is not None and total else "-"
    return ("M" + (pct if narrow else f"{pct}%").rjust(room))[: room + 1]


def host_line(
    snap: HostSnapshot, now: float, warned: set[tuple[str, int]], width: int,
    narrow: bool = False,
) -> Text:
    """One host: name, state, GPU cells, ``width`` cells wide; a host without cards
    names its state's reason in full (at least ``width`` cells)."""
    line = Text(no_wrap=True, overflow="crop")
    line.append(_cells(snap.host, NAME_WIDTH), "bold")
    line.append(" ")
    state = STATE_LABELS.get(snap.state, snap.state)
    age = re.search(r"(\d+) s", snap.error or "")
    if snap.state == model.HOST_STALE and age:
        state = f"stale {age.group(1)}s"
    line.append(_fit(state, STATE_WIDTH).ljust(STATE_WIDTH), STATE_STYLES.get(snap.state, "red"))
    line.append(" ")
    if snap.gpus:
        for gpu in snap.gpus:
            is_warned = (snap.host, gpu.index) in warned
            reserved = any(r.active(now) and picking.reserves(r, gpu) for r in snap.reservations)
            line.append_text(gpu_cell(gpu, gpu_class(gpu, snap, now, is_warned), is_warned,
                                      reserved, narrow))
            line.append(" ")
        if snap.queue:
            line.append(f"Q{len(snap.queue)}", "bold yellow")  # `gputop run` jobs
        line.truncate(width, pad=True)
    else:
        # No cards: the reason takes the rest of the line, however few cards the other
        # hosts have (the list cuts it at its own width).
        if snap.error:
            line.append(fmt.visible(snap.error), "dim")
        line.pad_right(max(width - line.cell_len, 0))
    return line


class TextLines(ScrollView, can_focus=True):
    """Rows of rich Text with a cursor, drawn line by line; wraps into columns if asked.

    Only the visible lines are rendered, and an update that changes nothing visible costs
    one comparison per row.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
        Binding("left", "move_column(-1)", show=False),
        Binding("right", "move_column(1)", show=False),
        Binding("pageup", "move(-20)", show=False),
        Binding("pagedown", "move(20)", show=False),
        Binding("home", "move(-100000)", show=False),
        Binding("end", "move(100000)", show=False),
        *bindings("lines"),
    ]

    class Chosen(Message):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    def __init__(self, column_width: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rows: list[Text] = []
        self.cursor = 0
        self.column_width = column_width  # 0: one column as wide as the widget

    def set_rows(self, rows: list[Text], column_width: int | None = None) -> None:
        if column_width is not None:
            self.column_width = column_width
        if rows == self.rows:
            return
        self.rows = rows
        self.cursor = min(self.cursor, max(0, len(rows) - 1))
        self._layout()
        self.refresh()

    def _columns(self) -> int:
        height = max(1, self.size.height)
        if not self.column_width or len(self.rows) <= height:
            return 1
        return max(1, min(self.size.width // (self.column_width + COLUMN_GAP), math.ceil(
            len(self.rows) / height)))

    def _per_column(self) -> int:
        return max(1, math.ceil(len(self.rows) / self._columns()))

    def _layout(self) -> None:
        self.virtual_size = Size(self.size.width, self._per_column())

    def on_resize(self) -> None:
        self._layout()
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        row = y + self.scroll_offset.y
        columns = self._columns()
        per = self._per_column()
        col_width = width if columns == 1 else self.column_width + COLUMN_GAP
        segments: list[Segment] = []
        for col in range(columns):
            index = col * per + row
            if row >= per or index >= len(self.rows):
                text = Text(" " * col_width)
            else:
                text = self.rows[index].copy()
                text.truncate(col_width, pad=True)
                if index == self.cursor:
                    self._highlight(text, col_width)
            segments.extend(text.render(self.app.console))
        return Strip(segments).adjust_cell_length(width)

    def _highlight(self, text: Text, width: int) -> None:
        # Only the host name is reversed: reversing the GPU cells turned their colours
        # (the point of the overview) into something else.  The rest of the line gets a
        # background under the cells' own, so the eye can follow the row across.
        name = min(NAME_WIDTH, width)
        if self.has_focus:
            text.stylize_before(ROW_BACKGROUND, 0, width)
            text.stylize(Style(reverse=True, bold=True), 0, name)
        else:
            text.stylize(Style(underline=True), 0, name)

    def line_text(self, y: int) -> str:
        """The plain text of one visible line (tests, screen readers)."""
        return self.render_line(y).text

    def action_move(self, step: int) -> None:
        if not self.rows:
            return
        self.cursor = max(0, min(len(self.rows) - 1, self.cursor + step))
        self._scroll_to_cursor()
        self.refresh()

    def action_move_column(self, step: int) -> None:
        if self._columns() > 1:
            self.action_move(step * self._per_column())

    def _scroll_to_cursor(self) -> None:
        row = self.cursor % self._per_column()
        top = self.scroll_offset.y
        height = max(1, self.size.height)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + height:
            self.scroll_to(y=row - height + 1, animate=False)

    def action_choose(self) -> None:
        if self.rows:
            self.post_message(self.Chosen(self.cursor))

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()


def _warned(app: GputopApp) -> set[tuple[str, int]]:
    return {(w.host, w.gpu) for w in app.state.warnings if w.gpu is not None and w.host}


def _matches(snap: HostSnapshot, needle: str) -> bool:
    """``host:NAME`` and ``label:NAME`` terms as in the all-processes filter; a plain
    word matches the host name or a label.  Every term must match."""
    terms = ProcFilter.parse(needle)
    host, labels = snap.host.lower(), [x.lower() for x in snap.labels]
    if terms.host and terms.host not in host:
        return False
    if terms.label and not any(terms.label in x for x in labels):
        return False
    return all(w in host or any(w in x for x in labels) for w in terms.words)


class ClusterScreen(Screen[None]):
    """All hosts at a glance."""

    BINDINGS: ClassVar[list[BindingType]] = bindings("cluster")
    DEFAULT_CSS = """
    ClusterScreen #cluster-totals { height: auto; padding: 0 1; background: $boost; }
    ClusterScreen #cluster-jobs { height: auto; max-height: 8; padding: 0 1; }
    ClusterScreen #cluster-hosts { height: 1fr; }
    """

    if TYPE_CHECKING:
        app = getters.app(GputopApp)

    def __init__(self) -> None:
        super().__init__()
        self.needle = ""
        self.order: list[str] = []

    def compose(self) -> ComposeResult:
        yield Static(id="cluster-totals")
        yield Static(id="cluster-jobs")  # jobs that span hosts
        yield TextLines(id="cluster-hosts")
        yield FilterInput(placeholder="host name or label; Enter keeps it, Esc clears",
                          id="cluster-filter")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_data()
        self.query_one(TextLines).focus()
        # A fixed redraw rate, not one per snapshot: 64 hosts must not mean 64 redraws a second.
        self.set_interval(max(0.5, self.app.interval), self.refresh_data)

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
        snaps = self.snapshots()
        shown = [s for s in snaps if _matches(s, self.needle)]
        self.order = [s.host for s in shown]
        most = max((len(s.gpus) for s in shown), default=1)
        # Every card must show: when the full cells do not fit, drop the memory figure.
        narrow = host_width(most) > (self.size.width or app.size.width)
        width = host_width(most, narrow)
        rows = [host_line(s, now, warned, width, narrow) for s in shown]
        summary = totals(shown, app.state.flags, now, warned).text(narrow)
        if self.needle:
            summary.append(f"   filter: {self.needle}", "italic")
        self.query_one("#cluster-totals", Static).update(summary)
        self._show_jobs(shown)
        self.query_one(TextLines).set_rows(rows, width)

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
        self.app.push_screen(ClusterProcessesScreen())

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


def multi_host_jobs_text(jobs: list[workload_groups.ClusterJob], limit: int = 7) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    for i, job in enumerate(jobs[:limit]):
        w = job.workload
        who = f" {w.user}" if w.user else ""
        name = f" {w.name}" if w.name else ""
        out.append(("\n" if i else "") + fmt.visible(job.label), "bold")
        out.append(fmt.visible(f"{name}{who}: {job.gpus} GPUs, {fmt.size(job.gpu_mem)}, "
                               f"{job.processes} processes on {len(job.hosts)} hosts: "
                               + ", ".join(job.hosts)))
    if len(jobs) > limit:
        out.append(f"\n... and {len(jobs) - limit} more jobs on several hosts", "dim")
    return out


# -- processes of all hosts ---------------------------------------------------------


@dataclass(frozen=True)
class ProcFilter:
    """``host:NAME user:NAME label:NAME`` terms (substring match), ``job:``,
    ``container:`` and ``pod:`` terms (analysis/workload_groups.matches) and free words."""

    host: str = ""
    user: str = ""
    label: str = ""
    words: tuple[str, ...] = ()
    workload: tuple[str, ...] = ()  # whole terms, e.g. "job:4242"

    @classmethod
    def parse(cls, text: str) -> ProcFilter:
        fields: dict[str, str] = {}
        words = []
        workload = []
        for term in text.split():
            key, sep, rest = term.partition(":")
            if sep and key in ("host", "user", "label"):
                fields[key] = rest.lower()
            elif term.lower().startswith(workload_groups.FILTER_PREFIXES):
                workload.append(term.lower())
            else:
                words.append(term.lower())
        return cls(words=tuple(words), workload=tuple(workload), **fields)

    def match(self, snap: HostSnapshot, proc: GpuProcess) -> bool:
        if self.host and self.host not in snap.host.lower():
            return False
        if self.user and self.user not in (proc.user or "").lower():
            return False
        if self.label and not any(self.label in x.lower() for x in snap.labels):
            return False
        if not all(workload_groups.matches(proc, term) for term in self.workload):
            return False
        for word in self.words:
            job = proc.workload.label if proc.workload is not None else ""
            hay = " ".join((snap.host, proc.user or "", proc.command or "", job, *snap.labels))
            if word not in hay.lower():
                return False
        return True


PROC_HEADER = (f"{'HOST':<16} {'GPU':>3} {'PID':>8} {'USER':<12} {'GPU-MEM':>7} {'SM%':>4} "
               f"{'FLAGS':<9} COMMAND")


def process_line(snap: HostSnapshot, proc: GpuProcess, idle: bool,
                 flags: tuple[str, ...] = ()) -> Text:
    """One row of the all-hosts table: the dashboard's columns (and words) plus HOST."""
    line = Text(no_wrap=True, overflow="crop")
    line.append(_cells(snap.host, 16), "bold")
    sm = "-" if proc.sm_util is None else str(proc.sm_util)
    line.append(f" {proc.gpu_label:>3} {proc.pid:>8} ")
    line.append(_cells(proc.user or "-", 12))
    line.append(" ")
    line.append(f"{fmt.size(proc.gpu_mem):>7}", "magenta" if idle else "")
    line.append(f" {sm:>4} ")
    short = " ".join(FLAG_SHORT.get(f, f.upper()) for f in flags)
    line.append(_fit(short, 9).ljust(9), "magenta" if idle else "")
    line.append(" ")
    if proc.workload is not None:
        line.append(fmt.visible(proc.workload.label) + " ", "cyan")
    if proc.command:
        line.append(fmt.visible(proc.command))
    else:
        line.append("(not in this PID namespace)" if not proc.visible else "?", "dim")
    return line


def process_rows(
    snapshots: Iterable[HostSnapshot],
    flags: dict[str, dict[tuple[int, int], Any]],
    where: ProcFilter,
) -> list[tuple[HostSnapshot, GpuProcess, Text]]:
    rows = []
    for snap in snapshots:
        host_flags = flags.get(snap.host) or {}
        for proc in sorted(snap.processes, key=lambda p: -(p.gpu_mem or 0)):
            if where.match(snap, proc):
                idle = _idle(proc, host_flags)
                names = tuple(getattr(host_flags.get(proc.key), "names", ()) or ())
                rows.append((snap, proc, process_line(snap, proc, idle, names)))
    return rows


class ClusterProcessesScreen(Screen[None]):
    """Every host's GPU processes in one list with a HOST column."""

    BINDINGS: ClassVar[list[BindingType]] = bindings("cluster_processes")
    DEFAULT_CSS = """
    ClusterProcessesScreen #procs-header { height: 1; padding: 0 0; text-style: bold; }
    ClusterProcessesScreen #procs-list { height: 1fr; }
    """

    if TYPE_CHECKING:
        app = getters.app(GputopApp)

    def __init__(self, query: str = "") -> None:
        super().__init__()
        self.where = ProcFilter.parse(query)
        self.query_text = query
        self.keys: list[tuple[str, int]] = []

    def compose(self) -> ComposeResult:
        yield Static(Text(PROC_HEADER), id="procs-header")
        yield TextLines(id="procs-list")
        yield FilterInput(value=self.query_text,
                          placeholder="host: user: label: job: container: pod: or words; "
                                      "Esc clears",
                          id="procs-filter")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_data()
        self.query_one(TextLines).focus()
        self.set_interval(max(0.5, self.app.interval), self.refresh_data)

    def refresh_data(self) -> None:
        state = self.app.state
        snaps = [state.snapshots[h] for h in state.snapshots]
        rows = process_rows(snaps, state.flags, self.where)
        self.keys = [(snap.host, proc.pid) for snap, proc, _ in rows]
        header = Text(PROC_HEADER)
        header.append(f"   {fmt.count(len(rows), 'process', 'processes')}", "dim")
        if self.query_text:
            header.append(f"   filter: {self.query_text}", "italic")
        self.query_one("#procs-header", Static).update(header)
        self.query_one(TextLines).set_rows([line for _, _, line in rows])

    @on(TextLines.Chosen)
    def _chosen(self, event: TextLines.Chosen) -> None:
        if 0 <= event.index < len(self.keys):
            host = self.keys[event.index][0]
            # Back to the dashboard of that host, where kill and reserve act.
            self.app.pop_screen()
            if isinstance(self.app.screen, ClusterScreen):
                self.app.screen.dismiss(None)
            self.app.show_host(host)

    def action_filter(self) -> None:
        self.query_one("#procs-filter", FilterInput).open()

    @on(FilterInput.Filtered, "#procs-filter")
    def _changed(self, event: FilterInput.Filtered) -> None:
        self._filter(event.value)

    @on(FilterInput.Closed, "#procs-filter")
    def _filter_closed(self, event: FilterInput.Closed) -> None:
        self._filter(event.value)
        self.query_one(TextLines).focus()

    def _filter(self, text: str) -> None:
        self.query_text = text
        self.where = ProcFilter.parse(text)
        self.refresh_data()

    def action_leave(self) -> None:
        box = self.query_one("#procs-filter", FilterInput)
        if box.is_open or self.query_text:
            box.close(keep=False)
            return
        self.app.pop_screen()


# -- opened from the dashboard --------------------------------------------------------


def open_cluster(app: GputopApp) -> None:
    if isinstance(app.screen, ClusterScreen):
        return
    app.push_screen(ClusterScreen())


def open_processes(app: GputopApp) -> None:
    """``p`` on the dashboard: the processes of every host (the main table shows one)."""
    if not isinstance(app.screen, ClusterProcessesScreen):
        app.push_screen(ClusterProcessesScreen())


def back(app: GputopApp) -> None:
    """Esc on the host dashboard: back to the overview when there is more than one host."""
    hosts = set(app.state.feeds) | set(app.state.snapshots)
    if len(hosts) > 1:
        open_cluster(app)
