"""Issue 19: reserving one MIG device from the dashboard (`r` on a process of it), seeing
it on the device's row, and `R` releasing it; the real app on the real --demo mig feed
with a real reservation store in a temp directory."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator

import pytest
from helpers.ui import plain
from textual.widgets import Static

from gputop.actions import reservations as store
from gputop.config import Config
from gputop.options import SourceOptions
from gputop.sources import opener
from gputop.ui.app import GputopApp
from gputop.ui.screens.reserve import ReserveScreen


@pytest.fixture
def demo_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    base = tempfile.mkdtemp(prefix="gputop-ui-mig-")
    os.chmod(base, 0o755)
    monkeypatch.setattr(tempfile, "tempdir", base)
    yield opener.demo_reservations_dir("mig")
    shutil.rmtree(base, ignore_errors=True)


async def _until(pilot, check: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.05)


async def test_reserve_a_mig_device_from_its_process_and_release_it(demo_dir: str) -> None:
    app = GputopApp(opener.open_feeds(SourceOptions(demo="mig"), Config()), interval=0.2)
    async with app.run_test(size=(160, 50)) as pilot:
        await _until(pilot, lambda: app.state.snapshot is not None)
        # the search leaves carol's training run (on MIG device 0:2) the only row
        await pilot.press("slash", *"resnet50-mig", "enter")
        await _until(pilot, lambda: (p := app.state.selected_process()) is not None
                     and p.pid == 6100003)
        await pilot.press("r")
        await _until(pilot, lambda: isinstance(app.screen, ReserveScreen))
        field = app.screen.query_one("#reserve-gpus")
        assert field.value == "0:2"  # the MIG device, not the whole card
        app.screen.query_one("#reserve-for").value = "1h"
        await pilot.press("enter")
        await _until(pilot, lambda: not isinstance(app.screen, ReserveScreen))
        (held,) = store.list_active(demo_dir)
        assert (held["gpu"], held["mig_device"]) == (0, 2)
        assert held["mig_uuid"] == app.state.snapshot.gpus[0].mig_devices[2].uuid
        panel = app.query_one("#gpu-0")
        await _until(pilot, lambda: "RSV" in str(panel.render()))
        # the RSV badge is on the device's own row, not on the card's first line
        lines = str(panel.render()).split("\n")
        assert "RSV" not in lines[0]
        assert any("0:2" in line and "RSV" in line for line in lines)
        await pilot.press("R")
        await _until(pilot, lambda: store.list_active(demo_dir) == [])


async def test_detail_names_the_mig_device(demo_dir: str) -> None:
    app = GputopApp(opener.open_feeds(SourceOptions(demo="mig"), Config()), interval=0.2)
    async with app.run_test(size=(160, 50)) as pilot:
        await _until(pilot, lambda: app.state.snapshot is not None)
        await pilot.press("slash", *"resnet50-mig", "enter")
        await _until(pilot, lambda: (p := app.state.selected_process()) is not None
                     and p.pid == 6100003)
        await pilot.press("enter")
        await _until(pilot, lambda: type(app.screen).__name__ == "DetailScreen")
        await pilot.pause()
        title = plain(app.screen.query_one("#detail-title", Static).content)
        facts = plain(app.screen.query_one("#detail-facts", Static).content)
        assert "GPU 0:2" in title
        uuid = app.state.snapshot.gpus[0].mig_devices[2].uuid
        assert f"0:2  GI 3 / CI 0  {uuid}" in facts


def test_cluster_cell_of_a_mig_card_keeps_the_cell_width() -> None:
    from gputop.model import Gpu, MigDevice
    from gputop.ui.cluster_cells import BUSY, gpu_cell

    def card(used_gib: list[int]) -> Gpu:
        devs = tuple(MigDevice(gpu=0, index=i, mem_used=u << 30, mem_total=10 << 30)
                     for i, u in enumerate(used_gib))
        return Gpu(index=0, mig_mode=True, mig_devices=devs, mem_total=80 << 30, util_gpu=50)

    plain_cell = gpu_cell(Gpu(index=1, util_gpu=5, mem_total=1, mem_used=1), BUSY, False, False)
    four = gpu_cell(card([10, 0, 5, 2]), BUSY, False, False)
    seven = gpu_cell(card([10, 0, 5, 2, 0, 0, 0]), BUSY, True, False)
    assert four.plain == "M█·▄▂   " and len(four.plain) == len(plain_cell.plain)
    assert seven.plain == "M  24%! "  # 17 of 70 GiB, each instance counted once
    narrow = gpu_cell(card([10, 0, 5, 2]), BUSY, False, False, narrow=True)
    assert narrow.plain == "M42  "  # 17 of 40 GiB
