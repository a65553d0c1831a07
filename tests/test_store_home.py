"""The reservation store's default directory has one home (gputop.storedir.RESERVATIONS_DIR):
the config's default, the store's rule, the action env and the remote probe all take it
from there, so no second copy of the path can drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.actions import store
from gputop.actions.env import ActionEnv
from gputop.config import Config
from gputop.storedir import RESERVATIONS_DIR

PACKAGE = Path(__file__).resolve().parent.parent / "gputop"


def test_the_default_path_is_written_once_in_the_package() -> None:
    where = [str(p.relative_to(PACKAGE)) for p in sorted(PACKAGE.rglob("*.py"))
             if RESERVATIONS_DIR in p.read_text()]
    assert where == ["storedir.py"]


def test_every_default_is_the_one_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(store.DIRECTORY_ENV, raising=False)
    assert Config().reservations.dir == RESERVATIONS_DIR
    assert ActionEnv().reservations_dir == RESERVATIONS_DIR
    assert store.store_directory()[0] == RESERVATIONS_DIR
