"""`gputop check` in a subprocess: exit codes for cron, text and JSON output, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.commands.check import exit_code, write_report
from gputop.model import CRITICAL, INFO, WARNING, HealthWarning, HostSnapshot


def gputop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputop.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )


def test_faulty_node_exits_critical() -> None:
    result = gputop("check", "--demo", "faulty")
    assert result.returncode == 2, result.stderr
    lines = result.stdout.splitlines()
    assert "DEMO" in lines[0] and "critical" in lines[0]
    crit = [line for line in lines if line.startswith("CRITICAL")]
    assert any("uncorrectable ECC" in line and "GPU 2" in line for line in crit)
    assert any("remapped rows pending" in line for line in crit)
    # severity order: every CRITICAL line before every WARNING line before INFO
    order = [line.split()[0] for line in lines[1:] if line[:1].isupper()]
    ranks = [{"CRITICAL": 0, "WARNING": 1, "INFO": 2}[s] for s in order]
    assert ranks == sorted(ranks)
    assert "hint:" in result.stdout
    assert "\x1b[" not in result.stdout  # NO_COLOR and not a terminal
    assert result.stderr == ""


# Every shipped scenario's exact verdict: exit code and (code, GPU) of each warning.
SCENARIO_VERDICTS = {
    # a training job holding >80 % of all eight cards: healthy, so silent and exit 0
    "dgx-h100": (0, set()),
    # its XIDs and lost GPU at once, as `--demo list` promises (issue 39.9)
    "faulty": (2, {("critical", "ecc-uncorrected", 2), ("critical", "remap-pending", 2),
                   ("critical", "xid-48", 6), ("critical", "xid-79", 6),
                   ("critical", "xid-94", 3), ("critical", "gpu-lost", 6),
                   ("warning", "nvlink-down", 4), ("warning", "pcie-gen", 5),
                   ("warning", "pcie-width", 5), ("info", "persistence-off", None)}),
    "lab": (1, {("warning", "temp-near-slowdown", 1), ("warning", "thermal-slowdown", 1),
                ("info", "orphan-memory", 3)}),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIO_VERDICTS))
def test_scenario_exit_code_and_warning_codes(scenario: str) -> None:
    result = gputop("check", "--demo", scenario, "--json")
    code, expected = SCENARIO_VERDICTS[scenario]
    assert result.returncode == code, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert {(w["severity"], w["code"], w["gpu"]) for w in doc["warnings"]} == expected


def test_lab_box_exits_warning() -> None:
    result = gputop("check", "--demo", "lab")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "too hot" in result.stdout


def test_json_output_matches_exit_code() -> None:
    result = gputop("check", "--demo", "faulty", "--json")
    assert result.returncode == 2
    doc = json.loads(result.stdout)
    assert doc["status"] == "critical"
    assert doc["schema"] == 1
    assert len(doc["hosts"]) == 1
    codes = {(w["code"], w["gpu"]) for w in doc["warnings"]}
    assert ("ecc-uncorrected", 2) in codes and ("pcie-width", 5) in codes
    first = doc["warnings"][0]
    assert first["severity"] == "critical" and first["hint"] and first["since"]


def test_config_thresholds_apply(tmp_path: Path) -> None:
    # The classic "memory above 80 %" alert is off by default and one config key turns it
    # on: the change in the verdict is the config's.
    config = tmp_path / "config.yaml"
    config.write_text("health:\n  mem_percent: 80\n")
    result = gputop("check", "--demo", "dgx-h100", "--config", str(config))
    assert result.returncode == 1, result.stdout
    warnings = [line for line in result.stdout.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 8 and all("memory" in line for line in warnings), result.stdout


def test_bad_health_key_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("health:\n  mem_precent: 90\n")
    result = gputop("check", "--demo", "lab", "--config", str(config))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert f"{config}:2: key 'health.mem_precent': unknown key" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_scenario_is_one_line() -> None:
    result = gputop("check", "--demo", "no-such-scenario")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "no-such-scenario" in result.stderr


@pytest.mark.parametrize(
    ("severities", "code"),
    [((), 0), ((INFO,), 0), ((INFO, WARNING), 1), ((WARNING, CRITICAL, INFO), 2)],
)
def test_exit_code(severities: tuple[str, ...], code: int) -> None:
    found = [HealthWarning(severity=s, code="x", message="m") for s in severities]
    assert exit_code(found) == code


def test_report_neutralises_terminal_escapes() -> None:
    import io

    evil = HealthWarning(
        severity=WARNING,
        code="idle-memory",
        message="pid 1 (mallory: python \x1b]0;pwned\x07 x.py) holds memory",
        host="h\x1b[2J",
        gpu=0,
    )
    out = io.StringIO()
    write_report([evil], [HostSnapshot(host="h", time=0.0)], out, colour=False)
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "mallory" in text


def test_check_and_topo_never_import_textual() -> None:
    code = (
        "import sys, contextlib, io\n"
        "from gputop.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['check', '--demo', 'faulty'])\n"
        "    main(['topo', '--demo', 'lab', '--json'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'gputop.ui'))\n"
        "bad += sorted(m for m in sys.modules if m.startswith('gputop.ui'))\n"
        "print(rc, bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2 []"


def _has_nvml() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_nvml(), reason="this machine has an NVIDIA driver")
def test_no_driver_here_is_exit_3_in_one_line() -> None:
    # Without an NVIDIA driver local collection cannot start.
    for command in ("check", "topo"):
        result = gputop(command)
        assert result.returncode == 3, (command, result.stdout, result.stderr)
        assert result.stderr.count("\n") == 1 and "--demo" in result.stderr
        assert not result.stderr.startswith("gputop check: gputop")


def test_closed_pipe_keeps_the_critical_exit_code() -> None:
    # `gputop check | head -1` with the reader already gone: EPIPE on the first write must
    # not turn the critical (2) into 0, nor print a traceback.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gputop.cli", "check", "--demo", "faulty"],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
            env={**os.environ, "NO_COLOR": "1"},
        )
    finally:
        os.close(write_end)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
