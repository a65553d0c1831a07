"""scripts/ensure-*.sh wait for another apt/dpkg (issue 39, point 1): a fresh VM's
unattended upgrades hold dpkg's lock, and giving up at once failed `make test`.  A real
apt-get, pointed by APT_CONFIG at a private dpkg/lists/cache tree whose locks this test
holds the way dpkg does (fcntl), so the machine's own apt is never touched."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MISSING = "gputop-test-no-such-package"


@pytest.fixture
def apt_tree(tmp_path: Path) -> Path:
    if shutil.which("apt-get") is None:
        pytest.skip("apt-get missing: the ensure scripts only install on Debian")
    for sub in ("dpkg", "lists/partial", "cache/archives/partial", "parts"):
        (tmp_path / sub).mkdir(parents=True)
    (tmp_path / "dpkg" / "status").write_text("")
    (tmp_path / "apt.conf").write_text(
        f'Dir::State::status "{tmp_path}/dpkg/status";\n'
        f'Dir::State::Lists "{tmp_path}/lists";\nDir::Cache "{tmp_path}/cache";\n'
        f'Dir::Etc::sourcelist "/dev/null";\nDir::Etc::sourceparts "{tmp_path}/parts";\n')
    return tmp_path


class _Locks:
    """dpkg's frontend lock and apt's lists lock of the private tree, held by us."""

    def __init__(self, tree: Path) -> None:
        self.fds = []
        for name in ("dpkg/lock-frontend", "lists/lock"):
            fd = os.open(tree / name, os.O_RDWR | os.O_CREAT, 0o640)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.fds.append(fd)

    def release(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


@pytest.fixture
def locks(apt_tree: Path) -> Iterator[_Locks]:
    held = _Locks(apt_tree)
    yield held
    held.release()


def _install(tree: Path, wait_s: int) -> subprocess.Popen[str]:
    script = ('. scripts/ensure-lib.sh; apt_install ' + MISSING +
              ' || { echo "PROBLEM $apt_problem" >&2; exit 1; }')
    env = dict(os.environ, APT_CONFIG=str(tree / "apt.conf"), APT_LOCK_WAIT_S=str(wait_s))
    return subprocess.Popen(["bash", "-c", script, "ensure-test.sh"], cwd=REPO, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_lock_that_stays_held_ends_in_one_line_naming_its_holder(apt_tree: Path,
                                                                   locks: _Locks) -> None:
    proc = _install(apt_tree, wait_s=2)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    problem = [line for line in err.splitlines() if line.startswith("PROBLEM ")]
    me = Path("/proc/self/comm").read_text().strip()  # apt names the holder by it
    assert problem == [f"PROBLEM ensure-test.sh: could not install {MISSING}: another "
                       f"apt/dpkg (process {os.getpid()} ({me})) held its lock for 2 s "
                       "(APT_LOCK_WAIT_S)"], err


def test_the_install_goes_on_once_the_lock_is_let_go(apt_tree: Path, locks: _Locks) -> None:
    proc = _install(apt_tree, wait_s=600)
    assert proc.stderr is not None
    first = proc.stderr.readline()  # it says it waits, then waits
    assert first == "ensure-test.sh: waiting up to 600 s for another apt/dpkg to finish\n"
    locks.release()
    _out, err = proc.communicate(timeout=300)
    # Past the lock, apt-get ran for real: the package is not in the (empty) lists.
    assert proc.returncode == 1
    assert err.strip() == (f"PROBLEM ensure-test.sh: could not install {MISSING}: "
                           f"E: Unable to locate package {MISSING}"), err
