"""The dashboard's top line in words: which host, which driver, how fresh the data is.

Pure and cheap to import: the header widget (widgets/header.py) styles these parts as a
rich Text, the start-up skeleton (skeleton.py) writes them before Textual is loaded, so
the first line reads the same in both.
"""

from __future__ import annotations

from gputop.model import HostSnapshot
from gputop.ui import fmt

WAITING = "  waiting for the first snapshot…"


def host_title(snap: HostSnapshot) -> str:
    """The host as configured (what the user typed or the hosts file calls it), then the
    machine's own name where it differs: several hosts can share a hostname (``vm``)."""
    name = fmt.visible(snap.host)
    if snap.hostname and snap.hostname != snap.host:
        return f"{name} ({fmt.visible(snap.hostname)})"
    return name


def age_text(now: float, snap: HostSnapshot) -> str:
    """The data's age in whole seconds: a tick where nothing else changed redraws only
    if this did."""
    return f"{max(now - snap.time, 0.0):.0f}s"


def header_parts(snap: HostSnapshot | None, interval: float, now: float, hosts: int = 1,
                 wide: bool = True) -> list[tuple[str, str]]:
    """(text, rich style) pieces of the header line; ``wide``: 110 columns or more."""
    out = [(" gputop ", "bold reverse")]
    if snap is None:
        out.append((WAITING, "dim"))
        return out
    out.append((" ", ""))
    out.append((host_title(snap), "bold"))
    if snap.demo:
        out.append((" ", ""))
        out.append((" DEMO ", "bold reverse yellow"))
    if hosts > 1:
        # The table below lists this host only: say where the others are.
        hint = " · c: cluster, p: all processes" if wide else ""
        out.append((f" (one of {hosts} hosts{hint})", "dim"))
    # Narrow terminals drop the words, never the data age.
    stale = max(now - snap.time, 0.0) > max(3 * interval, 3.0)
    out.append((f" · {'data ' if wide else ''}{age_text(now, snap)} old",
                "bold red" if stale else "dim"))
    if snap.driver_version:
        out.append((f" · {'driver ' if wide else ''}{fmt.visible(snap.driver_version)}", ""))
    if snap.cuda_version:
        out.append((f" · CUDA {fmt.visible(snap.cuda_version)}", ""))
    out.append((f" · {len(snap.gpus)} GPU{'s' if len(snap.gpus) != 1 else ''}", ""))
    if snap.queue:
        out.append((f" · {len(snap.queue)} in queue (Q)", "bold"))
    out.append((f" · {'every ' if wide else ''}{interval:g}s", ""))
    if not snap.ok:
        out.append((f" · {snap.state}", "bold red"))
        if snap.error:
            out.append((f": {fmt.visible(snap.error)}", "red"))
    return out
