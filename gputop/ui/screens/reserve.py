"""The reserve dialog (`r`) and the release key (`R`) of the dashboard.

``open_reserve(app)`` asks for the GPUs (prefilled with the GPU under focus, else a free
one: the selected process's card is busy by definition), a duration
(`4h`, `30m`, `until 18:00`) and a note; mistakes are shown under the fields and nothing
is sent until they are fixed.  The request goes through the host's feed, so the store of
the host the cards are in does the work (locally, in --demo, or inside the remote probe).
Reserving a card I already hold extends it.  ``release(app)`` ends my reservation of the
selected GPU, or, after asking, all of mine on the host when the selected GPU is not mine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from gputop.actions.reservations import ReservationError, check_note
from gputop.analysis.durations import format_duration, parse_until
from gputop.analysis.holders import holders
from gputop.analysis.pick import others_on
from gputop.model import HostSnapshot, Reservation
from gputop.ui import fmt
from gputop.ui.headline import host_title
from gputop.ui.keys import bindings
from gputop.ui.screens.confirm import ConfirmScreen

if TYPE_CHECKING:
    from textual import getters

    from gputop.ui.app import GputopApp


def me_on(app: GputopApp, host: str) -> str:
    """Who the store will see as the owner: the remote login over SSH, else this user."""
    return app.identity(host).reservation_owner or "?"


def selected_gpus(app: GputopApp) -> list[int | str]:
    """The GPU under focus, else the GPU (or MIG device, "0:1") of the selected process."""
    state = app.state
    if state.selected_gpu is not None:
        return [state.selected_gpu]
    proc = state.selected_process()
    if proc is None:
        return []
    return [proc.gpu_label if proc.mig_device is not None else proc.gpu]


def offered_gpus(app: GputopApp, snapshot: HostSnapshot) -> list[int | str]:
    """What `r` offers: the GPU under focus, or the MIG device of the selected process
    (the unit one reserves on a MIG card); else a free card, not a busy process's."""
    chosen = selected_gpus(app)
    if app.state.selected_gpu is not None or any(isinstance(c, str) for c in chosen):
        return chosen
    return list(free_gpu(snapshot, app.clock()))


def free_gpu(snapshot: HostSnapshot, now: float) -> list[int]:
    """A card with no process and no reservation, the least memory used first; none when
    every card is taken (then the user types one)."""
    busy = {p.gpu for p in snapshot.processes}
    held = holders(snapshot, now)
    free = [g for g in snapshot.gpus if g.index not in busy and not held.any_on(g)]
    free.sort(key=lambda g: (g.mem_used if g.mem_used is not None else 1 << 62, g.index))
    return [free[0].index] if free else []


def parse_gpus(text: str, snapshot: HostSnapshot) -> list[int | str]:
    """`0,2` -> [0, 2], `0:1` (MIG device 1 of card 0) -> ["0:1"], each checked against
    the host's GPUs."""
    known = {gpu.index for gpu in snapshot.gpus}
    migs = {d.label for gpu in snapshot.gpus for d in gpu.mig_devices if d.uuid}
    gpus: list[int | str] = []
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        item: int | str
        if part in migs:
            item = part
        elif not part.isdigit():
            raise ValueError(f"GPUs: {part!r} is neither a GPU index nor a MIG device")
        elif int(part) not in known:
            raise ValueError(f"GPUs: this host has no GPU {part}")
        else:
            item = int(part)
        if item not in gpus:
            gpus.append(item)
    if not gpus:
        raise ValueError("GPUs: give at least one index, e.g. 0 or 0,2")
    return gpus


def describe(reservations: list[Reservation], me: str, now: float) -> Text:
    """One line per current reservation of the chosen cards: who, how long, why."""
    out = Text()
    for r in reservations:
        who = "you" if r.user == me else r.user
        out.append(f"GPU {r.gpu}: reserved by ")
        out.append(fmt.visible(who), style="bold")
        out.append(f" for {format_duration(r.until - now)} more")
        if r.note:
            out.append(" (")
            out.append(fmt.visible(r.note))
            out.append(")")
        if r.user == me:
            out.append(" - reserving again extends it", style="dim")
        out.append("\n")
    return out


def cautions(others: dict[str, str]) -> Text:
    """One caution per chosen unit another user's process runs on (pick's rule, not ours):
    reserving it is allowed, but it does not make the card free."""
    out = Text()
    for label, why in others.items():
        out.append("caution: ", style="bold yellow")
        out.append(fmt.visible(f"GPU {label}: {why}"))
        out.append(" - `gputop pick` leaves it out; a reservation does not stop their job\n",
                   style="dim")
    return out


class _About(VerticalScroll):
    """What is known about the chosen cards; a Tab stop (arrows scroll it) only while it
    holds more than it shows."""

    def allow_focus(self) -> bool:
        return self.max_scroll_y > 0


class ReserveScreen(ModalScreen["dict | None"]):
    """Dismisses with the store's reply after a successful reservation, or None."""

    # Fits 80x24 with every part in sight (issue 39.7: the caution and the buttons were
    # below the edge there, Tab focused them unseen): one line per field, its label beside
    # it; what is known about the chosen cards (reservations, cautions) scrolls in a box of
    # at most 40 % of the screen's height; the error line and the buttons always show.
    DEFAULT_CSS = """
    ReserveScreen { align: center middle; }
    ReserveScreen > Vertical {
        width: 90%; max-width: 96; height: auto; max-height: 100%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    ReserveScreen #reserve-title { text-style: bold; margin-bottom: 1; }
    ReserveScreen .reserve-field { height: 1; margin-bottom: 1; }
    ReserveScreen .reserve-field Label { width: 14; }
    ReserveScreen .reserve-field Input { width: 1fr; background: $boost; }
    ReserveScreen #reserve-about { height: auto; max-height: 40vh; }
    ReserveScreen #reserve-current { height: auto; }
    ReserveScreen #reserve-error { color: $error; height: auto; }
    ReserveScreen #reserve-buttons { height: auto; align-horizontal: right; }
    ReserveScreen #reserve-buttons Button { margin-left: 2; }
    """

    BINDINGS: ClassVar[list[BindingType]] = bindings("reserve")

    if TYPE_CHECKING:
        app = getters.app(GputopApp)

    def __init__(self, host: str, gpus: list[int | str], me: str,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.host = host
        self.gpus = gpus
        self.me = me
        self.clock = clock
        self.sending = False

    def compose(self) -> ComposeResult:
        with Vertical():
            snap = self.app.state.snapshots.get(self.host)
            where = host_title(snap) if snap is not None else fmt.visible(self.host)
            yield Label(Text(f"Reserve GPUs on {where}"), id="reserve-title")
            for label, field in (
                    ("GPUs", Input(",".join(map(str, self.gpus)), placeholder="0 or 0,2",
                                   id="reserve-gpus", compact=True)),
                    ("For how long", Input(placeholder="4h, 30m, 1h30m, until 18:00",
                                           id="reserve-for", compact=True)),
                    ("Note", Input(placeholder="what for (shown to everyone)",
                                   id="reserve-note", compact=True))):
                with Horizontal(classes="reserve-field"):
                    yield Label(label)
                    yield field
            with _About(id="reserve-about"):
                yield Static(id="reserve-current")
            yield Static(id="reserve-error")
            with Horizontal(id="reserve-buttons"):
                yield Button("Cancel", id="reserve-cancel")
                yield Button("Reserve", id="reserve-confirm", variant="primary")

    def on_mount(self) -> None:
        # The first field first: a GPU number typed at once goes into "GPUs" (replacing
        # the prefilled one, which focus selects), never into the duration.
        self.query_one("#reserve-gpus", Input).focus()
        self._show_current()

    # -- helpers ---------------------------------------------------------------------------

    def _snapshot(self) -> HostSnapshot | None:
        return self.app.state.snapshots.get(self.host)

    def _show_current(self) -> None:
        snapshot = self._snapshot()
        current = self.query_one("#reserve-current", Static)
        if snapshot is None:
            current.update("")
            return
        try:
            gpus = parse_gpus(self.query_one("#reserve-gpus", Input).value, snapshot)
        except ValueError:
            gpus = []
        now = self.clock()
        held = holders(snapshot, now)
        text = describe([r for unit in gpus for r in held.of_unit(unit)], self.me, now)
        text.append(cautions(others_on(snapshot, gpus, now, self.me,
                                       self.app.identity(self.host).user)))
        text.rstrip()  # no empty last line to scroll to
        current.update(text)

    def _error(self, message: str) -> None:
        self.query_one("#reserve-error", Static).update(Text(message))

    def build_request(self) -> dict | None:
        """The request for the fields as typed, or None after showing what is wrong."""
        snapshot = self._snapshot()
        if snapshot is None:
            self._error("no data from this host yet")
            return None
        try:
            gpus = parse_gpus(self.query_one("#reserve-gpus", Input).value, snapshot)
        except ValueError as exc:
            self._error(str(exc))
            return None
        now = self.clock()
        try:
            until = parse_until(self.query_one("#reserve-for", Input).value, now)
        except ValueError as exc:
            self._error(f"For how long: {exc}")
            return None
        note = self.query_one("#reserve-note", Input).value
        try:
            check_note(note)
        except ReservationError as exc:
            self._error(f"Note: {exc}")
            return None
        self._error("")
        return {"op": "reserve", "gpus": gpus, "until": until, "note": note}

    # -- events ----------------------------------------------------------------------------

    @on(Input.Changed, "#reserve-gpus")
    def _gpus_changed(self) -> None:
        self._show_current()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_confirm()

    @on(Button.Pressed, "#reserve-confirm")
    def _confirm_pressed(self) -> None:
        self.action_confirm()

    @on(Button.Pressed, "#reserve-cancel")
    def _cancel_pressed(self) -> None:
        self.action_cancel()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_confirm(self) -> None:
        if self.sending:
            return
        request = self.build_request()
        if request is None:
            return
        self.sending = True
        self.run_worker(self._send(request), name="reserve", exit_on_error=False)

    async def _send(self, request: dict) -> None:
        try:
            reply = await self.app.request(self.host, request)
        except Exception as exc:  # the feed's trouble is shown, never a crash
            reply = {"ok": False, "message": f"{type(exc).__name__}: {exc}"}
        finally:
            self.sending = False
        if reply.get("ok"):
            message = fmt.visible(f"{self.host}: {reply.get('message', 'reserved')}")
            self.app.notify(message, markup=False)
            self.dismiss(reply)
        else:
            # A lost race names the holder; the dialog stays open to choose another card.
            self._error(str(reply.get("message") or "the reservation failed"))


def open_reserve(app: GputopApp) -> None:
    host = app.state.host
    if host is None or app.state.snapshots.get(host) is None:
        app.notify("reserve: no data from this host yet", severity="warning")
        return
    gpus = offered_gpus(app, app.state.snapshots[host])
    app.push_screen(ReserveScreen(host, gpus, me_on(app, host), clock=app.clock))


def release(app: GputopApp) -> None:
    """`R`: release my reservation of the selected GPU, or all of mine on this host."""
    host = app.state.host
    snapshot = app.state.snapshots.get(host) if host is not None else None
    if host is None or snapshot is None:
        app.notify("release: no data from this host yet", severity="warning")
        return
    me = me_on(app, host)
    now = app.clock()
    held = holders(snapshot, now)
    mine = [r for r in held.active if r.user == me]
    if not mine:
        app.notify(
            fmt.visible(f"release: you hold no reservation on {host}"),
            severity="warning",
            markup=False,
        )
        return
    chosen = {r for unit in selected_gpus(app) for r in held.of_unit(unit)}
    # A card's own reservation by index, a MIG device's by its UUID.
    gpus: list[int | str] | None = [
        r.mig_uuid if r.mig_uuid else r.gpu for r in mine if r in chosen] or None
    request = {"op": "release", "gpus": gpus}
    where = host_title(snapshot)

    async def send() -> None:
        try:
            reply = await app.request(host, request)
        except Exception as exc:  # the feed's trouble is shown, never a crash
            reply = {"ok": False, "message": f"{type(exc).__name__}: {exc}"}
        ok = bool(reply.get("ok"))
        message = fmt.visible(f"{host}: {reply.get('message') or ('released' if ok else 'failed')}")
        app.notify(message, severity="information" if ok else "error", markup=False)

    if gpus is not None:
        app.run_worker(send(), name="release", exit_on_error=False)
        return

    def answered(yes: bool | None) -> None:
        if yes:
            app.run_worker(send(), name="release", exit_on_error=False)

    # Nothing of mine on the selected card: releasing everything must not be one slip.
    body = Text(f"None of your reservations is on the selected GPU. Release all "
                f"{len(mine)} of yours on {where}?\n")
    body.append(describe(mine, me, now))
    app.push_screen(ConfirmScreen(f"Release all on {where}?", body, "Release all"), answered)
