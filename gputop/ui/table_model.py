"""The process table's rows: filtering, sorting, cell text.  Pure; no Textual.

Rows keep the GpuProcess and compute cell text only when a line is drawn, so a tick
with 2,000 processes costs a filter and a sort, not 22,000 formatted strings.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gputop.analysis import workload_groups
from gputop.analysis.health import workloads as workload_rules
from gputop.columns import COLUMNS
from gputop.model import GpuProcess
from gputop.ui import fmt
from gputop.ui.cells import by_gpu_memory, process_cell
from gputop.ui.state import RowKey

FLAG_SHORT = {"zombie": "ZOMB", "orphan": "ORPH", "idle": "IDLE", "kernel": "KERN",
              "hidden": "HID",
              "nojob": "NJOB", "foreign-gpu": "XGPU"}




@dataclass(slots=True)
class Row:
    key: RowKey
    proc: GpuProcess  # a group's row: its process with the most GPU memory
    flags: tuple[str, ...]  # orphan flag names
    group: workload_groups.Group | None = None  # a folded job / container / pod
    expanded: bool = False
    # the tree view (gputop/ui/tree.py): a parent that is not itself on a GPU, the
    # branch drawn before its command, the GPU memory of a row and all under it
    tree_parent: bool = False
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
    # job:, container: and pod: select by workload; other text as before.
    by_workload = needle.startswith(workload_groups.FILTER_PREFIXES)
    processes = tuple(processes)
    slurm_node = workload_rules.runs_jobs(processes)
    rows = []
    for proc in processes:
        if gpu is not None and proc.gpu != gpu:
            continue
        if mine is not None and proc.user != mine:
            continue
        if user is not None and proc.user != user:
            continue
        if by_workload:
            if not workload_groups.matches(proc, needle):
                continue
        elif needle and needle not in (proc.command or "").lower() and needle not in (
            proc.user or ""
        ).lower() and needle not in _job_text(proc):
            continue
        names = _flags_of(flags.get(proc.key)) + workload_rules.flags(proc, slurm_node)
        rows.append(Row((host, proc.pid, proc.start_ticks, proc.gpu), proc, names))
    return rows


def _job_text(proc: GpuProcess) -> str:
    return proc.workload.label.lower() if proc.workload is not None else ""


def shown_columns(columns: tuple[str, ...], processes: Iterable[GpuProcess]) -> tuple[str, ...]:
    """The configured columns, without JOB where no process has a workload (most hosts)."""
    if "job" in columns and not any(p.workload is not None for p in processes):
        return tuple(c for c in columns if c != "job")
    return columns


def group_key(host: str, group: workload_groups.Group) -> RowKey:
    """A group's row key: never a real process's (pid <= 0, gpu -1)."""
    return (host, -(zlib.crc32(group.label.encode()) + 1), None, -1)


def fold_rows(host: str, rows: list[Row], expanded: set[RowKey]) -> list[Row]:
    """Sorted rows folded into one line per workload, in the order of each one's first
    row; an expanded group's processes follow its line."""
    groups = workload_groups.group(r.proc for r in rows)
    by_key = {g.key: g for g in groups}
    members: dict[tuple[str, str] | None, list[Row]] = {}
    order: list[tuple[str, str] | None] = []
    for row in rows:
        w = row.proc.workload
        gkey = w.group_key if w is not None else None
        if gkey not in members:
            members[gkey] = []
            order.append(gkey)
        members[gkey].append(row)
    out: list[Row] = []
    for wkey in order:
        group = by_key[wkey]
        key = group_key(host, group)
        is_open = key in expanded
        out.append(Row(key, members[wkey][0].proc, (), group, is_open))
        if is_open:
            out.extend(members[wkey])
    return out


def _num(value: float | None) -> float:
    # Unknown values sort below every known one, in either direction they stay together.
    return -1.0 if value is None else float(value)


SORT_KEYS: dict[str, Callable[[Row, float], Any]] = {
    "gpu": lambda r, now: (r.proc.gpu, _num(r.proc.mig_device), r.proc.pid),
    "pid": lambda r, now: r.proc.pid,
    "user": lambda r, now: (r.proc.user or "", r.proc.pid),
    "type": lambda r, now: (r.proc.type, r.proc.pid),
    "gpu_mem": lambda r, now: by_gpu_memory(r.proc),
    "sm": lambda r, now: (_num(r.proc.sm_util), r.proc.pid),
    "cpu": lambda r, now: (_num(r.proc.cpu_percent), r.proc.pid),
    "rss": lambda r, now: (_num(r.proc.rss), r.proc.pid),
    # Running time: the oldest start first when sorted descending.
    "time": lambda r, now: (-(r.proc.start_time if r.proc.start_time is not None else now),
                            r.proc.pid),
    "flags": lambda r, now: (len(r.flags), r.flags, r.proc.state or "", r.proc.pid),
    "command": lambda r, now: ((r.proc.command or "").lower(), r.proc.pid),
    "job": lambda r, now: (_job_text(r.proc), r.proc.pid),
}

DESCENDING_BY_DEFAULT = frozenset(c.id for c in COLUMNS.values() if c.descending)


def sort_rows(rows: list[Row], column: str, reverse: bool, now: float) -> list[Row]:
    key = SORT_KEYS[column]
    return sorted(rows, key=lambda r: key(r, now), reverse=reverse)


def cell(column: str, row: Row, now: float) -> str:
    if row.group is not None:
        return _group_cell(column, row, now)
    p = row.proc
    if row.tree_parent and column not in ("pid", "user", "gpu_mem", "command"):
        return ""
    if column == "gpu_mem" and row.subtree_mem is not None:
        return "Σ" + fmt.size(row.subtree_mem)
    if column == "flags":
        state = process_cell("flags", p, now)
        return " ".join([state, *(FLAG_SHORT.get(f, f.upper()) for f in row.flags)])
    if column == "command":
        if row.tree_parent:
            return row.branch + (fmt.visible(p.command) if p.command else "?") + " (no GPU)"
        return row.branch + process_cell("command", p, now)
    return process_cell(column, p, now)


def _group_cell(column: str, row: Row, now: float) -> str:
    group = row.group
    assert group is not None
    procs = group.processes
    if column == "gpu":
        return "-" if row.expanded else "+"
    if column == "pid":
        return f"{len(group.pids)}p"
    if column == "user":
        w = group.workload
        users = {p.user for p in procs if p.user}
        user = (w.user if w is not None and w.user else None) or (
            users.pop() if len(users) == 1 else None)
        return fmt.visible(user) if user else "*"
    if column == "gpu_mem":
        return fmt.size(group.gpu_mem)
    if column == "sm":
        # Per card in use, so a 4-GPU job at full speed reads 100, like one process.
        return str(round(group.sm_util / max(len(group.gpus), 1)))
    if column == "cpu":
        return f"{sum(p.cpu_percent or 0.0 for p in procs):.0f}"
    if column == "rss":
        return fmt.size(sum(p.rss or 0 for p in {p.pid: p for p in procs}.values()))
    if column == "time":
        starts = [p.start_time for p in procs if p.start_time is not None]
        return fmt.duration(now - min(starts) if starts else None)
    if column in ("type", "flags"):
        return ""
    if column == "job":
        return fmt.visible(group.label)
    if column == "command":
        w = group.workload
        gpus = ",".join(str(g) for g in group.gpus)
        name = f" {w.name}" if w is not None and w.name else ""
        what = "no job" if w is None else group.label
        count = len(group.pids)
        return fmt.visible(f"{what}{name}: GPUs {gpus}, {count} process{'es' if count > 1 else ''}")
    raise KeyError(column)
