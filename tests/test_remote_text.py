"""Issue 41, point 8: what a remote host sends reaches the terminal only escaped, and data
no view can show is said, not dropped or raised.  Real hosts: a loopback sshd whose
"python3" answers hostile JSON (tests/helpers/hostile_probe.py), read by `--once`,
`--watch` and `--json` in their own processes; and the one escaping function itself.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import HostConf, SshdCluster

from gputop import model
from gputop.commands import once
from gputop.model import Gpu, GpuProcess, HostSnapshot, MigDevice, Reservation
from gputop.text import visible

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "helpers" / "hostile_probe.py"
MODES = ("textfields", "clock", "crowd")
UNSAFE = {"Cc", "Cf", "Zl", "Zp", "Cs"}  # what must never reach a terminal raw


def raw_unsafe(text: str) -> list[str]:
    """The characters of ``text`` a terminal would obey or break a line at (a newline
    between lines is ours)."""
    return sorted({c for c in text if c != "\n" and unicodedata.category(c) in UNSAFE})


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    tmp = tmp_path_factory.mktemp("remote-text")
    confs = []
    for mode in MODES:
        python = tmp / f"python3-{mode}"
        python.write_text(f"#!/bin/sh\nexec /usr/bin/python3 {HOSTILE} {mode}\n")
        python.chmod(0o755)
        confs.append(HostConf(mode, scenario=None, python=str(python)))
    with SshdCluster(tmp, confs, per_daemon=len(confs)) as cluster:
        yield cluster


def gputop(cluster: SshdCluster, name: str, *flags: str) -> subprocess.CompletedProcess[str]:
    hosts = cluster.hosts_yaml(cluster.tmp / f"hosts-{name}.yaml", names=[name])
    return subprocess.run([sys.executable, "-m", "gputop.cli", *flags, "--hosts", str(hosts),
                           "--timeout", "20"], capture_output=True, text=True,
                          env={**cluster.env(), "COLUMNS": "400"}, cwd=ROOT, timeout=120)


def test_once_shows_every_remote_field_escaped(hostile: SshdCluster) -> None:
    done = gputop(hostile, "textfields", "--once")
    assert done.returncode == 0, done.stdout + done.stderr
    assert raw_unsafe(done.stdout) == [], done.stdout
    header = done.stdout.splitlines()[0]
    # the driver's title-setting escape, the separators and the bidi override: shown
    assert "driver 550\\e]2;pwned\\x07" in header and "CUDA 12.4\\u2028\\e[2J" in header
    assert "node\\u2029fake" in header
    assert "python\\u2028\\xadx.py\\u200b" in done.stdout and "eve\\u2066" in done.stdout


def test_watch_shows_every_remote_field_escaped(hostile: SshdCluster) -> None:
    hosts = hostile.hosts_yaml(hostile.tmp / "hosts-watch.yaml", names=["textfields"])
    proc = subprocess.Popen([sys.executable, "-m", "gputop.cli", "--once", "--watch", "0.5",
                             "--hosts", str(hosts), "--timeout", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**hostile.env(), "COLUMNS": "400"}, cwd=ROOT)
    seen = ""
    deadline = time.monotonic() + 90
    try:
        assert proc.stdout is not None
        while (seen.count("gputop --watch 0.5") < 3 or "driver 550" not in seen) \
                and time.monotonic() < deadline:
            seen += proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    seen += rest
    assert seen.count("gputop --watch 0.5") >= 3, seen + err
    assert "driver 550\\e]2;pwned\\x07" in seen and "CUDA 12.4\\u2028" in seen
    assert raw_unsafe(seen) == [] and "Traceback" not in err


def test_a_clock_no_one_can_print_is_an_error_of_one_line(hostile: SshdCluster) -> None:
    done = gputop(hostile, "clock", "--once")
    assert "Traceback" not in done.stderr and "OverflowError" not in done.stderr
    assert done.returncode == 3, done.stdout + done.stderr  # no host could be read
    lines = done.stdout.splitlines()
    assert lines[0].startswith("clock  ERROR"), lines
    assert lines[1].strip() == ("probe data not as expected: its clock says 1e+300, not a "
                                "time between 2000 and 2100"), lines
    (host,) = json.loads(gputop(hostile, "clock", "--json").stdout)["hosts"]
    assert host["state"] == model.HOST_ERROR and "its clock says 1e+300" in host["error"]
    assert host["time"] < 4e9  # the client's clock, not the host's


def test_a_cut_process_list_says_how_much_is_shown(hostile: SshdCluster) -> None:
    done = gputop(hostile, "crowd", "--once")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4,096 of 100,000 processes shown" in "\n".join(done.stdout.splitlines()[:3])
    (host,) = json.loads(gputop(hostile, "crowd", "--json").stdout)["hosts"]
    assert len(host["processes"]) == 4096 and host["state"] == model.HOST_OK
    assert "4,096 of 100,000 processes shown" in host["error"]


# -- the one escaping function ---------------------------------------------------------


def test_visible_escapes_each_control_format_and_separator_character() -> None:
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        unsafe = unicodedata.category(char) in UNSAFE
        shown = visible(char)
        assert (shown != char) == unsafe, hex(code)
        if unsafe:  # an escape made of plain ASCII, as the terminal will print it
            assert shown.isascii() and shown.isprintable() and shown.startswith("\\")
    assert visible("日本 ünï [b]x[/b] a\xa0b") == "日本 ünï [b]x[/b] a\xa0b"
    assert visible("\U000e0001") == "\\U000e0001"  # past U+FFFF: eight digits, not four
    assert visible(visible("\x1b\u2028")) == visible("\x1b\u2028")  # once is enough


def _every_text(cls: type, text: str) -> dict[str, str]:
    """Every plain-text field of a model record, set to ``text``."""
    import dataclasses

    return {f.name: text for f in dataclasses.fields(cls)
            if str(f.type) in ("str", "str | None")}


def test_once_escapes_every_text_field_of_the_model() -> None:
    """Each field of text a snapshot carries, hostile at once: nothing of it is raw in
    --once's text (the text --watch redraws), coloured or not."""
    evil = "\x1b]2;t\x07\u2028\u2029\u202e\u200b\x85"
    now = 1_800_000_000.0
    device = MigDevice(**{**_every_text(MigDevice, evil), "gpu": 0, "index": 0, "gi": 1,
                          "ci": 0})
    snap = HostSnapshot(**{
        **_every_text(HostSnapshot, evil), "host": "h" + evil, "time": now,
        "state": model.HOST_OK,
        "gpus": (Gpu(**{**_every_text(Gpu, evil), "index": 0, "state": model.GPU_OK,
                        "mig_mode": True, "mig_devices": (device,)}),
                 Gpu(**{**_every_text(Gpu, evil), "index": 1, "state": model.GPU_LOST})),
        "processes": (GpuProcess(**{**_every_text(GpuProcess, evil), "pid": 5, "gpu": 0,
                                    "start_time": now - 60}),),
        "reservations": (Reservation(**{**_every_text(Reservation, evil), "gpu": 0,
                                        "until": now + 60, "since": now - 60}),),
    })
    warning = model.HealthWarning(severity=model.WARNING, code="x", message=evil, hint=evil)
    for color in (False, True):
        text = once.render_text([snap], {snap.host: [warning]}, width=None, color=color,
                                now=now)
        ours = text.replace("\x1b[", "")  # our own colours are SGR sequences: ESC [
        assert evil not in text and raw_unsafe(ours) == [], text
        assert text.count("\\e]2;t\\x07\\u2028\\u2029\\u202e\\u200b\\x85") >= 8
