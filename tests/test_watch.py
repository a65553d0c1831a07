"""`gputop --once --watch S` (issue 24): the --once table redrawn plainly every S
seconds, as `gpustat -i` does, without Textual; Ctrl+C ends it with exit 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from helpers import cli

HEADER = re.compile(r"^gputop --watch 0\.5  (\d\d:\d\d:\d\d)  Ctrl\+C quits$", re.M)


def test_watch_redraws_the_once_table_until_ctrl_c() -> None:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120"}
    proc = subprocess.Popen([sys.executable, "-c", cli.MAIN_CODE, "--demo", "lab", "--once",
                             "--watch", "0.5"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    seen = ""
    deadline = time.monotonic() + 120
    try:
        assert proc.stdout is not None
        while len(HEADER.findall(seen)) < 4 and time.monotonic() < deadline:
            seen += proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert err == "TEXTUAL-NOT-LOADED\n"  # no traceback, and no Textual
    frames = [f for f in HEADER.split(seen + rest)[2::2] if f.strip()]
    assert len(frames) >= 3
    # Each frame is the --once table: the host, the GPU table, the process table.
    for frame in frames[:3]:
        lines = frame.strip("\n").splitlines()
        assert lines[0].startswith("lab-gpu-03  DEMO  driver")
        assert lines[1].split()[:3] == ["GPU", "NAME", "UTIL"]
        assert any(line.split()[:2] == ["GPU", "PID"] for line in lines)
    # The clock runs: frames are live snapshots, not one repeated.
    stamps = [f.strip("\n").splitlines()[0].split()[-1] for f in frames]
    assert len(set(stamps)) >= 2, stamps


def test_watch_refuses_json_and_tiny_intervals() -> None:
    for args, problem in ((["--json", "--watch", "2"], "does not go with --json"),
                          (["--once", "--watch", "0"], "expected at least 0.1 seconds"),
                          (["--once", "--watch", "nan"], "expected at least 0.1 seconds")):
        done = subprocess.run([sys.executable, "-m", "gputop.cli", "--demo", "lab", *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert problem in done.stderr and "Traceback" not in done.stderr


def _watch_on_a_pty(term: str) -> str:
    """Two --watch frames of the lab demo written to a real terminal (a pty) with TERM."""
    import pty

    code = ("import sys\nfrom gputop.commands import watch\nfrom gputop.options import "
            "SourceOptions\nsys.exit(watch.run(SourceOptions(demo='lab'), 0.1, frames=2))\n")
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": term, "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    return out.decode()


def test_watch_on_a_dumb_terminal_prints_frames_one_after_another() -> None:
    """Issue 39.4: TERM=dumb moves no cursor and clears nothing: each frame follows the
    last, without escape codes (on an xterm the frame is redrawn in place)."""
    dumb = _watch_on_a_pty("dumb")
    assert dumb.count("Ctrl+C quits") == 2
    assert "\x1b" not in dumb, repr(dumb[:200])
    xterm = _watch_on_a_pty("xterm")
    assert xterm.count("Ctrl+C quits") == 2 and "\x1b[H\x1b[J" in xterm
