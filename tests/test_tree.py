"""The process tree: DDP workers under their launcher, data-loader workers under their
trainer, memory summed per subtree, and the dashboard's v key."""

from __future__ import annotations

from helpers.ui import SIZE, demo_app, feed_all, table_lines

from gputop.model import GpuProcess
from gputop.ui.table_model import Row, cell
from gputop.ui.tree import GROUP_GPU, tree_rows

GIB = 1 << 30


def _row(pid: int, ppid: int, gpu: int, mem: int, command: str, **extra: object) -> Row:
    proc = GpuProcess(pid=pid, gpu=gpu, ppid=ppid, gpu_mem=mem * GIB, command=command,
                      user="bob", start_ticks=pid, **extra)  # type: ignore[arg-type]
    return Row(("h", pid, pid, gpu), proc, ())


def test_workers_group_under_their_launcher_and_memory_sums() -> None:
    rows = [
        _row(11, 10, 0, 20, "python train.py --rank 0", parent_command="torchrun train.py",
             parent_user="bob"),
        _row(12, 10, 1, 20, "python train.py --rank 1", parent_command="torchrun train.py"),
        _row(30, 1, 2, 8, "python trainer.py"),
        _row(31, 30, 2, 1, "python trainer.py (loader)"),
        _row(40, 7, 3, 2, "python alone.py"),  # an only child of a non-GPU parent: no group
    ]
    out = tree_rows(rows)
    assert [(r.proc.pid, r.tree_parent) for r in out] == [
        (10, True), (11, False), (12, False), (30, False), (31, False), (40, False)]
    launcher = out[0]
    assert launcher.key == ("h", 10, None, GROUP_GPU) and launcher.proc.user == "bob"
    assert cell("gpu_mem", launcher, 0) == "Σ40.0G"
    assert cell("command", launcher, 0) == "torchrun train.py (no GPU)"
    assert cell("gpu", launcher, 0) == "" and cell("flags", launcher, 0) == ""
    assert [cell("command", r, 0) for r in out[1:3]] == [
        "├ python train.py --rank 0", "└ python train.py --rank 1"]
    assert cell("gpu_mem", out[3], 0) == "Σ9.0G"  # the trainer and its loader
    assert cell("gpu_mem", out[4], 0) == "1.0G" and out[4].branch == "└ "
    assert out[5].branch == "" and out[5].subtree_mem is None


def test_a_parent_cycle_does_not_hang() -> None:
    rows = [_row(5, 6, 0, 1, "a"), _row(6, 5, 0, 1, "b")]
    assert sorted(r.proc.pid for r in tree_rows(rows)) == [5, 6]


async def test_v_toggles_the_tree_and_group_rows_cannot_be_tagged() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.pause()
        flat = len(app.dashboard.table.rows)
        await pilot.press("v")
        rows = app.dashboard.table.rows
        assert app.dashboard.tree_view and "tree" in app.dashboard.filter_status()
        groups = [r for r in rows if r.tree_parent]
        assert len(rows) == flat + len(groups)
        # alice's orphaned worker and kernel, both adopted by her systemd --user
        adopted = next(g for g in groups if "systemd --user" in (g.proc.command or ""))
        at = rows.index(adopted)
        assert {r.proc.pid for r in rows[at + 1:at + 3]} == {5100033, 5100034}
        assert any("systemd --user (no GPU)" in line for line in table_lines(app))
        # erin's zombie data-loader under its trainer
        pids = [r.proc.pid for r in rows]
        assert pids.index(5100041) == pids.index(5100040) + 1
        assert rows[pids.index(5100041)].branch == "└ "
        app.dashboard.table.move_to(rows.index(groups[0]))
        await pilot.press("space")
        assert not app.state.tagged
        await pilot.press("v")
        assert len(app.dashboard.table.rows) == flat
