"""Shared fixtures: the real-sshd loopback hosts (tests/sshd.py) and a reaper of the real
processes a test starts; the rule that CI skips nothing; and the rule that a test run
touches nothing of the machine's own gputop files (tests/helpers/hermetic.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Generator, Iterator

import pytest
from helpers import hermetic
from helpers.procs import Reaper
from sshd import sshd_factory, sshd_hosts

__all__ = ["reaper", "sshd_factory", "sshd_hosts"]


def pytest_configure(config: pytest.Config) -> None:
    """Every temporary file of the run, ours, gputop's (the demo's reservation store) and
    pytest's own, goes under one folder that the run removes at its end: `make test`
    leaves nothing in /tmp.  World-writable and sticky like /tmp itself, because the
    tests' other users make their own folders in it; TMPDIR reaches the subprocesses."""
    root = tempfile.mkdtemp(prefix="gputop-tests-")
    os.chmod(root, 0o1777)
    redirected = {"TMPDIR": root, **hermetic.redirect(root)}
    config.stash[_TMP_ROOT] = (root, {k: os.environ.get(k) for k in redirected},
                               tempfile.tempdir)
    config.stash[_GUARD] = hermetic.Guard(hermetic.forbidden_places(os.path.expanduser("~")))
    # gputop's own state (its error log, a ledger, `gputop run`'s history), the system
    # ledger, the host policy, the reservation store and the config go there too, never
    # into the machine's or the ~/.local/state of whoever runs the tests.
    os.environ.update(redirected)
    tempfile.tempdir = root


def pytest_unconfigure(config: pytest.Config) -> None:
    root, before, tempdir = config.stash.get(_TMP_ROOT, (None, {}, None))
    if root is None:
        return
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    tempfile.tempdir = tempdir
    shutil.rmtree(root, ignore_errors=True)


_TMP_ROOT = pytest.StashKey[tuple[str, dict[str, str | None], str | None]]()
_GUARD = pytest.StashKey[hermetic.Guard]()


@pytest.fixture
def reaper() -> Iterator[Reaper]:
    """Kills and reaps every process the test started, also when it fails."""
    r = Reaper()
    try:
        yield r
    finally:
        r.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, None]:
    """Under CI (CI=true) a skipped test is a failure: every skip here means a real part
    (root, useradd, sshd, a browser, Prometheus, the fake driver) was missing, and CI
    must provide them all. A developer's machine may lack them and still run the rest."""
    outcome = yield
    report = outcome.get_result()
    guard = item.config.stash.get(_GUARD, None)
    touched = guard.take() if guard is not None else []
    if touched and report.passed:
        # A test (or its setup/teardown) read or changed the machine's own gputop files.
        report.outcome = "failed"
        report.longrepr = ("touched the machine's own gputop files, which a test run must "
                           "not: " + "; ".join(dict.fromkeys(touched)))
    if os.environ.get("CI", "").lower() == "true" and report.skipped \
            and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which must run every real part: {reason}"
