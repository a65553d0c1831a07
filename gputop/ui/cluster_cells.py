"""The cluster views' cells and rows, as rich Text; no Textual (the screens draw them).

One host line of the overview (``host_line``: name, state, one cell per GPU coloured by
``gpu_class``, ``!`` for a warning, ``R`` for a reservation of the whole card), the totals
line above them, the jobs that span hosts, and the rows of the all-processes table with
their filter (``ProcFilter``).  Whether a card is reserved is the host view's answer
(analysis/hostview.py): a reservation of one MIG device does not make its card reserved.

Host names, users, labels and commands are untrusted text: built as ``rich.text.Text``,
never parsed as markup.  A card's class (``gpu_class``) and a host's rank
(``problem_rank``) are analysis/hoststatus.py's: `--once` says them too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rich.cells import cell_len, set_cell_size
from rich.text import Text

from gputop import model
from gputop.analysis import workload_groups
from gputop.analysis.hoststatus import (  # noqa: F401 - re-exported for the screens
    BROKEN,
    BUSY,
    FINE,
    FREE,
    RESERVED,
    UNKNOWN,
    gpu_class,
    problem_rank,
    worst_warnings,
)
from gputop.analysis.hostview import view
from gputop.analysis.orphans import ProcessFlags
from gputop.analysis.pipeline import Flags
from gputop.model import Gpu, GpuProcess, HostSnapshot
from gputop.ui import fmt
from gputop.ui.table_model import FLAG_SHORT

GIB = 1024**3
NAME_WIDTH = 13  # the host-name column at least; wider up to the longest name shown...
MAX_NAME_WIDTH = 40  # ...as far as this and the screen allow (name_width)
STATE_WIDTH = 11
CELL_WIDTH = 8  # "100 93!R" is 8 cells; one space between GPU cells
NARROW_CELL_WIDTH = 5  # "100!R": util only, when the full cells do not fit the terminal

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


# -- problems first -------------------------------------------------------------------

PROBLEM_HOLD_S = 30.0  # how long a host that got better keeps its place (no flapping rows)


@dataclass
class ProblemOrder:
    """The overview's order, kept between refreshes: hosts by rank, then in the hosts
    file's order.  A host that gets worse moves up at once; one that gets better keeps
    its place for ``hold_s``, so that a warning that comes and goes does not make rows
    jump under the cursor."""

    hold_s: float = PROBLEM_HOLD_S
    shown: dict[str, tuple[int, float | None]] = field(default_factory=dict)

    def rank(self, host: str, rank: int, now: float) -> int:
        held, better_since = self.shown.get(host, (rank, None))
        if rank <= held:
            self.shown[host] = (rank, None)
            return rank
        if better_since is None:
            better_since = now
        if now - better_since >= self.hold_s:
            self.shown[host] = (rank, None)
            return rank
        self.shown[host] = (held, better_since)
        return held

    def sort(self, snaps: Sequence[HostSnapshot], worst: dict[str, str], now: float,
             ) -> list[HostSnapshot]:
        ranks = [self.rank(s.host, problem_rank(s, worst.get(s.host)), now) for s in snaps]
        order = sorted(range(len(snaps)), key=lambda n: (ranks[n], n))
        return [snaps[n] for n in order]


def fold_text(above: Sequence[HostSnapshot], below: Sequence[HostSnapshot],
              worst: dict[str, str]) -> Text:
    """The header's word on the hosts off screen: how many, and how many of them have a
    problem (a lab of 100 hosts on 46 rows must not hide its dead ones)."""
    out = Text()
    for hosts, words in ((below, "below the fold"),
                         (above, "above" if below else "above the fold")):
        if not hosts:
            continue
        bad = sum(problem_rank(s, worst.get(s.host)) < FINE for s in hosts)
        out.append(", " if out else "   ")
        out.append(f"{len(hosts)} {words}", "bold")
        if bad:
            out.append(f" ({bad} with problems)", "bold red")
    return out


def _idle(flag: ProcessFlags | None) -> bool:
    return flag is not None and (flag.idle or flag.orphan or flag.zombie)


@dataclass
class Totals:
    hosts: int = 0
    states: dict[str, int] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)
    idle_mem: int = 0  # bytes held by processes the orphan rules call idle/orphan/zombie
    idle_procs: int = 0

    def text(self, narrow: bool = False, fold: Text | None = None) -> Text:
        out = Text()
        out.append(fmt.count(self.hosts, "host"), "bold")
        parts = sorted(self.states.items(), key=lambda kv: (kv[0] != model.HOST_OK, kv[0]))
        for state, count in parts:
            out.append("  ")
            out.append(f"{count} {state}", STATE_STYLES.get(state, "red"))
        if fold is not None:
            out.append_text(fold)
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
    flags: dict[str, Flags],
    now: float,
    warned: set[tuple[str, int]] | None = None,
) -> Totals:
    result = Totals()
    warned = warned or set()
    for snap in snapshots:
        result.hosts += 1
        result.states[snap.state] = result.states.get(snap.state, 0) + 1
        shown = view(snap, now)
        for gpu in snap.gpus:
            kind = gpu_class(gpu, snap, now, (snap.host, gpu.index) in warned, shown)
            result.gpus[kind] = result.gpus.get(kind, 0) + 1
        host_flags = flags.get(snap.host) or {}
        for proc in snap.processes:
            if _idle(host_flags.get(proc.key)):
                result.idle_procs += 1
                result.idle_mem += proc.gpu_mem or 0
    return result


def host_width(max_gpus: int, narrow: bool = False, name_width: int = NAME_WIDTH) -> int:
    cell = NARROW_CELL_WIDTH if narrow else CELL_WIDTH
    return name_width + 1 + STATE_WIDTH + 1 + max(1, max_gpus) * (cell + 1)


def name_width(names: Iterable[str], room: int) -> int:
    """The host-name column for these names: as wide as the longest (three hosts named
    "127.0.0.1:19401".."19403" must not all read "127.0.0.1:19…"), within ``room``."""
    longest = max((cell_len(fmt.visible(name)) for name in names), default=0)
    return max(NAME_WIDTH, min(longest, MAX_NAME_WIDTH, room))


def _name_cells(untrusted: str, width: int) -> str:
    """A host name in exactly ``width`` cells; one too long loses its middle, not its
    end, where names that share a prefix differ."""
    text = fmt.visible(untrusted)
    if cell_len(text) <= width:
        return set_cell_size(text, width)
    head = set_cell_size(text, max(width // 3, 1)).rstrip()
    room = width - cell_len(head) - 1
    tail: list[str] = []
    used = 0
    for char in reversed(text):
        used += cell_len(char)
        if used > room:
            break
        tail.append(char)
    return set_cell_size(head + "…" + "".join(reversed(tail)), width)


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
    narrow: bool = False, name_cells: int = NAME_WIDTH,
) -> Text:
    """One host: name (``name_cells`` wide), state, GPU cells, ``width`` cells wide; a
    host without cards names its state's reason in full (at least ``width`` cells)."""
    line = Text(no_wrap=True, overflow="crop")
    line.append(_name_cells(snap.host, name_cells), "bold")
    line.append(" ")
    state = STATE_LABELS.get(snap.state, snap.state)
    age = re.search(r"(\d+) s", snap.error or "")
    if snap.state == model.HOST_STALE and age:
        state = f"stale {age.group(1)}s"
    line.append(_fit(state, STATE_WIDTH).ljust(STATE_WIDTH), STATE_STYLES.get(snap.state, "red"))
    line.append(" ")
    if snap.gpus:
        shown = view(snap, now)
        for card in shown.cards:
            gpu = card.gpu
            is_warned = (snap.host, gpu.index) in warned
            line.append_text(gpu_cell(gpu, gpu_class(gpu, snap, now, is_warned, shown),
                                      is_warned, card.reserved, narrow))
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


def cut_reasons(snaps: Sequence[HostSnapshot], screen: int,
                name_cells: int = NAME_WIDTH) -> list[HostSnapshot]:
    """The hosts without cards whose reason ``host_line`` cannot show whole in ``screen``
    columns (an `ssh-keyscan ... >> ~/.ssh/known_hosts` at 80): the screen says them in
    full, wrapped, under the list."""
    room = screen - name_cells - 1 - STATE_WIDTH - 1
    return [s for s in snaps
            if not s.gpus and s.error and cell_len(fmt.visible(s.error)) > room]


def reasons_text(snaps: Sequence[HostSnapshot], screen: int, most: int = 4) -> Text:
    """``cut_reasons``'s hosts, one wrapped paragraph each, at most ``most`` of them.  A
    reason too long for one line breaks after its last ": ", so that what follows (the
    fix: a command to copy) starts a line of its own, indented."""
    out = Text()
    for n, snap in enumerate(snaps[:most]):
        if n:
            out.append("\n")
        out.append(fmt.visible(snap.host), "bold")
        error = fmt.visible(snap.error or "")
        head, sep, fix = error.rpartition(": ")
        if sep and cell_len(snap.host) + 2 + cell_len(error) > screen:
            out.append(f": {head}:\n  ")
            out.append(fix)
        else:
            out.append(": " + error)
    if len(snaps) > most:
        out.append(f"\n… and {len(snaps) - most} more hosts (filter with /)", "dim")
    return out


def host_matches(snap: HostSnapshot, needle: str) -> bool:
    """``host:NAME`` and ``label:NAME`` terms as in the all-processes filter; a plain
    word matches the host name or a label.  Every term must match."""
    terms = ProcFilter.parse(needle)
    host, labels = snap.host.lower(), [x.lower() for x in snap.labels]
    if terms.host and terms.host not in host:
        return False
    if terms.label and not any(terms.label in x for x in labels):
        return False
    return all(w in host or any(w in x for x in labels) for w in terms.words)


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
    flags: dict[str, Flags],
    where: ProcFilter,
) -> list[tuple[HostSnapshot, GpuProcess, Text]]:
    rows = []
    for snap in snapshots:
        host_flags = flags.get(snap.host) or {}
        for proc in sorted(snap.processes, key=lambda p: -(p.gpu_mem or 0)):
            if where.match(snap, proc):
                flag = host_flags.get(proc.key)
                names = flag.names if flag is not None else ()
                rows.append((snap, proc, process_line(snap, proc, _idle(flag), names)))
    return rows

