"""The dashboard's first frame (issue 27): a skeleton from the first snapshot before Textual
loads, then Textual's first frame drawn from that same snapshot, never a blank
"waiting for the first snapshot" screen in between.

Orders and contents, never clocks: the timings are bench/bench_vs_nvitop.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

from helpers import fakenvml
from helpers.ui import demo_snapshots

from gputop import model
from gputop.columns import DEFAULT_COLUMNS
from gputop.sources.feed import LocalFeed
from gputop.sources.hostsource import open_simulation
from gputop.sources.identity import named_identity
from gputop.ui import skeleton
from gputop.ui.app import GputopApp
from gputop.ui.headline import WAITING

ROOT = Path(__file__).resolve().parent.parent
WAIT = 600.0  # for a first poll: a guard against a hang, not a measure
COLS, ROWS = 160, 50
# Textual's driver turns mouse reporting on right after taking the alternate screen.
TEXTUAL_STARTED = b"\x1b[?1000h"
ESCAPES = re.compile(rb"\x1b\[[0-9;?>$]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()=>][0-9A-Za-z]?")


def plain(data: bytes) -> str:
    return ESCAPES.sub(b"", data).decode("utf-8", "replace")


def run_dashboard(tmp_path: Path, scenario: dict,
                  until: Callable[[str], bool]) -> tuple[bytes, int | None]:
    """The real `gputop` in a pty on the fake driver, its output until ``until`` holds for
    what it wrote after Textual started (or it exited: the caller's assertions then say
    what is missing).  The deadline is a guard against a hang, not a measure."""
    env = fakenvml.environment(fakenvml.write_scenario(tmp_path / "scenario", scenario))
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "c"),
               TERM="xterm-256color", COLUMNS=str(COLS), LINES=str(ROWS))
    env.pop("GPUTOP_HOSTS", None)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from gputop.cli import main; sys.exit(main())",
         "--interval", "1"],
        env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    data = bytearray()
    exited = None
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                data.extend(chunk)
                started = data.find(TEXTUAL_STARTED)
                if started >= 0 and until(plain(bytes(data[started:]))):
                    break
            elif proc.poll() is not None:
                break
    finally:
        exited = proc.poll()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
    return bytes(data), exited


def test_the_skeleton_shows_cards_and_processes_before_textual_starts(tmp_path: Path) -> None:
    with fakenvml.processes(fakenvml.template("dgx8")) as scenario:
        pids = [str(p["pid"]) for d in scenario["devices"] for p in d["processes"]]
        data, _ = run_dashboard(tmp_path, scenario, until=lambda after: "UTIL" in after and all(
            re.search(rf"\b{pid}\b", after) for pid in pids))
    started = data.find(TEXTUAL_STARTED)
    assert data.startswith(skeleton.ENTER.encode()), data[:200]
    assert started > 0, plain(data)[-2000:]
    before, after = plain(data[:started]), plain(data[started:])
    # Before Textual wrote a byte: the header, every card's name and memory, every process.
    assert "gputop" in before and "8 GPUs" in before
    assert before.count("H100 80GB HBM3") == 8
    assert before.count("/79.6G") == 8
    for pid in pids:
        assert re.search(rf"\b{pid}\b", before), pid
    # Textual's frame then fills in the rest (the panels' gauges) for the same processes,
    # and at no point says it is still waiting for data.
    assert "UTIL" in after and "UTIL" not in before
    assert all(re.search(rf"\b{pid}\b", after) for pid in pids)
    assert WAITING.strip() not in plain(data)


def test_the_skeleton_is_cut_to_the_terminal_and_shows_hostile_text_escaped() -> None:
    snap = demo_snapshots("lab", 1)[0]
    hostile = dataclasses.replace(snap.processes[0], pid=4242, gpu_mem=10**12,
                                  command="evil\x1b[2Jcmd " + "x" * 300)
    snap = dataclasses.replace(snap, processes=(*snap.processes, hostile))
    frame = skeleton.lines(snap, 80, 10, 1.0, snap.time, DEFAULT_COLUMNS)
    assert len(frame) == 10
    texts = ["".join(t for t, _s in line) for line in frame]
    assert all(len(t) <= 80 for t in texts)
    assert texts[3 + len(snap.gpus)].lstrip().startswith("GPU")  # the column titles
    biggest = texts[4 + len(snap.gpus)]  # the table's default order: GPU memory, largest
    assert "4242" in biggest and "\x1b" not in biggest and "evil" in biggest
    assert "\x1b[2J" not in skeleton.ansi(frame)[len(skeleton.ENTER):]


class Counting:
    """A real collector (the simulator's) that counts its collections."""

    def __init__(self) -> None:
        self.inner = open_simulation("lab").collector
        self.calls = 0

    def collect(self) -> dict:
        self.calls += 1
        return self.inner.collect()


async def test_a_feed_polled_ahead_emits_only_later_polls() -> None:
    collector = Counting()
    feed = LocalFeed(collector, host="lab", identity=named_identity("alice"))
    first = feed.first_snapshot(WAIT)
    assert first is not None and first.state == model.HOST_OK and collector.calls == 1
    got: list[model.HostSnapshot] = []
    task = asyncio.create_task(feed.run(3600.0, got.append))
    for _ in range(20):
        await asyncio.sleep(0)
    await feed.close()
    await asyncio.wait_for(task, timeout=30)
    # The first poll is the app's to apply: not emitted again, not polled again at once.
    assert got == [] and collector.calls == 1
    assert feed.first_snapshot(WAIT) is None  # once


def test_a_seeded_feed_is_not_polled_ahead() -> None:
    collector = Counting()
    feed = LocalFeed(collector, host="lab", identity=named_identity("alice"), seed=list)
    assert feed.first_snapshot(WAIT) is None and collector.calls == 0


async def test_the_first_snapshot_is_in_the_first_frame() -> None:
    snap = demo_snapshots("lab", 1)[0]
    # An hour's interval: no refresh tick comes to draw it.
    app = GputopApp(first=snap, interval=3600, clock=lambda: snap.time)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.dashboard.table
        assert {row.proc.pid for row in table.rows} == {p.pid for p in snap.processes}
        header = app.dashboard.query_one("#header").render().plain  # type: ignore[union-attr]
        assert WAITING.strip() not in header and snap.host in header
        assert app.dashboard.gpu_panel(snap.gpus[0].index) is not None


class HeldBack(Counting):
    """A collector whose first collection waits for the test to let it go."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def collect(self) -> dict:
        assert self.go.wait(600)
        return super().collect()


async def test_a_first_poll_that_outlasts_its_wait_is_emitted_when_it_lands() -> None:
    collector = HeldBack()
    feed = LocalFeed(collector, host="lab", identity=named_identity("alice"))
    assert feed.first_snapshot(0.0) is None  # the UI starts without it
    got: list[model.HostSnapshot] = []
    landed = asyncio.Event()
    task = asyncio.create_task(feed.run(3600.0, lambda s: (got.append(s), landed.set())))
    for _ in range(20):
        await asyncio.sleep(0)
    assert got == []
    collector.go.set()
    await asyncio.wait_for(landed.wait(), timeout=60)
    await feed.close()
    await asyncio.wait_for(task, timeout=30)
    # That poll's snapshot, once, and no second poll begun while it was under way.
    assert [s.state for s in got] == [model.HOST_OK] and collector.calls == 1
