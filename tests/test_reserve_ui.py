"""The reserve dialog and the release key, in the real app on the real --demo feed.

The feed is the one `gputop --demo faulty` uses (opener.open_feeds), so the requests go
through dispatch to a real reservation store on disk (a temp directory here) and come
back in the next snapshot, as they do for a user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gputop.actions import reservations as store
from gputop.config import Config
from gputop.options import SourceOptions
from gputop.sources import opener
from gputop.ui.app import GputopApp
from gputop.ui.screens.confirm import ConfirmScreen
from gputop.ui.screens.reserve import ReserveScreen, describe, parse_gpus

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def demo_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """--demo keeps reservations under the temp dir: give it a private one."""
    base = tempfile.mkdtemp(prefix="gputop-ui-res-")
    os.chmod(base, 0o755)  # another uid must reach the store for the race test
    monkeypatch.setattr(tempfile, "tempdir", base)
    yield opener.demo_reservations_dir("faulty")
    shutil.rmtree(base, ignore_errors=True)


def _app() -> GputopApp:
    return GputopApp(opener.open_feeds(SourceOptions(demo="faulty"), Config()), interval=0.2)


async def _until(pilot, check: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.05)


def _field(app: GputopApp, name: str):
    return app.screen.query_one(f"#reserve-{name}")


async def test_reserve_dialog_validates_then_reserves_and_r_releases(demo_dir: str) -> None:
    app = _app()
    async with app.run_test(size=(140, 50)) as pilot:
        await _until(pilot, lambda: app.state.snapshot is not None)
        app.state.selected_gpu = 3
        await pilot.press("r")
        await _until(pilot, lambda: isinstance(app.screen, ReserveScreen))
        assert _field(app, "gpus").value == "3"

        # a bad duration: shown under the fields, nothing sent, the dialog stays
        _field(app, "for").value = "soon"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ReserveScreen)
        assert "bad duration 'soon'" in str(_field(app, "error").render())
        assert store.list_active(demo_dir) == []

        # a note with an escape sequence is refused too
        _field(app, "for").value = "2h"
        _field(app, "note").value = "hi\x1b[2J"
        await pilot.press("enter")
        await pilot.pause()
        assert "control character" in str(_field(app, "error").render())
        assert store.list_active(demo_dir) == []

        # a GPU the host does not have
        _field(app, "note").value = "ui run"
        _field(app, "gpus").value = "3,12"
        await pilot.press("enter")
        await pilot.pause()
        assert "no GPU 12" in str(_field(app, "error").render())

        _field(app, "gpus").value = "3,4"
        await pilot.press("enter")
        await _until(pilot, lambda: not isinstance(app.screen, ReserveScreen))
        held = store.list_active(demo_dir)
        assert [(r["gpu"], r["note"]) for r in held] == [(3, "ui run"), (4, "ui run")]
        assert held[0]["until"] == pytest.approx(time.time() + 7200, abs=30)

        # the next snapshot carries it: every user of the host sees it on the panel
        await _until(pilot, lambda: len(app.state.snapshot.reservations) == 2)
        panel = app.query_one("#gpu-3")
        await _until(pilot, lambda: "RSV" in str(panel.render()))

        # R on GPU 3 releases only GPU 3
        await pilot.press("R")
        await _until(pilot, lambda: [r["gpu"] for r in store.list_active(demo_dir)] == [4])
        # R with no GPU of mine selected asks before releasing all of mine on the host
        app.state.selected_gpu = 0
        await _until(pilot, lambda: len(app.state.snapshot.reservations) == 1)
        await pilot.press("R")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        body = str(app.screen.query_one("#confirm-body").render())
        assert "Release all 1 of yours" in body and "GPU 4" in body
        await pilot.press("n")
        await _until(pilot, lambda: app.screen is app.dashboard)
        await pilot.pause()
        assert [r["gpu"] for r in store.list_active(demo_dir)] == [4]
        await pilot.press("R")
        await _until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await _until(pilot, lambda: store.list_active(demo_dir) == [])


async def test_a_gpu_number_typed_at_once_goes_into_gpus(demo_dir: str) -> None:
    app = _app()
    async with app.run_test(size=(140, 50)) as pilot:
        await _until(pilot, lambda: app.state.snapshot is not None)
        app.state.selected_gpu = 3
        await pilot.press("r")
        await _until(pilot, lambda: isinstance(app.screen, ReserveScreen))
        await pilot.pause()
        await pilot.press("5")
        await pilot.pause()
        # the prefill is replaced, not appended to; the duration stays empty
        assert (_field(app, "gpus").value, _field(app, "for").value) == ("5", "")
        await pilot.press("tab", *"2h")
        await pilot.pause()
        assert _field(app, "for").value == "2h"


async def test_r_prefills_a_free_card_not_the_selected_process_card(demo_dir: str) -> None:
    app = _app()
    async with app.run_test(size=(140, 50)) as pilot:
        await _until(pilot, lambda: app.state.snapshot is not None)
        snap = app.state.snapshot
        busy = {p.gpu for p in snap.processes}
        assert app.state.selected_process() is not None
        await pilot.press("r")
        await _until(pilot, lambda: isinstance(app.screen, ReserveScreen))
        value = _field(app, "gpus").value
        free = [g.index for g in snap.gpus if g.index not in busy]
        assert free and value.isdigit() and int(value) in free


async def test_lost_race_names_the_holder_and_keeps_the_dialog(demo_dir: str) -> None:
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root to hold a reservation as another user")
    store.ensure_directory(demo_dir)
    # another real user (nobody) holds GPU 4
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1]);"
        "from gputop.actions import reservations as s;"
        "r = s.reserve(sys.argv[2], [4], time.time() + 3600, 'their run');"
        "sys.exit(0 if r['ok'] else 1)"
    )
    subprocess.run(["/usr/bin/python3", "-c", code, str(REPO), demo_dir],
                   user=65534, group=65534, extra_groups=[], cwd="/", check=True)
    app = _app()
    async with app.run_test(size=(140, 50)) as pilot:
        await _until(pilot, lambda: app.state.snapshot is not None
                     and app.state.snapshot.reservations)
        app.state.selected_gpu = 4
        await pilot.press("r")
        await _until(pilot, lambda: isinstance(app.screen, ReserveScreen))
        # the dialog says who holds the card before anything is sent
        assert "reserved by nobody" in str(_field(app, "current").render())
        _field(app, "for").value = "30m"
        await pilot.press("enter")
        await _until(pilot, lambda: "reserved by nobody" in str(_field(app, "error").render()))
        assert isinstance(app.screen, ReserveScreen)
        assert [r["user"] for r in store.list_active(demo_dir)] == ["nobody"]
        await pilot.press("escape")
        await _until(pilot, lambda: not isinstance(app.screen, ReserveScreen))


def test_parse_gpus_and_describe() -> None:
    from gputop.model import Gpu, HostSnapshot, Reservation

    snap = HostSnapshot(host="h", time=0.0, gpus=(Gpu(index=0), Gpu(index=1)))
    assert parse_gpus("1, 0,1", snap) == [1, 0]
    for bad, why in (("", "at least one"), ("2", "no GPU 2"), ("x", "neither a GPU index")):
        with pytest.raises(ValueError, match=why):
            parse_gpus(bad, snap)
    text = describe(
        [Reservation(gpu=1, user="bob", until=3600.0, since=0.0, note="[b]x[/b]\x1b")],
        "alice",
        0.0,
    )
    # untrusted text stays literal: no markup, control characters made visible
    assert "GPU 1: reserved by bob for 1h00m more ([b]x[/b]\\e)" in text.plain
    assert "\x1b" not in text.plain


async def test_a_card_another_users_process_runs_on_is_cautioned_as_pick_rules(
        demo_dir: str) -> None:
    app = _app()
    async with app.run_test(size=(140, 50)) as pilot:
        await _until(pilot, lambda: app.state.snapshot is not None)
        snap = app.state.snapshot
        me = app.identity(snap.host).reservation_owner
        others = sorted({p.gpu for p in snap.processes if p.user != me and p.type != "G"})
        free = [g.index for g in snap.gpus if g.index not in {p.gpu for p in snap.processes}]
        assert others and free
        app.state.selected_gpu = free[0]
        await pilot.press("r")
        await _until(pilot, lambda: isinstance(app.screen, ReserveScreen))
        await pilot.pause()
        # a free card: no caution
        assert "caution" not in str(_field(app, "current").render())
        # typed into the real field: a card of another user's process is cautioned, with
        # pick's own reason (who runs there), and the free one beside it is not
        await pilot.press("end", *f",{others[0]}")
        await _until(pilot, lambda: _field(app, "gpus").value == f"{free[0]},{others[0]}")
        busy = next(p for p in snap.processes if p.gpu == others[0])
        await _until(pilot, lambda: "caution" in str(_field(app, "current").render()))
        shown = str(_field(app, "current").render())
        assert f"GPU {others[0]}: in use by another user ({busy.user}" in shown
        assert f"GPU {free[0]}:" not in shown
        # a caution, not a refusal: the reservation still goes through
        await pilot.press("tab", *"1h", "enter")
        await _until(pilot, lambda: not isinstance(app.screen, ReserveScreen))
        assert sorted(r["gpu"] for r in store.list_active(demo_dir)) == sorted(
            [free[0], others[0]])


def test_others_on_is_picks_rule_for_cards_and_mig_devices() -> None:
    from gputop.analysis.pick import OTHERS, Want, others_on, rank_devices
    from gputop.model import Gpu, GpuProcess, HostSnapshot, MigDevice

    mig = Gpu(index=1, mem_used=0, mem_total=10, mig_devices=(
        MigDevice(index=0, gpu=1, uuid="MIG-a", mem_used=0, mem_total=5),
        MigDevice(index=1, gpu=1, uuid="MIG-b", mem_used=0, mem_total=5)))
    snap = HostSnapshot(host="h", time=0.0, gpus=(
        Gpu(index=0, mem_used=1, mem_total=10), mig, Gpu(index=2, mem_used=1, mem_total=10)),
        processes=(GpuProcess(pid=1, gpu=0, user="bob", type="C"),
                   GpuProcess(pid=2, gpu=1, mig_device=1, user="carol", type="C"),
                   GpuProcess(pid=3, gpu=2, user="me", type="C")))
    got = others_on(snap, [0, 1, 2], 0.0, "me")
    assert got == {"0": f"{OTHERS} (bob)", "1:1": f"{OTHERS} (carol)"}
    # the same words pick gives
    assert got["0"] == rank_devices(snap, Want(me="me"), 0.0).rejected["0"]
    assert others_on(snap, ["1:0"], 0.0, "me") == {}


def _visible(app: GputopApp, widget) -> bool:
    """The widget is drawn where it is: the screen's cell at its middle is the widget."""
    region = widget.region
    if not region.area:
        return False
    try:
        found, _ = app.screen.get_widget_at(*region.center)
    except Exception:  # no widget there: off the screen
        return False
    return found is widget or widget in found.ancestors_with_self


async def test_at_80x24_the_caution_error_and_buttons_are_in_sight() -> None:
    """Issue 39.7: at 80x24 the dialog hid its caution and its buttons (Tab focused them
    unseen, Enter on a bad field said nothing).  Every card of another user's process
    cautioned at once, and still both buttons, the caution and the error are seen."""
    from gputop.ui.screenshots import demo_app, load

    app = demo_app("lab")
    async with app.run_test(size=(80, 24)) as pilot:
        await load(pilot)
        snap = app.state.snapshot
        others = sorted({p.gpu for p in snap.processes if p.user != "alice" and p.type != "G"})
        assert len(others) >= 3  # three cautions, each wrapped over lines
        app.state.selected_gpu = others[0]
        await pilot.press("r")
        await _until(pilot, lambda: isinstance(app.screen, ReserveScreen))
        _field(app, "gpus").value = ",".join(map(str, others))
        await _until(pilot, lambda: str(_field(app, "current").render()).count("caution") == 3)
        await pilot.pause()
        for name in ("confirm", "cancel", "gpus", "for", "note"):
            assert _visible(app, _field(app, name)), name
        assert _visible(app, _field(app, "current"))
        # a bad duration: the word is seen, the dialog stays
        _field(app, "for").value = "soon"
        _field(app, "for").focus()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ReserveScreen)
        assert "bad duration 'soon'" in str(_field(app, "error").render())
        assert _visible(app, _field(app, "error"))
        # Tab reaches the buttons, in sight
        focused = []
        for _ in range(8):
            await pilot.press("tab")
            focused.append(app.screen.focused)
        for name in ("confirm", "cancel"):
            assert _field(app, name) in focused and _visible(app, _field(app, name)), name
