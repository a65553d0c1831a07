"""Which GPU processes hold memory for nobody: kernels, orphans, idle holders, zombies.

Pure: every fact comes from the snapshot (the collector read /proc for us) and from the
History of what gputop has observed.  Nothing here touches the system, so the rules can
be tested on any snapshot and run on the UI thread.

The verdicts are advice shown to a person who then confirms a kill, so each flag carries
the one line that justifies it ("idle: 0 % SM for 47 min as observed by gputop ...").
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping

from gputop.analysis.durations import format_duration
from gputop.model import GPU_OK, NO_PROCESS_LIST, DeviceHolder, GpuProcess, HostSnapshot
from gputop.records import Record, field, record

MIB = 1024 * 1024
GIB = 1024 * MIB

FLAG_NAMES = ("zombie", "orphan", "idle", "kernel", "hidden")

# Per GPU, memory NVML counts as used that no process owns is normal up to this much: the
# driver's own reservation plus, on a card driving a display, the framebuffer.  The RTX 4080
# capture (tests/fixtures) shows 244-259 MiB that way, an idle H100 in MIG mode 59 MiB.
UNACCOUNTED_FLOOR = 512 * MIB
UNACCOUNTED_FLOOR_FRACTION = 0.01

# Helpers of the driver itself hold /dev/nvidia* without a context NVML would list.
DRIVER_HELPERS = frozenset(
    {
        "nvidia-persistenced",
        "nvidia-smi",
        "nv-hostengine",
        "nv-fabricmanager",
        "nvidia-fabricmanager",
        "dcgm-exporter",
        "nvidia_gpu_exporter",
        "gputop",
    }
)

_NOTEBOOK_SERVERS = (
    "jupyter-notebook",
    "jupyter-lab",
    "jupyter-server",
    "jupyter-nbclassic",
    "jupyterhub-singleuser",
    "jupyter_server",
    "jupyterlab",
    "notebook",
    "nbclassic",
    "voila",
)


@record(frozen=True, slots=True)
class OrphanRules(Record):
    """When an idle process is worth flagging (config: reclaim)."""

    idle_minutes: float = 30.0
    idle_min_mem_mib: int = 1024


@record(frozen=True, slots=True)
class ProcessFlags(Record):
    """What the orphan rules found about one process, and why."""

    kernel: bool = False
    orphan: bool = False
    idle: bool = False
    zombie: bool = False
    hidden: bool = False
    # (flag name, one-line explanation), in FLAG_NAMES order: what the detail view shows
    reasons: tuple[tuple[str, str], ...] = ()
    idle_since: float | None = None  # start of the observed idle streak
    idle_recorded: bool = False  # idle_since comes from the usage ledger, not this session
    idle_simulated: bool = False  # idle_since lies in the demo's made-up past, not observed
    server_pid: int | None = None  # a kernel's notebook server, when it is its parent
    busy: bool = False  # computing right now (SM > 0 % in this snapshot)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.reasons)

    @property
    def reclaimable(self) -> bool:
        """Worth offering in the reclaim view: the memory is held for nobody.

        A busy orphan that is not a kernel is most likely a job started with nohup whose
        shell has gone: it is flagged, but not offered.
        """
        if self.zombie or self.hidden:
            return False
        return self.idle or (self.orphan and (self.kernel or not self.busy))

    def explain(self) -> list[str]:
        return [f"{name}: {text}" for name, text in self.reasons]

    def __bool__(self) -> bool:
        return bool(self.reasons)


@record(frozen=True, slots=True)
class Reclaimable(Record):
    """One process (over all its GPUs) whose memory a kill would give back."""

    host: str
    pid: int
    start_ticks: int | None
    user: str | None
    uid: int | None
    command: str | None
    gpus: tuple[int, ...]
    mem: int | None  # bytes over all its GPUs; None when NVML gave no figure
    flags: ProcessFlags
    simulated: bool = False


@record(frozen=True, slots=True)
class GhostMemory(Record):
    """Per host: GPU memory that no listed process explains."""

    unaccounted: dict[int, int] = field(default_factory=dict)  # gpu index -> bytes
    holders: tuple[DeviceHolder, ...] = ()  # hold /dev/nvidia* but NVML does not list them
    note: str | None = None  # why the /proc/*/fd scan is incomplete


# -- kernels and parents --------------------------------------------------------------


def is_kernel(process: GpuProcess) -> bool:
    """A Jupyter/IPython kernel, by its command line or its connection file."""
    if process.kernel_file:
        return True
    args = process.cmdline or tuple((process.command or "").split())
    # Every test below needs "kernel" in some argument (ipykernel, kernel-*.json); one
    # substring search over the joined line rejects most processes at a fraction of the
    # cost of the per-argument loop, which dominated classify_snapshot at 2,000 rows.
    if "kernel" not in " ".join(args):
        return False
    for i, arg in enumerate(args):
        base = os.path.basename(arg)
        if base.startswith("ipykernel_launcher") or base == "ipykernel":
            return True
        if arg == "-m" and i + 1 < len(args) and args[i + 1].startswith("ipykernel"):
            return True
        if _is_connection_file(base):
            return True
    return False


def _is_connection_file(name: str) -> bool:
    return name.startswith("kernel-") and name.endswith(".json")


def is_notebook_server(command: str | None) -> bool:
    if not command:
        return False
    for word in command.split()[:4]:
        base = os.path.basename(word)
        if base.startswith(_NOTEBOOK_SERVERS):
            return True
        if base == "jupyter" or base.startswith("jupyter-"):
            return True
    return False


def subreaper_name(process: GpuProcess) -> str | None:
    """Who adopted the process if its parent is gone, else None.

    Linux re-parents an orphan to the nearest subreaper, or to init (pid 1).  A user's
    `systemd --user` is the usual subreaper on desktops and login nodes.
    """
    if process.ppid is None:
        return None
    if process.ppid <= 1:
        return "init (pid 1)"
    parent = (process.parent_command or "").split()
    if parent and os.path.basename(parent[0]) == "systemd" and "--user" in parent:
        return f"systemd --user (pid {process.ppid})"
    return None


def _parent_label(process: GpuProcess) -> str:
    if process.ppid is None:
        return "unknown"
    command = _short(process.parent_command)
    return f"{process.ppid} ({command})" if command else str(process.ppid)


def _short(command: str | None, width: int = 40) -> str:
    if not command:
        return ""
    command = " ".join(command.split())
    return command if len(command) <= width else command[: width - 1] + "…"


# -- classification ---------------------------------------------------------------------


def classify(
    process: GpuProcess,
    snapshot: HostSnapshot,
    history: object | None,
    rules: OrphanRules | None = None,
    now: float | None = None,
    totals: Mapping[tuple[int, int | None], tuple[int, bool]] | None = None,
) -> ProcessFlags:
    """Flags of one process row.  ``history`` is a History (or None: no idle verdict).

    ``totals``: per (pid, start_ticks), the GPU memory over all its GPUs and whether it
    computes on any; classify_snapshot computes it once for all rows.
    """
    rules = rules or OrphanRules()
    now = snapshot.time if now is None else now
    key = (process.pid, process.start_ticks)
    found = totals.get(key) if totals is not None else None
    held, busy = found if found is not None else _totals(snapshot, process)[key]
    reasons: dict[str, str] = {}
    server_pid: int | None = None
    idle_since: float | None = None
    recorded = simulated = False

    if not process.visible:
        reasons["hidden"] = (
            f"NVML lists pid {process.pid} but it is not in this PID namespace "
            "(another container or namespace)"
        )

    if process.state == "Z":
        reasons["zombie"] = f"defunct; its parent {_parent_label(process)} must reap it"

    kernel = process.visible and is_kernel(process)
    adopted = subreaper_name(process) if process.visible else None
    if kernel:
        if is_notebook_server(process.parent_command) and process.ppid:
            server_pid = process.ppid
            reasons["kernel"] = f"Jupyter kernel, notebook server pid {server_pid}"
        elif adopted:
            reasons["kernel"] = "Jupyter kernel, notebook server not running"
        else:
            reasons["kernel"] = f"Jupyter kernel, started by {_parent_label(process)}"

    if process.visible and process.state != "Z":
        orphan = _orphan_reason(process, kernel, adopted)
        if orphan:
            reasons["orphan"] = orphan

    if history is not None and process.visible and process.state != "Z":
        idle = _idle(process, snapshot.host, history, rules, now, held)
        if idle is not None:
            idle_since, recorded = idle
            simulated = not recorded and _simulated(history, snapshot.host, idle_since)
            idle_for = format_duration(now - idle_since, minutes=True)
            day = "%H:%M" if now - idle_since < 86400 else "%a %d %b %H:%M"
            clock = time.strftime(day, time.localtime(idle_since))
            source = ("per the usage ledger" if recorded else
                      "in the demo's simulated past" if simulated else "as observed by gputop")
            reasons["idle"] = (
                f"0 % SM for {idle_for} {source} (since {clock}) "
                f"while holding {format_bytes(held)}"
            )

    if busy and "orphan" in reasons and not kernel:
        reasons["orphan"] += " (still computing: started with nohup?)"
    if not reasons:  # most rows: skip building the ordered tuple
        return _BUSY if busy else _CLEAN
    ordered = tuple((name, reasons[name]) for name in FLAG_NAMES if name in reasons)
    return ProcessFlags(
        kernel=kernel,
        orphan="orphan" in reasons,
        idle="idle" in reasons,
        zombie="zombie" in reasons,
        hidden="hidden" in reasons,
        reasons=ordered,
        idle_since=idle_since,
        idle_recorded=recorded,
        idle_simulated=simulated,
        server_pid=server_pid,
        busy=busy,
    )


# The verdicts of a row with no flag; frozen, so every such row can share them.
_CLEAN = ProcessFlags()
_BUSY = ProcessFlags(busy=True)


def _orphan_reason(process: GpuProcess, kernel: bool, adopted: str | None) -> str | None:
    # Display servers and desktop shells are started by init or systemd --user on
    # purpose; a graphics-only context is never "left over".
    if adopted and process.type != "G":
        if kernel:
            return f"its notebook server is gone; re-parented to {adopted}"
        return f"its parent is gone; re-parented to {adopted}"
    if kernel and process.kernel_file and process.kernel_file_exists is False:
        return f"its connection file {process.kernel_file} was deleted"
    return None


def _simulated(history: object, host: str, when: float) -> bool:
    """``when`` is before the demo began observing: its seeded history was made up."""
    simulated = getattr(history, "simulated", None)
    return bool(simulated is not None and simulated(host, when))


def _idle(
    process: GpuProcess,
    host: str,
    history: object,
    rules: OrphanRules,
    now: float,
    held: int,
) -> tuple[float, bool] | None:
    """When the current idle run began, and whether the ledger's record says so (it reaches
    back before this session; gputop's own observation decides that the run is on)."""
    floor = rules.idle_min_mem_mib * MIB
    if held < floor:
        return None

    def idle_sample(sample: object) -> bool:
        sm = getattr(sample, "sm_util", None)
        mem = getattr(sample, "gpu_mem", None)
        return sm == 0 and mem is not None and mem >= floor

    # The key names the predicate, so the history walks only the samples since last tick.
    since = history.process_streak(  # type: ignore[attr-defined]
        host, process.pid, process.start_ticks, idle_sample, key=("idle", floor)
    )
    if since is None:
        return None
    record = getattr(history, "recorded_idle", None)
    earlier = record(host, process.pid, process.start_time) if record is not None else None
    recorded = earlier is not None and earlier < since
    if recorded and earlier is not None:
        since = earlier
    if now - since < rules.idle_minutes * 60.0:
        return None
    return since, recorded


def _totals(
    snapshot: HostSnapshot, only: GpuProcess | None = None
) -> dict[tuple[int, int | None], tuple[int, bool]]:
    """Per (pid, start_ticks): GPU memory over all its GPUs, and whether any SM is busy."""
    out: dict[tuple[int, int | None], tuple[int, bool]] = {}
    for p in snapshot.processes:
        if only is not None and (p.pid, p.start_ticks) != (only.pid, only.start_ticks):
            continue
        key = (p.pid, p.start_ticks)
        mem, busy = out.get(key, (0, False))
        out[key] = (mem + (p.gpu_mem or 0), busy or (p.sm_util or 0) > 0)
    if only is not None and (only.pid, only.start_ticks) not in out:
        out[(only.pid, only.start_ticks)] = (only.gpu_mem or 0, (only.sm_util or 0) > 0)
    return out


def classify_snapshot(
    snapshot: HostSnapshot,
    history: object | None,
    rules: OrphanRules | None = None,
    now: float | None = None,
) -> dict[tuple[int, int], ProcessFlags]:
    """Flags of every process row, keyed like GpuProcess.key: (gpu, pid)."""
    totals = _totals(snapshot)
    return {
        p.key: classify(p, snapshot, history, rules, now, totals) for p in snapshot.processes
    }


def format_bytes(value: int | None) -> str:
    if value is None:
        return "?"
    if value >= GIB:
        return f"{value / GIB:.1f} GiB"
    return f"{value / MIB:.0f} MiB"


# -- memory nobody explains -------------------------------------------------------------


def unaccounted(snapshot: HostSnapshot) -> dict[int, int]:
    """Per GPU, bytes NVML counts as used beyond what its listed processes hold.

    Only GPUs over the driver's usual reservation are returned, so an idle card shows
    nothing.  A GPU with a process whose memory NVML did not report is skipped: the
    difference would be a guess.
    """
    listed: dict[int, int] = {}
    unknown: set[int] = set()
    for proc in snapshot.processes:
        if proc.gpu_mem is None:
            unknown.add(proc.gpu)
        else:
            listed[proc.gpu] = listed.get(proc.gpu, 0) + proc.gpu_mem
    out: dict[int, int] = {}
    for gpu in snapshot.gpus:
        if gpu.mem_used is None or gpu.index in unknown:
            continue
        extra = gpu.mem_used - listed.get(gpu.index, 0)
        if extra > driver_reserve(gpu.mem_total):
            out[gpu.index] = extra
    return out


def driver_reserve(mem_total: int | None) -> int:
    """What a card of ``mem_total`` bytes counts as used with nobody on it (see
    UNACCOUNTED_FLOOR)."""
    return max(UNACCOUNTED_FLOOR, int((mem_total or 0) * UNACCOUNTED_FLOOR_FRACTION))


UNSEEN = "in use by something unseen"
# Beyond the driver's reserve, this much more unlisted memory (the larger of the two) is
# someone's work: a container with a pid namespace of its own, a vGPU guest, any process
# the driver does not list (the case: 58.6 GiB at 100 %, no process listed).
UNSEEN_MARGIN = GIB
UNSEEN_MARGIN_FRACTION = 0.02
# A card that draws a desktop (a graphics process listed on it) holds framebuffers and
# compositor memory no process is charged for: the RTX 4000 Ada capture (tests/fixtures,
# a Wayland desktop) uses 2.3 GiB (11 % of the card) beyond what its four listed
# processes hold.  Such a card needs a quarter of itself unlisted to count as used.
DESKTOP_MARGIN_FRACTION = 0.25


def unseen_use(snapshot: HostSnapshot) -> dict[int, str]:
    """Per card, why memory no listed process holds makes it busy ("in use by something
    unseen: 58.6 GiB used that no listed process holds").  Such a card is not free (pick,
    reserve --count, run: analysis/pick.py) and is warned about (the ``unseen-use`` rule).
    A source that exports no process list (``model.NO_PROCESS_LIST``) says nothing here:
    its cards' processes are not known to be absent."""
    if NO_PROCESS_LIST in snapshot.missing:
        return {}
    # A lost or broken card has its own warning and is never picked.
    totals = {gpu.index: gpu.mem_total for gpu in snapshot.gpus if gpu.state == GPU_OK}
    desktops = {p.gpu for p in snapshot.processes if "G" in (p.type or "")}
    out: dict[int, str] = {}
    for index, amount in unaccounted(snapshot).items():
        if index not in totals:
            continue
        total = totals[index] or 0
        fraction = DESKTOP_MARGIN_FRACTION if index in desktops else UNSEEN_MARGIN_FRACTION
        if amount > driver_reserve(total) + max(UNSEEN_MARGIN, int(total * fraction)):
            out[index] = f"{UNSEEN}: {format_bytes(amount)} used that no listed process holds"
    return out


def unlisted_holders(
    snapshot: HostSnapshot, ignore_pids: Iterable[int] = ()
) -> tuple[DeviceHolder, ...]:
    """Holders of /dev/nvidia* that NVML does not list, without the driver's helpers.

    ``ignore_pids``: gputop's own process (NVML opens the device files for it).
    """
    listed = {p.pid for p in snapshot.processes}
    ignored = set(ignore_pids)
    out = []
    for holder in snapshot.device_holders:
        if holder.pid in listed or holder.pid in ignored:
            continue
        words = (holder.command or "").split()
        if words and os.path.basename(words[0]) in DRIVER_HELPERS:
            continue
        out.append(holder)
    return tuple(out)


def ghost_memory(snapshot: HostSnapshot, ignore_pids: Iterable[int] = ()) -> GhostMemory:
    return GhostMemory(
        unaccounted=unaccounted(snapshot),
        holders=unlisted_holders(snapshot, ignore_pids),
        note=snapshot.device_scan_note,
    )


# -- what a kill would give back ----------------------------------------------------------


def may_signal(process: GpuProcess, me: str | int | None, is_root: bool) -> bool:
    """Whether ``me`` (a user name or uid) owns the process, or is root."""
    if is_root:
        return True
    if me is None:
        return False
    if isinstance(me, int):
        return process.uid is not None and process.uid == me
    return process.user is not None and process.user == me


def reclaimable(
    snapshot: HostSnapshot,
    flags: Mapping[tuple[int, int], ProcessFlags],
    me: str | int | None,
    is_root: bool,
) -> list[Reclaimable]:
    """Orphaned or idle processes ``me`` may kill, one entry per process, largest first."""
    grouped: dict[tuple[int, int | None], list[GpuProcess]] = {}
    for proc in snapshot.processes:
        verdict = flags.get(proc.key)
        if verdict is None or not verdict.reclaimable or proc.start_ticks is None:
            continue
        if not may_signal(proc, me, is_root):
            continue
        grouped.setdefault((proc.pid, proc.start_ticks), []).append(proc)
    out = []
    for (pid, ticks), rows in grouped.items():
        mems = [r.gpu_mem for r in rows if r.gpu_mem is not None]
        first = rows[0]
        out.append(
            Reclaimable(
                host=snapshot.host,
                pid=pid,
                start_ticks=ticks,
                user=first.user,
                uid=first.uid,
                command=first.command,
                gpus=tuple(sorted({r.gpu for r in rows})),
                mem=sum(mems) if mems else None,
                flags=flags[first.key],
                simulated=first.simulated,
            )
        )
    out.sort(key=lambda r: (-(r.mem or 0), r.pid))
    return out
