"""The kill confirmation: what exactly will be signalled, then each outcome.

``open_kill(app)`` (the app's k/F9) takes the tagged rows, or the selected one, keeps the
processes this user may signal, and asks once.  Nothing is sent before the user says yes;
Cancel has the focus, so a stray Enter does nothing.  The requests go through the host's
feed (``app.request``), where the process identity (pid + start_ticks) is checked again
right before the signal, locally or inside the remote probe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen
from textual.widgets import Button, Label, RadioSet, Static

from gputop.analysis.orphans import may_signal
from gputop.model import GpuProcess
from gputop.ui import fmt
from gputop.ui.cells import command_label
from gputop.ui.keys import bindings
from gputop.ui.table_model import FLAG_SHORT
from gputop.ui.widgets.marks import MarkedRadioButton

if TYPE_CHECKING:
    from gputop.ui.app import GputopApp

SIGNALS = ("TERM", "KILL", "INT")
Request = Callable[[str, dict], Awaitable[dict]]


@dataclass(frozen=True)
class KillTarget:
    """One process to signal: its identity as shown, and what the dialog tells about it."""

    host: str
    pid: int
    start_ticks: int
    user: str | None
    command: str | None
    gpus: tuple[int, ...]
    gpu_mem: int | None  # bytes over all its GPUs
    flags: tuple[str, ...] = ()  # orphan flag names, as in the table
    notes: tuple[str, ...] = ()  # each flag's reason, then the cautions (see cautions())

    def request(self, sig: str, grace: float) -> dict:
        return {
            "op": "kill",
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "signal": sig,
            "grace": grace,
        }


# -- who may signal what ------------------------------------------------------------------

# Killing one of these takes a desktop down with it, not only a GPU job.
DISPLAY_COMMANDS = frozenset({
    "xorg", "x", "xwayland", "gnome-shell", "kwin_x11", "kwin_wayland", "plasmashell",
    "mutter", "gdm", "gdm-x-session", "sddm", "lightdm", "weston", "sway", "cinnamon",
})


def cautions(proc: GpuProcess, me: str | None) -> list[str]:
    """What to think twice about before signalling ``proc`` (as ``me``, maybe root)."""
    out = []
    argv0 = (proc.command or "").split(" ", 1)[0].rsplit("/", 1)[-1].lower()
    if "G" in proc.type or argv0 in DISPLAY_COMMANDS:
        out.append("CAUTION: a display process: killing it ends the desktop session")
    if proc.user != me:
        owner = proc.user or (f"uid {proc.uid}" if proc.uid is not None else "unknown")
        out.append(f"CAUTION: belongs to {owner}, not to you ({me or '?'})")
    return out


def targets_from_rows(
    rows: Iterable[tuple[str, GpuProcess]], snapshots: dict[str, Any],
    flags: dict[str, dict[tuple[int, int], Any]] | None = None,
    me: Callable[[str], str | None] | None = None,
) -> list[KillTarget]:
    """One target per (host, pid, start_ticks), memory summed over all its GPUs; with
    ``flags`` (per host, as in UiState) and ``me`` (who acts on a host), the reasons and
    cautions the dialog shows."""
    seen: dict[tuple[str, int, int], KillTarget] = {}
    for host, proc in rows:
        if proc.start_ticks is None:
            continue
        key = (host, proc.pid, proc.start_ticks)
        if key in seen:
            continue
        snap = snapshots.get(host)
        same = [
            p
            for p in (snap.processes if snap is not None else (proc,))
            if p.pid == proc.pid and p.start_ticks == proc.start_ticks
        ] or [proc]
        mems = [p.gpu_mem for p in same if p.gpu_mem is not None]
        names: list[str] = []
        notes: list[str] = []
        for p in same:
            found = (flags or {}).get(host, {}).get((p.gpu, p.pid))
            for name, reason in getattr(found, "reasons", ()) or ():
                if name not in names:
                    names.append(name)
                    notes.append(f"{name}: {reason}")
        if me is not None:
            notes.extend(cautions(proc, me(host)))
        seen[key] = KillTarget(
            host=host,
            pid=proc.pid,
            start_ticks=proc.start_ticks,
            user=proc.user,
            command=proc.command,
            gpus=tuple(sorted({p.gpu for p in same})),
            gpu_mem=sum(mems) if mems else None,
            flags=tuple(names),
            notes=tuple(notes),
        )
    return list(seen.values())


def refusal(proc: GpuProcess, me: str | int | None, is_root: bool) -> str | None:
    """Why this process is not offered for a kill, or None when it is."""
    if not proc.visible:
        return f"pid {proc.pid} is not in this PID namespace (container): cannot signal it"
    if proc.start_ticks is None:
        return f"pid {proc.pid}: start time unknown, so its identity cannot be checked"
    if proc.state == "Z":
        parent = f"{proc.ppid}" if proc.ppid is not None else "?"
        return f"pid {proc.pid} is a zombie: its parent {parent} must reap it"
    if not may_signal(proc, me, is_root):
        return f"pid {proc.pid} belongs to {proc.user or proc.uid or 'another user'}, not you"
    return None


# -- the dialog -----------------------------------------------------------------------------


def targets_table(targets: list[KillTarget]) -> Table:
    table = Table(box=None, pad_edge=False, expand=True, show_edge=False)
    table.add_column("HOST", no_wrap=True)
    table.add_column("PID", justify="right", no_wrap=True)
    table.add_column("USER", no_wrap=True)
    table.add_column("GPU", no_wrap=True)
    table.add_column("GPU-MEM", justify="right", no_wrap=True)
    table.add_column("FLAGS", no_wrap=True)
    table.add_column("COMMAND", no_wrap=True, overflow="ellipsis", ratio=1)
    for t in targets:
        table.add_row(
            fmt.safe_text(t.host),
            Text(str(t.pid)),
            fmt.safe_text(t.user or "?"),
            Text(",".join(str(g) for g in t.gpus)),
            Text(fmt.size(t.gpu_mem)),
            Text(" ".join(FLAG_SHORT.get(f, f.upper()) for f in t.flags) or "-"),
            fmt.safe_text(command_label(t.command) if t.command else t.command),
        )
    return table


def notes_text(targets: list[KillTarget], hidden: int) -> Text:
    """Each target's reasons and cautions, and how many of them the view's filter hides."""
    out = Text()
    if hidden:
        noun = "process is" if hidden == 1 else "processes are"
        out.append(f"{hidden} tagged {noun} hidden by the current filter or on another "
                   "host: all are listed above\n", style="bold")
    for t in targets:
        for note in t.notes:
            style = "bold red" if note.startswith("CAUTION") else ""
            out.append(f"{fmt.visible(t.host)} pid {t.pid}: ", style="bold")
            out.append(fmt.visible(note) + "\n", style=style)
    out.rstrip()
    return out


class KillScreen(ModalScreen["str | None"]):
    """Asks before signalling; dismisses with the chosen signal name, or None."""

    DEFAULT_CSS = """
    KillScreen { align: center middle; }
    KillScreen > Vertical {
        width: 90%; max-width: 120; height: auto; max-height: 90%;
        border: thick $error; background: $surface; padding: 1 2;
    }
    KillScreen #kill-title { text-style: bold; margin-bottom: 1; }
    KillScreen #kill-targets { height: auto; max-height: 16; overflow-y: auto; }
    KillScreen #kill-total { margin: 1 0; }
    KillScreen #kill-notes { height: auto; max-height: 10; overflow-y: auto; }
    KillScreen #kill-keys { color: $text-muted; }
    KillScreen RadioSet { layout: horizontal; width: auto; height: auto; }
    KillScreen #kill-buttons { height: auto; margin-top: 1; align-horizontal: right; }
    KillScreen #kill-buttons Button { margin-left: 2; }
    """

    BINDINGS: ClassVar[list[BindingType]] = bindings("kill")

    def __init__(self, targets: list[KillTarget], grace: float = 5.0, hidden: int = 0) -> None:
        super().__init__()
        self.targets = targets
        self.hidden = hidden
        self.grace = grace
        self.choice = "TERM"

    def compose(self) -> ComposeResult:
        n = len(self.targets)
        mem = [t.gpu_mem for t in self.targets if t.gpu_mem is not None]
        with Vertical():
            title = "Kill this process?" if n == 1 else f"Kill these {n} processes?"
            yield Label(title, id="kill-title")
            yield Static(targets_table(self.targets), id="kill-targets")
            yield Static(
                Text(f"GPU memory to be freed: {fmt.size(sum(mem)) if mem else 'unknown'}"),
                id="kill-total",
            )
            notes = notes_text(self.targets, self.hidden)
            if notes.plain:
                yield Static(notes, id="kill-notes")
            with RadioSet(id="kill-signal"):
                yield MarkedRadioButton(
                    f"TERM (then KILL after {self.grace:g} s)", value=True, id="sig-TERM"
                )
                yield MarkedRadioButton("KILL", id="sig-KILL")
                yield MarkedRadioButton(f"INT (then KILL after {self.grace:g} s)", id="sig-INT")
            with Horizontal(id="kill-buttons"):
                yield Button("Cancel", id="kill-cancel", variant="primary")
                yield Button("Kill", id="kill-confirm", variant="error")
            yield Label("y: kill · n or Esc: cancel · arrows: signal", id="kill-keys")

    def on_mount(self) -> None:
        self.query_one("#kill-cancel", Button).focus()

    def on_radio_set_changed(self, event: RadioSet.Changed) -> None:
        pressed = event.pressed.id or ""
        self.choice = pressed.removeprefix("sig-") if pressed.startswith("sig-") else "TERM"

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "kill-confirm":
            self.action_confirm()
        else:
            self.action_cancel()

    def action_confirm(self) -> None:
        self.dismiss(self.choice if self.choice in SIGNALS else "TERM")

    def action_cancel(self) -> None:
        self.dismiss(None)


# -- sending and reporting --------------------------------------------------------------------


async def send_kills(
    request: Request, targets: list[KillTarget], sig: str, grace: float
) -> list[tuple[KillTarget, dict]]:
    """Send every request at once (each may wait out its grace period) and collect answers."""

    async def one(target: KillTarget) -> tuple[KillTarget, dict]:
        try:
            answer = await request(target.host, target.request(sig, grace))
        except Exception as exc:  # a dropped connection is an outcome to show, not a crash
            answer = {"ok": False, "message": f"{type(exc).__name__}: {exc}"}
        return target, answer

    return list(await asyncio.gather(*(one(t) for t in targets)))


def report(app: GputopApp, target: KillTarget, answer: dict) -> None:
    outcome = answer.get("outcome") or ("done" if answer.get("ok") else "failed")
    message = answer.get("message") or outcome
    severity: SeverityLevel = "information" if answer.get("ok") else "warning"
    if outcome in ("permission denied", "pid reused", "still alive"):
        severity = "error"
    app.notify(
        fmt.visible(f"{message}"),
        title=fmt.visible(f"{target.host}: pid {target.pid} {outcome}"),
        severity=severity,
        timeout=10,
        markup=False,
    )


def confirm_and_kill(
    app: GputopApp,
    targets: list[KillTarget],
    grace: float,
    on_done: Callable[[list[tuple[KillTarget, dict]]], None] | None = None,
    hidden: int = 0,
) -> None:
    """Push the dialog; on yes, send the requests in a worker and notify each outcome."""

    def chosen(sig: str | None) -> None:
        if sig is None:
            return
        noun = "process" if len(targets) == 1 else "processes"
        app.notify(f"SIG{sig} to {len(targets)} {noun}...", timeout=3)

        async def work() -> None:
            results = await send_kills(app.request, targets, sig, grace)
            for target, answer in results:
                report(app, target, answer)
            if on_done is not None:
                on_done(results)

        app.run_worker(work(), name="kill", group="actions", exit_on_error=False)

    app.push_screen(KillScreen(targets, grace, hidden), chosen)


def open_kill(app: GputopApp) -> None:
    """The app's kill key: the tagged rows (or the selected one) of any host."""
    state = app.state
    if state.readonly:
        app.notify("kill: read-only mode (--readonly)", severity="warning")
        return
    rows = state.tagged_processes()
    if not rows:
        app.notify("kill: select a process first", severity="warning")
        return
    allowed: list[tuple[str, GpuProcess]] = []
    for host, proc in rows:
        who = app.identity(host)
        why = refusal(proc, who.me, who.is_root)
        if why is None:
            allowed.append((host, proc))
        else:
            app.notify(fmt.visible(why), title="not offered", severity="warning", markup=False)
    targets = targets_from_rows(allowed, state.snapshots, state.flags,
                                lambda host: app.identity(host).user)
    if not targets:
        return
    # A tag stays when a filter hides its row: say so, rather than kill it unseen.
    shown = {key[:3] for key in app.dashboard.table.rows_shown()}
    hidden = sum(1 for t in targets if (t.host, t.pid, t.start_ticks) not in shown)
    confirm_and_kill(app, targets, float(state.config.reclaim.kill_grace_s), hidden=hidden)
