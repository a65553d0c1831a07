"""Past usage from CSV in the ledger's own columns (issue 38.8): a simulated month built
without writing tables by hand, read back by quotas, fair share and the bill, every
number by hand; hostile files are one line, exit 2, nothing written."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gputop.analysis.fair_share import decayed_hours
from gputop.cli import main
from gputop.ledger import importer, query, share_usage, store

H0 = 491_000  # an epoch hour (2026-01-05 08:00 UTC)
HEADER = ",".join(importer.COLUMNS)


def _month(path: Path) -> None:
    """30 days: alice on card 0 of node1 8 hours a day, bob on card 1 of node2 2 hours a
    day at half busy; bob also reserved node1's card 1 one hour on day 0."""
    lines = [HEADER]
    for day in range(30):
        for h in range(8):
            hour = H0 + 24 * day + h
            for kind, name in (("user", "alice"), ("quota", "alice"), ("card", "")):
                lines.append(f"node1,0,GPU-a0,NVIDIA H100,{hour},{kind},{name},3600,3600,0,"
                             "324000")
        for h in range(2):
            hour = H0 + 24 * day + h
            for kind, name in (("user", "bob"), ("quota", "bob"), ("card", "")):
                lines.append(f"node2,1,GPU-b1,NVIDIA A100,{hour},{kind},{name},3600,1800,0,"
                             "90000")
    lines.append(f"node1,1,GPU-a1,NVIDIA H100,{H0},quota,bob,3600,0,0,0")
    path.write_text("\n".join(lines) + "\n")


def test_a_month_imported_is_what_quotas_fair_share_and_bills_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data, db = tmp_path / "month.csv", tmp_path / "ledger.sqlite"
    _month(data)
    assert main(["record", "--db", str(db), "--import", str(data)]) == 0
    assert "imported 901 rows" in capsys.readouterr().err  # 30 x (8 x 3 + 2 x 3) + 1
    t0, t1 = H0 * 3600.0, (H0 + 30 * 24) * 3600.0
    conn = store.open_reader(str(db))
    try:
        assert query.quota_hours(conn, t0, t1) == {"alice": 240.0, "bob": 61.0}
        usage = query.load(conn, t0, t1)
    finally:
        conn.close()
    assert sum(g.recorded_s for g in usage.gpus) == (240 + 60) * 3600.0
    # Fair share decays the same charged hours: a half life of 7 days, read at the end.
    uses = share_usage.uses(str(db), t0)
    hours = decayed_hours(uses, t1, 7 * 86400.0)
    # alice's 8 hours a day, each day's weight 2^-(age/7d) at each hour's middle.
    alice = sum(2 ** -((t1 - ((H0 + 24 * d + h) * 3600 + 1800)) / (7 * 86400.0))
                for d in range(30) for h in range(8))
    assert hours["alice"] == pytest.approx(alice, rel=1e-9)
    policy = tmp_path / "policy.yaml"
    policy.write_text('cost: {per_gpu_hour: {"H100": 2.0, "A100": 1.0}, currency: EUR}\n')
    policy.chmod(0o644)
    monkeypatch.setenv("GPUTOP_POLICY", str(policy))
    assert main(["report", "--db", str(db), "--from", "2026-01-05T08:00+00:00",
                 "--to", "2026-02-04T08:00+00:00", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_user = {r["name"]: (r["gpu_hours_charged"], r["cost"]) for r in doc["cost_by_user"]}
    # alice 240 h x 2.00; bob 60 h x 1.00 on the A100 and his reserved H100 hour x 2.00.
    assert by_user == {"alice": (240.0, 480.0), "bob": (61.0, 62.0)}
    assert doc["totals"]["cost"] == 542.0


@pytest.mark.parametrize(("line", "words"), [
    ("node1,0,GPU-a0,H100,491000,quota,alice,3601,0,0,0", "column 'dur': seconds in 0..3600"),
    ("node1,0,GPU-a0,H100,491000,boss,alice,60,0,0,0", "column 'kind': one of"),
    ("node1,0,GPU-a0,H100,-5,quota,alice,60,0,0,0", "column 'hour': a whole number"),
    ("node1,0,GPU-a0,H100,491000,quota,alice,60,61,0,0", "column 'busy_s': more than 'dur'"),
    ("node1,0,GPU-a0,H100,491000,quota,al\x1bice,60,0,0,0", "column 'name': text of"),
    ("node1,0,GPU-a0,H100,491000,card,alice,60,0,0,0", "empty exactly for kind card"),
    ("node1,0,GPU-a0,H100,491000,quota,alice,nan,0,0,0", "column 'dur': seconds"),
    ("node1,0,GPU-a0,H100,491000,quota,alice", "7 fields, 11 expected"),
])
def test_a_bad_row_is_one_line_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, words: str
) -> None:
    data, db = tmp_path / "bad.csv", tmp_path / "ledger.sqlite"
    good = "node1,0,GPU-a0,H100,491000,quota,alice,60,0,0,0"
    data.write_text(f"{HEADER}\n{good}\n{line}\n")
    assert main(["record", "--db", str(db), "--import", str(data)]) == 2
    err = capsys.readouterr().err
    assert f"{data}:3: " in err and words in err and "Traceback" not in err
    conn = store.open_reader(str(db))
    try:
        assert query.quota_hours(conn, 0, 1e12) == {}  # the good row went back too
    finally:
        conn.close()


def test_the_header_names_the_ledgers_columns(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "x.csv"
    with data.open("w", newline="") as handle:
        csv.writer(handle).writerow(["user", "hours"])
    assert main(["record", "--db", str(tmp_path / "l.sqlite"), "--import", str(data)]) == 2
    assert f"{data}:1: the header must be {HEADER}" in capsys.readouterr().err
