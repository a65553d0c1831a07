"""scan_device_holders: a /proc tree with real symlinks, and the real /proc as another user."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gputop.sources import devscan
from gputop.sources.devscan import scan_device_holders


def _fake_process(root: Path, pid: int, targets: list[str], cmdline: bytes) -> None:
    fd_dir = root / str(pid) / "fd"
    fd_dir.mkdir(parents=True)
    for n, target in enumerate(targets):
        # Dangling symlinks are fine: the scan only reads where they point.
        (fd_dir / str(n)).symlink_to(target)
    (root / str(pid) / "cmdline").write_bytes(cmdline)
    (root / str(pid) / "comm").write_text("kworker\n")


def test_finds_holders_of_nvidia_device_files(tmp_path: Path) -> None:
    _fake_process(tmp_path, 100, ["/dev/nvidia0", "/dev/nvidiactl", "/dev/null"], b"python\0a.py\0")
    _fake_process(tmp_path, 200, ["/dev/pts/0", "socket:[123]"], b"bash\0")
    _fake_process(tmp_path, 300, ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia0"], b"")
    (tmp_path / "self").mkdir()  # not a pid: ignored
    holders, note = scan_device_holders(str(tmp_path))
    assert note is None
    assert [h["pid"] for h in holders] == [100, 300]
    assert holders[0]["devices"] == ["/dev/nvidia0", "/dev/nvidiactl"]
    assert holders[0]["command"] == "python a.py"
    assert holders[0]["user"] == pwd.getpwuid(os.getuid()).pw_name
    assert holders[1]["devices"] == ["/dev/nvidia-uvm", "/dev/nvidia0"]
    assert holders[1]["command"] == "[kworker]"


def test_missing_root_is_a_note_not_a_crash(tmp_path: Path) -> None:
    holders, note = scan_device_holders(str(tmp_path / "nope"))
    assert holders == []
    assert note is not None and "nope" in note


def test_real_proc_as_current_user() -> None:
    holders, _ = scan_device_holders()
    # No NVIDIA devices on this machine; the scan itself must work on the real tree.
    assert all(d.startswith("/dev/nvidia") for h in holders for d in h["devices"])
    assert all(h["pid"] != os.getpid() for h in holders)


@pytest.mark.skipif(
    os.getuid() != 0 or not os.path.exists("/usr/bin/python3"),
    reason="needs root to switch to an unprivileged user, and a system python3",
)
def test_unreadable_processes_are_counted() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        _run_scan_as_nobody(Path(tmp))


def _run_scan_as_nobody(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    # devscan is stdlib-only: a copy (with the vendor names it looks for) runs under the
    # system python as `nobody`, who can read neither our virtualenv nor root's /proc/PID/fd.
    package = Path(devscan.__file__).parents[1]
    (tmp_path / "gputop").mkdir()
    for name in ("__init__.py", "records.py", "vendors.py"):
        shutil.copy(package / name, tmp_path / "gputop" / name)
    shutil.copy(devscan.__file__, tmp_path / "devscan.py")
    for path in (tmp_path, tmp_path / "gputop"):
        os.chmod(path, 0o755)
    for path in (tmp_path / "devscan.py", *(tmp_path / "gputop").iterdir()):
        os.chmod(path, 0o644)
    code = "import json, devscan; print(json.dumps(devscan.scan_device_holders()))"

    def demote() -> None:
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)

    # Keep a root-owned process alive so there is at least one fd dir nobody cannot read.
    keeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        out = subprocess.run(
            ["/usr/bin/python3", "-c", code],
            preexec_fn=demote,
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
        ).stdout
    finally:
        keeper.kill()
        keeper.wait()
    holders, note = json.loads(out)
    assert holders == []
    assert note is not None
    count = int(note.split()[0])
    assert count >= 1
    assert "not readable" in note
