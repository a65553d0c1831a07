"""The dashboard's first frame, drawn before Textual is loaded.

Importing Textual and starting the app take a quarter to half a second; the first
snapshot of this machine takes a tenth.  So the dashboard reads its first snapshot, writes
this skeleton (the header, each card's name and memory, the processes with their pids)
to the terminal as plain escape codes, then loads Textual, whose first frame, drawn from
the same snapshot, replaces it (gputop/ui/launch.py).  Textual's own start sequence
switches to the alternate screen again, which terminals treat as a no-op when already
there (xterm, tmux; one that clears shows a blank screen until Textual draws, as before).

Pure text functions plus one write; nothing here imports Textual or rich.Text, and the
untrusted fields (host, GPU and user names, commands) go through ``visible``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from rich.cells import cell_len, set_cell_size

from gputop.analysis import hostview
from gputop.model import HostSnapshot
from gputop.ui import fmt, headline
from gputop.ui.cells import by_gpu_memory, layout, process_cell, right, row_text

# The alternate screen, cursor hidden, cleared; and back (when Textual never started).
ENTER = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J"
LEAVE = "\x1b[?1049l\x1b[?25h"
# Columns the skeleton leaves out: flags come from the analysis, job names come later.
LEFT_OUT = ("flags", "job")
_SGR = {"bold": "1", "dim": "2", "reverse": "7", "red": "31", "yellow": "33"}

Part = tuple[str, str]  # (text, rich style words)


def lines(snap: HostSnapshot, width: int, height: int, interval: float, now: float,
          columns: Sequence[str]) -> list[list[Part]]:
    """The skeleton's lines, each cut to ``width``, at most ``height`` of them."""
    out: list[list[Part]] = [
        headline.header_parts(snap, interval, now, wide=width >= 110),
        [("  starting the dashboard…", "dim")],
    ]
    for card in hostview.view(snap, now).cards:
        gpu = card.gpu
        name = fmt.visible(fmt.short_name(gpu.name))  # as the GPU panels name it
        line: list[Part] = [(f" {gpu.index} {name}", "bold"), ("  ", "")]
        if gpu.state != "ok":
            line.append((gpu.state, "bold red"))
        else:
            filled, empty = fmt.bar(
                None if gpu.mem_percent is None else gpu.mem_percent / 100, 10)
            line += [("MEM ", "bold"), ("▕" + filled, ""), (empty + "▏", "dim"),
                     (f"{fmt.size(gpu.mem_used)}/{fmt.size(gpu.mem_total)}", "")]
        # Who holds it, as its panel will say: the card, or each held MIG device by label.
        held = [("", r) for r in card.holders]
        held += [(f" {dev.label}", r) for dev in card.devices for r in dev.holders]
        for unit, r in held:
            line += [(f"{unit} ", ""), ("RSV", "bold reverse"),
                     (f" {fmt.visible(r.user)} {fmt.duration(r.until - now)}", "")]
        out.append(line)
    shown = [c for c in columns if c not in LEFT_OUT]
    cols = layout(shown, max(width - 1, 1))
    titles = [right(c.title, w) if c.right else set_cell_size(c.title, w) for c, w in cols]
    out += [[], [(" " + " ".join(titles), "bold")]]
    for proc in sorted(snap.processes, key=by_gpu_memory, reverse=True):
        if len(out) >= height:
            break
        values = [process_cell(c.id, proc, now) for c, _w in cols]
        out.append([(" " + row_text(cols, values), "")])
    return [_cut(line, width) for line in out[:height]]


def _cut(parts: list[Part], width: int) -> list[Part]:
    out, room = [], width
    for text, style in parts:
        if room <= 0:
            break
        if cell_len(text) > room:
            text = set_cell_size(text, room)
        out.append((text, style))
        room -= cell_len(text)
    return out


def ansi(frame: list[list[Part]]) -> str:
    """The lines as terminal output: each at its row, styles as SGR codes."""
    chunks = [ENTER]
    for y, parts in enumerate(frame):
        chunks.append(f"\x1b[{y + 1};1H")
        for text, style in parts:
            codes = ";".join(_SGR[w] for w in style.split() if w in _SGR)
            chunks.append(f"\x1b[{codes}m{text}\x1b[0m" if codes else text)
    return "".join(chunks)


def paint(out: TextIO, snap: HostSnapshot, size: tuple[int, int], interval: float,
          now: float, columns: Sequence[str]) -> None:
    width, height = size
    out.write(ansi(lines(snap, width, height, interval, now, columns)))
    out.flush()
