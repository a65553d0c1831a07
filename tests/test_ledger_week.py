"""A simulated week recorded in seconds, then every report number checked against the
scenario's own definition (computed here, not read back from the ledger)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from gputop.cli import main
from gputop.ledger import query, report, store
from gputop.ledger.writer import Recorder, expire_raw
from gputop.model import HostSnapshot
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector

MIB = 1024 * 1024
GIB = 1024 * MIB
HOUR = 3600
STEP = 300.0  # five-minute intervals: a week is 2016 of them
START = 1_764_547_200.0  # 2025-12-01 00:00 UTC, a whole hour
WEEK_H = 168
IDLE_MEM = GIB

# (pid, user, gpu, MiB, SM %, first hour, last hour (exclusive))
PROCS = [
    (4101, "alice", 0, 20480, 0, 10, 60),  # the forgotten kernel: 50 h held idle
    (4102, "bob", 1, 10240, 60, 0, 100),
    (4103, "carol", 0, 8192, 40, 100, 130),
]
XID_HOUR = 20  # an XID 79 on GPU 1


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


def _sim_mem(mib: int, sm: int) -> int:
    # The simulator grows a process's memory a little with its activity (library.py).
    return int(mib * (0.97 + 0.03 * sm / 100.0)) * MIB


def record_week(path: Path) -> None:
    clock = Clock()
    nvml = sim.SimNvml(sim.synthetic_scenario(gpus=2, processes=0, name="week"), clock=clock)
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="lab-1", demo=True, clock=clock)
    recorder = Recorder(store.open_writer(str(path)), STEP, IDLE_MEM)
    for tick in range(WEEK_H * HOUR // int(STEP)):
        hour = tick * STEP / HOUR
        for pid, user, gpu, mib, sm, first, last in PROCS:
            if hour == first:
                # started a second before the sample, so that its first one has SM %
                nvml.add_process(pid, user, f"python job-{user}.py", {gpu: mib}, (sm, sm),
                                 age=1.0)
            elif hour == last:
                nvml.remove_process(pid)
        if hour == XID_HOUR:
            nvml.add_xid(1, 79, at=clock.now - 1)
        assert recorder.record(HostSnapshot.from_dict(collector.collect()))
        clock.now += STEP
    recorder.conn.close()


@pytest.fixture(scope="module")
def week(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ledger") / "week.sqlite"
    record_week(path)
    return path


def _doc(path: Path) -> dict:
    conn = store.open_reader(str(path))
    try:
        return report.build(query.load(conn, START, START + WEEK_H * HOUR), "user")
    finally:
        conn.close()


def _check_week(doc: dict) -> None:
    assert doc["idle_mem_bytes"] == IDLE_MEM  # the recorder's threshold, kept in the file
    groups = {g["name"]: g for g in doc["groups"]}
    assert set(groups) == {"alice", "bob", "carol"}
    for _pid, user, _gpu, mib, sm, first, last in PROCS:
        g = groups[user]
        hours = float(last - first)
        assert g["gpu_hours_held"] == hours
        assert g["gpu_hours_busy"] == (hours if sm else 0.0)
        assert g["gpu_hours_held_idle"] == (0.0 if sm else hours)
        assert g["mean_sm_pct_held"] == float(sm)
        assert g["peak_mem_bytes"] == _sim_mem(mib, sm)
        assert g["processes"] == 1
    assert [g["name"] for g in doc["groups"]] == ["bob", "alice", "carol"]  # by GPU-hours held
    assert [g["rank"] for g in doc["groups"]] == [1, 2, 3]

    worst = doc["idle_holds"]
    assert [(w["user"], w["pid"], w["gpu"], w["idle_hours"]) for w in worst] == [
        ("alice", 4101, 0, 50.0)]

    gpus = {g["gpu"]: g for g in doc["gpus"]}
    # GPU 0: carol busy 30 h, alice idle-held 50 h, free the rest; GPU 1: bob busy 100 h.
    assert gpus[0]["hours_recorded"] == gpus[1]["hours_recorded"] == float(WEEK_H)
    assert (gpus[0]["gpu_hours_busy"], gpus[0]["gpu_hours_held_idle"],
            gpus[0]["gpu_hours_free"]) == (30.0, 50.0, 88.0)
    assert (gpus[1]["gpu_hours_busy"], gpus[1]["gpu_hours_held_idle"],
            gpus[1]["gpu_hours_free"]) == (100.0, 0.0, 68.0)
    assert gpus[0]["busy_pct"] == round(100 * 30 / WEEK_H, 1)
    assert gpus[0]["held_idle_pct"] == round(100 * 50 / WEEK_H, 1)
    assert (gpus[0]["xids"], gpus[1]["xids"]) == (0, 1)
    host = doc["hosts"][0]
    assert host["host"] == "lab-1" and host["gpus"] == 2
    assert host["held_idle_pct"] == round(100 * 50 / (2 * WEEK_H), 1)

    t = doc["totals"]
    assert (t["gpu_hours_recorded"], t["gpu_hours_busy"], t["gpu_hours_held_idle"]) == (
        2.0 * WEEK_H, 130.0, 50.0)
    assert (t["processes"], t["users"], t["xids"]) == (3, 3, 1)

    # Energy: the simulated H100 draws 70 W idle, (70 + (0.92 * 700 - 70) * util) loaded,
    # within +-2 % of jitter; each process is alone on its card, so it gets all of it.
    idle_w, load_w = 70.0, 0.92 * 700
    for user, hours, util in (("alice", 50, 0), ("bob", 100, 60), ("carol", 30, 40)):
        watts = idle_w + (load_w - idle_w) * util / 100
        assert groups[user]["energy_kwh"] == pytest.approx(watts * hours / 1000, rel=0.021)


def test_week_report_numbers_match_the_scenario(week: Path) -> None:
    _check_week(_doc(week))


def test_expiring_raw_samples_keeps_the_numbers(week: Path, tmp_path: Path) -> None:
    copy = tmp_path / "rolled.sqlite"
    copy.write_bytes(week.read_bytes())
    conn = store.open_writer(str(copy))
    assert expire_raw(conn, START + 5 * 24 * HOUR) > 0  # the first five days
    (left,) = conn.execute("SELECT MIN(t0) FROM proc_samples").fetchone()
    conn.close()
    assert left >= START + 5 * 24 * HOUR
    rolled = _doc(copy)
    _check_week(rolled)
    assert rolled["hourly"] == _doc(week)["hourly"]


def test_report_command_json_and_text(week: Path, capsys: pytest.CaptureFixture[str]) -> None:
    span = ["--from", "2025-12-01T00:00+00:00", "--to", "2025-12-08T00:00+00:00"]
    assert main(["report", "--db", str(week), *span, "--format", "json"]) == 0
    _check_week(json.loads(capsys.readouterr().out))
    assert main(["report", "--db", str(week), *span]) == 0
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "50.0" in text and "alice" in text
    assert main(["report", "--db", str(week), *span, "--by", "gpu", "--format", "csv"]) == 0
    csv_text = capsys.readouterr().out
    assert "groups,1,lab-1:1,100.0,100.0,0.0,60.0" in csv_text


# -- the HTML report, rendered by a real headless browser --------------------------------------


def _browser() -> str:
    import shutil

    for name in ("chromium-headless-shell", "/usr/lib/chromium/chromium-headless-shell"):
        found = shutil.which(name)
        if found:
            return found
    reason = "chromium-headless-shell missing (make test installs it: scripts/ensure-chromium.sh)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)  # under CI a real part must be there
    pytest.skip(reason)


def render_png(html_file: Path, png: Path) -> list[str]:
    """Screenshot ``html_file``; returns the page's console messages (our pages have no
    scripts, so any message is a failed load or an error)."""
    run = subprocess.run(
        [_browser(), "--no-sandbox", "--headless", "--disable-gpu", "--hide-scrollbars",
         f"--screenshot={png}", "--window-size=1200,2000", "--enable-logging=stderr", "--v=0",
         html_file.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return [line for line in run.stderr.splitlines() if ":CONSOLE" in line]


def test_console_messages_are_caught(tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text('<p>x</p><script>console.error("boom")</script><img src="nowhere.png">')
    messages = render_png(page, tmp_path / "bad.png")
    assert any("boom" in m for m in messages)


def test_html_report_is_self_contained_and_renders_cleanly(week: Path, tmp_path: Path) -> None:
    out = tmp_path / "week.html"
    span = ["--from", "2025-12-01T00:00+00:00", "--to", "2025-12-08T00:00+00:00"]
    assert main(["report", "--db", str(week), *span, "--format", "html", "--out", str(out)]) == 0
    page = out.read_text()
    for outside in ("<script", "<link", "src=", "url(", "@import", "@font-face"):
        assert outside not in page
    assert page.count("<svg") == 3 and "alice" in page and "50.0" in page
    png = tmp_path / "week.png"
    assert render_png(out, png) == []
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1200, 2000)
    assert len(data) > 20_000  # charts and tables, not a blank page
