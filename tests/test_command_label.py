"""One label for a command in every process list (issue 39.8): the main table, the
reclaim view and the kill dialog all show the script where the interpreter's directory
would not fit (`python train.py`, not `/home/alice/.ve...`)."""

from __future__ import annotations

from rich.console import Console

from gputop.analysis.orphans import ProcessFlags, Reclaimable
from gputop.ui.cells import command_label
from gputop.ui.screens.kill import KillTarget, targets_table
from gputop.ui.screens.reclaim import entry_prompt

COMMAND = "/home/alice/.venvs/llm-2024/bin/python stubborn_worker.py --queue redis://q/2"


def test_the_label_is_whole_where_it_fits_else_the_script() -> None:
    assert command_label(COMMAND, len(COMMAND)) == COMMAND
    assert command_label(COMMAND, 30).startswith("python stubborn_worker.py")
    assert command_label(COMMAND).startswith("python stubborn_worker.py")


def test_the_reclaim_view_and_kill_dialog_show_the_script() -> None:
    entry = Reclaimable(host="lab", pid=5100033, start_ticks=1, user="alice", uid=1000,
                        command=COMMAND, gpus=(3,), mem=2 << 30,
                        flags=ProcessFlags(orphan=True))
    assert "python stubborn_worker.py" in entry_prompt(entry).plain
    assert "/home/alice" not in entry_prompt(entry).plain
    target = KillTarget(host="lab", pid=5100033, start_ticks=1, user="alice",
                        command=COMMAND, gpus=(3,), gpu_mem=2 << 30)
    console = Console(width=80, record=True, color_system=None)
    console.print(targets_table([target]))
    shown = console.export_text()
    assert "python stubborn_worker" in shown and "/home/alice" not in shown, shown
