"""Issue 43, points 1 and 2: the real `gputop --demo cluster` in a pty at 160x50 and
160x9.  Hosts with problems come first (down, CRITICAL, WARNING), the header says how
many hosts are off screen, and every row can be reached: End shows the last host and the
cursor's row (reverse video) is always on screen, the one Enter opens.

Contents and orders only; the deadlines in helpers/ptyscreen.py guard against a hang.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from helpers.ptyscreen import Terminal

from gputop.sources.simcluster import CLUSTER_DOWN, CLUSTER_HOSTS

HOSTS = [h[1] for h in CLUSTER_HOSTS] + [h[0] for h in CLUSTER_DOWN]
DOWN = [h[0] for h in CLUSTER_DOWN]  # in the hosts' order
CRITICAL = "a100-node-12"  # the faulty scenario: a lost card


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "c"))
    env.pop("GPUTOP_HOSTS", None)
    return env


def _rows(term: Terminal) -> list[str]:
    """The host names of the overview's rows, top to bottom."""
    out = []
    for line in term.lines():
        word = line.split(" ", 1)[0]
        if word in HOSTS:
            out.append(word)
    return out


def _all_read(term: Terminal) -> bool:
    text = term.text()
    return ("8 hosts" in text and "connecting" not in text
            and all(f"1 {state}" in text for _h, state, _w, _l in CLUSTER_DOWN))


def _cursor(term: Terminal) -> str:
    names = [run for run in term.reversed_text() if run in HOSTS]
    assert len(names) == 1, (term.reversed_text(), term.text())
    return names[0]


def test_problems_first_at_160x50(tmp_path: Path) -> None:
    with Terminal(["--demo", "cluster"], 160, 50, _env(tmp_path)) as term:
        term.wait(_all_read, "every host read")
        term.settle()
        rows = _rows(term)
        assert sorted(rows) == sorted(HOSTS), term.text()
        # The two hosts that are down first, in the hosts' order, then the critical one.
        assert rows[:3] == [*DOWN, CRITICAL], term.text()
        assert "the fold" not in term.lines()[0]  # everything is on screen
        # Stable: the same order a few refreshes later.
        term.settle(3.0)
        assert _rows(term) == rows


def test_every_row_is_reachable_at_160x9(tmp_path: Path) -> None:
    with Terminal(["--demo", "cluster"], 160, 9, _env(tmp_path)) as term:
        term.wait(_all_read, "every host read")
        term.settle()
        first = _rows(term)
        assert first[:2] == DOWN, term.text()
        hidden = len(HOSTS) - len(first)
        assert hidden > 0, term.text()
        assert f"{hidden} below the fold" in term.lines()[0], term.text()
        # Down through the whole list: the cursor's row is on screen at every step, and
        # it is each host in turn.
        seen = [_cursor(term)]
        for _ in range(len(HOSTS) - 1):
            term.press("down")
            term.settle(0.5)
            seen.append(_cursor(term))
            assert seen[-1] in _rows(term)
        assert sorted(seen) == sorted(HOSTS), seen
        assert _rows(term)[-1] == seen[-1], term.text()  # the last host, on the last row
        header = term.lines()[0]
        assert f"{hidden} above the fold (2 with problems)" in header, header
        assert "below the fold" not in header
        # Home, then End: the last host again, on screen.
        term.press("home")
        term.settle(0.5)
        assert _cursor(term) == seen[0]
        term.press("end")
        term.settle(0.5)
        assert _cursor(term) == seen[-1] == _rows(term)[-1]
        # Enter opens the host under the cursor, the one on screen.
        term.press("enter")
        term.wait(lambda t: not _rows(t) and re.search(rf"\b{re.escape(seen[-1])}\b",
                                                         t.text()) is not None,
                  f"the dashboard of {seen[-1]}")


def test_a_host_that_gets_better_keeps_its_place_for_a_while() -> None:
    from gputop import model
    from gputop.model import HostSnapshot
    from gputop.ui.cluster_cells import ProblemOrder

    def host(name: str) -> HostSnapshot:
        return HostSnapshot(host=name, time=0.0)

    snaps = [host("a"), host("b"), host("c")]
    order = ProblemOrder(hold_s=30.0)
    names = lambda worst, now: [s.host for s in order.sort(snaps, worst, now)]  # noqa: E731
    assert names({}, 0.0) == ["a", "b", "c"]  # the hosts file's order
    # c gets a critical warning, b a warning: up at once, worst first.
    assert names({"c": model.CRITICAL, "b": model.WARNING}, 1.0) == ["c", "b", "a"]
    # c's warning goes away and comes back: c keeps its row meanwhile...
    assert names({"b": model.WARNING}, 2.0) == ["c", "b", "a"]
    assert names({"c": model.CRITICAL, "b": model.WARNING}, 10.0) == ["c", "b", "a"]
    assert names({"b": model.WARNING}, 20.0) == ["c", "b", "a"]
    # ...and goes back to its place once it has been fine for hold_s.
    assert names({"b": model.WARNING}, 50.0) == ["b", "a", "c"]
    down = model.error_snapshot("a", 0.0, model.HOST_TIMEOUT, "no SSH handshake")
    assert [s.host for s in order.sort([down, *snaps[1:]], {"b": model.WARNING}, 51.0)] \
        == ["a", "b", "c"]
