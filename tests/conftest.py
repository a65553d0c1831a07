"""Shared fixtures: the real-sshd loopback hosts (tests/sshd.py) and a reaper of the real
processes a test starts; and the rule that CI skips nothing."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator

import pytest
from helpers.procs import Reaper
from sshd import sshd_factory, sshd_hosts

__all__ = ["reaper", "sshd_factory", "sshd_hosts"]


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
    if os.environ.get("CI", "").lower() == "true" and report.skipped \
            and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which must run every real part: {reason}"
