"""Live GPUs for the benches: a static fake-driver scenario with its values on waveforms.

Real GPUs change every sample, so every gauge, sparkline and row a dashboard draws
changes too; a bench on a frozen machine measures the cost of nothing changing.  ``live``
puts each gauge of a scenario (tests/fakenvml/README.md, "Values that move") on a sine
around its static value, 20-60 s periods, each card at its own phase, and the counters
on the integral of their rates, so the two tools of bench_vs_nvitop.py see the same
moving machine at the same moment (``time_origin``).
"""

from __future__ import annotations

import copy
import time
from typing import Any

# gauge key -> (period in seconds, amplitude as a share of the static value, [lo, hi])
GAUGES: dict[str, tuple[float, float, tuple[float, float]]] = {
    "util_gpu": (20, 0.5, (0, 100)),
    "util_mem": (30, 0.5, (0, 100)),
    "temperature": (60, 0.15, (20, 95)),
    "power_draw_mw": (25, 0.3, (50_000, 1_000_000)),
    "fan_speed": (45, 0.2, (0, 100)),
}
CLOCKS = (40, 0.1, (210, 3000))
PCIE = (35, 0.8, (0, 64_000_000))
# A process's memory dips below what the scenario gives it, never above: the card's
# total holds (dgx8's training ranks hold 93% of theirs).
PROCESS = {"used_mib": (50, 0.05, (0, 0)), "sm_util": (20, 0.5, (0, 100)),
           "mem_util": (30, 0.5, (0, 100))}


def wave(static: float, period: float, share: float, clamp: tuple[float, float],
         phase: float) -> dict[str, Any]:
    """A sine of ``share`` of ``static`` around it, moved inside ``clamp`` (a card at 92%
    swings 8-100%, never stuck at the top)."""
    lo, hi = clamp
    amp = min(max(static * share, 1), (hi - lo) / 2)
    base = min(max(static, lo + amp), hi - amp)
    return {"base": base, "amp": amp, "period_s": period, "phase_s": phase,
            "clamp": list(clamp)}


def live(scenario: dict[str, Any], origin: float | None = None) -> dict[str, Any]:
    """A copy of ``scenario`` whose gauges move and whose counters run, its clock at
    ``origin`` (a Unix time; default now)."""
    out = copy.deepcopy(scenario)
    out["time_origin"] = time.time() if origin is None else origin
    for index, device in enumerate(out.get("devices") or ()):
        if device is None:
            continue
        phase = 3.7 * index  # each card at its own point of every wave

        def move(holder: dict[str, Any], key: str,
                 spec: tuple[float, float, tuple[float, float]], phase: float = phase) -> None:
            if isinstance(holder.get(key), (int, float)) and not isinstance(holder[key], bool):
                holder[key] = wave(holder[key], spec[0], spec[1], spec[2], phase)

        for key, spec in GAUGES.items():
            move(device, key, spec)
        device.setdefault("pcie", {})
        device["pcie"].setdefault("tx_kbps", 2_000_000)
        device["pcie"].setdefault("rx_kbps", 6_000_000)
        for key in ("tx_kbps", "rx_kbps"):
            move(device["pcie"], key, PCIE)
        device["pcie"].setdefault("replays", {"start": 0, "per_s": 0.01})
        clocks = device.setdefault("clocks", {"graphics": 1410, "sm": 1410, "mem": 1215,
                                              "video": 1275})
        for key in ("graphics", "sm", "video"):
            move(clocks, key, CLOCKS)
        device.setdefault("energy_mj", 1_000_000_000)  # integral of the moving power
        if isinstance(device.get("nvlink"), dict):
            for key in ("data_tx_kib", "data_rx_kib"):
                device["nvlink"][key] = {"start": 0, "per_s": wave(20_000_000, 30, 0.8,
                                                                   (0, 1 << 40), phase)}
        for proc in device.get("processes") or ():
            for key, (period, share, clamp) in PROCESS.items():
                top = proc.get(key) if key == "used_mib" else None
                move(proc, key, (period, share, (0, top) if isinstance(top, int) else clamp))
    return out
