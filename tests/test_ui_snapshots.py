"""Pictures of the main screen (pytest-textual-snapshot), lab and dgx-h100, 80x24 and 160x50.

Deterministic: the simulator on a frozen clock, a fixed user, default config, no cursor
blink (the table has focus; the search box is hidden).  Regenerate with
`pytest tests/test_ui_snapshots.py --snapshot-update` and look at the SVGs before
committing them.
"""

from __future__ import annotations

from typing import Any

import pytest

from gputop.ui.screenshots import demo_app, load


@pytest.mark.parametrize("scenario", ["lab", "dgx-h100"])
@pytest.mark.parametrize("size", [(80, 24), (160, 50)], ids=["80x24", "160x50"])
def test_main_screen(snap_compare: Any, scenario: str, size: tuple[int, int]) -> None:
    assert snap_compare(demo_app(scenario), terminal_size=size, run_before=load)
