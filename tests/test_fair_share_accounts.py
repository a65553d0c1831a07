"""Fair share with accounts and shares (issue 38.4): a simulated month imported through
`gputop record --import`, two accounts of unequal shares (one of a real Unix group, one
of named users), a user in both and a user in none; `gputop quota --share` and the line's
order checked against the arithmetic written out below, Slurm's classic fair share."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.users import ensure_users

from gputop.analysis import fair_share, queue_plan
from gputop.analysis.queue_plan import plan
from gputop.cli import main
from gputop.ledger import importer, share_usage
from gputop.model import Gpu, HostSnapshot, QueueJob
from gputop.policy import PolicyError, load_policy, parse_policy

HALF = 7 * 86400.0
GROUP = "acc38small"
BOB, CAROL = "acc38bob", "acc38carol"  # real users: members of GROUP
# big: 3 shares, alice (3) and bob (1) by name; small: 1 share, GROUP's members, and the
# default account (erin, named nowhere, lands there). bob is in both: charged to big, the
# first in the policy's order.
POLICY = f"""\
fair_share:
  half_life: 7d
  accounts:
    big: {{shares: 3, members: {{alice: 3, {BOB}: 1}}}}
    small: {{shares: 1, group: {GROUP}}}
  default_account: small
"""
CARDS = {"alice": 4, BOB: 2, CAROL: 1, "erin": 1}  # cards each holds in every busy hour


@pytest.fixture(scope="module")
def group() -> Iterator[str]:
    with ensure_users([BOB, CAROL]):
        subprocess.run(["groupdel", GROUP], check=False, capture_output=True)
        subprocess.run(["groupadd", "--system", GROUP], check=True, capture_output=True)
        try:
            for name in (BOB, CAROL):
                subprocess.run(["usermod", "-aG", GROUP, name], check=True,
                               capture_output=True)
            yield GROUP
        finally:
            subprocess.run(["groupdel", GROUP], check=False, capture_output=True)


def _busy_hours(now: float) -> list[int]:
    """The month: 8 hours a day for the 30 days before today (all at least 17 h old)."""
    this_hour = int(now // 3600)
    return [this_hour - 24 * day + h for day in range(1, 31) for h in range(8)]


@pytest.fixture
def month(tmp_path: Path, group: str, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> Path:
    """The ledger of the month, built by the importer; the policy in place."""
    lines = [",".join(importer.COLUMNS)]
    card = 0
    for user, count in CARDS.items():
        for _ in range(count):
            lines += [f"node1,{card},GPU-{card},NVIDIA H100,{hour},quota,{user},3600,3600,0,0"
                      for hour in _busy_hours(time.time())]
            card += 1
    data, db = tmp_path / "month.csv", tmp_path / "ledger.sqlite"
    data.write_text("\n".join(lines) + "\n")
    assert main(["record", "--db", str(db), "--import", str(data)]) == 0
    assert "imported 1920 rows" in capsys.readouterr().err  # 8 cards x 30 days x 8 hours
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    policy.chmod(0o644)
    monkeypatch.setenv("GPUTOP_POLICY", str(policy))
    return db


def _weight_sum(at: float) -> float:
    """W: one card busy in each of the month's hours, decayed at ``at`` (each hour's
    GPU-hour weighted at its middle). Every user used the same hours, so a user's raw
    usage is W x their cards, and W cancels out of every normalised number."""
    return sum(fair_share.weight(at - (hour * 3600 + 1800), HALF)
               for hour in _busy_hours(at))


# The arithmetic (U: raw usage over everyone's 8W; S: shares; UE: effective usage):
#   U: alice 4W/8W = 0.5, bob 2/8 = 0.25, carol 1/8 = 0.125, erin 1/8 = 0.125
#   big:   S = 3/(3+1) = 0.75,  U = UE = 0.5 + 0.25 = 0.75,  F = 2^(-0.75/0.75) = 0.5
#     alice: s 3 of 4: S = 0.75 x 3/4 = 0.5625; UE = 0.5 + (0.75 - 0.5) x 3/4 = 0.6875;
#            F = 2^(-0.6875/0.5625) = 2^(-11/9) = 0.428622
#     bob:   s 1 of 4: S = 0.75 x 1/4 = 0.1875; UE = 0.25 + (0.75 - 0.25) x 1/4 = 0.375;
#            F = 2^(-0.375/0.1875) = 2^-2 = 0.25
#   small: S = 1/4 = 0.25,  U = UE = 0.125 + 0.125 = 0.25,  F = 2^(-0.25/0.25) = 0.5
#     carol, erin: s 1 of 2: S = 0.25 x 1/2 = 0.125; UE = 0.125 + (0.25 - 0.125) x 1/2
#            = 0.1875; F = 2^(-0.1875/0.125) = 2^-1.5 = 0.353553
EXPECTED = {  # (account, user): raw shares, cards, norm shares, norm usage, effective, F
    ("big", None): (3, 6, 0.75, 0.75, 0.75, 0.5),
    ("big", BOB): (1, 2, 0.1875, 0.25, 0.375, 0.25),
    ("big", "alice"): (3, 4, 0.5625, 0.5, 0.6875, 0.428622),
    ("small", None): (1, 2, 0.25, 0.25, 0.25, 0.5),
    ("small", CAROL): (1, 1, 0.125, 0.125, 0.1875, 0.353553),
    ("small", "erin"): (1, 1, 0.125, 0.125, 0.1875, 0.353553),
}


def test_quota_share_prints_each_account_and_user_as_sshare(
        month: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quota", "--share", "--db", str(month), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    w = _weight_sum(doc["at"])
    rows = {(r["account"], r["user"]): r for r in doc["rows"]}
    assert list(rows) == list(EXPECTED)  # each account, then its users by name
    for key, (raw_shares, cards, norm_shares, norm_usage, effective, factor) in \
            EXPECTED.items():
        row = rows[key]
        assert row["raw_shares"] == raw_shares, key
        assert row["raw_usage"] == pytest.approx(cards * w, abs=1e-5), key
        assert row["norm_shares"] == pytest.approx(norm_shares, abs=1e-6), key
        assert row["norm_usage"] == pytest.approx(norm_usage, abs=1e-6), key
        assert row["effective_usage"] == pytest.approx(effective, abs=1e-6), key
        assert row["factor"] == pytest.approx(factor, abs=1e-6), key
    assert rows[("big", BOB)]["also_in"] == ["small"]
    assert doc["default_account"] == "small"
    assert main(["quota", "--share", "--db", str(month)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[1].split() == ["ACCOUNT", "USER", "RAW", "SHARES", "NORM", "SHARES", "RAW",
                               "USAGE", "NORM", "USAGE", "EFFECTV", "USAGE", "FAIRSHARE"]
    by_user = {line.split()[1]: line.split() for line in text[2:8] if len(line.split()) == 8}
    assert by_user["alice"][2:4] == ["3", "0.562500"] and by_user["alice"][-1] == "0.428622"
    assert by_user[BOB][-2:] == ["0.375000", "0.250000"]
    assert f"{BOB} is also in small: charged to big, the first in the policy" in text[-1]


def test_the_line_orders_by_the_factor_not_the_hours(month: Path) -> None:
    policy, _warning = load_policy()
    now = time.time()
    hours = fair_share.decayed_hours(share_usage.uses(str(month), now - 70 * 86400.0), now,
                                     HALF)
    gpus = (Gpu(index=0, uuid="GPU-0", mem_total=1 << 34, mem_used=0, util_gpu=0),)
    jobs = tuple(QueueJob(id=f"0000000{i}", user=user, submitted=now - 100 + i)
                 for i, user in enumerate((BOB, "erin", CAROL, "alice")))
    snap = HostSnapshot(host="node", time=now, gpus=gpus, queue=jobs)
    # alice used the most (4W of 8W) but holds the most shares: F 0.4286 goes first;
    # erin and carol (0.3536) by arrival; bob (0.25) last.
    order = [j.user for j in queue_plan.ordered(jobs, policy, hours)]
    assert order == ["alice", "erin", CAROL, BOB]
    assert plan(snap, policy, now, usage=hours).position["00000003"] == 1
    # Without accounts every user weighs the same: fewest hours first, alice last.
    flat = queue_plan.Policy(fair_share_half_life_s=HALF)
    assert [j.user for j in queue_plan.ordered(jobs, flat, hours)] == [
        "erin", CAROL, BOB, "alice"]
    notes = {r["user"]: r["share"] for r in queue_plan.listing(snap, policy, now, hours)}
    assert notes["alice"]["account"] == "big"
    assert notes["alice"]["factor"] == pytest.approx(0.4286, abs=1e-4)
    assert "; account big, fair-share factor 0.429" in notes["alice"]["why"]


def test_no_usage_yet_every_factor_is_one() -> None:
    accounts = parse_policy(POLICY, "p").fair_share_accounts
    table = fair_share.shares({}, accounts, ["zed"])
    assert {r.user: r.factor for r in table.rows if r.user} == {"alice": 1.0, BOB: 1.0,
                                                              "zed": 1.0}


@pytest.mark.parametrize(("text", "problem"), [
    ("fair_share: {half_life: 7d, accounts: {a: {shares: 1}}}",
     "p:1: key 'fair_share': 'accounts' needs 'default_account'"),
    ("fair_share: {half_life: 7d, accounts: {a: {shares: 1}}, default_account: b}",
     "p:1: key 'fair_share.default_account': 'b' is not one of 'accounts'"),
    ("fair_share:\n  half_life: 7d\n  default_account: a\n  accounts:\n    a: {group: g}\n",
     "p:5: key 'fair_share.accounts.a': needs 'shares'"),
    ("fair_share:\n  half_life: 7d\n  default_account: a\n  accounts:\n"
     "    a: {shares: 0}\n", "p:5: key 'fair_share.accounts.a.shares': expected shares,"),
    ("fair_share:\n  half_life: 7d\n  default_account: a\n  accounts:\n"
     "    a: {shares: 1.5}\n", "expected shares, a whole number 1..1000000"),
    ("fair_share:\n  half_life: 7d\n  default_account: a\n  accounts:\n"
     "    a: {shares: 1, colour: red}\n", "p:5: key 'fair_share.accounts.a.colour': unknown"),
    ("fair_share:\n  half_life: 7d\n  default_account: a\n  accounts:\n"
     "    a: {shares: 1, group: 'x y'}\n", "p:5: key 'fair_share.accounts.a.group': not a"),
    ("fair_share:\n  half_life: 7d\n  default_account: a\n  accounts:\n"
     "    a: {shares: 1, members: ['b;rm']}\n", "p:5: key 'fair_share.accounts.a.members':"
     " not a user name"),
    ("fair_share:\n  half_life: 7d\n  default_account: a\n  accounts:\n"
     "    a: {shares: 1, members: {u: 0}}\n", "p:5: key 'fair_share.accounts.a.members.u':"
     " expected shares"),
    ("fair_share:\n  half_life: 7d\n  default_account: a\n  accounts:\n"
     "    a: {shares: 1, members: [u, u]}\n", "'u' twice"),
    # A user the file names in two accounts: refused (their use is charged to one).
    ("fair_share:\n  half_life: 7d\n  default_account: a\n  accounts:\n"
     "    a: {shares: 1, members: [u]}\n    b: {shares: 2, members: {u: 4}}\n",
     "p:6: key 'fair_share.accounts.b.members': 'u' is already a member of account 'a'"
     " (line 5); a user belongs to one account"),
    ("fair_share: {half_life: 7d, accounts: {}, default_account: a}",
     "key 'fair_share.accounts': expected 1..1000 accounts"),
])
def test_a_bad_accounts_section_is_one_line(text: str, problem: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "p")
    assert problem in str(err.value)


def test_a_bad_policy_is_exit_2_for_quota_share(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("fair_share:\n  half_life: 7d\n  accounts: {a: {shares: -1}}\n"
                      "  default_account: a\n")
    policy.chmod(0o644)
    monkeypatch.setenv("GPUTOP_POLICY", str(policy))
    assert main(["quota", "--share", "--db", str(tmp_path / "none.sqlite")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gputop quota: {policy}:3: key 'fair_share.accounts.a.shares': expected"
                   " shares, a whole number 1..1000000"]
