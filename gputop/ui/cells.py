"""The process table's cells: which of the declared columns (gputop/columns.py) fit a
width, a plain process's cell text and a row's text.  Pure and cheap to import (no
Textual, no analysis):
the start-up skeleton (gputop/ui/skeleton.py) draws its rows with them before Textual is
loaded; the table (table_model.py, widgets/process_table.py) builds on them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich.cells import set_cell_size

from gputop.columns import COLUMNS, Column
from gputop.text import visible, without_program_dir
from gputop.ui import fmt

if TYPE_CHECKING:
    from gputop.model import GpuProcess


MIN_COMMAND = 20


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


def process_cell(column: str, p: GpuProcess, now: float) -> str:
    """A process's cell as the table shows it on a plain row (no group, tree or flags;
    table_model.cell adds those)."""
    if column == "gpu":
        return p.gpu_label  # "0:1" on MIG device 1 of card 0
    if column == "pid":
        return str(p.pid)
    if column == "user":
        return visible(p.user) if p.user else ("?" if p.visible else "-")
    if column == "type":
        return p.type
    if column == "gpu_mem":
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
        return p.state or ("?" if p.visible else "-")
    if column == "command":
        if p.command:
            return visible(p.command)
        return "(not in this PID namespace)" if not p.visible else "?"
    if column == "job":
        return visible(p.workload.label) if p.workload is not None else "-"
    raise KeyError(column)


def by_gpu_memory(p: GpuProcess) -> tuple[float, int]:
    """The table's default order (descending): GPU memory, unknown lowest, then pid."""
    return (-1.0 if p.gpu_mem is None else float(p.gpu_mem), p.pid)


def command_label(command: str, width: int | None = None) -> str:
    """A command as every process list shows it (the table, the reclaim view, the kill
    dialog): whole where it fits ``width``; else, cut, the script and its arguments rather
    than the interpreter's directory.  ``width`` None: a column whose width the layout
    decides later, narrow (the dialogs)."""
    if width is not None and len(command) <= width:
        return command
    return without_program_dir(command)


def row_text(cols: list[tuple[Column, int]], values: list[str]) -> str:
    """The cells of a row in their columns, one space apart."""
    parts = []
    for (col, width), value in zip(cols, values, strict=True):
        if col.id == "command":
            value = command_label(value, width)
        text = set_cell_size(value, width) if not col.right else right(value, width)
        parts.append(text)
    return " ".join(parts)


def right(value: str, width: int) -> str:
    value = set_cell_size(value, min(len(value), width))
    return " " * (width - len(value)) + value
