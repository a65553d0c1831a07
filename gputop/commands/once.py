"""`gputop --once`, `gputop --json` and `gputop --demo list`: the outputs scripts use.

Plain text and plain ANSI: this path must not import Textual or rich (a subprocess test
checks sys.modules), so that `gputop --once` starts in a fraction of a second.
"""

from __future__ import annotations

import functools
import os
import sys
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from gputop import model
from gputop.analysis import hoststatus, hostview
from gputop.analysis.durations import format_duration
from gputop.analysis.health.common import HOST_STATE
from gputop.commands import common
from gputop.exitcodes import EXIT_NO_DRIVER, EXIT_OK
from gputop.model import Gpu, GpuProcess, HostSnapshot
from gputop.options import SourceOptions
from gputop.text import clock, visible, without_program_dir

WIDTH = 80
# Written to a pipe or file without $COLUMNS nothing is cut but the commands, and those
# only past this many cells (a command line can be kilobytes long).
PIPE_COMMAND_WIDTH = 200
_ELLIPSIS = "..."

_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"
_RED = "\x1b[31m"
_YELLOW = "\x1b[33m"
_GREEN = "\x1b[32m"
_RESET = "\x1b[0m"

GIB = 1024**3
MIB = 1024**2


# -- entry points ----------------------------------------------------------------------------


def run(options: SourceOptions, as_json: bool, topology: bool = False) -> int:
    return common.run("", lambda: _report(options, as_json, topology))


def _report(options: SourceOptions, as_json: bool, topology: bool = False) -> int:
    from gputop.analysis.pipeline import warnings_once

    config = common.config(options)
    settings = common.settings(config)
    # `--json --topology` alone reads NVLink remote ends and the topology (docs/performance.md)
    collected = common.collect(options, config, lean=not as_json, topology=topology)
    snapshots = collected.snapshots
    now = time.time()
    warnings = {
        snap.host: warnings_once(snap, settings, collected.me(snap.host), now)
        for snap in snapshots
    }
    out = sys.stdout
    with common.reader_may_leave():
        if as_json:
            write_json(json_document(snapshots, now, warnings), out)
        else:
            out.write(render_text(snapshots, warnings, width=terminal_width(out),
                                  color=common.use_colour(out), now=now))
    # Any host that could not be read, not only all of them: a script that reads 100
    # hosts learns of the one that is down (README, exit codes); its state is printed.
    return EXIT_NO_DRIVER if any(not snap.ok for snap in snapshots) else EXIT_OK


def run_demo_list() -> int:
    from gputop.sources.sim import list_scenarios
    from gputop.sources.simcluster import CLUSTER, DESCRIPTION

    for name, description in [*list_scenarios(), (CLUSTER, DESCRIPTION)]:
        print(f"{name:<14} {description}")
    return EXIT_OK


def terminal_width(stream: TextIO, env: Mapping[str, str] | None = None) -> int | None:
    """The terminal's width; else $COLUMNS where set; else None: no limit."""
    isatty = getattr(stream, "isatty", None)
    if isatty and isatty():
        import shutil  # a terminal only: shutil pulls in bz2, lzma and more

        return max(shutil.get_terminal_size((WIDTH, 24)).columns, 20)
    columns = (os.environ if env is None else env).get("COLUMNS", "")
    return int(columns) if columns.isdigit() and 20 <= int(columns) <= 10_000 else None


# -- JSON --------------------------------------------------------------------------------------


def json_document(
    snapshots: Sequence[HostSnapshot],
    now: float,
    warnings: dict[str, list[model.HealthWarning]] | None = None,
) -> dict[str, Any]:
    hosts = []
    for snap in snapshots:
        data = snap.to_dict()
        _add_verdicts(snap, data)
        found = (warnings or {}).get(snap.host)
        if found is not None:
            data["warnings"] = [w.to_dict() for w in found]
        hosts.append(data)
    return {"schema": model.SCHEMA_VERSION, "generated": now, "hosts": hosts}


def _add_verdicts(snap: HostSnapshot, data: dict[str, Any]) -> None:
    """What scripts look for (idle kernels, memory nobody owns) next to the raw fields:
    each process's ``flags`` and ``flag_reasons``, each GPU's ``unaccounted`` bytes, and
    power rounded once, to 0.1 W."""
    from gputop.analysis import orphans

    flags = orphans.classify_snapshot(snap, None) if snap.processes else {}
    for row, proc in zip(data["processes"], snap.processes, strict=True):
        verdict = flags.get(proc.key)
        row["flags"] = list(verdict.names) if verdict else []
        row["flag_reasons"] = dict(verdict.reasons) if verdict else {}
    ghost = orphans.unaccounted(snap)
    # None where it cannot be said: the card is not readable or a process's size is unknown
    blind = {p.gpu for p in snap.processes if p.gpu_mem is None}
    for row in data["gpus"]:
        known = row["state"] == model.GPU_OK and row["mem_used"] is not None
        row["unaccounted"] = (ghost.get(row["index"], 0)
                              if known and row["index"] not in blind else None)
        for key, value in row.items():
            if key.startswith("power_") and isinstance(value, float):
                row[key] = round(value, 1)


# What --json hands the stream at a time: json.dump writes every key, colon and comma on
# its own, each one write() when stdout is unbuffered (PYTHONUNBUFFERED=1, `python -u`):
# 3 million calls for the 20 MB of 1,000 hosts x 8 GPUs. Pieces this size are a few
# dozen calls, and never the whole document twice in memory.
JSON_PIECE = 1 << 20


def write_json(document: dict[str, Any], out: TextIO) -> None:
    """``document`` as indented JSON and a newline, in pieces of about JSON_PIECE."""
    import json  # --json only: a text table loads no JSON encoder

    encoder = json.JSONEncoder(indent=1, default=_json_default)
    piece: list[str] = []
    size = 0
    for chunk in encoder.iterencode(document):
        piece.append(chunk)
        size += len(chunk)
        if size >= JSON_PIECE:
            out.write("".join(piece))
            piece, size = [], 0
    piece.append("\n")
    out.write("".join(piece))


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


# -- text --------------------------------------------------------------------------------------


def render_text(
    snapshots: Sequence[HostSnapshot],
    warnings: dict[str, list[model.HealthWarning]] | None = None,
    width: int | None = WIDTH,
    color: bool = False,
    now: float | None = None,
) -> str:
    """``now``: the moment whose reservations hold (None: each snapshot's own time).
    Several hosts start with one line each (``summary_lines``), problems first."""
    paint = _painter(color)
    blocks = []
    if len(snapshots) > 1:
        blocks.append("\n".join(summary_lines(snapshots, warnings or {}, width, paint, now)))
    for snap in snapshots:
        lines = _host_block(hostview.view(snap, snap.time if now is None else now), width,
                            paint)
        found = (warnings or {}).get(snap.host)
        if found and not snap.ok:
            # The block says the host's state and why already: not twice in other words.
            found = [w for w in found if w.code != HOST_STATE]
        if found:
            lines.extend(_warning_lines(found, width, paint))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


_RANK_WORDS = {hoststatus.DOWN: "down", hoststatus.CRITICAL: "critical",
               hoststatus.WARNED: "warning", hoststatus.FINE: "ok"}
_SEVERITY_STYLES = {model.CRITICAL: _RED, model.WARNING: _YELLOW, model.INFO: _DIM}
_NAME_MOST = 32  # cells of a host name in the summary; longer ones are cut
_WORST_LEAST = 16  # cells the worst warning keeps however narrow the terminal


def summary_lines(
    snapshots: Sequence[HostSnapshot], warnings: Mapping[str, list[model.HealthWarning]],
    width: int | None, paint: Callable[[str, str], str], now: float | None = None,
) -> list[str]:
    """The first block for several hosts: how many are down (and why, by state), with
    critical or other warnings, and their cards free / busy / broken; then one line per
    host, problems first (the cluster overview's order): state, its cards, and its worst
    warning (for a host down: why).  A lab of 100 hosts reads its 10 dead ones here, not
    1,400 lines further down."""
    statuses = [hoststatus.status(s, warnings.get(s.host) or (), s.time if now is None else now)
                for s in snapshots]
    ranks = {rank: sum(st.rank == rank for st in statuses) for rank in _RANK_WORDS}
    down: dict[str, int] = {}
    gpus: dict[str, int] = {}
    for st in statuses:
        if st.rank == hoststatus.DOWN:
            down[st.snapshot.state] = down.get(st.snapshot.state, 0) + 1
        for kind, count in st.gpus.items():
            gpus[kind] = gpus.get(kind, 0) + count
    # Free, busy and broken always; reserved and unknown where some card is.
    kinds = [k for k in hoststatus.KINDS
             if gpus.get(k) or k in (hoststatus.FREE, hoststatus.BUSY, hoststatus.BROKEN)]
    words = []
    for rank, word in _RANK_WORDS.items():
        if ranks[rank] or rank == hoststatus.DOWN:
            text = f"{ranks[rank]} {word}"
            if rank == hoststatus.DOWN and down:
                text += " (" + ", ".join(f"{n} {state}" for state, n in down.items()) + ")"
            words.append(text)
    cards = ", ".join(f"{gpus.get(k, 0)} {k}" for k in kinds)
    hosts = f"{len(statuses)} hosts: {', '.join(words)}"
    cards = f"{sum(gpus.values())} GPUs: {cards}"
    one = f"{hosts}   {cards}"
    style = _RED if ranks[hoststatus.DOWN] else _BOLD
    lines = [paint(_fit(text, width), style)
             for text in ([one] if width is None or _display_width(one) <= width
                          else [hosts, cards])]
    state_w = max(len(s.state) for s in snapshots)
    # The names as wide as the longest, within _NAME_MOST and what leaves WORST some room.
    rest = 2 + state_w + 2 + sum(len(k) + 1 for k in kinds) + 1 + _WORST_LEAST
    name_w = max(min(max(_display_width(visible(s.host)) for s in snapshots), _NAME_MOST,
                     _NAME_MOST if width is None else width - rest), 4)
    head = (f"{'HOST':<{name_w}}  {'STATE':<{state_w}}  "
            + " ".join(k.upper() for k in kinds) + "  WORST")
    lines.append(paint(_fit(head, width), _BOLD))
    for st in hoststatus.problems_first(statuses):
        snap = st.snapshot
        name = _fit(visible(snap.host), name_w)
        name += " " * (name_w - _display_width(name))
        counts = " ".join(f"{st.gpus.get(k, 0) if snap.gpus else '-':>{len(k)}}"
                          for k in kinds)
        fixed = f"{name}  {snap.state:<{state_w}}  {counts}  "
        if st.rank == hoststatus.DOWN:
            why, style = visible(snap.error or snap.state), _RED
        elif st.worst is not None:
            w = st.worst
            where = f"GPU {w.gpu}" if w.gpu is not None else "host"
            why = f"{w.severity.upper()} {where}: {visible(w.message)}"
            style = _SEVERITY_STYLES.get(w.severity, "")
        else:
            why, style = "-", ""
        room = None if width is None else max(width - _display_width(fixed), _WORST_LEAST)
        lines.append(fixed + paint(_fit(why, room), style))
    return lines


def _painter(color: bool) -> Callable[[str, str], str]:
    if not color:
        return lambda text, style: text
    return lambda text, style: f"{style}{text}{_RESET}" if style else text


_GPU_HEADER = (
    f"{'GPU':>3}  {'NAME':<24} {'UTIL':>5} {'MEMORY':>17} {'TEMP':>5} {'POWER':>11} {'FAN':>4}"
)


def _host_block(
    shown: hostview.HostView, width: int | None, paint: Callable[[str, str], str]
) -> list[str]:
    snap = shown.snapshot
    lines = [_fit(_host_header(snap), width)]
    if not snap.ok:
        # The header says the state (UNREACHABLE); this line only why, once.
        lines.append(paint(_fit(f"  {snap.error or snap.state}", width), _RED))
        return lines
    if snap.error:  # an ok host's note, e.g. "4,096 of 100,000 processes shown"
        lines.append(paint(_fit(f"  {snap.error}", width), _YELLOW))
    lines.append(paint(_fit(_GPU_HEADER, width), _BOLD))
    if not snap.gpus:
        lines.append("  no GPUs")
    for card in shown.cards:
        lines.append(_gpu_line(card.gpu, width, paint))
        lines.extend(_fit(line, width) for line in mig_lines(card))
        if card.jobs:  # the jobs an exporter names for the card (no process list)
            lines.append(_fit(f"     jobs: {card.jobs}", width))
    for hold in shown.holds:  # a MIG device's as "GPU 0:1": it holds the device, not the card
        res = hold.reservation
        until = clock("%a %H:%M", res.until)
        note = f"  {res.note}" if res.note else ""
        text = f"  GPU {hold.unit} reserved by {res.user} until {until}{note}"
        lines.append(_fit(text, width))
    lines.append("")
    if model.NO_PROCESS_LIST in snap.missing and not snap.processes:
        lines.append(f"  {model.NO_PROCESS_LIST_TEXT}")
        return lines
    # The JOB column only where some process has a workload: most hosts have none.
    jobs = any(p.workload is not None for p in snap.processes)
    head = (
        f"{'GPU':>3} {'PID':>8} {'USER':<10} {'TYPE':<4} {'GPU-MEM':>9} {'SM%':>4} {'TIME':>7}  "
        + (f"{'JOB':<{_JOB_WIDTH}} " if jobs else "")
        + "COMMAND"
    )
    lines.append(paint(_fit(head, width), _BOLD))
    if not snap.processes:
        lines.append("  no processes")
    for proc in snap.processes:
        lines.append(_process_line(proc, snap.time, width, jobs))
    return lines


def _host_header(snap: HostSnapshot) -> str:
    parts = [snap.host]
    if snap.demo:
        parts.append("DEMO")
    if snap.hostname and snap.hostname != snap.host:
        parts.append(f"({snap.hostname})")
    if snap.state != model.HOST_OK:
        parts.append(snap.state.upper())
    if snap.driver_version:
        parts.append(f"driver {snap.driver_version}")
    if snap.cuda_version:
        parts.append(f"CUDA {snap.cuda_version}")
    parts.append(clock("%Y-%m-%d %H:%M:%S", snap.time))
    return "  ".join(parts)


@functools.lru_cache(maxsize=256)
def _card_name(name: str | None) -> str:
    # A site's 8,000 cards have a handful of model names: each is made visible and cut once.
    return _fit(visible(name or "n/a"), 24)


def _gpu_line(gpu: Gpu, width: int | None, paint: Callable[[str, str], str]) -> str:
    name = _card_name(gpu.name)
    if gpu.state != model.GPU_OK:
        text = f"{gpu.index:>3}  {name:<24} {gpu.state.upper()}: {gpu.error or ''}"
        return paint(_fit(text, width), _RED)
    util = _pct(gpu.util_gpu)
    mem = _mem_pair(gpu.mem_used, gpu.mem_total)
    temp = f"{gpu.temp}C" if gpu.temp is not None else "n/a"
    power = f"{_int(gpu.power_draw)}/{_int(gpu.power_limit)}W"
    if gpu.power_limit is None:  # no known limit: the draw alone, never "100/n/aW"
        power = f"{_int(gpu.power_draw)}W" if gpu.power_draw is not None else "n/a"
    fan = _pct(gpu.fan)
    text = f"{gpu.index:>3}  {name:<24} {util:>5} {mem:>17} {temp:>5} {power:>11} {fan:>4}"
    hot = gpu.temp is not None and gpu.temp_slowdown is not None and gpu.temp >= gpu.temp_slowdown
    return paint(_fit(text, width), _YELLOW if hot else "")


def mig_lines(card: hostview.CardView) -> list[str]:
    """Under a MIG card: its MIG state, then one line per MIG device in the card
    line's columns (untrusted text raw: the caller fits them, which escapes it)."""
    gpu = card.gpu
    lines = [f"     {card.mig_summary}"] if card.mig_summary else []
    for line in card.devices:
        dev = line.device
        mem = _mem_pair(dev.mem_used, dev.mem_total)
        bar1 = f"BAR1 {_mem(dev.bar1_used)}/{_mem(dev.bar1_total)}"
        lines.append(f" {line.label:<4}{line.title:<20} {line.activity:>9} {mem:>15}"
                     f"  {dev.uuid or 'n/a'}  {bar1}")
        if line.jobs:  # the instance's own jobs (a pod on its GI), under its line
            lines.append(f"     jobs: {line.jobs}")
    if gpu.mig_note:
        lines.append(f"     {gpu.mig_note}")
    return lines


_JOB_WIDTH = 18


def _process_line(proc: GpuProcess, now: float, width: int | None, jobs: bool = False) -> str:
    user = _fit(visible(proc.user or ("?" if proc.visible else "(hidden)")), 10)
    runtime = format_duration(now - proc.start_time) if proc.start_time is not None else "n/a"
    sm = f"{proc.sm_util}" if proc.sm_util is not None else "n/a"
    command = proc.command if proc.visible else "(not in this PID namespace)"
    if proc.state == "Z":
        command = f"<defunct> {command or ''}"
    fixed = (
        f"{proc.gpu_label:>3} {proc.pid:>8} {user:<10} {visible(proc.type)[:4]:<4} "
        f"{_mem(proc.gpu_mem):>9} {sm:>4} {runtime:>7}  "
    )
    if jobs:
        job = _fit(visible(proc.workload.label), _JOB_WIDTH) if proc.workload else "-"
        fixed += f"{job:<{_JOB_WIDTH}} "
    room = PIPE_COMMAND_WIDTH if width is None else max(width - _display_width(fixed), 8)
    shown = visible(command or "n/a")
    if _display_width(shown) > room:  # cut: show the script, not the interpreter's path
        shown = without_program_dir(shown)
    return fixed + _fit(shown, room)


def _warning_lines(
    warnings: list[model.HealthWarning], width: int | None, paint: Callable[[str, str], str]
) -> list[str]:
    lines = ["", paint("WARNINGS", _BOLD)]
    styles = {model.CRITICAL: _RED, model.WARNING: _YELLOW, model.INFO: _DIM}
    for w in sorted(warnings, key=lambda w: model.SEVERITY_ORDER.get(w.severity, 9)):
        where = f"GPU {w.gpu}" if w.gpu is not None else "host"
        text = f"{w.severity.upper():<8} {where:<6} {w.message}"
        lines.append(paint(_fit(text, width), styles.get(w.severity, "")))
        if w.hint:
            lines.append(_fit(f"{'':<15} hint: {w.hint}", width))
    return lines


# -- formatting helpers ------------------------------------------------------------------------


def _char_width(c: str) -> int:
    if unicodedata.combining(c):
        return 0
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def _display_width(text: str) -> int:
    if text.isascii():
        return len(text)
    return sum(_char_width(c) for c in text)


def _fit(text: str, width: int | None) -> str:
    """Text made visible (every line but a process's, whose cells are escaped each,
    passes here: what a remote host sent never reaches the terminal raw), cut to at most
    ``width`` terminal cells (None: no limit), marking the cut."""
    text = visible(text)
    if width is None or _display_width(text) <= width:
        return text
    room = width - len(_ELLIPSIS)
    out = []
    used = 0
    for c in text:
        w = _char_width(c)
        if used + w > room:
            break
        out.append(c)
        used += w
    return "".join(out) + _ELLIPSIS


def _pct(value: int | float | None) -> str:
    return f"{round(value)}%" if value is not None else "n/a"


def _int(value: float | None) -> str:
    return f"{round(value)}" if value is not None else "n/a"


def _gib(value: int | None) -> str:
    return f"{value / GIB:.1f}" if value is not None else "n/a"


def _mem_pair(used: int | None, total: int | None) -> str:
    """``used/total`` of a card or MIG device in one unit rule: ``21.8/79.6GiB``; a used
    amount under 1 GiB in MiB (``13MiB/9.6GiB``), never rounded to a false ``0.0``."""
    if used is None and total is None:
        return "n/a"
    if used is not None and 0 < used < GIB:
        return f"{_mem(used)}/{_mem(total)}"
    return f"{_gib(used)}/{_gib(total)}GiB"


def _mem(value: int | None) -> str:
    if value is None:
        return "n/a"
    if value >= GIB:
        return f"{value / GIB:.1f}GiB"
    return f"{value // MIB}MiB"
