"""The dashboard's command-line entry: bad input is one line and exit 2; screenshots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gputop.ui import screenshots


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--demo", "--interval", "0"], "--interval 0: expected 0.1 to 3600 seconds"),
        (["--demo", "no-such-scenario"], "no-such-scenario"),
    ],
)
def test_bad_arguments_one_line_exit_2(args: list[str], message: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_screenshot_writes_svgs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keep = {"main-lab-80x24", "help"}
    monkeypatch.setattr(screenshots, "SHOTS", [s for s in screenshots.SHOTS if s[0] in keep])
    assert screenshots.run_screenshots(str(tmp_path / "out")) == 0
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["help.svg", "main-lab-80x24.svg"]
    main = (tmp_path / "out" / "main-lab-80x24.svg").read_text()
    assert main.startswith("<svg") and "lab-gpu-03" in main and "DEMO" in main
    assert "Sort&#160;by&#160;PID" in (tmp_path / "out" / "help.svg").read_text()


def test_screenshot_dir_not_writable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run("--screenshot", str(blocker / "sub"))
    assert proc.returncode == 2
    assert "--screenshot" in proc.stderr and "Traceback" not in proc.stderr
