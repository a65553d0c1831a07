"""Shared fixtures: the real-sshd loopback hosts (tests/sshd.py) and a reaper of the real
processes a test starts."""

from __future__ import annotations

from collections.abc import Iterator

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
