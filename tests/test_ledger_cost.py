"""Cost per user, group, Unix group and GPU model in every report format (issue 28.6),
from the policy file's rates; the hour of test_ledger_report_reading, numbers by hand."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from test_ledger_report_reading import hour  # noqa: F401 (the recorded hour)

from gputop.analysis.cost import CostRates
from gputop.cli import main
from gputop.ledger import query, report, store
from gputop.policy import PolicyError, parse_accounting

SPAN = ["--from", "2025-12-01T00:00+00:00", "--to", "2025-12-01T01:00+00:00"]
POLICY = 'cost: {per_gpu_hour: {"H100": 2.5, "A100": 1.5, default: 1.0}, currency: EUR}\n'


def test_rates_by_model() -> None:
    rates = parse_accounting(POLICY, "p.yaml").cost
    assert rates is not None
    assert rates.currency == "EUR" and rates.default == 1.0
    assert rates.model("NVIDIA H100 80GB HBM3") == "H100"
    assert rates.rate("NVIDIA A100-SXM4-80GB") == 1.5
    assert rates.rate("NVIDIA GeForce RTX 3090") == 1.0  # default
    assert rates.model(None) == "default"
    longest = CostRates({"A100": 1.5, "A100-SXM4-80GB": 2.0})
    assert longest.rate("NVIDIA A100-SXM4-80GB") == 2.0
    assert longest.rate("Tesla T4") == 0.0  # no default given: free
    for bad, words in (("cost: {per_gpu_hour: {H100: -1}}", "a rate per GPU-hour"),
                       ("cost: {per_gpu_hour: {H100: .nan}}", "a rate per GPU-hour"),
                       ("cost: {per_gpu_hour: {'=cmd()': 1}}", "not a GPU model"),
                       ("cost: {currency: '<b>'}", "a currency"),
                       ("cost: {rate: 1}", "unknown key")):
        with pytest.raises(PolicyError, match=words):
            parse_accounting(bad + "\n", "p.yaml")


def _doc(path: Path) -> dict:
    conn = store.open_reader(str(path))
    try:
        usage = query.load(conn, 1_764_547_200.0, 1_764_547_200.0 + 3600)
    finally:
        conn.close()
    rates = parse_accounting(POLICY, "p.yaml").cost
    return report.build(usage, "user", cost=rates, members={"lab": {"alice", "bob"},
                                                              "other": {"zed"}})


def test_cost_per_user_group_unix_group_and_model(hour: Path) -> None:  # noqa: F811
    doc = _doc(hour)
    by_user = {r["name"]: r["cost"] for r in doc["cost_by_user"]}
    # Card-hours held x 2.50 (both cards are H100s): alice 2 h, bob 0.5 h, carol 1 minute.
    assert by_user == {"alice": 5.0, "bob": 1.25, "carol": 0.04}
    assert {g["name"]: g["cost"] for g in doc["groups"]} == by_user
    assert doc["cost_by_unix_group"] == [{"name": "lab", "gpu_hours_charged": 2.5,
                                          "cost": 6.25}]
    # What is charged is what the users were charged (issue 38.5): bob's half hour beside
    # alice on card 1 is his, so the cards, the host, the model and the total are the
    # sums of the users' charges: 2.5 h + 1 min at 2.50 = 6.2917, rounded once.
    assert doc["cost_by_model"] == [{"model": "H100", "gpus": 2, "gpu_hours_charged": 2.517,
                                     "per_gpu_hour": 2.5, "cost": 6.29}]
    assert [g["cost"] for g in doc["gpus"]] == [2.54, 3.75]  # (1 h + 1 min), 1.5 h
    assert doc["hosts"][0]["cost"] == 6.29
    assert doc["totals"]["cost"] == doc["cost"]["total"] == 6.29
    assert doc["totals"]["gpu_hours_charged"] == 2.517
    assert doc["summary"].endswith("Cost: 6.29 EUR.")


@pytest.fixture
def policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    path.chmod(0o644)
    monkeypatch.setenv("GPUTOP_POLICY", str(path))
    return path


def test_every_format_carries_the_cost(
    hour: Path, policy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    def out(fmt: str) -> str:
        assert main(["report", "--db", str(hour), *SPAN, "--format", fmt]) == 0
        return capsys.readouterr().out

    doc = json.loads(out("json"))
    assert doc["cost_by_user"][0] == {"name": "alice", "gpu_hours_charged": 2.0,
                                     "cost": 5.0}
    text = out("text")
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "Cost per user (EUR)" in text and "Cost per GPU model (EUR)" in text
    alice = next(line for line in text.splitlines() if line.split()[1:2] == ["alice"])
    assert alice.split()[-1] == "5.00"
    md = out("md")
    assert "## Cost per GPU model (EUR)" in md and "| H100 | 2 | 2.52 | 2.50 | 6.29 |" in md
    rows = list(csv.reader(io.StringIO(out("csv"))))
    assert ["cost_by_model", "H100", "2", "2.517", "2.5", "6.29"] in rows
    assert ["totals", "cost", "6.29"] in rows and ["totals", "currency", "EUR"] in rows
    page = out("html")
    assert "<h2>Cost per user (EUR)</h2>" in page and "<td class=\"n\">5.00</td>" in page


def test_without_cost_rates_no_cost_anywhere(
    hour: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
    capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GPUTOP_POLICY", str(tmp_path / "none.yaml"))
    assert main(["report", "--db", str(hour), *SPAN, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "cost" not in doc and "cost" not in doc["groups"][0]


def test_reservations_are_billed_as_quotas_count_them_and_energy_follows_time_held(
    tmp_path: Path,
) -> None:
    # Issue 38.5, by hand. One H100 drawing 300 W all hour (0.3 kWh). alice's process
    # holds it the first 10 minutes; bob reserves it, with no process, for 4 minutes.
    from gputop.ledger.writer import Recorder
    from gputop.model import Gpu, GpuProcess, HostSnapshot, Reservation

    t0, step, gib = 1_764_547_200.0, 60.0, 1024**3
    path = tmp_path / "ledger.sqlite"
    recorder = Recorder(store.open_writer(str(path)), step, gib)
    for n in range(60):
        t = t0 + n * step
        procs = (GpuProcess(pid=11, gpu=0, gpu_mem=4 * gib, sm_util=40, user="alice",
                            start_time=t0 - 5),) if n < 10 else ()
        held = (Reservation(gpu=0, user="bob", until=t + 3600, since=t0, gpu_uuid="GPU-0"),
                ) if 30 <= n < 34 else ()
        gpu = Gpu(index=0, uuid="GPU-0", name="NVIDIA H100", util_gpu=40 if procs else 0,
                  mem_used=4 * gib if procs else 0, mem_total=80 * gib, power_draw=300.0)
        assert recorder.record(HostSnapshot(host="h", time=t, gpus=(gpu,), processes=procs,
                                            reservations=held))
    recorder.conn.close()
    conn = store.open_reader(str(path))
    try:
        charged = query.quota_hours(conn, t0, t0 + 3600)
        usage = query.load(conn, t0, t0 + 3600)
    finally:
        conn.close()
    assert charged == pytest.approx({"alice": 10 / 60, "bob": 4 / 60})
    rates = parse_accounting(POLICY, "p.yaml").cost
    doc = report.build(usage, "user", cost=rates)
    # The bill charges what the quota charges: alice 10 min, bob 4 min, at 2.50 an hour.
    assert {r["name"]: (r["gpu_hours_charged"], r["cost"]) for r in doc["cost_by_user"]} \
        == {"alice": (0.167, 0.42), "bob": (0.067, 0.17)}
    # The exact sum, 0.5833, rounded once, everywhere.
    assert doc["totals"]["cost"] == doc["hosts"][0]["cost"] == doc["gpus"][0]["cost"] == 0.58
    assert doc["cost_by_model"][0]["cost"] == 0.58
    # alice held the card a sixth of the hour: a sixth of its 0.3 kWh, not all of it.
    (alice,) = [g for g in doc["groups"] if g["name"] == "alice"]
    assert alice["energy_kwh"] == pytest.approx(0.05, abs=1e-4)
    assert doc["totals"]["energy_kwh"] == pytest.approx(0.3, abs=1e-4)
