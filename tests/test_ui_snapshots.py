"""Pictures (pytest-textual-snapshot): the main screen of lab and dgx-h100 at 80x24 and
160x50, with three minutes of simulated history; the cluster overview of several hosts.

Deterministic: the simulator on a frozen clock, a fixed user, default config, no cursor
blink (the table has focus; the search box is hidden).  Regenerate with
`pytest tests/test_ui_snapshots.py --snapshot-update` and look at the SVGs before
committing them.
"""

from __future__ import annotations

from typing import Any

import pytest

from gputop.ui.screenshots import CLUSTER, demo_app, load, reserve_dialog


@pytest.mark.parametrize("scenario", ["lab", "dgx-h100"])
@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_main_screen(snap_compare: Any, scenario: str, size: tuple[int, int]) -> None:
    assert snap_compare(demo_app(scenario), terminal_size=size, run_before=load)


async def _cluster_overview(pilot: Any) -> None:
    await load(pilot)
    await pilot.press("c")
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_cluster_overview(snap_compare: Any, size: tuple[int, int]) -> None:
    # Short history: the overview shows only the latest snapshot of each host.
    assert snap_compare(demo_app(CLUSTER, seconds=30), terminal_size=size,
                        run_before=_cluster_overview)


# -- issue 15: the slurm node with its JOB column, then folded by job ------------------------


async def _folded(pilot: Any) -> None:
    await load(pilot)
    await pilot.press("J")
    await pilot.pause()


@pytest.mark.parametrize("fold", [False, True], ids=["jobs", "folded"])
def test_slurm_node(snap_compare: Any, fold: bool) -> None:
    assert snap_compare(demo_app("slurm"), terminal_size=(160, 50),
                        run_before=_folded if fold else load)


# -- issue 19: a node whose cards are split with MIG -------------------------------------------


@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_mig_node(snap_compare: Any, size: tuple[int, int]) -> None:
    assert snap_compare(demo_app("mig"), terminal_size=size, run_before=load)


# -- issue 39.7: the reserve dialog at 80x24 keeps its cautions, error line and buttons ----


def test_reserve_dialog_80x24(snap_compare: Any) -> None:
    async def steps(pilot: Any) -> None:
        await load(pilot)
        await reserve_dialog("0,1,3")(pilot)

    assert snap_compare(demo_app("lab"), terminal_size=(80, 24), run_before=steps)
