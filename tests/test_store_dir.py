"""One way to name the reservation store (issue 25, point 4): $GPUTOP_RESERVATIONS_DIR,
else the config's `reservations: dir:`, else the default; the same for local commands,
--demo, the remote probe, and shown by `gputop config`.

Local commands run as real processes on gputop's fake NVIDIA driver (2 idle cards)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import fakenvml

from gputop.actions import store
from gputop.config import ConfigError, parse_config
from gputop.sources import probe
from gputop.storedir import RESERVATIONS_DIR

REPO = Path(__file__).resolve().parent.parent


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    scenario = fakenvml.write_scenario(tmp_path / "scenario", fakenvml.idle_cards(2))
    env = fakenvml.environment(scenario)
    env.update(XDG_CONFIG_HOME=str(tmp_path / "xdg"), TMPDIR=str(tmp_path / "tmp"),
               NO_COLOR="1", **extra)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    for name in ("GPUTOP_HOSTS", store.DIRECTORY_ENV):
        if name not in extra:
            env.pop(name, None)
    return env


def _gputop(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args], env=env, text=True,
                          capture_output=True, timeout=60, cwd=str(REPO), check=False)


@pytest.fixture
def configured(tmp_path: Path) -> Path:
    """The config file's store: ~/.config/gputop/config.yaml names ``configured``."""
    config = tmp_path / "xdg" / "gputop" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(f"interval: 1\nreservations:\n  dir: {tmp_path / 'configured'}\n")
    return tmp_path / "configured"


def test_the_variable_wins_over_the_config_for_local_commands(
    tmp_path: Path, configured: Path
) -> None:
    private = tmp_path / "private"
    env = _env(tmp_path, GPUTOP_RESERVATIONS_DIR=str(private))
    done = _gputop(env, "reserve", "--gpus", "1", "--for", "1h", "--note", "mine")
    assert done.returncode == 0, done.stderr
    assert [r["note"] for r in store_list(private)] == ["mine"]
    assert not configured.exists()  # the config's (shared) store was never written
    listed = _gputop(env, "reservations", "--json")
    assert [r["gpu"] for r in json.loads(listed.stdout)] == [1]
    shown = _gputop(env, "config")
    assert f"store:       {private} (from $GPUTOP_RESERVATIONS_DIR;" in shown.stdout
    # Without the variable: the config's store, which holds nothing.
    plain = _env(tmp_path)
    assert json.loads(_gputop(plain, "reservations", "--json").stdout) == []
    line = 3  # "  dir: ..." in the file above
    config = tmp_path / "xdg" / "gputop" / "config.yaml"
    assert (f"store:       {configured} (from {config}:{line};"
            in _gputop(plain, "config").stdout)


def test_without_either_the_default_is_shown(tmp_path: Path) -> None:
    shown = _gputop(_env(tmp_path), "config")
    assert f"store:       {RESERVATIONS_DIR} (from default;" in shown.stdout


def test_demo_takes_the_variable_but_never_the_configs_store(
    tmp_path: Path, configured: Path
) -> None:
    plain = _env(tmp_path)
    done = _gputop(plain, "reserve", "--demo", "faulty", "--gpus", "3", "--for", "1h")
    assert done.returncode == 0, done.stderr
    assert not configured.exists()  # the config names a real store
    private = tmp_path / "private"
    named = _env(tmp_path, GPUTOP_RESERVATIONS_DIR=str(private))
    again = _gputop(named, "reserve", "--demo", "faulty", "--gpus", "4", "--for", "1h")
    assert again.returncode == 0, again.stderr
    assert [r["gpu"] for r in store_list(private)] == [4]


def test_the_probe_uses_the_same_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(store.DIRECTORY_ENV, raising=False)
    assert probe._reservations_dir(None) == RESERVATIONS_DIR
    assert probe._reservations_dir("lab") != RESERVATIONS_DIR  # private to the sim
    monkeypatch.setenv(store.DIRECTORY_ENV, str(tmp_path / "x"))
    assert probe._reservations_dir(None) == str(tmp_path / "x")
    assert probe._reservations_dir("lab") == str(tmp_path / "x")
    monkeypatch.setenv(store.DIRECTORY_ENV, "rel/store")
    monkeypatch.chdir(tmp_path)
    assert store.store_directory("/c") == (str(tmp_path / "rel" / "store"),
                                           "$GPUTOP_RESERVATIONS_DIR")


def test_a_relative_store_in_the_config_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("reservations:\n  dir: res\n", "c.yaml")
    assert str(caught.value) == ("c.yaml:2: key 'reservations.dir': expected an absolute path,"
                                 " got 'res'")


def store_list(directory: Path) -> list[dict[str, object]]:
    from gputop.actions import reservations

    return reservations.list_active(str(directory))
