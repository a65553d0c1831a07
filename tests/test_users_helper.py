"""The test-user helper (helpers/users.py) cleans up after itself: when the block fails,
when the interpreter exits with the block still open, and after a killed run (a leftover
system account of the same name is reused, then removed)."""

from __future__ import annotations

import pwd
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.users import ensure_users

NAME = "gt13a"
HELPERS = Path(__file__).parent


def exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def test_users_removed_when_the_block_fails() -> None:
    with pytest.raises(KeyboardInterrupt), ensure_users([NAME]) as (entry,):
        assert entry.pw_name == NAME and exists(NAME)
        raise KeyboardInterrupt
    assert not exists(NAME)


def test_users_removed_at_exit_when_the_block_never_closes() -> None:
    code = ("import pwd, sys; sys.path.insert(0, sys.argv[1]);"
            "from helpers.users import ensure_users;"
            f"block = ensure_users([{NAME!r}]); block.__enter__();"
            f"print(pwd.getpwnam({NAME!r}).pw_name)")
    with ensure_users([]):  # skips where users cannot be made
        pass
    out = subprocess.run([sys.executable, "-c", code, str(HELPERS)], capture_output=True,
                         text=True, check=True).stdout
    assert out == f"{NAME}\n"
    assert not exists(NAME)


def test_a_leftover_is_reused_and_removed() -> None:
    with ensure_users([]):
        pass
    subprocess.run(["useradd", "--system", "--no-create-home", NAME], check=True,
                   capture_output=True)
    uid = pwd.getpwnam(NAME).pw_uid
    try:
        with ensure_users([NAME]) as (entry,):
            assert entry.pw_uid == uid
        assert not exists(NAME)
    finally:
        subprocess.run(["userdel", NAME], check=False, capture_output=True)
