"""Reports as a lab head reads them (issue 28.9): a user's card-hours counted once, the
per-process sum named as such, amounts with the digits they need, and an HTML report whose
charts span the data, with a colour legend.  One recorded hour, every number from its
definition here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers.ledgers import as_schema_1

from gputop.cli import main
from gputop.commands import report_html
from gputop.ledger import query, report, store
from gputop.ledger.writer import Recorder
from gputop.model import Gpu, GpuProcess, HostSnapshot

GIB = 1024**3
START = 1_764_547_200.0  # 2025-12-01 00:00 UTC, a whole hour
STEP = 60.0
TICKS = 60  # one hour
WATTS = 120.0


def _snap(tick: int) -> HostSnapshot:
    t = START + tick * STEP
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", name="NVIDIA H100 80GB HBM3",
                     util_gpu=0 if i == 0 else 60, mem_used=4 * GIB, mem_total=80 * GIB,
                     power_draw=WATTS, temp=40) for i in range(2))
    procs = [
        # alice: two idle kernels on card 0 all hour, and a busy job on card 1
        GpuProcess(pid=101, gpu=0, gpu_mem=2 * GIB, sm_util=0, user="alice", start_time=1.0),
        GpuProcess(pid=102, gpu=0, gpu_mem=2 * GIB, sm_util=0, user="alice", start_time=2.0),
        GpuProcess(pid=103, gpu=1, gpu_mem=2 * GIB, sm_util=50, user="alice", start_time=3.0),
    ]
    if tick < 30:  # bob: half an hour on card 1, beside alice
        procs.append(GpuProcess(pid=201, gpu=1, gpu_mem=2 * GIB, sm_util=30, user="bob",
                                start_time=4.0))
    if tick == 0:  # carol: one sample
        procs.append(GpuProcess(pid=301, gpu=0, gpu_mem=GIB // 2, sm_util=0, user="carol",
                                start_time=5.0))
    return HostSnapshot(host="lab-1", time=t, gpus=gpus, processes=tuple(procs))


@pytest.fixture(scope="module")
def hour(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ledger") / "hour.sqlite"
    recorder = Recorder(store.open_writer(str(path)), STEP, GIB)
    for tick in range(TICKS):
        assert recorder.record(_snap(tick))
    recorder.conn.close()
    return path


def _doc(path: Path, t_from: float = START) -> dict:
    conn = store.open_reader(str(path))
    try:
        return report.build(query.load(conn, t_from, START + 3600), "user")
    finally:
        conn.close()


def _check_card_hours(doc: dict) -> None:
    groups = {g["name"]: g for g in doc["groups"]}
    alice, bob, carol = groups["alice"], groups["bob"], groups["carol"]
    # Two cards all hour: two card-hours, though three processes held 3 process-hours.
    assert alice["gpu_hours_held"] == 2.0
    assert alice["process_gpu_hours_held"] == 3.0
    assert (alice["gpu_hours_busy"], alice["gpu_hours_held_idle"]) == (1.0, 1.0)
    assert alice["mean_sm_pct_held"] == 25.0  # 0 % on card 0, 50 % on card 1
    assert alice["processes"] == 3
    assert (bob["gpu_hours_held"], bob["process_gpu_hours_held"]) == (0.5, 0.5)
    assert (bob["gpu_hours_busy"], bob["mean_sm_pct_held"]) == (0.5, 30.0)
    assert carol["gpu_hours_held"] == round(STEP / 3600, 3)
    t = doc["totals"]
    assert t["gpu_hours_held"] == 2.0  # both cards were held all hour, by anyone
    assert t["process_gpu_hours_held"] == round(3.0 + 0.5 + STEP / 3600, 3)


def test_a_users_card_hours_count_once(hour: Path) -> None:
    _check_card_hours(_doc(hour))


def test_energy_split_shows_its_digits(hour: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _doc(hour)
    groups = {g["name"]: g for g in doc["groups"]}
    # 120 W on card 1 for an hour, split within the hour by memory held (byte-seconds):
    # bob's 2 GiB for half an hour beside alice's 2 GiB all hour is a third of it.
    assert groups["bob"]["energy_kwh"] == pytest.approx(WATTS / 1000 / 3, abs=1e-4)
    assert doc["totals"]["energy_kwh"] == pytest.approx(2 * WATTS / 1000, abs=1e-4)
    span = ["--from", "2025-12-01T00:00+00:00", "--to", "2025-12-01T01:00+00:00"]
    assert main(["report", "--db", str(hour), *span]) == 0
    text = capsys.readouterr().out
    bob = next(line for line in text.splitlines() if line.split()[1:2] == ["bob"])
    assert bob.split()[-1] == "0.04"  # not 0.0 while the total is 0.24
    carol = next(line for line in text.splitlines() if line.split()[1:2] == ["carol"])
    assert carol.split()[2] == "0.02"  # one minute is 0.017 h, not 0.0
    assert "proc GPU-h: summed per process" in text
    assert "using 0.24 kWh" in text


def test_a_schema_1_ledger_is_read_and_upgraded_with_the_same_card_hours(
    hour: Path, tmp_path: Path
) -> None:
    old = tmp_path / "old.sqlite"
    old.write_bytes(hour.read_bytes())
    as_schema_1(old)
    _check_card_hours(_doc(old))  # read as it is, without changing it
    assert not store.has_table(store.open_reader(str(old)), "holder_hourly")
    store.open_writer(str(old)).close()  # the recorder upgrades it
    reader = store.open_reader(str(old))
    assert reader.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0] == "2"
    reader.close()
    _check_card_hours(_doc(old))


def _polyline_xs(svg: str) -> list[float]:
    points = re.search(r'<polyline[^>]*points="([^"]+)"', svg)
    assert points is not None
    return [float(p.split(",")[0]) for p in points.group(1).split()]


def test_html_charts_span_the_data_and_have_a_legend(hour: Path, tmp_path: Path) -> None:
    from test_ledger_week import render_png

    week_before = START + 3600 - 7 * 86400  # the default 7-day window, one hour of data
    doc = _doc(hour, week_before)
    page = report_html.render_html(doc)
    charts = page.split("<svg")
    util, bars, heat = charts[1], charts[2], charts[3]
    xs = _polyline_xs(util)
    assert (min(xs), max(xs)) == (40.0, 940.0)  # the hour of data spans the chart
    assert report.when(START) in util and report.when(START - 7 * 86400 + 3600) not in util
    # The heatmap: a 0 % card's hour is drawn in a colour that is not the page's white,
    # and a legend from 0 % to 100 % says what the shades mean.
    assert "rgb(255,255,255)" not in heat
    zero = report_html._shade(0)
    assert f'fill="{zero}"><title>0%</title>' in heat
    assert heat.count("<rect") >= 11 and ">0%<" in heat and ">100%<" in heat
    # Bars: carol's minute is a sliver beside alice's two card-hours, labelled as such.
    widths = {}
    for name in ("alice", "carol"):
        row = bars.split(f">{name}</text>", 1)[1].split("</text>", 1)[0]
        widths[name] = sum(float(w) for w in re.findall(r'width="([\d.]+)"', row))
    assert widths["alice"] == pytest.approx(640.0, abs=0.5)
    assert widths["carol"] < 6.0
    assert ">0.02 GPU-h<" in bars
    out = tmp_path / "hour.html"
    out.write_text(page)
    assert render_png(out, tmp_path / "hour.png") == []


def test_json_names_both_figures(hour: Path, capsys: pytest.CaptureFixture[str]) -> None:
    span = ["--from", "2025-12-01T00:00+00:00", "--to", "2025-12-01T01:00+00:00"]
    assert main(["report", "--db", str(hour), *span, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    _check_card_hours(doc)
