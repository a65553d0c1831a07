"""Any terminal, or none (issue 39, points 3-5): the dashboard without a terminal prints
the --once table and exits; a terminal that goes away ends it; SIGTERM and SIGHUP give
the terminal back as `q` does; TERM=dumb gets plain text.  The real `gputop` in a real
pty (os.openpty); every deadline is a guard against a hang, not a measure."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUARD_S = 120.0
# Textual's driver turns mouse reporting on right after taking the alternate screen.
TEXTUAL_STARTED = b"\x1b[?1000h"
# What `q` leaves behind: mouse reporting off, the alternate screen left, the cursor shown.
RESTORED = (b"\x1b[?1000l", b"\x1b[?1049l", b"\x1b[?25h")
GPUTOP = [sys.executable, "-c", "import sys; from gputop.cli import main; sys.exit(main())"]


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", **extra}
    for name in ("GPUTOP_HOSTS", "NO_COLOR", "COLUMNS", "LINES"):
        env.pop(name, None)
    return env


class Pty:
    """A gputop whose stdin, stdout and stderr are a pty's slave: a terminal of 120x40."""

    def __init__(self, *args: str, term: str = "xterm-256color") -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        # A session of its own and no controlling terminal: only its stdio is the pty.
        self.proc = subprocess.Popen([*GPUTOP, *args], env=_env(TERM=term), stdin=slave,
                                     stdout=slave, stderr=slave, start_new_session=True)
        os.close(slave)
        self.data = bytearray()

    def read_until(self, wanted: bytes) -> bool:
        """Read until ``wanted`` was written, or the pty closed, or the guard passed."""
        deadline = time.monotonic() + GUARD_S
        while wanted not in self.data and time.monotonic() < deadline:
            if not self._read_some():
                break
        return wanted in self.data

    def read_to_end(self) -> None:
        deadline = time.monotonic() + GUARD_S
        while time.monotonic() < deadline and self._read_some():
            pass

    def _read_some(self) -> bool:
        ready, _, _ = select.select([self.master], [], [], 1.0)
        if not ready:
            return self.proc.poll() is None
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every slave closed, the process is gone
            return False
        self.data.extend(chunk)
        return bool(chunk)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.master)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def ptys() -> Iterator[list[Pty]]:
    opened: list[Pty] = []
    yield opened
    for p in opened:
        p.close()


def _dashboard(ptys: list[Pty]) -> Pty:
    term = Pty("--demo", "lab", "--interval", "1")
    ptys.append(term)
    assert term.read_until(TEXTUAL_STARTED), bytes(term.data[-2000:])
    term.read_until(b"lab-gpu-03")  # a frame drawn from a snapshot
    return term


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_give_the_terminal_back(ptys: list[Pty], sig: int) -> None:
    term = _dashboard(ptys)
    started = len(term.data)
    term.proc.send_signal(sig)
    term.read_to_end()
    assert term.proc.wait(GUARD_S) == 128 + sig
    after = bytes(term.data[started:])
    for code in RESTORED:
        assert code in after, (code, after[-400:])


def test_a_dashboard_whose_terminal_goes_away_ends(ptys: list[Pty]) -> None:
    # No controlling terminal, so no SIGHUP when the master closes: the dashboard's input
    # reads end-of-file from then on, and before this it spun at most of a core for good.
    term = _dashboard(ptys)
    os.close(term.master)
    assert term.proc.wait(GUARD_S) == 128 + signal.SIGHUP


def _without_a_terminal(*args: str, stdin: int | None = subprocess.DEVNULL,
                        **env: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([*GPUTOP, *args], env=_env(**env), stdin=stdin, text=True,
                              capture_output=True, timeout=GUARD_S)
    except subprocess.TimeoutExpired as err:  # the old dashboard: escape codes for ever
        pytest.fail(f"still running after {GUARD_S:g} s, {len(err.stdout or b'')} bytes out")


def test_stdout_not_a_terminal_prints_the_once_table_and_exits_0() -> None:
    done = _without_a_terminal("--demo", "lab")
    once = _without_a_terminal("--demo", "lab", "--once")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0].startswith("lab-gpu-03  DEMO  driver")
    assert lines[1].split()[:3] == ["GPU", "NAME", "UTIL"]
    # The --once table: the same rows (the demo's values move between the two runs).
    def rows(text: str) -> list[str]:
        return [" ".join(line.split()[:2]) for line in text.splitlines()[1:]]

    assert rows(done.stdout) == rows(once.stdout)


def test_stdin_not_a_terminal_says_so_in_one_line(ptys: list[Pty]) -> None:
    # stdout and stderr a terminal, stdin /dev/null (a cron job with a tty? `ssh -n`).
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen([*GPUTOP, "--demo", "lab"], env=_env(),
                                stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                                start_new_session=True)
        os.close(slave)
        term = Pty.__new__(Pty)
        term.master, term.proc, term.data = master, proc, bytearray()
        ptys.append(term)
        term.read_to_end()
        assert proc.wait(GUARD_S) == 0
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(slave)
        raise
    text = term.data.decode()
    assert text.startswith("gputop: stdin is not a terminal: the --once table instead of "
                           "the dashboard (--once --watch S redraws it)\r\n"), text[:300]
    assert "lab-gpu-03  DEMO  driver" in text and TEXTUAL_STARTED not in term.data


def test_term_dumb_gets_plain_text_and_no_dashboard(ptys: list[Pty]) -> None:
    for args in (("--demo", "lab"), ("--demo", "lab", "--once")):
        term = Pty(*args, term="dumb")
        ptys.append(term)
        term.read_to_end()
        assert term.proc.wait(GUARD_S) == 0, bytes(term.data[-500:])
        assert b"\x1b" not in term.data, bytes(term.data[:300])
        assert b"lab-gpu-03  DEMO  driver" in term.data
    assert term.data.startswith(b"lab-gpu-03")  # --once: the table alone
