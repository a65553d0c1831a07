"""A test run reads and writes nothing outside its temporary root (issue 39, point 1):
the system ledger, the host policy, gputop's state and config are redirected for the
tests and their subprocesses, and a test that touches the machine's own files fails."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from helpers import hermetic

from gputop import config, policy
from gputop.ledger import jobs, paths

REPO = Path(__file__).resolve().parents[1]


def _inside_the_run(path: str) -> bool:
    root = os.path.realpath(tempfile.gettempdir())
    return os.path.realpath(path).startswith(root + os.sep)


def test_every_machine_path_of_the_run_is_inside_its_temporary_root() -> None:
    assert os.path.basename(tempfile.gettempdir()).startswith("gputop-tests-")
    found = {"system ledger": paths.SYSTEM_PATH, "policy": policy.policy_path(),
             "user ledger": paths.default_path(), "job history": jobs.own_path(),
             "config": config.default_path()}
    outside = {name: p for name, p in found.items() if not _inside_the_run(p)}
    assert not outside, outside
    assert os.path.dirname(paths.SYSTEM_DEFAULT) == hermetic.SYSTEM_LEDGER_DIR


def test_a_subprocess_reads_no_system_ledger_either() -> None:
    # `gputop run` and the CLI tests run gputop in a subprocess: what jobs.read_paths()
    # gives there, with a system ledger present under the run's root, is the run's own.
    code = "from gputop.ledger import jobs, paths; print(paths.SYSTEM_PATH); " \
           "print(*jobs.read_paths(), sep='\\n')"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", code], env=env, text=True,
                         capture_output=True, check=True, timeout=60).stdout.split()
    assert out and all(_inside_the_run(p) for p in out), out
    assert "/var/lib/gputop/ledger.sqlite" not in out


def test_a_test_that_opens_the_machines_policy_fails(tmp_path: Path) -> None:
    # A run of pytest with our conftest, over one test that only tries to open the real
    # /etc/gputop/policy.yaml (absent or not, the open is the touch), and one that does not.
    (tmp_path / "test_touch.py").write_text(textwrap.dedent("""
        import contextlib, sqlite3
        def test_opens_policy():
            with contextlib.suppress(OSError):
                open("/etc/gputop/policy.yaml").close()
        def test_connects_the_system_ledger():
            with contextlib.suppress(sqlite3.Error):
                sqlite3.connect("file:/var/lib/gputop/ledger.sqlite?mode=ro", uri=True)
        def test_stays_home(tmp_path):
            (tmp_path / "x").write_text("fine")
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]))
    env.pop("CI", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest",
                          "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          str(tmp_path / "test_touch.py")],
                         env=env, text=True, capture_output=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "2 failed, 1 passed" in run.stdout, run.stdout
    assert "open /etc/gputop/policy.yaml" in run.stdout
    assert "sqlite3.connect" in run.stdout and "/var/lib/gputop/ledger.sqlite" in run.stdout
