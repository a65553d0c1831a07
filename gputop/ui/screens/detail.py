"""One process in full: command line, parent chain, facts, GPU memory and SM % history.

Updates live from ``app.state_changed``; says so when the process has exited.  The
command line, user names and parents' commands are untrusted text (rich Text, control
characters made visible).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from gputop.analysis import workload_groups
from gputop.model import GpuProcess
from gputop.text import capped
from gputop.ui import fmt
from gputop.ui.keys import bindings
from gputop.ui.state import RowKey, UiState

MAX_COMMAND_CHARS = 4096  # about a screenful: the rest is counted, not shown

if TYPE_CHECKING:
    from textual import getters

    from gputop.ui.app import GputopApp


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def _environment_rows(facts: dict[str, Any]) -> list[tuple[str, str]]:
    """The environment variables that say which GPUs, job and rank (sources/procfs.py);
    where /proc/PID/environ is not readable, that it is not."""
    if "environment" not in facts:
        return []  # a source that reads no environment (the simulator, a remote host)
    environment = facts["environment"]
    if environment is None:
        return [("environment", "not readable (another user's process)")]
    if not environment:
        return [("environment", "no CUDA_VISIBLE_DEVICES, Slurm or rank variables")]
    return [("env", f"{name}={value}") for name, value in environment.items()]


def process_title(key: RowKey, proc: GpuProcess | None) -> Text:
    """PID, host, GPU and user of a process's view (this one, its metrics); or that it is
    no longer listed."""
    host, pid, _ticks, gpu = key
    title = Text()
    title.append(f"PID {pid}", style="bold")
    title.append(f" on {fmt.visible(host)}, GPU {proc.gpu_label if proc else gpu}")
    if proc is None:
        title.append("  — no longer listed: exited or freed its GPU context",
                     style="bold red")
    else:
        title.append("  ")
        title.append(fmt.visible(proc.user or "?"), style="bold cyan")
    return title


class DetailScreen(Screen[None]):
    DEFAULT_CSS = """
    DetailScreen > VerticalScroll { padding: 0 1; }
    DetailScreen .section { margin-top: 1; text-style: bold; color: $accent; }
    """

    BINDINGS: ClassVar[list[BindingType]] = bindings("detail")

    if TYPE_CHECKING:
        app = getters.app(GputopApp)

    def __init__(self, key: RowKey) -> None:
        super().__init__()
        self.key = key
        self.facts: dict[str, Any] | None = None  # from /proc or the simulator, if any
        self.chain: list[dict[str, Any]] | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="detail-title")
            yield Static("Command line", classes="section")
            yield Static(id="detail-command")
            yield Static("Facts", classes="section")
            yield Static(id="detail-facts")
            yield Static("Parent chain", classes="section")
            yield Static(id="detail-parents")
            yield Static("History", classes="section")
            yield Static(id="detail-history")
        yield Footer()

    def on_mount(self) -> None:
        self.app.state_changed.subscribe(self, self._changed)
        self.run_worker(self._read_process, thread=True, exit_on_error=False, name="detail")
        self.redraw()

    def _changed(self, state: UiState) -> None:
        self.redraw()

    def _read_process(self) -> None:
        """cwd and the parent chain, read where the source can, for this very process."""
        host, pid, ticks, _gpu = self.key
        details = self.app.process_details(host, pid, ticks)
        self.app.call_from_thread(self._facts_read, details.facts, details.parents)

    def _facts_read(self, facts: dict[str, Any] | None, chain: list[dict] | None) -> None:
        self.facts, self.chain = facts, chain
        self.redraw()

    def redraw(self) -> None:
        state = self.app.state
        proc = state.process(self.key)
        self.query_one("#detail-title", Static).update(process_title(self.key, proc))
        if proc is None:
            return
        command = " ".join(proc.cmdline) if proc.cmdline else (proc.command or "?")
        self.query_one("#detail-command", Static).update(
            Text(capped(fmt.visible(command), MAX_COMMAND_CHARS)))
        self.query_one("#detail-facts", Static).update(self._facts_table(state, proc))
        self.query_one("#detail-parents", Static).update(self._parents(proc))
        self.query_one("#detail-history", Static).update(self._history(state, proc))

    def _facts_table(self, state: UiState, proc: GpuProcess) -> Table:
        now = state.snapshots[self.key[0]].time if self.key[0] in state.snapshots else 0.0
        table = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        running = None if proc.start_time is None else now - proc.start_time
        rows = [
            ("user", f"{proc.user or '?'}" + (f" (uid {proc.uid})" if proc.uid is not None
                                              else "")),
            ("state", proc.state or "-"),
            ("started", f"{_when(proc.start_time)} ({fmt.duration(running)} ago)"),
            ("type", {"C": "compute", "G": "graphics", "C+G": "compute + graphics"}.get(
                proc.type, proc.type)),
            ("GPU memory", fmt.size(proc.gpu_mem)),
            ("SM", fmt.percent(proc.sm_util)),
            ("memory bandwidth", fmt.percent(proc.mem_util)),
            ("CPU", fmt.percent(proc.cpu_percent)),
            ("RSS", fmt.size(proc.rss)),
            ("start ticks", "-" if proc.start_ticks is None else str(proc.start_ticks)),
        ]
        if proc.mig_device is not None:  # the MIG device it runs on
            rows.insert(4, ("MIG device", f"{proc.gpu_label}  GI {proc.gpu_instance_id} / CI "
                            f"{proc.compute_instance_id}  {fmt.visible(proc.mig_uuid or '')}"))
        if self.facts is not None:
            if self.facts.get("error"):
                rows.append(("cwd", f"not readable: {self.facts['error']}"))
            else:
                rows.append(("cwd", self.facts.get("cwd") or "not readable (permission)"))
        if self.facts is not None and not self.facts.get("error"):
            rows.extend(_environment_rows(self.facts))
        if proc.kernel_file:
            exists = {True: "", False: " (deleted)", None: ""}[proc.kernel_file_exists]
            rows.append(("kernel file", proc.kernel_file + exists))
        flags = state.flags.get(self.key[0], {}).get(proc.key)
        for line in (flags.explain() if flags is not None and hasattr(flags, "explain")
                     else []):
            rows.append(("flag", line))
        if not proc.visible:
            rows.append(("note", "NVML lists this pid but it is not in our PID namespace"))
        if proc.workload is not None:
            rows.extend(workload_groups.facts(proc.workload))
        for name, value in rows:
            table.add_row(name, Text(fmt.visible(value)))
        return table

    def _parents(self, proc: GpuProcess) -> Text:
        out = Text()
        if self.chain is not None:
            for entry in self.chain:
                out.append(f"{entry.get('pid', '?'):>7} ", style="bold")
                out.append(f"{fmt.visible(entry.get('user') or '?'):<10} ", style="cyan")
                out.append(fmt.visible(entry.get("command") or "?") + "\n")
            if not self.chain:
                out.append("no readable parents\n", style="dim")
            return out
        # Remote hosts: what the snapshot carries.
        if proc.ppid is not None:
            out.append(f"{proc.ppid:>7} ", style="bold")
            out.append(f"{fmt.visible(proc.parent_user or '?'):<10} ", style="cyan")
            out.append(fmt.visible(proc.parent_command or "?"))
        else:
            out.append("unknown", style="dim")
        return out

    def _history(self, state: UiState, proc: GpuProcess) -> Text:
        host, pid, ticks, gpu = self.key
        history = state.history
        snap = state.snapshots.get(host)
        now = snap.time if snap else 0.0
        total = None
        if snap is not None:
            card = snap.gpu(gpu)
            total = card.mem_total if card else None
        mem = history.process_series(host, pid, ticks, "gpu_mem")
        sm = history.process_series(host, pid, ticks, "sm_util")
        span = min(history.seconds, 600.0)
        width = max(self.size.width - 24, 20)
        mem_pct = [(t, 100.0 * v / total) for t, v in mem] if total else []
        out = Text()
        out.append("GPU-MEM ", style="bold")
        out.append(fmt.sparkline(mem_pct, width, now, span), style="yellow")
        out.append(f" {fmt.size(proc.gpu_mem)}\n")
        out.append("SM %    ", style="bold")
        out.append(fmt.sparkline(sm, width, now, span), style="green")
        out.append(f" {fmt.percent(proc.sm_util)}\n")
        bandwidth = history.process_series(host, pid, ticks, "mem_util")
        out.append("MEM BW %", style="bold")
        out.append(fmt.sparkline(bandwidth, width, now, span), style="magenta")
        out.append(f" {fmt.percent(proc.mem_util)}\n")
        first = history.first_seen(host, pid, ticks)
        until = history.simulated_until.get(host)
        if until is not None and first is not None and first <= until:
            # --demo: the start of the chart was made up, not seen (it began at `until`)
            seen = (f"simulated before {_when(until)}, observed since; "
                    f"in the simulated past from {_when(first)}")
        else:
            seen = f"as observed by gputop; first seen {_when(first)}"
        out.append(f"last {span / 60:.0f} min, 0-100 % scale, {seen}; m: all metrics",
                   style="dim")
        return out

    def action_close(self) -> None:
        self.dismiss()

    def action_metrics(self) -> None:
        from gputop.ui.screens.metrics import MetricsScreen

        self.app.push_screen(MetricsScreen(self.key))
