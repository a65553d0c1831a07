"""The reclaim view: orphaned and idle GPU processes I may kill, and memory nobody owns.

``open_reclaim(app)`` (the app's ``o``) lists, over every host, the processes the orphan
rules flag as orphaned or idle that this user may signal (all users' for root), largest
first, with the memory each would free and why it is listed.  Select several with Space
(``a`` all), press ``k`` (or Enter): one confirmation for all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Label, SelectionList, Static
from textual.widgets.selection_list import Selection

from gputop.analysis import orphans
from gputop.analysis.orphans import Reclaimable
from gputop.ui import fmt
from gputop.ui.cells import command_label
from gputop.ui.keys import bindings
from gputop.ui.screens.kill import confirm_and_kill, targets_from_rows
from gputop.ui.widgets.marks import MarkedSelectionList

if TYPE_CHECKING:
    from textual import getters

    from gputop.ui.app import GputopApp

EntryKey = tuple[str, int, int]  # host, pid, start_ticks

FLAG_STYLE = {"orphan": "bold yellow", "idle": "cyan", "kernel": "magenta"}


def collect(app: GputopApp) -> list[Reclaimable]:
    """Reclaimable processes over all hosts, largest first."""
    state = app.state
    out: list[Reclaimable] = []
    for host, snap in state.snapshots.items():
        if not snap.ok:
            continue
        who = app.identity(host)
        out.extend(orphans.reclaimable(snap, state.flags.get(host) or {}, who.me, who.is_root))
    out.sort(key=lambda r: (-(r.mem or 0), r.host, r.pid))
    return out


def entry_key(entry: Reclaimable) -> EntryKey:
    return (entry.host, entry.pid, entry.start_ticks or 0)


def _shown(entry: Reclaimable) -> tuple[Any, ...]:
    """What a row displays: rebuild the list only when this changes."""
    return (entry_key(entry), entry.mem, entry.flags.names, entry.command, entry.user)


def entry_prompt(entry: Reclaimable) -> Text:
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(fmt.visible(entry.host)[:14].ljust(15))
    line.append(str(entry.pid).rjust(8) + "  ")
    line.append(fmt.visible(entry.user or "?")[:10].ljust(11))
    line.append(fmt.size(entry.mem).rjust(7) + "  ")
    for name in entry.flags.names:
        if name in FLAG_STYLE:
            line.append(name.upper()[:4] + " ", style=FLAG_STYLE[name])
    line.append(" ")
    line.append(command_label(fmt.visible(entry.command)))
    return line


def ghost_text(app: GputopApp) -> Text:
    """Per host: memory NVML counts as used that no listed process owns, and who holds
    the device files without being listed."""
    out = Text()
    for host, snap in app.state.snapshots.items():
        if not snap.ok:
            continue
        ghost = orphans.ghost_memory(snap)
        for gpu, amount in sorted(ghost.unaccounted.items()):
            out.append(f"{fmt.visible(host)} GPU {gpu}: ", style="bold")
            out.append(f"{fmt.size(amount)} used by no listed process")
            out.append(" (another container, or a process stuck in D state)\n", style="dim")
        for holder in ghost.holders:
            out.append(f"{fmt.visible(host)}: pid {holder.pid} ", style="bold")
            out.append(fmt.visible(holder.user or "?") + " ")
            out.append(fmt.visible(holder.command or "?"))
            out.append(" holds " + ", ".join(fmt.visible(d) for d in holder.devices))
            out.append(" but NVML does not list it\n", style="dim")
        if ghost.note:
            out.append(f"{fmt.visible(host)}: device scan incomplete: ", style="dim")
            out.append(fmt.visible(ghost.note) + "\n", style="dim")
    return out


class ReclaimScreen(Screen[None]):
    DEFAULT_CSS = """
    ReclaimScreen #reclaim-title { text-style: bold; padding: 0 1; }
    ReclaimScreen #reclaim-summary { padding: 0 1; color: $text-muted; }
    ReclaimScreen SelectionList { height: 1fr; }
    ReclaimScreen #reclaim-why { height: auto; max-height: 6; padding: 0 1; }
    ReclaimScreen #reclaim-ghost { height: auto; max-height: 8; padding: 0 1; }
    """

    BINDINGS: ClassVar[list[BindingType]] = bindings("reclaim")

    if TYPE_CHECKING:
        app = getters.app(GputopApp)

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[EntryKey, Reclaimable] = {}
        self._seen_version = -1

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Reclaim GPU memory", id="reclaim-title")
            yield Static("", id="reclaim-summary")
            yield MarkedSelectionList(id="reclaim-list")
            yield Static("", id="reclaim-why")
            yield Static("", id="reclaim-ghost")
        yield Footer()

    @property
    def selection(self) -> SelectionList[EntryKey]:
        return self.query_one("#reclaim-list", SelectionList)

    def on_mount(self) -> None:
        self.reload()
        self.app.state_changed.subscribe(self, self._state_changed)
        self.selection.focus()

    def _state_changed(self, state: Any) -> None:
        if self.is_current:
            self.reload()

    def on_screen_resume(self) -> None:
        # Snapshots that came while the kill dialog was on top were not shown.
        if self.is_mounted:
            self.reload()

    def reload(self) -> None:
        """Rebuild from the latest snapshots, keeping what was selected."""
        self._seen_version = self.app.state.version
        entries = collect(self.app)
        keys = [entry_key(e) for e in entries]
        widget = self.selection
        chosen = set(widget.selected)
        if [_shown(e) for e in entries] != [_shown(e) for e in self.entries.values()]:
            highlighted = widget.highlighted
            widget.clear_options()
            widget.add_options(
                [Selection(entry_prompt(e), entry_key(e), entry_key(e) in chosen) for e in entries]
            )
            if keys:
                widget.highlighted = min(highlighted or 0, len(keys) - 1)
        self.entries = dict(zip(keys, entries, strict=True))
        self._summary()
        self._why()
        self.query_one("#reclaim-ghost", Static).update(ghost_text(self.app))

    def _summary(self) -> None:
        state = self.app.state
        root = any(self.app.identity(h).is_root for h in state.snapshots)
        whose = "all users (root)" if root else "yours"
        picked = [self.entries[k] for k in self.selection.selected if k in self.entries]
        total = sum(e.mem or 0 for e in self.entries.values())
        text = Text()
        if not self.entries:
            text.append(f"Nothing to reclaim: no orphaned or idle processes ({whose}).")
        else:
            text.append(
                f"{len(self.entries)} orphaned or idle processes ({whose}) hold "
                f"{fmt.size(total)}; {len(picked)} selected "
                f"({fmt.size(sum(e.mem or 0 for e in picked))}).  "
            )
            text.append("Space select, a all, k kill, Esc back", style="dim")
        self.query_one("#reclaim-summary", Static).update(text)

    def _why(self) -> None:
        widget = self.selection
        text = Text()
        if widget.highlighted is not None and widget.option_count:
            key = widget.get_option_at_index(widget.highlighted).value
            entry = self.entries.get(key)
            if entry is not None:
                for line in entry.flags.explain():
                    text.append(fmt.visible(line) + "\n")
        self.query_one("#reclaim-why", Static).update(text)

    def on_selection_list_selection_highlighted(self, event: Any) -> None:
        self._why()

    def on_selection_list_selected_changed(self, event: Any) -> None:
        self._summary()

    def action_select_all(self) -> None:
        self.selection.select_all()

    def action_close(self) -> None:
        self.app.pop_screen()

    def action_kill(self) -> None:
        if self.app.state.readonly:
            self.app.notify("kill: read-only mode (--readonly)", severity="warning")
            return
        keys = list(self.selection.selected)
        if not keys and self.selection.highlighted is not None and self.entries:
            keys = [self.selection.get_option_at_index(self.selection.highlighted).value]
        chosen = [self.entries[k] for k in keys if k in self.entries]
        if not chosen:
            self.app.notify("reclaim: nothing selected", severity="warning")
            return
        # The dialog's rows as the main table's kill builds them (flags, reasons,
        # cautions): one process, one picture, wherever the kill starts.
        state = self.app.state
        rows = []
        for e in chosen:
            snap = state.snapshots.get(e.host)
            same = [p for p in (snap.processes if snap else ())
                    if p.pid == e.pid and p.start_ticks == e.start_ticks]
            if same:
                rows.append((e.host, same[0]))
        targets = targets_from_rows(rows, state.snapshots, state.flags,
                                    lambda host: self.app.identity(host).user)
        if not targets:
            self.app.notify("reclaim: the selected processes are gone", severity="warning")
            return
        grace = float(self.app.state.config.reclaim.kill_grace_s)
        confirm_and_kill(self.app, targets, grace, on_done=lambda _results: self.reload())


def open_reclaim(app: GputopApp) -> None:
    app.push_screen(ReclaimScreen())
