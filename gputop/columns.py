"""The process table's columns, declared once: id, title, width, alignment, the order in
which narrow terminals hide them, the direction a sort by it starts in, and whether the
table shows it when the config file names no ``columns:``.

Below the config layer, so that the config checks ``columns:`` against this registry and
the UI draws from it: a column is one entry here plus its cells in the UI
(``gputop/ui/cells.py``: a process's text; ``gputop/ui/table_model.py``: its sort key and
a folded job's cell).  No Textual, no rich: a one-shot loads it with the config.
"""

from __future__ import annotations

from gputop.records import Record, record


@record(frozen=True, slots=True)
class Column(Record):
    id: str
    title: str
    width: int  # 0: takes the rest of the line
    right: bool  # right-aligned (numbers)
    drop: int  # order in which narrow terminals hide it; 0 never
    descending: bool = False  # numbers read best biggest first; names alphabetically
    shown: bool = True  # in the default ``columns:``


# The drop order keeps what nvitop keeps at 80 columns (TYPE and TIME, COMMAND's 20
# cells beside them): RSS goes first, then CPU%, and only narrower still TYPE, then TIME.
COLUMNS: dict[str, Column] = {
    c.id: c
    for c in (
        Column("gpu", "GPU", 3, True, 0),
        Column("pid", "PID", 7, True, 0),
        Column("user", "USER", 8, False, 0),  # ps's width
        Column("type", "TYPE", 4, False, 3),
        Column("gpu_mem", "GPU-MEM", 7, True, 0, descending=True),
        Column("sm", "SM%", 4, True, 0, descending=True),
        Column("cpu", "CPU%", 5, True, 2, descending=True),
        Column("rss", "RSS", 6, True, 1, descending=True),
        Column("time", "TIME", 7, True, 4, descending=True),  # "999d23h" at most
        Column("flags", "STATE/FLAGS", 11, False, 0, descending=True),
        Column("job", "JOB", 16, False, 5),  # hidden where no process has a workload
        Column("command", "COMMAND", 0, False, 0),
    )
}

# The table's columns, in this order, when the config file names none.
DEFAULT_COLUMNS = tuple(c.id for c in COLUMNS.values() if c.shown)
