"""One poll of a host without python3: nvidia-smi's and ps' text, assembled.

The nvidia-smi backend (sources/smi.py) over the poll's ``ps`` listing, joined by the host
assembler as every backend's reading is (sources/hostsource.py is the factory of the
others; this one is not shipped to remote hosts, it runs on the client for SSH hosts).
"""

from __future__ import annotations

from typing import Any

from gputop.sources import smi
from gputop.sources.assembler import HostAssembler


def fallback_snapshot(
    host: str, output: str, now: float, reason: str | None = None, xml: bool = False,
    mode: smi.Mode | None = None, extras: smi.Extras | None = None,
) -> dict[str, Any]:
    """One poll of a host without python3 (the output of ``mode``'s commands, an
    ``smi.Mode``; ``xml`` is short for ``Mode(xml=True)``) with the host's last
    ``smi.Extras`` (-L, topo -m, nvlink -s) -> a HostSnapshot dict."""
    mode = mode or smi.Mode(xml=xml)
    backend, listing = smi.read_fallback(output, now, reason or smi.NO_PYTHON, mode, extras)
    return HostAssembler(backend, listing, host=host, clock=lambda: now, lean=True).collect()
