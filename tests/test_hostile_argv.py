"""Processes with hostile command lines (issue 25 point 11): escape sequences, bidi
overrides, zero-width characters, newlines, tabs and a 100 KB argument, in a real process
on gputop's own fake driver.  `--once`, `--json`, the dashboard, the detail view, the
process tree, the processes of all hosts, the reclaim view and the kill dialog never pass
them to the terminal raw (gputop/text.py `visible()` is the one escaping function), never
break a row, and never draw or send the 100 KB.

The process is a real one (a sleeping python whose argv is the attack), orphaned by a
double fork and shaped as a Jupyter kernel, so that the reclaim view offers it too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import fakenvml

from gputop.sources.procfs import CMDLINE_CUT, MAX_CMDLINE_BYTES

ESC = "\x1b[2J\x1b]0;pwned\x07"
RLO, ZWSP = "\u202e", "\u200b"
HOSTILE = [ESC, f"txt.{RLO}exe", "two\nlines", f"{ZWSP}zero", "tab\there", "x" * 100_000]
# Shaped as a kernel whose notebook server is gone: the reclaim view offers it.
KERNEL = ["-m", "ipykernel_launcher", "-f", "/tmp/kernel-hostile.json"]
RAW = ("\x1b", RLO, ZWSP, "\t", "\x07")
# What the detail view shows of its environment (issue 24.19), and what it never shows.
ENVIRONMENT = {"CUDA_VISIBLE_DEVICES": "1,3", "SLURM_JOB_ID": "4242",
               "GPUTOP_TEST_SECRET": "hunter2"}
ROOT = Path(__file__).resolve().parent.parent

_START = """
import os, sys
pid = os.fork()
if pid:
    print(pid, flush=True)
    sys.exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):  # the starter's pipes end with the starter
    os.dup2(null, fd)
os.execv(sys.executable, ["py", "-c", "import time; time.sleep(3600)", *sys.argv[1:]])
"""


@contextlib.contextmanager
def hostile_process() -> Iterator[int]:
    """A real process with the hostile argv, re-parented (its parent exits at once)."""
    # the attack first, where every view shows it; the 100 KB last
    starter = subprocess.run([sys.executable, "-c", _START, *HOSTILE[:-1], *KERNEL, HOSTILE[-1]],
                             capture_output=True, text=True, timeout=60, check=True,
                             env={**os.environ, **ENVIRONMENT})
    pid = int(starter.stdout)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until the exec has happened
            with contextlib.suppress(OSError):
                if ESC.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    break
            time.sleep(0.05)
        else:
            raise AssertionError("the hostile process did not start")
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """The fake driver with the hostile process on GPU 0; the environment that loads it."""
    with hostile_process() as pid:
        scenario = fakenvml.idle_cards(2)
        scenario["devices"][0]["processes"] = [{"pid": pid, "used_mib": 4096, "sm_util": 0}]
        path = fakenvml.write_scenario(tmp_path / "hostile.scenario", scenario)
        env = {**fakenvml.environment(path), "PYTHONPATH": str(ROOT), "NO_COLOR": "1",
               "HOME": str(tmp_path)}
        for name in ("GPUTOP_HOSTS", "COLUMNS"):
            env.pop(name, None)
        yield pid, env


def gputop(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_once_escapes_and_keeps_the_row_whole(driver: tuple[int, dict[str, str]]) -> None:
    pid, env = driver
    done = gputop(env, "--once")
    assert done.returncode == 0, done.stderr
    assert not any(raw in done.stdout for raw in RAW), done.stdout[:2000]
    lines = done.stdout.splitlines()
    rows = [line for line in lines if line.split()[1:2] == [str(pid)]]
    assert len(rows) == 1, rows  # the newline did not break the row
    # the warning about it is one line too, its command escaped
    (warning,) = [line for line in lines if line.startswith("INFO") and str(pid) in line]
    assert "py -c import time; time.sleep(3" in warning
    (row,) = rows
    assert "\\e[2J\\e]0;pwned\\x07" in row and "txt.\\u202eexe" in row
    assert "two\\nlines" in row and "\\u200bzero" in row
    assert max(len(line) for line in done.stdout.splitlines()) < 400  # not 100 KB


def test_json_escapes_and_caps_the_command_line(driver: tuple[int, dict[str, str]]) -> None:
    pid, env = driver
    done = gputop(env, "--json")
    assert done.returncode == 0, done.stderr
    assert not any(raw in done.stdout for raw in RAW)  # JSON escapes, ASCII only
    assert len(done.stdout) < 4 * MAX_CMDLINE_BYTES * 2  # command and cmdline, capped
    (proc,) = [p for p in json.loads(done.stdout)["hosts"][0]["processes"] if p["pid"] == pid]
    argv = proc["cmdline"]
    # What was read is exact; the 100 KB argument is cut, and says so.
    assert argv[:3 + len(HOSTILE) - 1 + len(KERNEL)] == [
        "py", "-c", "import time; time.sleep(3600)", *HOSTILE[:-1], *KERNEL]
    assert argv[-1] == CMDLINE_CUT and set(argv[-2]) == {"x"}
    assert proc["command"] == " ".join(argv)
    assert {"kernel", "orphan"} <= set(proc["flags"])


UI_SCRIPT = r"""
import asyncio, json, sys
from gputop.config import Config
from gputop.options import SourceOptions
from gputop.sources import opener
from gputop.ui.app import GputopApp
from gputop.ui.screens.detail import DetailScreen
from gputop.ui.screens.kill import KillScreen
from gputop.ui.screens.reclaim import ReclaimScreen

pid, out = int(sys.argv[1]), sys.argv[2]


async def main():
    app = GputopApp(opener.open_feeds(SourceOptions(), Config()), Config(), interval=0.5)
    shots = {}
    async with app.run_test(size=(160, 50)) as pilot:
        async def until(check):
            for _ in range(600):
                if check():
                    return
                await pilot.pause(0.05)
            raise AssertionError("timed out")

        def seen():
            snap = app.state.snapshot
            return snap is not None and any(p.pid == pid for p in snap.processes)

        await until(seen)
        app.dashboard.refresh_view()
        await pilot.pause()
        shots["dashboard"] = app.export_screenshot()
        rows = app.dashboard.table.rows
        app.dashboard.table.move_to(next(i for i, r in enumerate(rows) if r.proc.pid == pid))
        await pilot.press("enter")
        await until(lambda: isinstance(app.screen, DetailScreen))
        await pilot.pause(0.3)
        shots["detail"] = app.export_screenshot()
        shots["detail-command"] = str(app.screen.query_one("#detail-command").content)
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("k")
        await until(lambda: isinstance(app.screen, KillScreen))
        shots["kill"] = app.export_screenshot()
        await pilot.press("n")
        await pilot.pause()
        await pilot.press("v")
        await pilot.pause(0.3)
        shots["tree"] = app.export_screenshot()
        await pilot.press("v")
        await pilot.press("o")
        await until(lambda: isinstance(app.screen, ReclaimScreen) and app.screen.entries)
        shots["reclaim"] = app.export_screenshot()
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("p")
        await pilot.pause(0.3)
        shots["all processes"] = app.export_screenshot()
    with open(out, "w") as fh:
        json.dump(shots, fh)


asyncio.run(main())
"""


def test_every_screen_escapes_a_real_hostile_process(
        driver: tuple[int, dict[str, str]], tmp_path: Path) -> None:
    pid, env = driver
    out = tmp_path / "shots.json"
    done = subprocess.run([sys.executable, "-c", UI_SCRIPT, str(pid), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    shots = json.loads(out.read_text())
    assert set(shots) == {"dashboard", "detail", "detail-command", "kill", "tree", "reclaim",
                          "all processes"}
    for name, svg in shots.items():
        assert not any(raw in svg for raw in RAW), name
        assert len(svg) < 1_000_000, name  # the 100 KB is never drawn whole
        if name != "detail-command":
            assert str(pid) in svg, name  # the process is on every one of these screens
    for name in ("dashboard", "detail", "kill", "reclaim"):
        assert "\\u202e" in shots[name] or "\\e[2J" in shots[name], name
    # The environment where readable (we are its owner): the GPUs and the job, no secret.
    assert "CUDA_VISIBLE_DEVICES=1,3" in shots["detail"]
    assert "SLURM_JOB_ID=4242" in shots["detail"]
    assert "hunter2" not in shots["detail"]
    command = shots["detail-command"]
    assert "\\e[2J\\e]0;pwned\\x07" in command and "two\\nlines" in command
    assert len(command) < 5000
