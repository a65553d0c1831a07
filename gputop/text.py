"""Untrusted text (process command lines, user names, host names, remote errors) made
safe to print: control characters become visible escapes, so nothing a user or a remote
host wrote can drive the terminal or break a one-line cell.

Standard library only: the one-shot commands use it, and the dashboard's rich Text too.
"""

from __future__ import annotations

import re
import time

# Any C0/C1 control character, DEL included: ESC must never reach the terminal raw,
# and a newline or tab must not break a one-line cell.  Also the invisible format
# characters that make text lie about itself: bidirectional overrides and isolates
# (U+202E shows "exe.txt" for "txt.exe") and zero-width characters (two names that look
# the same are different users).
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u2069\ufeff]"
)
_NAMED = {"\x1b": "\\e", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(char: str) -> str:
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def visible(text: str | None) -> str:
    """Untrusted text with control characters replaced by visible escapes."""
    if not text:
        return ""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: _escape(m.group()), text)


def clock(fmt: str, epoch: float) -> str:
    """`epoch` as local time; "?" for a time no clock can show (1e18, NaN from a remote
    host must not end the program)."""
    try:
        return time.strftime(fmt, time.localtime(epoch))
    except (OverflowError, OSError, ValueError):
        return "?"


def without_program_dir(command: str) -> str:
    """``/home/alice/venvs/llm/bin/python -u train.py`` -> ``python -u train.py``: for a
    command cut to a narrow cell, where the interpreter's directory would take the room
    of the script and its arguments (eight ranks of one job all read "/home/alice/ven")."""
    program, space, rest = command.partition(" ")
    if not program.startswith(("/", "~", "./")) or "/" not in program.rstrip("/"):
        return command
    return program.rstrip("/").rsplit("/", 1)[1] + space + rest


def capped(text: str, limit: int) -> str:
    """At most `limit` characters, then how much was left out: a 200 KB command line must
    not fill a screen."""
    if len(text) <= limit:
        return text
    rest = len(text[limit:].encode("utf-8", "surrogateescape"))
    return f"{text[:limit]}... ({rest} more bytes)"
