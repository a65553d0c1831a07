"""Untrusted text (process command lines, user names, host names, remote errors) made
safe to print: control characters become visible escapes, so nothing a user or a remote
host wrote can drive the terminal or break a one-line cell.

Standard library only: the one-shot commands use it, and the dashboard's rich Text too.
"""

from __future__ import annotations

import time
import unicodedata

# Unicode's "Other, control" (C0/C1, DEL: ESC must never reach the terminal raw, and a
# newline or tab must not break a one-line cell), "Other, format" (bidirectional
# overrides and isolates: U+202E shows "exe.txt" for "txt.exe"; zero-width characters:
# two names that look the same are different users), the line and paragraph separators
# U+2028/U+2029 (a terminal or log viewer may break the line there) and lone surrogates
# (undecodable bytes of a command line; printed raw they end the program).  By category,
# not a list: a character Unicode adds to these is escaped too.
_UNSAFE = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))
_NAMED = {"\x1b": "\\e", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(char: str) -> str:
    if unicodedata.category(char) not in _UNSAFE:
        return char
    code = ord(char)
    if code < 0x100:
        return _NAMED.get(char) or f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str | None) -> str:
    """Untrusted text with control, format and separator characters replaced by visible
    escapes: the one escaping function of every view (--once, --watch, check, the
    dashboard's rich Text)."""
    if not text:
        return ""
    if text.isprintable():  # none of those (the fast path: one C loop)
        return text
    return "".join(map(_escape, text))


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
