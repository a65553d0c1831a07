"""Config loading: defaults, every section, and errors that name file, line and key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gputop.columns import DEFAULT_COLUMNS
from gputop.config import Config, ConfigError, load_config, parse_config

GOOD = """\
interval: 2
history_minutes: 5
thresholds:
  temp: {warn: 70, crit: 80}
  util: [40, 95]
colors:
  crit: "#ff0000"
columns: [gpu, pid, user, command]
keys:
  kill: "k,f9"
  quit: q
health:
  mem_percent: 83
  fan_hot_temp: 55
reclaim:
  idle_minutes: 45
  kill_grace_s: 2.5
reservations:
  dir: /tmp/res
"""


def test_defaults_when_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    config = load_config()
    assert config == Config()
    assert config.reclaim.idle_minutes == 30 and config.reclaim.idle_min_mem_mib == 1024
    assert config.reclaim.kill_grace_s == 5
    assert config.reservations.dir == "/var/tmp/gputop-reservations"
    assert config.columns == DEFAULT_COLUMNS


def test_xdg_config_home_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gputop").mkdir()
    (tmp_path / "gputop" / "config.yaml").write_text("interval: 3\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    config = load_config()
    assert config.interval == 3.0
    assert config.path == str(tmp_path / "gputop" / "config.yaml")


def test_every_section_read() -> None:
    c = parse_config(GOOD, "c.yaml")
    assert c.interval == 2.0 and c.history_minutes == 5.0
    assert c.thresholds["temp"] == (70.0, 80.0) and c.thresholds["util"] == (40.0, 95.0)
    assert c.thresholds["mem"] == (50.0, 90.0)  # untouched default
    assert c.colors["crit"] == "#ff0000" and c.colors["ok"] == "green"
    assert c.columns == ("gpu", "pid", "user", "command")
    assert c.keys == {"kill": "k,f9", "quit": "q"}
    assert c.health == {"mem_percent": 83, "fan_hot_temp": 55}
    assert c.reclaim.idle_minutes == 45 and c.reclaim.kill_grace_s == 2.5
    assert c.reclaim.idle_min_mem_mib == 1024
    assert c.reservations.dir == "/tmp/res"


def test_empty_file_is_defaults() -> None:
    assert parse_config("", "e.yaml").interval == 1.0
    assert parse_config("# only a comment\n", "e.yaml").columns == DEFAULT_COLUMNS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("interval: 1\nintervall: 2\n", "c.yaml:2: key 'intervall': unknown key"),
        ("interval: fast\n", "c.yaml:1: key 'interval': expected a number, got 'fast'"),
        ("interval: 0\n", "c.yaml:1: key 'interval': 0 is out of range"),
        ("thresholds:\n  temp:\n    warn: 90\n    crit: 80\n",
         "c.yaml:3: key 'thresholds.temp': warn (90) is above crit (80)"),
        ("thresholds:\n  tmp: [1, 2]\n", "c.yaml:2: key 'thresholds.tmp': unknown gauge"),
        ("thresholds:\n  temp: {warn: 1, hot: 2}\n",
         "c.yaml:2: key 'thresholds.temp.hot': unknown key"),
        ("colors:\n  warn: notacolour\n", "c.yaml:2: key 'colors.warn': 'notacolour' is not"),
        ("columns: [gpu, pidd]\n", "c.yaml:1: key 'columns': unknown column 'pidd'"),
        ("columns: []\n", "c.yaml:1: key 'columns': expected a non-empty list"),
        ("keys:\n  kil: k\n", "c.yaml:2: key 'keys.kil': unknown binding id"),
        ("reclaim:\n  idle_minutes: -1\n", "c.yaml:2: key 'reclaim.idle_minutes': -1 is out"),
        ("reclaim:\n  grace: 1\n", "c.yaml:2: key 'reclaim.grace': unknown key"),
        ("reservations:\n  dir: [a]\n", "c.yaml:2: key 'reservations.dir': expected a single"),
        ("health:\n  a: [1]\n", "c.yaml:2: key 'health.a': expected a single"),
        ("health:\n  mem_percnt: 80\n", "c.yaml:2: key 'health.mem_percnt': unknown key"),
        ("health:\n  mem_percent: lots\n", "c.yaml:2: key 'health.mem_percent': expected a"),
        ("interval: 1\ninterval: 2\n", "c.yaml:2: key 'interval': duplicate key (first on line 1)"),
        ("- 1\n- 2\n", "c.yaml:1: key '(top level)': expected a mapping"),
        ("interval: [1\n", "c.yaml:2: not valid YAML"),
    ],
)
def test_errors_name_file_line_and_key(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "c.yaml")
    message = str(info.value)
    assert message.startswith(expected), message
    assert "\n" not in message


def test_missing_explicit_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.yaml")


def test_cli_bad_config_exits_2_one_line_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("interval: 1\ncolours: {}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gputop.cli", "--demo", "--config", str(bad)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"{bad}:2: key 'colours': unknown key" in proc.stderr
    assert proc.stderr.strip().count("\n") == 0


def test_shipped_example_parses_and_shows_the_defaults() -> None:
    """gputop/examples/config.example.yaml (`gputop config --example`) says its values
    are the defaults: they must be."""
    from gputop.analysis.health import Thresholds
    from gputop.commands.configfile import CONFIG_EXAMPLE, example
    from gputop.keymap import BY_ID

    c = parse_config(example(CONFIG_EXAMPLE), "example")
    d = Config()
    for name in ("interval", "history_minutes", "thresholds", "colors", "columns", "reclaim",
                 "reservations", "serve", "prometheus"):
        assert getattr(c, name) == getattr(d, name), name
    assert Thresholds.from_config(c.health) == Thresholds()
    assert c.keys and all(keys == BY_ID[name].keys for name, keys in c.keys.items())
