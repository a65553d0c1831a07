"""The dashboard's idle verdicts reach back before the session when a ledger recorded the
process: "0 % SM for 3d00h per the usage ledger", not "for 0 min as observed"."""

from __future__ import annotations

from pathlib import Path

from gputop.analysis.pipeline import Analyser, Settings
from gputop.ledger import store
from gputop.ledger.query import RecordedIdle
from gputop.ledger.writer import Recorder
from gputop.model import Gpu, GpuProcess, HostSnapshot

GIB = 1 << 30
T0 = 1_764_547_200.0
STEP = 600.0
DAYS = 3
NOW = T0 + DAYS * 86400


def _snap(t: float, busy_sm: int) -> HostSnapshot:
    start = T0 - 100
    return HostSnapshot(
        host="lab", time=t, gpus=(Gpu(index=0, uuid="GPU-0", util_gpu=busy_sm),),
        processes=(
            GpuProcess(pid=777, gpu=0, gpu_mem=20 * GIB, sm_util=0, user="alice",
                       start_time=start, start_ticks=1),
            # computed once, on day 2 at 12:00, then idle again
            GpuProcess(pid=778, gpu=0, gpu_mem=4 * GIB, user="bob", start_time=start,
                       start_ticks=2, sm_util=busy_sm),
        ))


def _ledger(tmp_path: Path) -> str:
    path = str(tmp_path / "ledger.sqlite")
    recorder = Recorder(store.open_writer(path), STEP, GIB)
    bob_busy_at = T0 + 86400 + 12 * 3600
    t = T0
    while t < NOW:
        assert recorder.record(_snap(t, 50 if t == bob_busy_at else 0))
        t += STEP
    recorder.conn.close()
    return path


def _flags(recorded: RecordedIdle | None) -> dict:
    settings = Settings()
    history = settings.history()
    history.recorded_idle = recorded
    analysed = Analyser(settings, history, lambda host: None)(_snap(NOW, 0))
    return {pid: (analysed.flags[(0, pid)], analysed.warnings) for pid in (777, 778)}


def test_idle_since_comes_from_the_ledger(tmp_path: Path) -> None:
    found = _flags(RecordedIdle(_ledger(tmp_path), clock=lambda: NOW))
    alice, warnings = found[777]
    assert alice.idle and alice.idle_recorded and alice.idle_since == T0
    reason = dict(alice.reasons)["idle"]
    assert "0 % SM for 3d00h per the usage ledger" in reason
    bob, _ = found[778]
    # bob's run began with the first sample after the one at 50 % SM
    assert bob.idle and bob.idle_since == T0 + 86400 + 12 * 3600 + STEP
    idle_warnings = [w.message for w in warnings if w.code == "idle-memory" and w.pid == 777]
    assert idle_warnings and "for 3d00h (ledger)" in idle_warnings[0]


def test_without_a_ledger_only_the_session_counts(tmp_path: Path) -> None:
    alice, _ = _flags(None)[777]
    assert not alice.idle  # one observed sample: not yet 30 minutes
    missing = RecordedIdle(str(tmp_path / "none.sqlite"), clock=lambda: NOW)
    alice, _ = _flags(missing)[777]
    assert not alice.idle


def test_a_process_the_ledger_lost_sight_of_is_not_extended(tmp_path: Path) -> None:
    later = NOW + 3600  # the recorder stopped an hour ago
    alice, _ = _flags(RecordedIdle(_ledger(tmp_path), clock=lambda: later))[777]
    assert not alice.idle
