"""`gputop --screenshot`: the pictures are deterministic, keep their spaces and cover every
screen; the app hands back what it froze for them."""

from __future__ import annotations

import gc
from pathlib import Path

from helpers.ui import demo_app, feed_all

from gputop.ui.screenshots import (
    SHOTS,
    _shoot,
)
from gputop.ui.widgets.header import HostLine


async def test_header_and_host_line_keep_their_spaces_in_the_svg() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=(80, 24)) as pilot:
        feed_all(app)
        await pilot.pause()
        line = app.query_one(HostLine).render().plain
        assert "% of 48" in line and "  LOAD " in line
        svg = app.export_screenshot()
        # Without it librsvg drops leading spaces of every styled run ("16%of 48").
        assert svg.count('xml:space="preserve"') == 1
        assert "&#160;of&#160;48" in svg


def test_screenshot_list_covers_the_new_screens() -> None:
    screens = {shot[4] for shot in SHOTS}
    assert {"ClusterScreen", "ClusterProcessesScreen", "ReclaimScreen",
            "ReserveScreen"} <= screens


async def test_cluster_screenshot_twice_is_identical(tmp_path: Path) -> None:
    shot = next(s for s in SHOTS if s[0] == "cluster-80x24")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = await _shoot(*shot, outdir=tmp_path / "a")
    two = await _shoot(*shot, outdir=tmp_path / "b")
    assert one is not None and two is not None
    text = Path(one).read_text()
    assert text == Path(two).read_text()
    assert "dgx-h100-08" in text and "lab-gpu-05" in text


async def test_startup_objects_are_frozen_once_and_handed_back_on_exit() -> None:
    assert gc.get_freeze_count() == 0
    app, _ = demo_app("lab")
    async with app.run_test(size=(120, 40)) as pilot:
        feed_all(app)
        await pilot.pause()
        await pilot.pause()
        frozen = gc.get_freeze_count()
        assert frozen > 1000  # the widget tree, CSS and modules
        feed_all(app)
        await pilot.pause()
        await pilot.pause()
        # Once, not every refresh (frozen objects still die by reference count, so the
        # count may drop).
        assert gc.get_freeze_count() <= frozen
    assert gc.get_freeze_count() == 0
