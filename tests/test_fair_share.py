"""Fair share for `gputop run`: the decay arithmetic over a simulated month (every number
checked against the closed form of its geometric series), the ledger's GPU time per user
from a real ledger file, the policy key, and the line's order and reasons."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest
from helpers.ledgers import as_schema_1

from gputop.analysis import fair_share, queue_plan
from gputop.analysis.fair_share import Use, decayed_hours, fractions, weight
from gputop.analysis.queue_plan import Policy, plan
from gputop.ledger import query, share_usage, store
from gputop.ledger.writer import Recorder
from gputop.model import Gpu, GpuProcess, HostSnapshot, QueueJob, Reservation
from gputop.policy import PolicyError, parse_policy

DAY = 86400.0
HALF = 7 * DAY
NOW = 1_764_680_000.0 + 12 * 3600  # noon of "day 30"
GIB = 1024**3


def _geometric(first_age_days: int, last_age_days: int) -> float:
    """Sum of 2 ** (-k / 7) for k = first..last: the closed form a_1 (1 - r^n) / (1 - r)."""
    r = 2 ** (-1 / 7)
    n = last_age_days - first_age_days + 1
    return float(r ** first_age_days * (1 - r ** n) / (1 - r))


def _month() -> list[Use]:
    """30 days of a lab: alice 8 GPU-h every day; bob 24 GPU-h a day in the first ten
    days only; carol 2 GPU-h a day in the last ten; each day's use at noon."""
    uses = []
    for day in range(30):  # day 0 is 30 days before NOW, day 29 one day before
        t = NOW - (30 - day) * DAY
        uses.append(Use("alice", t, 8 * 3600.0))
        if day < 10:
            uses.append(Use("bob", t, 24 * 3600.0))
        if day >= 20:
            uses.append(Use("carol", t, 2 * 3600.0))
    return uses


def test_a_gpu_hour_counts_half_after_each_half_life() -> None:
    assert weight(0, HALF) == 1.0
    assert weight(HALF, HALF) == 0.5
    assert weight(2 * HALF, HALF) == 0.25
    assert weight(-DAY, HALF) == 1.0  # a clock step: the future counts as now
    assert decayed_hours([Use("bob", NOW - HALF, 100 * 3600.0),
                          Use("bob", NOW - 2 * HALF, 100 * 3600.0)], NOW, HALF) == {
        "bob": 75.0}
    with pytest.raises(ValueError, match="half-life"):
        decayed_hours([], NOW, 0.0)


def test_a_simulated_month_every_number_checked() -> None:
    hours = decayed_hours(_month(), NOW, HALF)
    # alice: ages 1..30 days, 8 GPU-h each.
    assert math.isclose(hours["alice"], 8 * _geometric(1, 30), rel_tol=1e-12)
    # bob: days 0..9, ages 30..21 days, 24 GPU-h each.
    assert math.isclose(hours["bob"], 24 * _geometric(21, 30), rel_tol=1e-12)
    # carol: days 20..29, ages 10..1 days, 2 GPU-h each.
    assert math.isclose(hours["carol"], 2 * _geometric(1, 10), rel_tol=1e-12)
    # The same to two decimals, from r = 2^(-1/7) = 0.9057...: alice 8 r (1 - r^30) /
    # (1 - r) = 72.92; bob 24 r^21 (1 - r^10) / (1 - r) = 20.00; carol 2 r (1 - r^10) /
    # (1 - r) = 12.08. As r^21 = 1/8, bob's is carol's times 24 / 8 / (2 r) = 3 / (2 r).
    assert [round(hours[u], 2) for u in ("alice", "bob", "carol")] == [72.92, 20.0, 12.08]
    assert math.isclose(hours["bob"] / hours["carol"], 3 / (2 * 2 ** (-1 / 7)))
    parts = fractions(hours)
    total = hours["alice"] + hours["bob"] + hours["carol"]
    assert math.isclose(sum(parts.values()), 1.0)
    assert all(math.isclose(parts[u], hours[u] / total) for u in hours)
    # Undecayed, bob used most (240 GPU-h against alice's 240 and carol's 20); decayed,
    # his old burst counts least but carol's: carol, bob, alice.
    assert sum(u.gpu_seconds for u in _month() if u.user == "bob") / 3600 == 240.0
    jobs = [QueueJob(id=f"0000000{i}", user=u, submitted=NOW - 100 + i)
            for i, u in enumerate(["alice", "bob", "carol", "dave"])]
    policy = Policy(fair_share_half_life_s=HALF)
    order = [j.user for j in queue_plan.ordered(jobs, policy, hours)]
    assert order == ["dave", "carol", "bob", "alice"]  # dave never used a GPU: 0
    # Without fair share in the policy, arrival alone.
    assert [j.user for j in queue_plan.ordered(jobs, Policy(), hours)] == [
        "alice", "bob", "carol", "dave"]
    # Priority still comes first.
    urgent = [*jobs[:3], QueueJob(id="00000009", user="alice", submitted=NOW,
                                  priority="high")]
    assert queue_plan.ordered(urgent, policy, hours)[0].id == "00000009"
    # Ten days later, with no more use, each number is halved ten/seven times over.
    later = decayed_hours(_month(), NOW + 10 * DAY, HALF)
    assert all(math.isclose(later[u], hours[u] * 2 ** (-10 / 7)) for u in hours)


def test_the_line_says_each_waiting_jobs_share_and_why() -> None:
    hours = {"alice": 72.92, "bob": 19.69}
    gpus = (Gpu(index=0, uuid="GPU-0", mem_total=1 << 34, mem_used=0, util_gpu=0),)
    held = Reservation(gpu=0, user="zed", until=NOW + 3600, since=NOW - 60)
    jobs = (QueueJob(id="aaaaaaaa", user="alice", submitted=NOW - 300),
            QueueJob(id="bbbbbbbb", user="bob", submitted=NOW - 200),
            QueueJob(id="cccccccc", user="carol", submitted=NOW - 100))
    snap = HostSnapshot(host="node", time=NOW, gpus=gpus, queue=jobs, reservations=(held,))
    policy = Policy(fair_share_half_life_s=HALF)
    assert plan(snap, policy, NOW, usage=hours).position == {
        "cccccccc": 1, "bbbbbbbb": 2, "aaaaaaaa": 3}
    rows = {r["user"]: r for r in queue_plan.listing(snap, policy, NOW, hours)}
    assert rows["carol"]["share"] == {
        "gpu_hours": 0.0, "fraction": 0.0,
        "why": "carol used 0.0 GPU-h recently (half-life 7d00h), 0 % of the host's; ahead of"
               " earlier jobs of alice (72.9), bob (19.7)"}
    assert rows["bob"]["share"]["fraction"] == round(19.69 / (72.92 + 19.69), 4)
    assert rows["bob"]["share"]["why"] == (
        "bob used 19.7 GPU-h recently (half-life 7d00h), 21 % of the host's; ahead of earlier"
        " jobs of alice (72.9); behind later jobs of carol (0.0)")
    assert rows["alice"]["share"]["why"].endswith(
        "79 % of the host's; behind later jobs of bob (19.7), carol (0.0)")
    assert all(r["share"] is None for r in queue_plan.listing(snap, Policy(), NOW, hours))


STEP = 900.0  # the recorder's interval in the ledgers below


def _ledger(path: Path, rows: list[tuple[str, int, int, float]],
            reserved: Sequence[tuple[str, int, int, float]] = ()) -> None:
    """A real ledger file, written by the recorder's own writer from snapshots every STEP
    seconds: each row of ``rows`` (user, card, hour, seconds) is a process of that user on
    that card from the start of that hour for that long; each of ``reserved`` a
    reservation of the card for that long.  Every hour named is sampled whole, so each
    sample stands for STEP seconds (a gap of hours is a pause in recording)."""
    assert all(seconds % STEP == 0 for *_, seconds in [*rows, *reserved])
    procs = [(GpuProcess(pid=1000 + n, gpu=gpu, gpu_mem=GIB, sm_util=50, user=user,
                         start_time=hour * 3600.0 - n), hour * 3600.0, hour * 3600.0 + seconds)
             for n, (user, gpu, hour, seconds) in enumerate(rows)]
    held = [Reservation(gpu=gpu, user=user, since=hour * 3600.0, until=hour * 3600.0 + seconds)
            for user, gpu, hour, seconds in reserved]
    hours = sorted({hour for _, _, hour, _ in [*rows, *reserved]})
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", util_gpu=50, mem_used=GIB, mem_total=80 * GIB)
                 for i in range(2))
    recorder = Recorder(store.open_writer(str(path)), STEP, GIB)
    for t in [hour * 3600.0 + k * STEP for hour in hours for k in range(int(3600 // STEP))]:
        assert recorder.record(HostSnapshot(
            host="node", time=t, gpus=gpus,
            processes=tuple(p for p, a, b in procs if a <= t < b),
            reservations=tuple(r for r in held if r.since <= t < r.until)))
    recorder.conn.close()


def test_the_ledgers_card_hours_count_once_per_card_and_hour(tmp_path: Path) -> None:
    hour = int((NOW - HALF) // 3600)  # a week before NOW
    path = tmp_path / "ledger.sqlite"
    _ledger(path, [("alice", 0, hour, 3600.0), ("alice", 0, hour, 1800.0),  # one card
                   ("alice", 1, hour, 3600.0), ("bob", 0, hour - 24 * 7, 1800.0),
                   ("eve", 0, hour - 24 * 7 * 11, 3600.0)],  # beyond ten half-lives
            # Reservations count as quotas count them: carol's half hour on card 1 held
            # with nothing on it; alice's reserved card 0, on which she runs, once.
            reserved=[("carol", 1, hour, 1800.0), ("alice", 0, hour, 3600.0)])
    hours, warning = share_usage.recent_hours(str(path), HALF, NOW)
    assert warning is None
    mid = hour * 3600 + 1800  # the hour's use counts at its middle
    assert math.isclose(hours["alice"], 2 * weight(NOW - mid, HALF))
    assert math.isclose(hours["bob"], 0.5 * weight(NOW - mid + HALF, HALF))
    assert math.isclose(hours["carol"], 0.5 * weight(NOW - mid, HALF))
    assert "eve" not in hours
    assert set(hours) == {"alice", "bob", "carol"}
    missing, why = share_usage.recent_hours(str(tmp_path / "none.sqlite"), HALF + 1, NOW)
    assert missing == {} and why is not None and "first come, first served" in why


def test_fair_share_and_quotas_count_the_same_gpu_hours(tmp_path: Path) -> None:
    # One fact: undecayed, fair share's hours of a period are `gputop quota`'s.
    hour = int(NOW // 3600) - 48
    path = tmp_path / "ledger.sqlite"
    _ledger(path, [("alice", 0, hour, 2700.0), ("alice", 0, hour, 900.0),
                   ("alice", 1, hour + 1, 3600.0), ("bob", 1, hour, 1800.0),
                   ("bob", 0, hour + 5, 900.0)],
            reserved=[("bob", 1, hour, 3600.0), ("carol", 0, hour + 3, 2700.0)])
    since = hour * 3600.0
    undecayed: dict[str, float] = {}
    for use in share_usage.uses(str(path), since):
        undecayed[use.user] = undecayed.get(use.user, 0.0) + use.gpu_seconds / 3600
    conn = store.open_reader(str(path))
    try:
        assert query.quota_hours(conn, since, math.inf) == undecayed
        # Counted here from the rows above: alice 0.75 h (card 0; her second process
        # shares the first's quarter-hours) + 1 h (card 1); bob 1 h reserved on card 1
        # (his half hour of running there inside it) + 0.25 h; carol 0.75 h reserved.
        assert undecayed == {"alice": 1.75, "bob": 1.25, "carol": 0.75}
        # Hour-resolved, for the decay: each use at the middle of its own hour.
        assert sorted((u.user, u.t, u.gpu_seconds) for u in share_usage.uses(str(path), since)) == [
            ("alice", since + 1800, 2700.0), ("alice", since + 3600 + 1800, 3600.0),
            ("bob", since + 1800, 3600.0), ("bob", since + 5 * 3600 + 1800, 900.0),
            ("carol", since + 3 * 3600 + 1800, 2700.0)]
        # A later start leaves the earlier hours out of both.
        assert query.quota_hours(conn, since + 3600, math.inf) == {
            "alice": 1.0, "bob": 0.25, "carol": 0.75}
        assert {u.user for u in share_usage.uses(str(path), since + 3600)} == {
            "alice", "bob", "carol"}
    finally:
        conn.close()


def test_a_schema_1_ledger_counts_through_its_backfill(tmp_path: Path) -> None:
    # A ledger from before holder_hourly (no reservations then), read as it is: the
    # processes' hours backfilled by store.HOLDERS_FROM_PROCS, as quotas read it.
    hour = int(NOW // 3600) - 24
    path = tmp_path / "old.sqlite"
    _ledger(path, [("alice", 0, hour, 3600.0), ("alice", 0, hour, 1800.0),
                   ("alice", 1, hour + 1, 1800.0), ("bob", 1, hour, 3600.0)])
    as_schema_1(path)
    hours, warning = share_usage.recent_hours(str(path), HALF, NOW)
    assert warning is None
    mid = hour * 3600 + 1800
    assert math.isclose(hours["alice"], weight(NOW - mid, HALF)
                        + 0.5 * weight(NOW - mid - 3600, HALF))
    assert math.isclose(hours["bob"], weight(NOW - mid, HALF))
    reader = store.open_reader(str(path))
    try:
        assert not store.has_table(reader, "holder_hourly")  # read, not upgraded
        assert query.quota_hours(reader, hour * 3600.0, math.inf) == {"alice": 1.5, "bob": 1.0}
    finally:
        reader.close()


def test_the_policy_key() -> None:
    policy = parse_policy("fair_share: {half_life: 7d}\n", "p.yaml")
    assert policy.fair_share_half_life_s == HALF and policy.fair_share_ledger is None
    other = parse_policy("fair_share: {half_life: 36h, ledger: /srv/l.sqlite}\n", "p.yaml")
    assert other.fair_share_half_life_s == 36 * 3600 and other.fair_share_ledger == "/srv/l.sqlite"
    for text, problem in [("fair_share: {half_life: 1m}\n", "p.yaml:1: key 'fair_share.half_life'"
                           ": expected 1h..365d"),
                          ("fair_share: {}\n", "p.yaml:1: key 'fair_share': needs 'half_life'"),
                          ("fair_share: {half_life: 7d, ledger: rel}\n", "expected an absolute"),
                          ("fair_share: {half_life: 7d, weight: 2}\n", "weight")]:
        with pytest.raises(PolicyError, match=problem.replace("(", r"\(").replace(".", r"\.")):
            parse_policy(text, "p.yaml")
    assert fair_share.rank_key("nobody", {}) == -1.0  # nothing used: factor 1, first
