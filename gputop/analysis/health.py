"""Health rules: warnings about broken, throttled or wasted GPUs.

Pure functions over a snapshot and its history (no I/O, no clock: ``now`` is passed in),
so every rule is tested against simulator scenarios and real captures.  The rules read
model fields that are None when a card does not report them; None never raises an alarm,
because a consumer card's "Not Supported" is not a fault.

``WarningTracker`` turns the per-snapshot lists into what a person sees over time: a
warning keeps the time it was first seen, lingers a little after it clears (so a flapping
warning does not blink), and then goes to the session log.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gputop import model
from gputop.analysis import memtrend, orphans
from gputop.analysis import mig as mig_rules
from gputop.analysis import workloads as workload_rules
from gputop.analysis import xid as xid_catalog
from gputop.analysis.durations import format_duration
from gputop.analysis.pick import reservation_warnings
from gputop.model import (
    CRITICAL,
    INFO,
    SEVERITY_ORDER,
    WARNING,
    Gpu,
    GpuProcess,
    HealthWarning,
    HostSnapshot,
)

GIB = 1024**3
MIB = 1024**2

HOST_STATE = "host-state"  # the code of "this host cannot be seen"


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Tunable limits; the config file's ``health:`` section uses the same names."""

    # The classic "memory above N %" alert, off (0) by default: caching allocators
    # (PyTorch, vLLM, JAX) hold most of a card by design, so high use alone is no fault.
    mem_percent: float = 0.0
    oom_percent: float = 98.0  # OOM risk at or above this share of a card's memory
    oom_horizon_minutes: float = 15.0  # OOM risk when the trend reaches the total this soon
    oom_window_minutes: float = 5.0  # the trend is a straight line over this many minutes
    temp_slowdown_margin: float = 5.0  # warn this close (C) to the slowdown threshold
    # critical this close (C) to the shutdown threshold; small, because slowdown is often
    # only 3 C below shutdown (A100: 89/92 C) and a throttling card is a warning, not a page
    temp_shutdown_margin: float = 2.0
    fan_hot_temp: float = 60.0  # a stopped fan (0 %) is a problem at or above this (C)
    busy_util: float = 20.0  # a card at or above this util % is busy (PCIe gen rule)
    idle_minutes: float = 30.0  # a process at 0 % SM this long while holding memory
    idle_memory_mib: float = 1024.0  # ... and holding at least this much
    input_bound_minutes: float = 5.0  # low SM with a busy CPU for this long
    input_bound_sm_percent: float = 5.0
    input_bound_cpu_percent: float = 80.0
    linger_seconds: float = 30.0  # a cleared warning stays visible this long
    xid_hold_minutes: float = 60.0  # an XID (a one-off event) stays visible this long

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None) -> Thresholds:
        """Build from the config's ``health:`` mapping; ValueError names a bad key."""
        if section is None:
            return cls()
        if not isinstance(section, Mapping):
            raise ValueError("health: expected a mapping of thresholds")
        names = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, float] = {}
        for key, value in section.items():
            if key not in names:
                known = ", ".join(sorted(names))
                raise ValueError(f"health.{key}: unknown key (known: {known})")
            # bool is an int in Python, but `mem_percent: yes` is a mistake, not 1 %.
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"health.{key}: expected a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"health.{key}: expected a number >= 0, got {value!r}")
            values[key] = float(value)
        return cls(**values)


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

_MEM_HINT = (
    "free memory: smaller batch, mixed precision (bf16/fp16), gradient accumulation, "
    "activation checkpointing"
)
_OOM_HINT = (
    "the next allocation may fail: look for a leak (memory that grows every step), "
    "or free memory: smaller batch, mixed precision, activation checkpointing"
)

# Names of data-centre cards, where persistence mode should be on.  Workstation names
# such as "RTX A6000" do not match (four digits after the letter).
_DATA_CENTRE = re.compile(
    r"\b(Tesla|[ABHL]\d{1,3}[A-Z]?|GH200|GB200|V100|P100|P40|P4|T4|K80)\b"
)


def is_data_centre(name: str | None) -> bool:
    return bool(name and _DATA_CENTRE.search(name))


def warnings(
    snapshot: HostSnapshot,
    history: Any = None,
    thresholds: Thresholds | None = None,
    now: float | None = None,
    me: str | None = None,
    flags: Mapping[tuple[int, int], orphans.ProcessFlags] | None = None,
) -> list[HealthWarning]:
    """Every warning for one host, most severe first.

    ``history`` is a ``gputop.analysis.history.History`` (or None for one-shot commands,
    which then skip the rules that need minutes of observation: idle memory, input
    bound); ``me`` is the user name for the reservation rules.  ``flags`` are the
    snapshot's ``orphans.classify_snapshot`` verdicts, classified with
    ``orphan_rules(thresholds)``, when the caller has them already (the dashboard shows
    them in the process table); without them they are computed here, once.
    """
    th = thresholds or Thresholds()
    now = snapshot.time if now is None else now
    out: list[HealthWarning] = []
    add = _Adder(out, snapshot.host, now)
    if not snapshot.ok:
        if snapshot.state != model.HOST_CONNECTING:
            add(
                WARNING,
                HOST_STATE,
                f"host {snapshot.state}" + (f": {snapshot.error}" if snapshot.error else ""),
                hint="gputop cannot see this host's GPUs; check the host and the connection",
            )
        return sort_warnings(out)
    if snapshot.xid_watched is False:
        add(
            INFO,
            "xid-unwatched",
            "XID errors are not watched on this host (driver gives no XID events)",
            hint="check `dmesg | grep Xid` on the host for GPU errors",
        )
    _xid_rules(snapshot, add)
    up = _any_nvlink_up(snapshot.gpus)
    for gpu in snapshot.gpus:
        _gpu_rules(gpu, th, add, any_nvlink_up=up)
        if gpu.state == model.GPU_OK:
            _memory_rules(snapshot.host, gpu, history, th, add)
    _persistence_rule(snapshot.gpus, add)
    if snapshot.processes:
        # One pass over all processes: classifying each row on its own rescans the
        # snapshot per row, which is what made 2,000 processes cost a quarter second.
        if flags is None or any(p.key not in flags for p in snapshot.processes):
            flags = orphans.classify_snapshot(snapshot, history, orphan_rules(th), now)
        for proc in snapshot.processes:
            _process_rules(snapshot, proc, history, th, add, flags)
    out.extend(_foreign_warnings(snapshot, now, me))
    out.extend(workload_rules.warnings(snapshot, now))
    out.extend(mig_rules.warnings(snapshot, now))
    return sort_warnings(out)


def orphan_rules(thresholds: Thresholds) -> orphans.OrphanRules:
    """The orphan/idle rules the health warnings use: the ``flags`` ``warnings`` expects."""
    return orphans.OrphanRules(
        idle_minutes=thresholds.idle_minutes, idle_min_mem_mib=int(thresholds.idle_memory_mib)
    )


def sort_warnings(items: Iterable[HealthWarning]) -> list[HealthWarning]:
    return sorted(
        items,
        key=lambda w: (
            SEVERITY_ORDER.get(w.severity, 9),
            w.host or "",
            -1 if w.gpu is None else w.gpu,
            w.code,
            -1 if w.pid is None else w.pid,
        ),
    )


def worst(items: Iterable[HealthWarning]) -> str | None:
    """The most severe severity among ``items`` (None for an empty list)."""
    ranks = [SEVERITY_ORDER.get(w.severity, 9) for w in items]
    if not ranks:
        return None
    best = min(ranks)
    return next(s for s, r in SEVERITY_ORDER.items() if r == best)


class _Adder:
    """Appends warnings for one host with the common fields filled in."""

    def __init__(self, out: list[HealthWarning], host: str, now: float) -> None:
        self.out = out
        self.host = host
        self.now = now

    def __call__(
        self,
        severity: str,
        code: str,
        message: str,
        *,
        gpu: int | None = None,
        pid: int | None = None,
        hint: str | None = None,
        since: float | None = None,
    ) -> None:
        self.out.append(
            HealthWarning(
                severity=severity,
                code=code,
                message=message,
                host=self.host,
                gpu=gpu,
                pid=pid,
                hint=hint,
                since=self.now if since is None else since,
            )
        )


def _xid_rules(snapshot: HostSnapshot, add: _Adder) -> None:
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
            message += f" — {_one_line(event.detail, 80)}"
        add(info.severity, f"xid-{event.xid}", message, gpu=event.gpu, hint=info.hint,
            since=event.time)


def _gpu_rules(gpu: Gpu, th: Thresholds, add: _Adder, any_nvlink_up: bool) -> None:
    i = gpu.index
    if gpu.state == model.GPU_LOST:
        add(
            CRITICAL,
            "gpu-lost",
            "GPU has fallen off the bus" + (f" ({gpu.error})" if gpu.error else ""),
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


def _memory_rules(host: str, gpu: Gpu, history: Any, th: Thresholds, add: _Adder) -> None:
    """OOM risk (nearly full, or growing towards full soon), and the opt-in classic alert.

    A full card is shown by its gauge's colour; it is a warning only when the next
    allocation is likely to fail.
    """
    i = gpu.index
    pct = gpu.mem_percent
    if pct is None or gpu.mem_total is None or gpu.mem_used is None:
        return
    size = f"({_gib(gpu.mem_used)} of {_gib(gpu.mem_total)} GiB)"
    if th.mem_percent > 0 and pct > th.mem_percent:
        add(WARNING, "mem-high", f"memory {pct:.0f}% full {size}", gpu=i, hint=_MEM_HINT)
    if th.oom_percent > 0 and pct >= th.oom_percent:
        add(WARNING, "oom-risk", f"memory {pct:.0f}% full {size}: the next allocation may fail",
            gpu=i, hint=_OOM_HINT)
        return
    series: Callable[..., list[tuple[float, Any]]] | None = getattr(history, "gpu_series", None)
    if series is None or th.oom_horizon_minutes <= 0:
        return
    window = th.oom_window_minutes * 60
    trend = memtrend.forecast(
        series(host, i, "mem_used", since=add.now - window), gpu.mem_total, add.now, window
    )
    if trend is None or trend.eta > th.oom_horizon_minutes * 60:
        return
    add(
        WARNING,
        "oom-risk",
        f"memory grows {trend.rate * 60 / GIB:.1f} GiB/min: full in "
        f"~{max(math.ceil(trend.eta / 60), 1)} min {size}",
        gpu=i,
        hint=_OOM_HINT,
    )


def _persistence_rule(gpus: Iterable[Gpu], add: _Adder) -> None:
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


def _any_nvlink_up(gpus: Iterable[Gpu]) -> bool:
    return any(link.active for gpu in gpus for link in gpu.nvlinks)


def _process_rules(
    snapshot: HostSnapshot,
    proc: GpuProcess,
    history: Any,
    th: Thresholds,
    add: _Adder,
    all_flags: Mapping[tuple[int, int], orphans.ProcessFlags],
) -> None:
    if proc.state == "Z":
        return  # a zombie's memory is the reclaim view's business: its parent must reap it
    # The orphan rules (analysis/orphans.py) decide "orphan" and "idle", so the process
    # table's flags and these warnings never disagree.
    flags = all_flags[proc.key]
    held = proc.gpu_mem is not None and proc.gpu_mem >= th.idle_memory_mib * MIB
    # A running process whose parent is gone (nohup, setsid) is normal: its orphan flag
    # stays in the detail view.  Only a kernel whose notebook server is gone holds memory
    # for nobody for sure, so only it gets the "stop it" advice (idle ones get it below).
    abandoned = flags.orphan and flags.kernel and held
    if not (flags.idle or abandoned) and (
        proc.cpu_percent is None or proc.cpu_percent < th.input_bound_cpu_percent
    ):
        return  # the common case: nothing to say, and no need to format the process
    what = ", orphaned" if flags.orphan else ""
    if flags.idle and flags.idle_since is not None:
        add(
            INFO,
            "idle-memory",
            f"{_who(proc)} holds {_gib(proc.gpu_mem)} GiB at 0% SM for "
            f"{format_duration(add.now - flags.idle_since, minutes=True)} "
            f"({'ledger' if flags.idle_recorded else 'as observed'}){what}",
            gpu=proc.gpu,
            pid=proc.pid,
            hint="if it is a forgotten notebook or job, stop it (reclaim view) to free the card",
            since=flags.idle_since,
        )
        return
    if abandoned:
        reason = next((text for name, text in flags.reasons if name == "orphan"), "orphaned")
        add(
            INFO,
            "orphan-memory",
            f"{_who(proc)} holds {_gib(proc.gpu_mem)} GiB, orphaned: {reason}",
            gpu=proc.gpu,
            pid=proc.pid,
            hint="if nobody uses it any more, stop it (reclaim view) to free the card",
        )
    streak: Callable[..., float | None] | None = getattr(history, "process_streak", None)
    if streak is None or proc.cpu_percent is None:
        return
    if proc.cpu_percent < th.input_bound_cpu_percent:
        return
    if proc.sm_util is not None and proc.sm_util > th.input_bound_sm_percent:
        return  # computing now, so no starving streak: spare the history walk

    def starving(sample: Any) -> bool:
        if sample.sm_util is None or sample.sm_util > th.input_bound_sm_percent:
            return False
        # History may not record CPU use per sample; then the current reading stands in.
        cpu = getattr(sample, "cpu_percent", None)
        return cpu is None or cpu >= th.input_bound_cpu_percent

    start = streak(snapshot.host, proc.pid, proc.start_ticks, starving)
    if start is not None and add.now - start >= th.input_bound_minutes * 60:
        add(
            INFO,
            "input-bound",
            f"{_who(proc)} at {_pct(proc.sm_util)} SM with {proc.cpu_percent:.0f}% CPU for "
            f"{format_duration(add.now - start, minutes=True)}: probably waiting for input data",
            gpu=proc.gpu,
            pid=proc.pid,
            hint="more data-loader workers, pinned memory, prefetching, data on faster "
            "(local) storage",
            since=start,
        )


def _foreign_warnings(snapshot: HostSnapshot, now: float, me: str | None) -> list[HealthWarning]:
    """Reservation warnings (another user on my card, mine expiring, reserved card lost)."""
    return list(reservation_warnings(snapshot, now, me))


def _who(proc: GpuProcess) -> str:
    user = proc.user or "?"
    command = _one_line(proc.command or "?", 40)
    return f"pid {proc.pid} ({user}: {command})"


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _gib(value: int | None) -> str:
    return "?" if value is None else f"{value / GIB:.1f}"


def _pct(value: int | None) -> str:
    return "?%" if value is None else f"{value}%"


# ---------------------------------------------------------------- over time


@dataclass(frozen=True, slots=True)
class ClearedWarning:
    warning: HealthWarning
    cleared: float  # epoch seconds when it stopped being reported


class WarningTracker:
    """Warnings as a person sees them over time, across hosts.

    ``update(host, fresh, now)`` takes one host's latest ``warnings(...)`` list.  A warning
    keeps the ``since`` of its first sighting; when a host stops reporting it, it stays
    for ``linger`` seconds (XIDs, which are one-off events, for ``xid_hold``) and then
    moves to ``log``.  A warning that comes back while lingering continues as before.
    """

    def __init__(
        self,
        linger: float = 30.0,
        xid_hold: float = 3600.0,
        log_limit: int = 1000,
    ) -> None:
        self.linger = linger
        self.xid_hold = xid_hold
        self.log_limit = log_limit
        self.log: list[ClearedWarning] = []
        self._active: dict[tuple[Any, ...], HealthWarning] = {}
        self._gone: dict[tuple[Any, ...], float] = {}  # key -> first update without it

    @classmethod
    def from_thresholds(cls, th: Thresholds) -> WarningTracker:
        return cls(linger=th.linger_seconds, xid_hold=th.xid_hold_minutes * 60)

    def update(self, host: str, fresh: Iterable[HealthWarning], now: float) -> list[HealthWarning]:
        present = set()
        for w in fresh:
            key = w.key
            present.add(key)
            old = self._active.get(key)
            if old is not None and old.since is not None:
                since = old.since if w.since is None else min(old.since, w.since)
                w = dataclasses.replace(w, since=since)
            self._active[key] = w
            self._gone.pop(key, None)
        # A host we cannot see says nothing about its GPUs: keep their warnings (with
        # their first-seen time) until it answers again, instead of logging them as cleared.
        blind = any(w.code == HOST_STATE for w in self._active.values()
                    if w.host == host and w.key in present)
        for key, w in self._active.items():
            if w.host != host or key in present or key in self._gone:
                continue
            if blind and w.code != HOST_STATE:
                continue
            self._gone[key] = now
        return self.expire(now)

    def expire(self, now: float) -> list[HealthWarning]:
        """Move what lingered long enough to the log; returns current()."""
        for key, gone in list(self._gone.items()):
            w = self._active[key]
            hold = self.xid_hold if w.code.startswith("xid-") else self.linger
            if now - gone >= hold:
                del self._active[key]
                del self._gone[key]
                self.log.append(ClearedWarning(w, cleared=gone))
        if len(self.log) > self.log_limit:
            del self.log[: len(self.log) - self.log_limit]
        return self.current()

    def clearing(self, w: HealthWarning) -> bool:
        """True when ``w``'s host no longer reports it (it is lingering)."""
        return w.key in self._gone

    def current(self, host: str | None = None) -> list[HealthWarning]:
        items: Iterable[HealthWarning] = self._active.values()
        if host is not None:
            items = [w for w in items if w.host == host]
        return sort_warnings(items)

    def for_gpu(self, host: str, gpu: int) -> list[HealthWarning]:
        return [w for w in self.current(host) if w.gpu == gpu]
