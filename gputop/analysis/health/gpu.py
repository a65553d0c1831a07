"""The card's own rules: XID events, lost or unreadable cards, ECC and row remapping,
temperature and clock slowdowns, PCIe link, NVLinks, fans, persistence mode."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from gputop import model
from gputop.analysis import xid as xid_catalog
from gputop.analysis.health.common import one_line
from gputop.analysis.health.registry import BROKEN_CARD, HOST, Context, Finding, rule
from gputop.model import CRITICAL, INFO, WARNING, Gpu

# Names of data-centre cards, where persistence mode should be on.  Workstation names
# such as "RTX A6000" do not match (four digits after the letter).
_DATA_CENTRE = re.compile(
    r"\b(Tesla|[ABHL]\d{1,3}[A-Z]?|GH200|GB200|V100|P100|P40|P4|T4|K80)\b"
)


def is_data_centre(name: str | None) -> bool:
    return bool(name and _DATA_CENTRE.search(name))


@rule("xid-unwatched", INFO, scope=HOST, reads=("xid_watched",), unexported=("xid_watched",),
      summary="XID errors are not watched on this host (driver gives no XID events)",
      hint="check `dmesg | grep Xid` on the host for GPU errors",
      when="the driver gives no XID events on this host: check `dmesg` yourself")
def _xid_unwatched(ctx: Context) -> Iterator[Finding]:
    if ctx.snapshot.xid_watched is False:
        yield Finding()


@rule("xid-N", (CRITICAL, WARNING), scope=HOST, reads=("xid_events",), alert="GpuXidError",
      summary="the driver reported an XID error on this GPU",
      hint="`gputop check` on the host explains the code and what to do",
      when="one per XID burst on a card; critical or warning as the catalog "
      "(gputop/analysis/xid.py) says: critical for 48, 63, 64, 74, 79, 94, 95, 119, ...; "
      "warning for XIDs that are usually the application's fault (13, 31, 43, 45), XID 92 "
      "and unknown codes; an event that cannot be placed on a card says \"GPU unknown\" "
      "and has no GPU")
def _xid(ctx: Context) -> Iterator[Finding]:
    seen: set[tuple[int | None, int]] = set()
    for event in sorted(ctx.snapshot.xid_events, key=lambda e: e.time):
        if (event.gpu, event.xid) in seen:
            continue  # a burst of the same XID is one warning, since its first event
        seen.add((event.gpu, event.xid))
        info = xid_catalog.lookup(event.xid)
        message = xid_catalog.describe(event.xid)
        if event.gpu is None:
            message = f"GPU unknown: {message}"
        if event.detail:
            message += f" — {one_line(event.detail, 80)}"
        yield Finding(message, gpu=event.gpu, hint=info.hint, since=event.time,
                      severity=info.severity, code=f"xid-{event.xid}")


@rule("gpu-lost", CRITICAL, scope=BROKEN_CARD, reads=("state",), alert="GpuFallenOffBus",
      summary="GPU has fallen off the bus",
      hint="look for XID 79 in dmesg; the card needs a reset or a reboot; "
      "check PCIe seating, power and cooling if it repeats",
      when="the GPU fell off the bus (NVML `GPU_IS_LOST`); other rules skip that card")
def _lost(ctx: Context) -> Iterator[Finding]:
    gpu = ctx.card
    if gpu.state == model.GPU_LOST:
        yield Finding(f"GPU lost: {gpu.error}" if gpu.error else None, gpu=gpu.index)


@rule("gpu-unreadable", WARNING, scope=BROKEN_CARD, reads=("state", "error"),
      unexported=("state", "error"),
      summary="GPU could not be read",
      hint="check `nvidia-smi -i {gpu}` and dmesg on the host",
      when="the collector could not read the card at all")
def _unreadable(ctx: Context) -> Iterator[Finding]:
    gpu = ctx.card
    if gpu.state != model.GPU_LOST:
        yield Finding("GPU could not be read" + (f": {gpu.error}" if gpu.error else ""),
                      gpu=gpu.index)


@rule("fields-unreadable", INFO, reads=("field_errors",), unexported=("field_errors",),
      summary="some fields failed to read (shown n/a)",
      hint="unlike 'not supported', the driver had the value but could not give it; "
      "if it persists, check dmesg and the driver",
      when="some fields failed with an error (Unknown, Timeout, No Permission), not \"not "
      "supported\": they show n/a, and this names them (`Gpu.field_errors`)")
def _fields(ctx: Context) -> Iterator[Finding]:
    errors = ctx.card.field_errors
    if errors:
        shown = "; ".join(errors[:3]) + (" ..." if len(errors) > 3 else "")
        yield Finding(f"{len(errors)} field(s) failed to read (shown n/a): {shown}",
                      gpu=ctx.card.index)


@rule("inforom-corrupted", WARNING, reads=("inforom_corrupted",),
      unexported=("inforom_corrupted",),
      summary="the card's infoROM is corrupted",
      hint="its readings still hold, but settings and error counts it stores may not: "
      "update the VBIOS/infoROM or ask for an RMA; `nvidia-smi -q -i {gpu}`",
      when="the card's infoROM fails its checksum (nvmlDeviceValidateInforom; not in a "
      "lean `--once`), or nvidia-smi warns \"infoROM is corrupted\" for it (exit status 14)")
def _inforom(ctx: Context) -> Iterator[Finding]:
    if ctx.card.inforom_corrupted:
        yield Finding(gpu=ctx.card.index)


# -- critical: the card is or will be broken

@rule("ecc-uncorrected", CRITICAL, reads=("ecc_volatile_uncorrected",), alert="GpuMemoryErrors",
      summary="uncorrectable ECC errors since the last reset",
      hint="results on this card may be wrong: drain it and reset it (nvidia-smi -r)",
      when="volatile uncorrectable ECC errors > 0")
def _ecc(ctx: Context) -> Iterator[Finding]:
    if ctx.card.ecc_volatile_uncorrected:
        yield Finding(f"{ctx.card.ecc_volatile_uncorrected} uncorrectable ECC error(s) since "
                      "the last reset", gpu=ctx.card.index)


@rule("remap-failure", CRITICAL, reads=("remap_failure",), alert="GpuMemoryErrors",
      summary="row remapping failed",
      hint="the card cannot repair its memory any more: drain it and ask for an RMA",
      when="row remapping failed")
def _remap_failure(ctx: Context) -> Iterator[Finding]:
    if ctx.card.remap_failure:
        yield Finding(gpu=ctx.card.index)


@rule("remap-pending", CRITICAL, reads=("remap_pending",), alert="GpuMemoryErrors",
      summary="remapped rows pending: memory repair waits for a GPU reset",
      hint="reset the GPU when idle (nvidia-smi -r) or reboot to apply the remap",
      when="remapped rows wait for a reset")
def _remap_pending(ctx: Context) -> Iterator[Finding]:
    if ctx.card.remap_pending:
        yield Finding(gpu=ctx.card.index)


@rule("retired-pages-pending", CRITICAL, reads=("retired_pages_pending",),
      alert="GpuMemoryErrors",
      summary="retired pages pending: a reset is needed to retire them",
      hint="reset the GPU when idle (nvidia-smi -r) or reboot",
      when="retired pages wait for a reset")
def _retired(ctx: Context) -> Iterator[Finding]:
    if ctx.card.retired_pages_pending:
        yield Finding(gpu=ctx.card.index)


def _near_shutdown(gpu: Gpu, margin: float) -> bool:
    return (gpu.temp is not None and gpu.temp_shutdown is not None
            and gpu.temp >= gpu.temp_shutdown - margin)


@rule("temp-shutdown", CRITICAL, reads=("temp", "temp_shutdown"), unexported=("temp_shutdown",),
      thresholds=("temp_shutdown_margin",), alert="GpuNearShutdown",
      summary="the GPU is about to shut down: it is too hot",
      hint="stop the load now; check fans, airflow and the room's cooling",
      when="temp >= shutdown threshold - `temp_shutdown_margin`")
def _shutdown(ctx: Context) -> Iterator[Finding]:
    gpu = ctx.card
    if _near_shutdown(gpu, ctx.thresholds.temp_shutdown_margin):
        yield Finding(f"{gpu.temp} C, shutdown at {gpu.temp_shutdown} C", gpu=gpu.index)


# -- warning: slowed, degraded or about to be

_THERMAL = ("hw_thermal_slowdown", "sw_thermal_slowdown")
_BRAKE = ("hw_power_brake_slowdown",)


def _reasons(gpu: Gpu) -> set[str]:
    return set(gpu.clock_event_reasons or ())


@rule("thermal-slowdown", WARNING, reads=("clock_event_reasons",), alert="GpuThermalSlowdown",
      summary="clocks slowed because the GPU is too hot",
      hint="check airflow, fans and inlet temperature; clean filters; spread load over cards",
      when="clock-event reasons `hw_thermal_slowdown` or `sw_thermal_slowdown`")
def _thermal(ctx: Context) -> Iterator[Finding]:
    if _reasons(ctx.card).intersection(_THERMAL):
        yield Finding(gpu=ctx.card.index)


@rule("power-brake", WARNING, reads=("clock_event_reasons",),
      summary="clocks slowed by the power brake (external power-supply signal)",
      hint="check the node's power supplies and cabling",
      when="`hw_power_brake_slowdown`")
def _brake(ctx: Context) -> Iterator[Finding]:
    if _reasons(ctx.card).intersection(_BRAKE):
        yield Finding(gpu=ctx.card.index)


@rule("hw-slowdown", WARNING, reads=("clock_event_reasons",),
      summary="clocks slowed by the hardware (HW slowdown)",
      hint="check temperatures and power supplies; `nvidia-smi -q -d PERFORMANCE`",
      when="`hw_slowdown` without one of the two above")
def _hw_slowdown(ctx: Context) -> Iterator[Finding]:
    # HW slowdown without its thermal or power-brake detail: still the hardware telling
    # us something is wrong (power supply, thermal, or external signal).
    reasons = _reasons(ctx.card)
    if "hw_slowdown" in reasons and not reasons.intersection(_THERMAL + _BRAKE):
        yield Finding(gpu=ctx.card.index)


# The SW power cap holding a busy card well below what it is made to draw: a power limit
# set low (nvidia-smi -pl, a BMC policy) costs speed.  At its default limit a card under
# full load is capped by design, which is why the cap alone is no warning.
POWER_CAPPED_SHARE = 0.8


@rule("power-capped", INFO,
      reads=("clock_event_reasons", "util_gpu", "power_draw", "power_limit",
             "power_default_limit", "power_max_limit"),
      unexported=("power_default_limit", "power_max_limit"), thresholds=("busy_util",),
      summary="clocks held by the software power cap well below what the card is made for, "
      "while busy",
      hint="`nvidia-smi -q -d POWER`; if the limit was lowered on purpose this is expected, "
      "else raise it with `nvidia-smi -pl`",
      when="`sw_power_cap` while busy (util >= `busy_util`) and drawing under 80 % of the "
      "card's default (else maximum) power limit: a lowered limit costs speed; at its own "
      "limit a busy card is capped by design, so the cap alone says nothing")
def _power_capped(ctx: Context) -> Iterator[Finding]:
    gpu = ctx.card
    reference = gpu.power_default_limit or gpu.power_max_limit
    if (
        "sw_power_cap" not in (gpu.clock_event_reasons or ())
        or gpu.util_gpu is None
        or gpu.util_gpu < ctx.thresholds.busy_util
        or gpu.power_draw is None
        or not reference
        or gpu.power_draw >= POWER_CAPPED_SHARE * reference
    ):
        return
    limit = f", limit {gpu.power_limit:.0f} W" if gpu.power_limit else ""
    yield Finding(
        f"clocks held by the software power cap at {gpu.power_draw:.0f} W{limit} "
        f"(the card is made for {reference:.0f} W) while busy ({gpu.util_gpu}% util)",
        gpu=gpu.index)


@rule("temp-near-slowdown", WARNING, reads=("temp", "temp_slowdown", "temp_shutdown"),
      unexported=("temp_slowdown", "temp_shutdown"),
      thresholds=("temp_slowdown_margin", "temp_shutdown_margin"), alert="GpuTooHot",
      summary="the GPU is close to its slowdown temperature: it will throttle",
      hint="check airflow and fans; the card will throttle",
      when="temp >= slowdown threshold - `temp_slowdown_margin` (not when already critical)")
def _near_slowdown(ctx: Context) -> Iterator[Finding]:
    gpu, th = ctx.card, ctx.thresholds
    if (
        not _near_shutdown(gpu, th.temp_shutdown_margin)
        and gpu.temp is not None
        and gpu.temp_slowdown is not None
        and gpu.temp >= gpu.temp_slowdown - th.temp_slowdown_margin
    ):
        yield Finding(f"{gpu.temp} C, clocks slow down at {gpu.temp_slowdown} C",
                      gpu=gpu.index)


@rule("pcie-width", WARNING, reads=("pcie_width", "pcie_width_max"),
      summary="the PCIe link is narrower than the card and slot can do",
      hint="reseat the card, or move it to a full-width slot; check riser cables",
      when="link width below the card's and slot's maximum")
def _pcie_width(ctx: Context) -> Iterator[Finding]:
    gpu = ctx.card
    if (gpu.pcie_width is not None and gpu.pcie_width_max is not None
            and gpu.pcie_width < gpu.pcie_width_max):
        yield Finding(
            f"PCIe link x{gpu.pcie_width}, the card and slot can do x{gpu.pcie_width_max}",
            gpu=gpu.index)


@rule("pcie-gen", WARNING, reads=("pcie_gen", "pcie_gen_max", "util_gpu"),
      thresholds=("busy_util",),
      summary="the PCIe link runs below its generation while the card is busy",
      hint="check the slot's BIOS link speed setting, riser cables, and reseat the card",
      when="generation below maximum **while busy** (util >= `busy_util`); idle cards "
      "train down to save power")
def _pcie_gen(ctx: Context) -> Iterator[Finding]:
    # Idle cards train their link down to save power; only a busy card at a low
    # generation is a fault.
    gpu = ctx.card
    if (
        gpu.pcie_gen is not None
        and gpu.pcie_gen_max is not None
        and gpu.pcie_gen < gpu.pcie_gen_max
        and gpu.util_gpu is not None
        and gpu.util_gpu >= ctx.thresholds.busy_util
    ):
        yield Finding(f"PCIe gen {gpu.pcie_gen} while busy ({gpu.util_gpu}% util), "
                      f"max gen {gpu.pcie_gen_max}", gpu=gpu.index)


@rule("nvlink-down", WARNING, reads=("nvlinks",), unexported=("nvlinks",),
      summary="NVLinks of this GPU are down while peers are up",
      hint="`nvidia-smi nvlink -s`; check fabric manager; reset the GPUs or reboot",
      when="some NVLinks of a card inactive while its other links, or other cards' links, "
      "are up")
def _nvlink(ctx: Context) -> Iterator[Finding]:
    gpu = ctx.card
    down = [link.link for link in gpu.nvlinks if link.active is False]
    if down and (any(link.active for link in gpu.nvlinks) or any_nvlink_up(ctx.snapshot.gpus)):
        shown = ", ".join(str(n) for n in down[:8]) + (" ..." if len(down) > 8 else "")
        yield Finding(
            f"{len(down)} of {len(gpu.nvlinks)} NVLinks down (link {shown}) while peers are up",
            gpu=gpu.index)


@rule("fan-stopped", WARNING, reads=("fan", "temp"), thresholds=("fan_hot_temp",),
      summary="the fan stands while the card is hot",
      hint="check that the fan spins and is connected; check the fan curve",
      when="fan at 0 % while temp >= `fan_hot_temp` (consumer cards stop fans when cool)")
def _fan(ctx: Context) -> Iterator[Finding]:
    gpu = ctx.card
    if gpu.fan == 0 and gpu.temp is not None and gpu.temp >= ctx.thresholds.fan_hot_temp:
        yield Finding(f"fan at 0% while the card is at {gpu.temp} C", gpu=gpu.index)


@rule("nvlinks-all-down", WARNING, scope=HOST, reads=("nvlinks", "fabric_state"),
      unexported=("nvlinks", "fabric_state"),
      summary="every NVLink of this NVSwitch system is down",
      hint="is the fabric manager running? `systemctl status nvidia-fabricmanager`, "
      "`nvidia-smi -q | grep -A3 Fabric`; then reset the GPUs or reboot",
      when="every NVLink of every card is inactive on a host whose cards take part in an "
      "NVSwitch fabric (a fabric state is known: usually the fabric manager is not running)")
def _nvlinks_all_down(ctx: Context) -> Iterator[Finding]:
    cards = [g for g in ctx.snapshot.gpus if g.state == model.GPU_OK and g.nvlinks]
    if not cards or any_nvlink_up(cards):
        return
    states = sorted({g.fabric_state for g in cards if g.fabric_state is not None})
    if not states:
        return  # no fabric (NVLink bridges, or a driver that cannot say): not this rule
    total = sum(len(g.nvlinks) for g in cards)
    pending = [s for s in states if s != "completed"]
    said = f"; fabric {', '.join(pending)}" if pending else ""
    yield Finding(f"all {total} NVLinks of {len(cards)} GPU(s) are down{said}")


@rule("persistence-off", INFO, scope=HOST, reads=("persistence_mode", "name"),
      unexported=("persistence_mode",),
      summary="persistence mode is off on a data-centre card",
      hint="enable it (nvidia-smi -pm 1, or nvidia-persistenced) to avoid slow starts",
      when="persistence mode off on a data-centre card (one host-level line when several "
      "cards)")
def _persistence(ctx: Context) -> Iterator[Finding]:
    off = [
        g.index
        for g in ctx.snapshot.gpus
        if g.state == model.GPU_OK and g.persistence_mode is False and is_data_centre(g.name)
    ]
    if len(off) == 1:
        yield Finding(gpu=off[0])
    elif off:
        # One host-level line instead of eight identical ones: one setting of the host.
        yield Finding(
            f"persistence mode is off on {len(off)} data-centre cards (GPU {_ranges(off)})")


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
