"""The card's own rules: XID events, lost or unreadable cards, ECC and row remapping,
temperature and clock slowdowns, PCIe link, NVLinks, fans, persistence mode."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gputop import model
from gputop.analysis import xid as xid_catalog
from gputop.analysis.health.common import Adder, one_line
from gputop.analysis.health.thresholds import Thresholds
from gputop.model import CRITICAL, INFO, WARNING, Gpu, HostSnapshot

# Clock-event flags that mean the card is slowed against the user's will.  sw_power_cap
# is left out: a card at its power limit under full load is working as designed.
_CLOCK_EVENTS: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (
        ("hw_thermal_slowdown", "sw_thermal_slowdown"),
        "thermal-slowdown",
        "clocks slowed because the GPU is too hot",
        "check airflow, fans and inlet temperature; clean filters; spread load over cards",
    ),
    (
        ("hw_power_brake_slowdown",),
        "power-brake",
        "clocks slowed by the power brake (external power-supply signal)",
        "check the node's power supplies and cabling",
    ),
)

# Names of data-centre cards, where persistence mode should be on.  Workstation names
# such as "RTX A6000" do not match (four digits after the letter).
_DATA_CENTRE = re.compile(
    r"\b(Tesla|[ABHL]\d{1,3}[A-Z]?|GH200|GB200|V100|P100|P40|P4|T4|K80)\b"
)


def is_data_centre(name: str | None) -> bool:
    return bool(name and _DATA_CENTRE.search(name))


def xid_rules(snapshot: HostSnapshot, add: Adder) -> None:
    """One warning per XID burst on a card, and a note when the driver gives no XIDs."""
    if snapshot.xid_watched is False:
        add(
            INFO,
            "xid-unwatched",
            "XID errors are not watched on this host (driver gives no XID events)",
            hint="check `dmesg | grep Xid` on the host for GPU errors",
        )
    seen: set[tuple[int | None, int]] = set()
    for event in sorted(snapshot.xid_events, key=lambda e: e.time):
        if (event.gpu, event.xid) in seen:
            continue  # a burst of the same XID is one warning, since its first event
        seen.add((event.gpu, event.xid))
        info = xid_catalog.lookup(event.xid)
        message = xid_catalog.describe(event.xid)
        if event.gpu is None:
            message = f"GPU unknown: {message}"
        if event.detail:
            message += f" — {one_line(event.detail, 80)}"
        add(info.severity, f"xid-{event.xid}", message, gpu=event.gpu, hint=info.hint,
            since=event.time)


def card_rules(gpu: Gpu, th: Thresholds, add: Adder, any_nvlink_up: bool) -> None:
    i = gpu.index
    if gpu.state == model.GPU_LOST:
        add(
            CRITICAL,
            "gpu-lost",
            f"GPU lost: {gpu.error}" if gpu.error else "GPU has fallen off the bus",
            gpu=i,
            hint="look for XID 79 in dmesg; the card needs a reset or a reboot; "
            "check PCIe seating, power and cooling if it repeats",
        )
        return
    if gpu.state != model.GPU_OK:
        add(
            WARNING,
            "gpu-unreadable",
            "GPU could not be read" + (f": {gpu.error}" if gpu.error else ""),
            gpu=i,
            hint=f"check `nvidia-smi -i {i}` and dmesg on the host",
        )
        return

    if gpu.field_errors:
        shown = "; ".join(gpu.field_errors[:3]) + (" ..." if len(gpu.field_errors) > 3 else "")
        add(
            INFO,
            "fields-unreadable",
            f"{len(gpu.field_errors)} field(s) failed to read (shown n/a): {shown}",
            gpu=i,
            hint="unlike 'not supported', the driver had the value but could not give it; "
            "if it persists, check dmesg and the driver",
        )

    # -- critical: the card is or will be broken
    if gpu.ecc_volatile_uncorrected:
        add(
            CRITICAL,
            "ecc-uncorrected",
            f"{gpu.ecc_volatile_uncorrected} uncorrectable ECC error(s) since the last reset",
            gpu=i,
            hint="results on this card may be wrong: drain it and reset it (nvidia-smi -r)",
        )
    if gpu.remap_failure:
        add(
            CRITICAL,
            "remap-failure",
            "row remapping failed",
            gpu=i,
            hint="the card cannot repair its memory any more: drain it and ask for an RMA",
        )
    if gpu.remap_pending:
        add(
            CRITICAL,
            "remap-pending",
            "remapped rows pending: memory repair waits for a GPU reset",
            gpu=i,
            hint="reset the GPU when idle (nvidia-smi -r) or reboot to apply the remap",
        )
    if gpu.retired_pages_pending:
        add(
            CRITICAL,
            "retired-pages-pending",
            "retired pages pending: a reset is needed to retire them",
            gpu=i,
            hint="reset the GPU when idle (nvidia-smi -r) or reboot",
        )
    hot_critical = False
    if (
        gpu.temp is not None
        and gpu.temp_shutdown is not None
        and gpu.temp >= gpu.temp_shutdown - th.temp_shutdown_margin
    ):
        hot_critical = True
        add(
            CRITICAL,
            "temp-shutdown",
            f"{gpu.temp} C, shutdown at {gpu.temp_shutdown} C",
            gpu=i,
            hint="stop the load now; check fans, airflow and the room's cooling",
        )

    # -- warning: slowed, degraded or about to be
    reasons = set(gpu.clock_event_reasons or ())
    flagged = False
    for flags, code, message, hint in _CLOCK_EVENTS:
        if reasons.intersection(flags):
            flagged = True
            add(WARNING, code, message, gpu=i, hint=hint)
    if "hw_slowdown" in reasons and not flagged:
        # HW slowdown without its thermal or power-brake detail: still the hardware
        # telling us something is wrong (power supply, thermal, or external signal).
        add(
            WARNING,
            "hw-slowdown",
            "clocks slowed by the hardware (HW slowdown)",
            gpu=i,
            hint="check temperatures and power supplies; `nvidia-smi -q -d PERFORMANCE`",
        )
    power_capped_rule(gpu, th, add)
    if (
        not hot_critical
        and gpu.temp is not None
        and gpu.temp_slowdown is not None
        and gpu.temp >= gpu.temp_slowdown - th.temp_slowdown_margin
    ):
        add(
            WARNING,
            "temp-near-slowdown",
            f"{gpu.temp} C, clocks slow down at {gpu.temp_slowdown} C",
            gpu=i,
            hint="check airflow and fans; the card will throttle",
        )
    if (
        gpu.pcie_width is not None
        and gpu.pcie_width_max is not None
        and gpu.pcie_width < gpu.pcie_width_max
    ):
        add(
            WARNING,
            "pcie-width",
            f"PCIe link x{gpu.pcie_width}, the card and slot can do x{gpu.pcie_width_max}",
            gpu=i,
            hint="reseat the card, or move it to a full-width slot; check riser cables",
        )
    # Idle cards train their link down to save power; only a busy card at a low
    # generation is a fault.
    if (
        gpu.pcie_gen is not None
        and gpu.pcie_gen_max is not None
        and gpu.pcie_gen < gpu.pcie_gen_max
        and gpu.util_gpu is not None
        and gpu.util_gpu >= th.busy_util
    ):
        add(
            WARNING,
            "pcie-gen",
            f"PCIe gen {gpu.pcie_gen} while busy ({gpu.util_gpu}% util), "
            f"max gen {gpu.pcie_gen_max}",
            gpu=i,
            hint="check the slot's BIOS link speed setting, riser cables, and reseat the card",
        )
    down = [link.link for link in gpu.nvlinks if link.active is False]
    up_here = any(link.active for link in gpu.nvlinks)
    if down and (up_here or any_nvlink_up):
        shown = ", ".join(str(n) for n in down[:8]) + (" ..." if len(down) > 8 else "")
        add(
            WARNING,
            "nvlink-down",
            f"{len(down)} of {len(gpu.nvlinks)} NVLinks down (link {shown}) while peers are up",
            gpu=i,
            hint="`nvidia-smi nvlink -s`; check fabric manager; reset the GPUs or reboot",
        )
    if gpu.fan == 0 and gpu.temp is not None and gpu.temp >= th.fan_hot_temp:
        add(
            WARNING,
            "fan-stopped",
            f"fan at 0% while the card is at {gpu.temp} C",
            gpu=i,
            hint="check that the fan spins and is connected; check the fan curve",
        )


# The SW power cap holding a busy card well below what it is made to draw: a power limit
# set low (nvidia-smi -pl, a BMC policy) costs speed.  At its default limit a card under
# full load is capped by design, which is why the cap alone is no warning.
_POWER_CAPPED_SHARE = 0.8


def power_capped_rule(gpu: Gpu, th: Thresholds, add: Adder) -> None:
    reference = gpu.power_default_limit or gpu.power_max_limit
    if (
        "sw_power_cap" not in (gpu.clock_event_reasons or ())
        or gpu.util_gpu is None
        or gpu.util_gpu < th.busy_util
        or gpu.power_draw is None
        or not reference
        or gpu.power_draw >= _POWER_CAPPED_SHARE * reference
    ):
        return
    limit = f", limit {gpu.power_limit:.0f} W" if gpu.power_limit else ""
    add(
        INFO,
        "power-capped",
        f"clocks held by the software power cap at {gpu.power_draw:.0f} W{limit} "
        f"(the card is made for {reference:.0f} W) while busy ({gpu.util_gpu}% util)",
        gpu=gpu.index,
        hint="`nvidia-smi -q -d POWER`; if the limit was lowered on purpose this is expected, "
        "else raise it with `nvidia-smi -pl`",
    )


def persistence_rule(gpus: Iterable[Gpu], add: Adder) -> None:
    off = [
        g.index
        for g in gpus
        if g.state == model.GPU_OK and g.persistence_mode is False and is_data_centre(g.name)
    ]
    if not off:
        return
    hint = "enable it (nvidia-smi -pm 1, or nvidia-persistenced) to avoid slow starts"
    if len(off) == 1:
        add(INFO, "persistence-off", "persistence mode is off on a data-centre card",
            gpu=off[0], hint=hint)
        return
    # One host-level line instead of eight identical ones: it is one setting of the host.
    add(INFO, "persistence-off",
        f"persistence mode is off on {len(off)} data-centre cards (GPU {_ranges(off)})",
        hint=hint)


def _ranges(indexes: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    parts: list[str] = []
    start = prev = indexes[0]
    for n in [*indexes[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(parts)


def any_nvlink_up(gpus: Iterable[Gpu]) -> bool:
    return any(link.active for gpu in gpus for link in gpu.nvlinks)
