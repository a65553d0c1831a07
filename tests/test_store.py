"""The store both record kinds build on (gputop/actions/store.py): one set of rules for
reading a file anyone may have planted, the same for reservations and jobs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_queue_store import store  # noqa: F401 (the fixture: a sticky, world-writable dir)

from gputop.actions import queue, reservations
from gputop.actions.store import FILE_MODE, TMP_PREFIX, StoreError, is_lock_file, locked


def _problems(directory: Path) -> list[str]:
    return (queue.list_jobs(str(directory))["problems"]
            + reservations.scan(str(directory))["problems"])


@pytest.mark.parametrize("name", ["job.0000abcd.json", "index-0.1.json"])
def test_deeply_nested_json_is_skipped_not_raised(store: Path, name: str) -> None:  # noqa: F811
    # json.loads raises RecursionError (not ValueError) here; uncaught, it would stop
    # every user's collector on this host.
    (store / name).write_text("[" * 4000)
    assert any(f"{name}: not valid JSON (corrupt); skipped" in p for p in _problems(store))


@pytest.mark.parametrize("name", ["job.0000abcd.json", "index-0.1.json"])
def test_a_file_not_everyone_can_read_counts_for_no_one(
    store: Path, name: str  # noqa: F811
) -> None:
    # Readers who cannot read it would see another line (or holder) than its owner and root.
    path = store / name
    path.write_text("{}")
    path.chmod(0o600)
    assert f"{path}: not readable by everyone; skipped" in _problems(store)


def test_the_record_kinds_share_one_error_and_one_lock(store: Path) -> None:  # noqa: F811
    assert reservations.ReservationError is StoreError
    with locked(str(store), [0]):
        assert (store / ".lock-gpu0").exists()
    assert is_lock_file(".lock-gpu0") and not is_lock_file(".lock-gpu00")


def test_a_job_file_is_written_whole_and_world_readable(store: Path) -> None:  # noqa: F811
    old = os.umask(0o077)
    try:
        job = queue.submit(str(store), {"gpus": 1, "priority": "low", "command": "x"})
    finally:
        os.umask(old)
    assert os.stat(job.path).st_mode & 0o777 == FILE_MODE
    assert not [p for p in os.listdir(store) if p.startswith(TMP_PREFIX)]
    queue.withdraw(job)
