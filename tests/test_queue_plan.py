"""Who runs next in a `gputop run` line: the pure planner, and the policy file.

The integration with real processes and users is tests/test_run_queue.py.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from gputop.analysis import queue_plan
from gputop.analysis.queue_plan import Policy, Window, plan, refusal
from gputop.model import Gpu, GpuProcess, HostSnapshot, QueueJob, Reservation
from gputop.policy import PolicyError, load_policy, parse_policy

NOW = 1_764_680_000.0  # a Tuesday
GIB = 1 << 30
UTC = dt.timezone.utc


def _gpus(n: int, used_gib: float = 0.5) -> tuple[Gpu, ...]:
    return tuple(Gpu(index=i, uuid=f"GPU-{i:04d}", mem_total=24 * GIB,
                     mem_used=int(used_gib * GIB), util_gpu=0) for i in range(n))


def _job(job_id: str, user: str, gpus: int = 1, age_s: float = 60.0, priority: str = "normal",
         **extra: object) -> QueueJob:
    return QueueJob(id=job_id, user=user, submitted=NOW - age_s, priority=priority, gpus=gpus,
                    **extra)  # type: ignore[arg-type]


def _snap(n: int, jobs: list[QueueJob], reservations: tuple[Reservation, ...] = (),
          processes: tuple[GpuProcess, ...] = ()) -> HostSnapshot:
    return HostSnapshot(host="node", time=NOW, gpus=_gpus(n), queue=tuple(jobs),
                        reservations=reservations, processes=processes)


def _held(gpu: int, user: str, job: str | None = None) -> Reservation:
    return Reservation(gpu=gpu, user=user, until=NOW + 3600, since=NOW - 60, job=job)


def test_priority_then_arrival_decides_the_order() -> None:
    jobs = [_job("aaaaaaa1", "ann", age_s=300), _job("aaaaaaa2", "bob", age_s=200),
            _job("aaaaaaa3", "cat", age_s=100, priority="high"),
            _job("aaaaaaa4", "dan", age_s=400, priority="low")]
    result = plan(_snap(1, jobs), Policy(), NOW)
    assert result.starts == {"aaaaaaa3": (0,)}
    assert result.position == {"aaaaaaa3": 1, "aaaaaaa1": 2, "aaaaaaa2": 3, "aaaaaaa4": 4}
    assert result.waiting["aaaaaaa1"].startswith("2nd in line for 1 GPU; 0 of 1 free")
    assert "GPU 0 goes to a job ahead" in result.waiting["aaaaaaa1"]


def test_a_small_job_that_fits_is_not_blocked_by_a_big_one_ahead() -> None:
    jobs = [_job("bbbbbbb1", "ann", gpus=2, age_s=120), _job("bbbbbbb2", "bob", gpus=1)]
    result = plan(_snap(2, jobs, (_held(0, "eve"),)), Policy(), NOW)
    assert result.starts == {"bbbbbbb2": (1,)}
    assert "1 of 2 free" in result.waiting["bbbbbbb1"]
    assert "GPU 0 held by eve until" in result.waiting["bbbbbbb1"]


def test_a_starved_job_holds_back_the_jobs_behind_it() -> None:
    jobs = [_job("ccccccc1", "ann", gpus=2, age_s=3600), _job("ccccccc2", "bob", gpus=1)]
    policy = Policy(starvation_s=1800)
    result = plan(_snap(2, jobs, (_held(0, "eve"),)), policy, NOW)
    assert result.starts == {}
    assert "held back: ann's job ccccccc1 has waited 1h00m" in result.waiting["ccccccc2"]
    # Below the limit the small job goes first.
    assert plan(_snap(2, jobs, (_held(0, "eve"),)), Policy(starvation_s=7200), NOW).starts


def test_running_jobs_are_not_in_line_and_their_cards_are_taken() -> None:
    jobs = [_job("ddddddd1", "ann"), _job("ddddddd2", "bob")]
    result = plan(_snap(2, jobs, (_held(1, "ann", job="ddddddd1"),)), Policy(), NOW)
    assert result.running == {"ddddddd1": (1,)}
    assert result.starts == {"ddddddd2": (0,)}
    assert "ddddddd1" not in result.position


def test_other_users_processes_make_a_card_unfit_even_with_limits() -> None:
    busy = (GpuProcess(pid=42, gpu=0, user="eve", gpu_mem=GIB),)
    mine = (GpuProcess(pid=43, gpu=1, user="ann", gpu_mem=GIB),)
    job = _job("eeeeeee1", "ann", gpus=1, min_free_mem=10 * GIB)
    result = plan(_snap(2, [job], processes=busy + mine), Policy(), NOW)
    assert result.starts == {"eeeeeee1": (1,)}  # my own process does not stop my job
    assert plan(_snap(1, [job], processes=busy), Policy(), NOW).waiting["eeeeeee1"].endswith(
        "GPU 0 in use by another user (eve)")


def test_named_cards_wait_for_exactly_those_cards() -> None:
    job = _job("fffffff1", "ann", gpus=None, gpu_ids=(1, 2))  # type: ignore[arg-type]
    held = plan(_snap(3, [job], (_held(2, "eve"),)), Policy(), NOW)
    assert held.starts == {} and "GPU 2 held by eve" in held.waiting["fffffff1"]
    assert plan(_snap(3, [job]), Policy(), NOW).starts == {"fffffff1": (1, 2)}
    assert "GPU 2 no such GPU" in plan(_snap(2, [job]), Policy(), NOW).waiting["fffffff1"]


def test_a_card_reserved_by_the_submitter_is_not_taken_for_the_job() -> None:
    result = plan(_snap(1, [_job("abcdef01", "ann")], (_held(0, "ann"),)), Policy(), NOW)
    assert result.starts == {}


def test_per_user_cap_counts_what_the_user_holds() -> None:
    policy = Policy(max_gpus_per_user=2)
    jobs = [_job("1234abcd", "ann", gpus=2), _job("1234abce", "bob", gpus=1, age_s=10)]
    result = plan(_snap(4, jobs, (_held(0, "ann"),)), policy, NOW)
    assert "ann holds 1 GPU(s); at most 2 per user at once" in result.waiting["1234abcd"]
    assert result.starts == {"1234abce": (1,)}


def test_big_jobs_wait_for_their_window_and_high_priority_needs_permission() -> None:
    night = Window(20 * 60, 8 * 60, weekends=True)
    policy = Policy(big_job_gpus=2, big_job_window=night, high_priority_users=frozenset({"ann"}))
    tuesday_noon = dt.datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()
    big = QueueJob(id="99999991", user="bob", submitted=tuesday_noon - 60, gpus=4)
    result = plan(HostSnapshot(host="n", time=tuesday_noon, gpus=_gpus(4), queue=(big,)),
                  policy, tuesday_noon, tz=UTC)
    assert "start only 20:00-08:00 and on weekends" in result.waiting["99999991"]
    late = tuesday_noon + 10 * 3600  # 22:00
    assert plan(HostSnapshot(host="n", time=late, gpus=_gpus(4), queue=(big,)),
                policy, late, tz=UTC).starts == {"99999991": (0, 1, 2, 3)}
    saturday = dt.datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    assert night.open_at(saturday) and not night.open_at(saturday - dt.timedelta(days=4))
    # bob's "high" counts as normal: ann's older normal job stays ahead.
    jobs = [_job("77777771", "ann", age_s=100), _job("77777772", "bob", priority="high")]
    assert plan(_snap(1, jobs), policy, NOW).starts == {"77777771": (0,)}
    assert refusal("bob", 1, "high", None, policy) == "bob may not use --priority high"
    assert refusal("ann", 1, "high", None, policy) is None


def test_refusals_name_the_rule() -> None:
    policy = Policy(max_gpus_per_user=2, max_duration_s=8 * 3600, source="/etc/p.yaml")
    assert refusal("ann", 3, "normal", 3600, policy) == (
        "3 GPUs asked, but at most 2 per user may be used at once (/etc/p.yaml)")
    assert "jobs may run at most 8h00m; give --for" in str(refusal("ann", 1, "normal", None,
                                                                   policy))
    assert refusal("ann", 2, "normal", 3600, policy) is None


def test_policy_file_parses_every_rule() -> None:
    policy = parse_policy(
        "max_gpus_per_user: 4\nmax_duration: 24h\nstarvation_limit: 10m\n"
        "high_priority: [alice, bob]\nbig_jobs: {gpus: 2, hours: \"20:00-08:00\","
        " weekends: false}\n", "p.yaml")
    assert policy == Policy(4, 86400.0, 600.0, frozenset({"alice", "bob"}), 2,
                            Window(1200, 480, False), "p.yaml")
    assert parse_policy("", "p.yaml").starvation_s == queue_plan.DEFAULT_STARVATION_S


@pytest.mark.parametrize(("text", "problem"), [
    ("max_gpus: 4\n", "p.yaml:1: key 'max_gpus': unknown key"),
    ("max_gpus_per_user: 0\n", "p.yaml:1: key 'max_gpus_per_user': expected a whole number"),
    ("max_duration: soon\n", "p.yaml:1: key 'max_duration':"),
    ("high_priority: [alice, 'x y']\n", "p.yaml:1: key 'high_priority': not a user name"),
    ("big_jobs: {gpus: 2}\n", "p.yaml:1: key 'big_jobs': needs 'gpus' and 'hours'"),
    ("big_jobs:\n  gpus: 2\n  hours: '25:00-08:00'\n", "p.yaml:3: key 'big_jobs.hours'"),
    ("a: [\n", "p.yaml:2: not valid YAML"),
])
def test_bad_policy_files_name_file_and_line(text: str, problem: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "p.yaml")
    assert str(err.value).startswith(problem)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own the file as root")
def test_a_policy_file_others_can_write_does_not_count(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("max_gpus_per_user: 1\n")
    path.chmod(0o644)
    assert load_policy(str(path)) == (Policy(max_gpus_per_user=1, source=str(path)), None)
    path.chmod(0o666)
    policy, warning = load_policy(str(path))
    assert policy == Policy() and "must be owned by root and writable by nobody else" in (
        warning or "")
    os.chown(path, 65534, 65534)
    path.chmod(0o644)
    assert load_policy(str(path))[0] == Policy()
    assert load_policy(str(tmp_path / "absent.yaml")) == (Policy(), None)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(PolicyError, match="not a regular file"):
        load_policy(str(tmp_path / "fifo"))


async def test_the_dashboard_shows_the_line_and_counts_it_in_the_header() -> None:
    import dataclasses

    from helpers.ui import demo_app, feed_all, plain, wait_for

    from gputop.ui.screens.queue import QueueScreen
    from gputop.ui.widgets.header import HeaderBar

    app, _ = demo_app("lab")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        last = app._test_snapshots[-1]  # type: ignore[attr-defined]
        jobs = (QueueJob(id="0badcafe", user="bob", submitted=last.time - 125, gpus=2,
                         command="python train.py --big"),
                QueueJob(id="00c0ffee", user="carol", submitted=last.time - 30, gpus=1,
                         priority="high", command="python eval.py"))
        feed_all(app, [*app._test_snapshots[:-1],  # type: ignore[attr-defined]
                       dataclasses.replace(last, queue=jobs)])
        assert "2 in queue (Q)" in plain(app.dashboard.query_one(HeaderBar).render())
        await pilot.press("Q")
        await wait_for(pilot, lambda: isinstance(app.screen, QueueScreen))
        text = plain(app.screen.query_one("#jobs").render())
        # carol's high-priority job is first in line; every card of the lab box is busy.
        assert text.index("00c0ffee") < text.index("0badcafe")
        assert "1st in line for 1 GPU; 0 of 1 free; GPU 0 in use by another user" in text
        assert "2nd in line for 2 GPUs" in text and " 2m05s " in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, QueueScreen))


def test_the_cluster_overview_counts_each_hosts_jobs() -> None:
    from helpers.ui import plain

    from gputop.ui.cluster_cells import host_line

    jobs = [_job("aaaa0001", "ann"), _job("aaaa0002", "bob")]
    assert plain(host_line(_snap(2, jobs), NOW, set(), 80)).rstrip().endswith("Q2")
    assert "Q" not in plain(host_line(_snap(2, []), NOW, set(), 80)).split("ok")[-1]
