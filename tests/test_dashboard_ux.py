"""Everyday dashboard behaviour: no surprise kills (tags hidden by a filter, cautions),
g takes the selected row's GPU, the header names the configured host."""

from __future__ import annotations

from helpers.ui import SIZE, demo_app, demo_snapshots, feed_all, plain

from gputop.model import GpuProcess
from gputop.ui.screens.kill import KillScreen, cautions, notes_text
from gputop.ui.state import row_key


def _key(app, pid):  # type: ignore[no-untyped-def]
    snap = app.state.snapshot
    return row_key(snap.host, next(p for p in snap.processes if p.pid == pid))


async def test_kill_lists_tags_a_filter_hides_and_esc_untags() -> None:
    app, _ = demo_app("lab")  # alice: a kernel on GPU 2, a worker and a kernel on GPU 3
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.pause()
        table = app.dashboard.table
        table.move_to(next(i for i, r in enumerate(table.rows) if r.proc.pid == 5100032))
        await pilot.press("space")
        await pilot.press("g")  # the selected row's GPU... now the row after the tagged one
        shown_gpu = app.state.selected_gpu
        assert shown_gpu is not None and shown_gpu != 2
        assert {r.proc.gpu for r in table.rows} == {shown_gpu}
        assert _key(app, 5100032) not in table.rows_shown()
        await pilot.press("k")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, KillScreen)
        assert [t.pid for t in dialog.targets if t.pid == 5100032] == [5100032]
        assert dialog.hidden == 1
        notes = plain(dialog.query_one("#kill-notes").render())
        assert "1 tagged process is hidden" in notes
        # the kernel's flag and its reason, and the keys
        target = next(t for t in dialog.targets if t.pid == 5100032)
        assert target.flags and any(n.startswith(target.flags[0]) for n in target.notes)
        assert "y: kill" in plain(dialog.query_one("#kill-keys").render())
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard and app.state.tagged

        await pilot.press("escape")  # tags go with the filters
        assert not app.state.tagged and app.state.selected_gpu is None
        await pilot.press("space", "space")
        assert len(app.state.tagged) == 2
        await pilot.press("U")
        assert not app.state.tagged


def test_cautions_for_display_processes_and_other_users() -> None:
    snap = demo_snapshots("lab", 1)[0]
    xorg = next(p for p in snap.processes if p.pid == 5100005)
    texts = cautions(xorg, "alice")
    assert any("display process" in t for t in texts)
    assert any("belongs to root, not to you (alice)" in t for t in texts)
    mine = GpuProcess(gpu=0, pid=1, user="alice", command="/usr/bin/python train.py")
    assert cautions(mine, "alice") == []
    shell = GpuProcess(gpu=0, pid=2, user="alice", command="/usr/bin/gnome-shell")
    assert len(cautions(shell, "alice")) == 1
    assert notes_text([], 0).plain == ""
