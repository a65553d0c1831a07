"""A one-shot of a demo sees its scenario's events at once (issue 39.9): `--demo list`
promises XIDs and a lost GPU for `faulty`, and `check` or `--once` ends before the
scenario's 5-20 s would have passed; the dashboard keeps them timed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from gputop.sources import sim


def gputop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})


def faulty_events() -> set[tuple[str, int]]:
    """What the faulty scenario's file says will happen: each XID and each lost GPU."""
    faults = sim.load_scenario("faulty").faults
    return ({(f"xid-{x['xid']}", x["gpu"]) for x in faults["xid"]}
            | {("gpu-lost", lost["gpu"]) for lost in faults["lost"]})


@pytest.mark.parametrize("args", [("check", "--demo", "faulty", "--json"),
                                  ("--demo", "faulty", "--json")])
def test_a_one_shot_of_the_faulty_demo_shows_its_xids_and_lost_gpu(args: tuple[str, ...]) -> None:
    result = gputop(*args)
    assert result.returncode in (0, 2), result.stderr
    document = json.loads(result.stdout)
    warnings = document.get("warnings") or document["hosts"][0]["warnings"]
    found = {(w["code"], w["gpu"]) for w in warnings}
    expected = faulty_events()
    assert len(expected) >= 4  # XIDs 48, 79, 94 and GPU 6 lost
    assert expected <= found, expected - found


def test_squeezed_scenario_keeps_the_order_of_its_events() -> None:
    timed = sim.load_scenario("faulty")
    squeezed = sim.squeezed(timed, 0.2)

    def order(scenario: sim.Scenario) -> list[tuple[float, str]]:
        return sorted([(x["at"], f"xid {x['xid']}") for x in scenario.faults["xid"]]
                      + [(lost["after"], "lost") for lost in scenario.faults["lost"]])

    assert [what for _, what in order(squeezed)] == [what for _, what in order(timed)]
    assert max(t for t, _ in order(squeezed)) == pytest.approx(0.2)
    assert max(t for t, _ in order(timed)) == 20  # the scenario itself is left as it was
    clock = [1_764_680_000.0]
    nv = sim.SimNvml(squeezed, clock=lambda: clock[0])
    nv.nvmlInit()
    assert not nv.is_lost(6)
    clock[0] += 0.2
    assert nv.is_lost(6)


def test_pick_in_the_demo_counts_the_scenario_users_processes_as_mine() -> None:
    """The demo's user (the scenario's `me`) is who "yours" means in the dashboard's
    reclaim view and kill dialog; pick says the same: not "another user (alice)"."""
    lab = sim.load_scenario("lab")
    users_on: dict[int, set[str]] = {}
    for proc in lab.processes:
        for gpu in proc["gpus"]:
            users_on.setdefault(gpu, set()).add(proc["user"])
    only_mine = [gpu for gpu, users in users_on.items() if users == {lab.me}]
    assert only_mine and any(len(users) > 1 for users in users_on.values())
    result = gputop("pick", "--demo", "lab", "--count", str(len(lab.gpus)))
    assert result.returncode != 0  # other users' processes on the other cards
    assert "in use by another user" in result.stderr
    assert not re.search(rf"another user \([^)]*\b{lab.me}\b", result.stderr), result.stderr
    for gpu in only_mine:  # left out as one's own busy card is, not as another's
        assert re.search(rf"GPU {gpu}: \d+ process\(es\) running", result.stderr), gpu
