"""The dashboard's history lines from the usage ledger: H cycles session, 24 h, 7 d."""

from __future__ import annotations

from pathlib import Path

from helpers.ui import SIZE, START, demo_app, feed_all

from gputop.ledger import store
from gputop.ledger.query import LedgerSeries
from gputop.ledger.writer import Recorder
from gputop.model import Gpu, HostSnapshot

GIB = 1 << 30
STEP = 600.0


def _ledger(path: Path) -> str:
    """Three days of host "lab": GPU 0 at 80 %, the others at 10 %, 12 of 24 GiB used."""
    recorder = Recorder(store.open_writer(str(path)), STEP, GIB)
    t = START - 3 * 86400
    while t < START:
        gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", util_gpu=80 if i == 0 else 10,
                         mem_used=12 * GIB, mem_total=24 * GIB) for i in range(4))
        assert recorder.record(HostSnapshot(host="lab", time=t, gpus=gpus))
        t += STEP
    recorder.conn.close()
    return str(path)


async def test_h_cycles_the_history_through_the_ledger(tmp_path: Path) -> None:
    app, clock = demo_app("lab")
    app.ledger_series = LedgerSeries(_ledger(tmp_path / "l.sqlite"), clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.pause()
        panel = app.dashboard.gpu_panel(0)
        assert panel is not None and panel.data is not None
        session = panel.data.span
        assert session < 3600
        # every 288 s slot of the last day; every hour the three recorded days touch (START
        # is not on the hour: 73)
        for span, label, points in ((86400.0, "util 24h", 300), (7 * 86400.0, "util 7d", 73)):
            await pilot.press("H")
            await pilot.pause()
            data = panel.data
            assert data is not None and data.span == span
            # the ledger's numbers, not the session's: 80 % all along, half the memory
            assert len(data.util_series) == points
            assert {v for _t, v in data.util_series} == {80.0}
            assert {v for _t, v in data.mem_series} == {50.0}
            assert label in panel.render().plain
        await pilot.press("H")
        await pilot.pause()
        assert panel.data is not None and panel.data.span == session


async def test_h_without_a_ledger_says_so(tmp_path: Path) -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.press("H")
        await pilot.pause()
        assert app.dashboard.history_range is None
        assert any("no usage ledger here" in n.message for n in app._notifications)
