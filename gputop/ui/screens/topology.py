"""The topology screen: the `nvidia-smi topo -m` matrix of one host, coloured by link kind,
with NVLink counts, CPU/NUMA affinity and the legend.

Topology is static (read once per connection), so the screen renders the snapshot it was
opened with; `tab` moves to the next host when there are several.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from gputop.analysis import topology
from gputop.model import HostSnapshot
from gputop.ui import fmt
from gputop.ui.keys import bindings

if TYPE_CHECKING:
    from gputop.ui.app import GputopApp

# Near to far: green, cyan, blue, yellow, orange, red (fixed colours so that NODE and SYS
# stay apart in every theme).
KIND_STYLE = {
    "X": "dim",
    "NV": "bold #5fd75f",
    "PIX": "#5fd7ff",
    "PXB": "#5f87ff",
    "PHB": "#ffd75f",
    "NODE": "#ff8700",
    "SYS": "bold #ff5f5f",
}


def matrix_text(snapshot: HostSnapshot, room: int | None = None) -> Text:
    """The coloured matrix, affinity columns and legend as one rich Text.

    ``room``: the columns there are.  When the affinity columns do not fit beside the
    matrix (8 GPUs at 80 columns), they become a table of their own under it, and the
    NVLink line and the legend go on over indented lines instead of being cut."""
    m = topology.build(snapshot)
    out = Text(no_wrap=True)
    out.append(fmt.visible(snapshot.host), style="bold")
    if snapshot.demo:
        out.append("  ")
        out.append(" DEMO ", style="bold reverse")
    out.append("\n\n")
    if not m.gpus:
        out.append("no GPUs on this host\n", style="dim")
        return out
    labels = [f"GPU{g}" for g in m.gpus]
    width = max(5, *(len(c) for row in m.cells for c in row), *(len(s) for s in labels))
    cpu = [fmt.visible(c) for c in m.cpu_affinity]
    numa = [fmt.visible(c) for c in m.numa_affinity]
    cpu_w = max(len("CPU Affinity"), *(len(c) for c in cpu))
    numa_w = max(len("NUMA Affinity"), *(len(c) for c in numa))
    matrix_w = (width + 2) * (len(labels) + 1)
    beside = room is None or matrix_w + cpu_w + 2 + numa_w <= room
    out.append(" " * (width + 2))
    for label in labels:
        out.append(label.ljust(width + 2), style="bold underline")
    if beside:
        out.append("CPU Affinity".ljust(cpu_w + 2), style="bold underline")
        out.append("NUMA Affinity", style="bold underline")
    out.append("\n")
    for n, label in enumerate(labels):
        out.append(label.ljust(width + 2), style="bold")
        for cell in m.cells[n]:
            style = KIND_STYLE.get(topology.kind_family(cell), "dim")
            out.append(cell.ljust(width + 2), style=style)
        if beside:
            out.append(cpu[n].ljust(cpu_w + 2))
            out.append(numa[n])
        out.append("\n")
    if not beside:
        # The same columns, under the matrix: one row per GPU, nothing cut.
        out.append("\n" + " " * (width + 2))
        out.append("CPU Affinity".ljust(cpu_w + 2), style="bold underline")
        out.append("NUMA Affinity", style="bold underline")
        out.append("\n")
        for n, label in enumerate(labels):
            out.append(label.ljust(width + 2), style="bold")
            out.append(cpu[n].ljust(cpu_w + 2))
            out.append(numa[n] + "\n")
    out.append("\n")
    counts = _nvlink_summary(snapshot)
    if counts:
        head = "NVLinks up per GPU: "
        out.append(head, style="bold")
        # broken between GPUs only (a no-break space inside each while wrapping)
        keep = counts.replace(" ", "\u00a0").replace(",\u00a0", ", ")
        out.append(_wrapped(keep, room, len(head), len(head)).replace("\u00a0", " "))
        out.append("\n\n")
    out.append("Legend:\n", style="bold")
    for key, text in topology.LEGEND:
        family = "NV" if key == "NV#" else key
        out.append(f"  {key:<4}", style=KIND_STYLE.get(family, ""))
        out.append(" = " + _wrapped(text, room, 9, 9) + "\n")
    return out


def _wrapped(text: str, room: int | None, first: int, indent: int) -> str:
    """``text`` broken at spaces to fit ``room`` columns, after ``first`` columns already
    used on its first line; the next lines start ``indent`` columns in."""
    if room is None or first + len(text) <= room or room - indent < 20:
        return text
    lines = textwrap.wrap(text, width=room - indent, initial_indent=" " * (first - indent),
                          break_on_hyphens=False)
    lines[0] = lines[0][first - indent:]
    return ("\n" + " " * indent).join(lines)


def _nvlink_summary(snapshot: HostSnapshot) -> str:
    # Count each GPU's own links: summing the pair matrix would count a link once per peer
    # behind an NVSwitch (an H100 has 18 links, shared by all 7 peers).
    parts = []
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        if gpu.nvlinks:
            up = sum(1 for link in gpu.nvlinks if link.active)
            parts.append(f"GPU{gpu.index} {up}/{len(gpu.nvlinks)}")
    return ", ".join(parts)


class TopologyScreen(Screen[None]):
    """Opened by the app's `t` binding with the current snapshots (first: the shown host)."""

    BINDINGS: ClassVar[list[BindingType]] = bindings("topology")

    DEFAULT_CSS = """
    TopologyScreen #topology { padding: 1 2; width: auto; }
    """

    def __init__(self, snapshots: Sequence[HostSnapshot] | HostSnapshot) -> None:
        super().__init__()
        if isinstance(snapshots, HostSnapshot):
            snapshots = [snapshots]
        self.snapshots = list(snapshots)
        self.position = 0

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self._text(), id="topology")
        yield Footer()

    def on_resize(self) -> None:
        self.query_one("#topology", Static).update(self._text())

    def _room(self) -> int | None:
        # The padding (2 a side) and a scrollbar; None before the first layout.
        return self.size.width - 6 if self.size.width else None

    def _text(self) -> Text:
        if not self.snapshots:
            return Text("no host to show", style="dim")
        snap = self.snapshots[self.position]
        if not snap.ok:
            reason = snap.state + (f": {snap.error}" if snap.error else "")
            return Text(f"{fmt.visible(snap.host)}: {fmt.visible(reason)}", style="yellow")
        return matrix_text(snap, self._room())

    def action_next_host(self) -> None:
        if len(self.snapshots) > 1:
            self.position = (self.position + 1) % len(self.snapshots)
            self.query_one("#topology", Static).update(self._text())


def open_topology(app: GputopApp) -> None:
    """The dashboard's `t`: the shown host first, then the others by name."""
    state = app.state
    snapshots = dict(state.snapshots)
    if not snapshots:
        app.notify("topology: no data yet", severity="warning")
        return
    first = snapshots.pop(state.host, None) if state.host is not None else None
    ordered = ([first] if first is not None else []) + [snapshots[h] for h in sorted(snapshots)]
    app.push_screen(TopologyScreen(ordered))
