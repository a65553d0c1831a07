"""The real `gputop` in a pseudo-terminal, its screen read back as text.

``Terminal`` starts the command in a pty of the given size and keeps a small emulation of
the screen: cursor addressing, erasing, printing; colours are dropped.  That is all
Textual's output uses, so ``text()`` is what a person sees.  Waits are for a condition on
the screen with a generous deadline (a guard against a hang, not a measure).
"""

from __future__ import annotations

import codecs
import contextlib
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
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.cells import cell_len

ROOT = Path(__file__).resolve().parent.parent.parent
WAIT = 100.0  # a guard against a hang on a loaded 2-core machine, not a measure
_SEQ = re.compile(r"\x1b\[([0-9;?>=]*)([ -/]*)([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
                  r"|\x1b[()][0-9A-Za-z]|\x1b[=>78]")
KEYS = {"down": "\x1b[B", "up": "\x1b[A", "end": "\x1b[F", "home": "\x1b[H",
        "pagedown": "\x1b[6~", "pageup": "\x1b[5~", "enter": "\r", "escape": "\x1b"}


class Terminal:
    def __init__(self, argv: Sequence[str], cols: int, rows: int, env: dict[str, str]) -> None:
        self.cols, self.rows = cols, rows
        self.grid = [[" "] * cols for _ in range(rows)]
        self.reversed = [[False] * cols for _ in range(rows)]
        self.reverse = False  # SGR 7: how the lists mark the cursor's row
        self.y = self.x = 0
        self.pending = ""
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        full = dict(env, PYTHONPATH=str(ROOT), TERM="xterm-256color",
                    COLUMNS=str(cols), LINES=str(rows))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from gputop.cli import main; sys.exit(main())",
             *argv], env=full, stdin=slave, stdout=slave, stderr=slave,
            start_new_session=True)
        os.close(slave)
        self.master = master

    # -- the screen --------------------------------------------------------------------

    def _feed(self, data: str) -> None:
        data = self.pending + data
        self.pending = ""
        pos = 0
        while pos < len(data):
            char = data[pos]
            if char == "\x1b":
                match = _SEQ.match(data, pos)
                if match is None:
                    if len(data) - pos < 64:  # a sequence cut by the read: the next read
                        self.pending = data[pos:]
                        return
                    pos += 1
                    continue
                if match.group(3):
                    self._csi(match.group(1), match.group(3))
                pos = match.end()
                continue
            pos += 1
            if char == "\r":
                self.x = 0
            elif char == "\n":
                self.y = min(self.y + 1, self.rows - 1)
            elif char == "\b":
                self.x = max(self.x - 1, 0)
            elif char >= " ":
                if self.x < self.cols and 0 <= self.y < self.rows:
                    self.grid[self.y][self.x] = char
                    self.reversed[self.y][self.x] = self.reverse
                self.x += max(cell_len(char), 1)

    def _sgr(self, nums: list[int]) -> None:
        n = 0
        while n < len(nums):
            code = nums[n]
            if code in (38, 48, 58):  # a colour: its arguments are not attributes
                n += 5 if n + 1 < len(nums) and nums[n + 1] == 2 else 3
                continue
            if code == 0:
                self.reverse = False
            elif code == 7:
                self.reverse = True
            elif code == 27:
                self.reverse = False
            n += 1

    def _csi(self, params: str, final: str) -> None:
        if not re.fullmatch(r"[0-9;:]*", params):
            return  # modes, queries
        nums = [int(p) if p.isdigit() else 0 for p in params.replace(":", ";").split(";")]
        first = nums[0] if params else 0
        if final == "m":
            self._sgr(nums if params else [0])
        elif final in "Hf":
            row = nums[0] if nums and nums[0] else 1
            col = nums[1] if len(nums) > 1 and nums[1] else 1
            self.y, self.x = min(row, self.rows) - 1, min(col, self.cols) - 1
        elif final == "J" and first == 2:
            self.grid = [[" "] * self.cols for _ in range(self.rows)]
            self.reversed = [[False] * self.cols for _ in range(self.rows)]
        elif final == "K":
            line = self.grid[self.y]
            if first == 0:
                line[self.x:] = [" "] * (self.cols - self.x)
            elif first == 2:
                line[:] = [" "] * self.cols
        elif final == "G":
            self.x = max(first, 1) - 1
        elif final == "A":
            self.y = max(self.y - max(first, 1), 0)
        elif final == "B":
            self.y = min(self.y + max(first, 1), self.rows - 1)
        elif final == "C":
            self.x = min(self.x + max(first, 1), self.cols - 1)
        elif final == "D":
            self.x = max(self.x - max(first, 1), 0)

    def reversed_text(self) -> list[str]:
        """The runs of reverse-video text on screen (the cursor's row label), top first."""
        runs = []
        for row, flags in zip(self.grid, self.reversed, strict=True):
            run = "".join(c if f else "\0" for c, f in zip(row, flags, strict=True))
            runs += [part.strip() for part in run.split("\0") if part.strip()]
        return runs

    def lines(self) -> list[str]:
        return ["".join(row).rstrip() for row in self.grid]

    def text(self) -> str:
        return "\n".join(self.lines())

    # -- talking to it -----------------------------------------------------------------

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return self.proc.poll() is None
        try:
            chunk = os.read(self.master, 1 << 16)
        except OSError:
            return False
        if not chunk:
            return False
        self._feed(self.decoder.decode(chunk))
        return True

    def wait(self, condition: Callable[[Terminal], bool], what: str = "") -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if condition(self):
                return
            if not self._read(0.2):
                break
        if condition(self):
            return
        raise AssertionError(f"never on screen: {what}\n{self.text()}")

    def settle(self, seconds: float = 1.0) -> None:
        """Read for ``seconds`` (the frame after a key is drawn; the app redraws every
        interval, so "until it is quiet" would never come)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and self._read(max(end - time.monotonic(), 0)):
            pass

    def press(self, *keys: str) -> None:
        for key in keys:
            os.write(self.master, KEYS.get(key, key).encode())
            self.settle(0.3)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        os.close(self.master)

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
