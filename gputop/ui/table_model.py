"""The process table's rows: filtering, sorting, cell text.  Pure; no Textual.

Rows keep the GpuProcess and compute cell text only when a line is drawn, so a tick
with 2,000 processes costs a filter and a sort, not 22,000 formatted strings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gputop.model import GpuProcess
from gputop.ui import fmt
from gputop.ui.state import RowKey

FLAG_SHORT = {"zombie": "ZOMB", "orphan": "ORPH", "idle": "IDLE", "kernel": "KERN",
              "hidden": "HID"}


@dataclass(frozen=True, slots=True)
class Column:
    id: str
    title: str
    width: int  # 0: takes the rest of the line
    right: bool  # right-aligned (numbers)
    drop: int  # order in which narrow terminals hide it; 0 never


COLUMNS: dict[str, Column] = {
    c.id: c
    for c in (
        Column("gpu", "GPU", 3, True, 0),
        Column("pid", "PID", 7, True, 0),
        Column("user", "USER", 9, False, 0),
        Column("type", "TYPE", 4, False, 2),
        Column("gpu_mem", "GPU-MEM", 7, True, 0),
        Column("sm", "SM%", 4, True, 0),
        Column("cpu", "CPU%", 5, True, 4),
        Column("rss", "RSS", 6, True, 1),
        Column("time", "TIME", 8, True, 3),
        Column("flags", "STATE/FLAGS", 11, False, 0),
        Column("command", "COMMAND", 0, False, 0),
    )
}

MIN_COMMAND = 20


@dataclass(slots=True)
class Row:
    key: RowKey
    proc: GpuProcess
    flags: tuple[str, ...]  # orphan flag names
    # the tree view (gputop/ui/tree.py): a parent that is not itself on a GPU, the
    # branch drawn before its command, the GPU memory of a row and all under it
    group: bool = False
    branch: str = ""
    subtree_mem: int | None = None


def _flags_of(flags: Any) -> tuple[str, ...]:
    return tuple(getattr(flags, "names", ()) or ())


def build_rows(
    host: str,
    processes: Iterable[GpuProcess],
    flags: dict[tuple[int, int], Any] | None = None,
    *,
    mine: str | None = None,
    user: str | None = None,
    gpu: int | None = None,
    search: str = "",
) -> list[Row]:
    """Rows that pass every active filter (mine, one user, one GPU, search text)."""
    flags = flags or {}
    needle = search.lower()
    rows = []
    for proc in processes:
        if gpu is not None and proc.gpu != gpu:
            continue
        if mine is not None and proc.user != mine:
            continue
        if user is not None and proc.user != user:
            continue
        if needle and needle not in (proc.command or "").lower() and needle not in (
            proc.user or ""
        ).lower():
            continue
        rows.append(
            Row((host, proc.pid, proc.start_ticks, proc.gpu), proc, _flags_of(flags.get(proc.key)))
        )
    return rows


def _num(value: float | None) -> float:
    # Unknown values sort below every known one, in either direction they stay together.
    return -1.0 if value is None else float(value)


SORT_KEYS: dict[str, Callable[[Row, float], Any]] = {
    "gpu": lambda r, now: (r.proc.gpu, r.proc.pid),
    "pid": lambda r, now: r.proc.pid,
    "user": lambda r, now: (r.proc.user or "", r.proc.pid),
    "type": lambda r, now: (r.proc.type, r.proc.pid),
    "gpu_mem": lambda r, now: (_num(r.proc.gpu_mem), r.proc.pid),
    "sm": lambda r, now: (_num(r.proc.sm_util), r.proc.pid),
    "cpu": lambda r, now: (_num(r.proc.cpu_percent), r.proc.pid),
    "rss": lambda r, now: (_num(r.proc.rss), r.proc.pid),
    # Running time: the oldest start first when sorted descending.
    "time": lambda r, now: (-(r.proc.start_time if r.proc.start_time is not None else now),
                            r.proc.pid),
    "flags": lambda r, now: (len(r.flags), r.flags, r.proc.state or "", r.proc.pid),
    "command": lambda r, now: ((r.proc.command or "").lower(), r.proc.pid),
}

# Numbers read best biggest first; names alphabetically.
DESCENDING_BY_DEFAULT = frozenset({"gpu_mem", "sm", "cpu", "rss", "time", "flags"})


def sort_rows(rows: list[Row], column: str, reverse: bool, now: float) -> list[Row]:
    key = SORT_KEYS[column]
    return sorted(rows, key=lambda r: key(r, now), reverse=reverse)


def cell(column: str, row: Row, now: float) -> str:
    p = row.proc
    if row.group and column not in ("pid", "user", "gpu_mem", "command"):
        return ""
    if column == "gpu":
        return str(p.gpu)
    if column == "pid":
        return str(p.pid)
    if column == "user":
        return fmt.visible(p.user) if p.user else ("?" if p.visible else "-")
    if column == "type":
        return p.type
    if column == "gpu_mem":
        if row.subtree_mem is not None:
            return "Σ" + fmt.size(row.subtree_mem)
        return fmt.size(p.gpu_mem)
    if column == "sm":
        return "-" if p.sm_util is None else str(p.sm_util)
    if column == "cpu":
        return "-" if p.cpu_percent is None else f"{p.cpu_percent:.0f}"
    if column == "rss":
        return fmt.size(p.rss)
    if column == "time":
        return fmt.duration(None if p.start_time is None else now - p.start_time)
    if column == "flags":
        state = p.state or ("?" if p.visible else "-")
        return " ".join([state, *(FLAG_SHORT.get(f, f.upper()) for f in row.flags)])
    if column == "command":
        if row.group:
            return row.branch + (fmt.visible(p.command) if p.command else "?") + " (no GPU)"
        if p.command:
            return row.branch + fmt.visible(p.command)
        return row.branch + ("(not in this PID namespace)" if not p.visible else "?")
    raise KeyError(column)


def layout(columns: Iterable[str], width: int) -> list[tuple[Column, int]]:
    """The columns that fit ``width`` with their widths; one space between columns.

    Narrow terminals hide the least useful columns first (Column.drop) so COMMAND keeps
    at least MIN_COMMAND cells.
    """
    shown = [COLUMNS[c] for c in columns]

    def fixed(cols: list[Column]) -> int:
        return sum(c.width + 1 for c in cols if c.width)

    droppable = sorted((c for c in shown if c.drop), key=lambda c: c.drop)
    has_command = any(not c.width for c in shown)
    while droppable and width - fixed(shown) < (MIN_COMMAND if has_command else 0):
        shown.remove(droppable.pop(0))
    rest = max(width - fixed(shown), 1)
    return [(c, c.width or rest) for c in shown]
