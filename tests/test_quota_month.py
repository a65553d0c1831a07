"""A simulated month of GPU-hour quotas (issue 28.5), every number checked.

December 2025 in Europe/Berlin, recorded every 15 minutes: processes, reservations and
both together on one card.  What each user used per week is counted here from the
scenario's own definition (cards held or reserved at each sample, each card once), never
read back from the ledger, and compared with what the ledger and the quota arithmetic say.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.analysis import quota
from gputop.analysis.queue_plan import Policy, plan
from gputop.ledger import query, store
from gputop.ledger.writer import Recorder
from gputop.model import Gpu, GpuProcess, HostSnapshot, QueueJob, Reservation

GIB = 1024**3
TZ = "Europe/Berlin"
STEP = 900.0
DAY = 86400.0
# 2025-12-01 00:00 in Berlin (a Monday), to 2026-01-01 00:00.
START = dt.datetime(2025, 12, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))).timestamp()
END = dt.datetime(2026, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))).timestamp()
GPUS = 4


def _in(t: float, first_day: float, last_day: float) -> bool:
    return START + first_day * DAY <= t < START + last_day * DAY


def _working_hours(t: float) -> bool:
    local = time.localtime(t)
    return local.tm_wday < 5 and 10 <= local.tm_hour < 18


def scenario(t: float) -> tuple[list[GpuProcess], list[Reservation]]:
    """Who holds what at sample time ``t``."""
    procs, held = [], []
    if _in(t, 0, 3):  # alice: two processes on card 0 for three days (one card-hour each hour)
        procs += [GpuProcess(pid=1, gpu=0, gpu_mem=2 * GIB, sm_util=40, user="alice",
                             start_time=START - 10),
                  GpuProcess(pid=2, gpu=0, gpu_mem=GIB, sm_util=10, user="alice",
                             start_time=START - 10)]
    if _in(t, 2, 4):  # alice reserves card 1 for two days, and runs on it on day 2
        held.append(Reservation(gpu=1, user="alice", since=START + 2 * DAY,
                                until=START + 4 * DAY))
        if _in(t, 2, 3):
            procs.append(GpuProcess(pid=3, gpu=1, gpu_mem=GIB, sm_util=90, user="alice",
                                    start_time=START + 2 * DAY - 10))
    if _working_hours(t):  # bob (nlp): card 2 on weekdays, 10:00 to 18:00
        procs.append(GpuProcess(pid=4, gpu=2, gpu_mem=GIB, sm_util=70, user="bob",
                                start_time=START - 10))
    if _in(t, 8, 20):  # carol (nlp): card 3 for twelve days
        procs.append(GpuProcess(pid=5, gpu=3, gpu_mem=GIB, sm_util=0, user="carol",
                                start_time=START + 8 * DAY - 10))
    return procs, held


def ticks() -> Iterator[float]:
    t = START
    while t < END:
        yield t
        t += STEP


@pytest.fixture
def berlin() -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = TZ
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


@pytest.fixture
def month(tmp_path: Path, berlin: None) -> Path:
    path = tmp_path / "month.sqlite"
    recorder = Recorder(store.open_writer(str(path)), STEP, GIB)
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", name="NVIDIA H100", util_gpu=10,
                     mem_used=GIB, mem_total=80 * GIB, power_draw=100.0) for i in range(GPUS))
    for t in ticks():
        procs, held = scenario(t)
        assert recorder.record(HostSnapshot(host="lab", time=t, gpus=gpus,
                                            processes=tuple(procs), reservations=tuple(held)))
    recorder.conn.close()
    return path


def expected(t_from: float, t_to: float) -> dict[str, float]:
    """Per user: cards held or reserved at each sample in [t_from, t_to), x STEP, in hours."""
    used: dict[str, float] = {}
    for t in ticks():
        if not t_from <= t < t_to:
            continue
        procs, held = scenario(t)
        cards = {(p.user, p.gpu) for p in procs} | {(r.user, r.gpu) for r in held}
        for user, _gpu in cards:
            used[user] = used.get(user, 0.0) + STEP / 3600
    return used


def test_periods_start_at_local_midnight(berlin: None) -> None:
    wed = START + 2 * DAY + 15 * 3600  # Wednesday 3 December 15:00
    assert quota.period_bounds(wed, "week") == (START, START + 7 * DAY)
    assert quota.period_bounds(wed, "day") == (START + 2 * DAY, START + 3 * DAY)
    assert quota.period_bounds(wed, "month") == (START, END)
    assert quota.reset_words(START + 7 * DAY, "week") == "Monday 00:00"
    assert quota.reset_words(END, "month") == "1 Jan 00:00"
    assert quota.reset_words(START + 3 * DAY, "day") == "Thursday 00:00"
    # A Monday is in the week it starts; a Sunday 23:59 in the one before.
    assert quota.period_bounds(START + 7 * DAY, "week")[0] == START + 7 * DAY
    assert quota.period_bounds(START + 7 * DAY - 60, "week")[0] == START


def test_a_month_of_quotas_every_number(month: Path) -> None:
    quotas = quota.Quotas(users={"alice": 100.0, "bob": 40.0, "carol": 200.0},
                          groups={"nlp": 150.0}, period="week")
    members = {"nlp": {"bob", "carol"}}
    conn = store.open_reader(str(month))
    weeks = []
    try:
        monday = START
        while monday < END:
            start, reset = quota.period_bounds(monday + 3600, "week")
            assert start == monday
            used = query.quota_hours(conn, start, reset)
            want = expected(start, reset)
            assert set(used) == set(want)
            for user, hours in want.items():
                assert used[user] == pytest.approx(hours, abs=1e-9), (user, start)
            weeks.append((start, used))
            monday = reset
        whole = query.quota_hours(conn, START, END)
    finally:
        conn.close()
    # The scenario by hand, for the record: alice 72 h on card 0, 48 h reserved on card 1
    # (her process there the first day counts once): 120 h, all in week 1.
    assert whole["alice"] == pytest.approx(120.0)
    assert expected(START, END)["carol"] == pytest.approx(12 * 24.0)
    assert len(weeks) == 5  # Dec 1, 8, 15, 22, 29 (the last cut by the month's end)

    first = quota.standings(quotas, weeks[0][1], members)
    by = {(s.kind, s.who): s for s in first}
    assert by[("user", "alice")].over and not by[("user", "carol")].over
    assert by[("user", "alice")].message("week", "Monday 00:00") == (
        "alice used 120 of 100 GPU-hours this week (resets Monday 00:00)")
    assert by[("user", "bob")].used_h == pytest.approx(40.0)  # 5 days x 8 h: at the limit
    assert by[("user", "bob")].over  # used >= limit: the 41st hour is beyond it
    assert by[("group", "nlp")].used_h == pytest.approx(40.0)
    second = {(s.kind, s.who): s for s in quota.standings(quotas, weeks[1][1], members)}
    # Week 2: carol from Tuesday 9 Dec (6 x 24 h), bob 40: nlp 184 of 150.
    assert second[("user", "carol")].used_h == pytest.approx(144.0)
    assert second[("group", "nlp")].used_h == pytest.approx(184.0)
    assert second[("group", "nlp")].message("week", "Monday 00:00") == (
        "group nlp used 184 of 150 GPU-hours this week (resets Monday 00:00)")
    # bob has spent his own 40 h (that is named first), carol her group's share.
    assert quota.blocking(list(second.values()), "bob", {"nlp"}) == second[("user", "bob")]
    assert quota.blocking(list(second.values()), "carol", {"nlp"}) == second[("group", "nlp")]
    assert quota.blocking(list(second.values()), "alice", set()) is None  # a new week
    third = {(s.kind, s.who): s for s in quota.standings(quotas, weeks[2][1], members)}
    # Week 3: carol until Sunday 21 Dec 00:00 (6 days), bob 40: nlp 184.
    assert third[("user", "carol")].used_h == pytest.approx(144.0)
    assert third[("group", "nlp")].used_h == pytest.approx(184.0)
    # Weeks 4 and 5: bob alone; 25 and 26 Dec are weekdays like any other here.
    fourth = {(s.kind, s.who): s for s in quota.standings(quotas, weeks[3][1], members)}
    assert fourth[("user", "carol")].used_h == 0.0
    assert fourth[("group", "nlp")].used_h == pytest.approx(40.0)
    fifth = {(s.kind, s.who): s for s in quota.standings(quotas, weeks[4][1], members)}
    assert fifth[("user", "bob")].used_h == pytest.approx(3 * 8.0)  # Mon 29 to Wed 31


def test_messages_round_down() -> None:
    assert quota.Standing("alice", "user", 199.96, 200.0).message("week", "Monday 00:00") == (
        "alice used 199.9 of 200 GPU-hours this week (resets Monday 00:00)")
    assert not quota.Standing("alice", "user", 199.96, 200.0).over
    assert quota.Standing("alice", "user", 212.0, 200.0).left_h == 0.0


def test_a_spent_quota_lowers_or_holds_a_waiting_job_in_the_plan() -> None:
    # Issue 38.2: the plan of every waiting `gputop run` applies the quota, not only
    # the submission: ann's job came first, but her quota is spent.
    now = 1_764_680_000.0
    jobs = (QueueJob(id="aaaaaaa1", user="ann", submitted=now - 300, gpus=1),
            QueueJob(id="aaaaaaa2", user="bob", submitted=now - 100, gpus=1))
    snap = HostSnapshot(host="node", time=now, queue=jobs, gpus=(
        Gpu(index=0, uuid="GPU-0", mem_total=24 << 30, mem_used=0, util_gpu=0),))
    assert plan(snap, Policy(), now).starts == {"aaaaaaa1": (0,)}
    message = "ann used 212 of 200 GPU-hours this week (resets Monday 00:00)"
    low = plan(snap, Policy(), now, quota={"ann": quota.Hold(False, message)})
    assert low.starts == {"aaaaaaa2": (0,)}
    assert low.position == {"aaaaaaa2": 1, "aaaaaaa1": 2}
    assert low.waiting["aaaaaaa1"].endswith(f"; at low priority: {message}")
    alone = HostSnapshot(host="node", time=now, queue=jobs[:1], gpus=snap.gpus)
    # At low priority it still runs on a card nobody else waits for; refused, it does not.
    assert plan(alone, Policy(), now, quota={"ann": quota.Hold(False, message)}).starts
    held = plan(alone, Policy(), now, quota={"ann": quota.Hold(True, message)})
    assert held.starts == {}
    assert held.waiting["aaaaaaa1"] == f"1st in line for 1 GPU; held by the quota: {message}"


def test_a_reservation_counts_ahead_against_the_quota() -> None:
    quotas = quota.Quotas(users={"ann": 10.0}, period="week", over="wait")
    found = quota.standings(quotas, {"ann": 9.5}, {})
    now = 1_764_680_000.0
    assert quota.reservation_refusal(found, quotas, "ann", set(), 0.5, now) is None
    why = quota.reservation_refusal(found, quotas, "ann", set(), 0.51, now)
    assert why is not None and "ann used 9.5 of 10 GPU-hours this week" in why
    assert "this reservation is 0.6 GPU-hours" in why
    assert why.endswith("`gputop run` still waits at low priority")
    spent = quota.standings(quotas, {"ann": 10.0}, {})
    why = quota.reservation_refusal(spent, quotas, "ann", set(), 0.01, now)
    assert why is not None and "this reservation" not in why
