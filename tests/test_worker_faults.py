"""A fault in a worker is logged with its traceback, shown once, and the worker restarts:
the dashboard never stops collecting for good."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.feeds import QueueFeed
from helpers.ui import demo_snapshots

from gputop.ui.app import GputopApp
from gputop.ui.faults import restart_delay


class FlakyFeed(QueueFeed):
    """Raises on its first `fail` runs, then replays snapshots."""

    def __init__(self, hosts: list[str], fail: int) -> None:
        super().__init__(hosts)
        self.fail = fail
        self.runs = 0

    async def run(self, interval: float, emit: Any) -> None:
        self.runs += 1
        if self.runs <= self.fail:
            raise OSError(75, "Value too large for defined data type")
        await super().run(interval, emit)


async def _wait(pilot: Any, done: Any) -> None:
    for _ in range(400):
        if done():
            return
        await pilot.pause(0.01)
    raise AssertionError("the worker did not recover")


def test_restart_delays_double_and_stop_growing() -> None:
    assert [restart_delay(n, 1.0) for n in (1, 2, 3, 6, 60)] == [1.0, 2.0, 4.0, 30.0, 30.0]


async def test_a_feed_that_raises_is_restarted(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    snap = demo_snapshots("lab", 1)[0]
    feed = FlakyFeed([snap.host], fail=3)
    app = GputopApp([feed])
    app.restart_base_s = 0.01
    async with app.run_test(size=(120, 40)) as pilot:
        feed.put(snap)
        await _wait(pilot, lambda: app.state.snapshot is not None)
        assert feed.runs == 4
        shown = [n.message for n in app._notifications]
        assert len(shown) == 1 and "OSError" in shown[0] and "restarting" in shown[0]
    log = (tmp_path / "gputop" / "errors.log").read_text()
    assert log.count("Traceback") == 3 and "Value too large" in log


async def test_an_analysis_fault_drops_one_snapshot_not_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    first, second = demo_snapshots("lab", 2)
    feed = QueueFeed([first.host])
    app = GputopApp([feed])
    app.restart_base_s = 0.01
    history = app.analyser.history
    real = history.add
    calls = []

    def add(snap: Any) -> Any:  # the fault is injected into the first analysis step
        calls.append(snap)
        if len(calls) == 1:
            raise OverflowError("timestamp out of range")
        return real(snap)

    monkeypatch.setattr(history, "add", add)
    async with app.run_test(size=(120, 40)) as pilot:
        feed.put(first)
        feed.put(second)
        await _wait(pilot, lambda: app.state.snapshot is not None)
        assert app.state.snapshot.time == second.time
        assert any("analysis: OverflowError" in n.message for n in app._notifications)
    assert "OverflowError: timestamp out of range" in (
        tmp_path / "gputop" / "errors.log").read_text()
