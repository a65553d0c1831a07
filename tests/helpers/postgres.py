"""A real PostgreSQL server for the ledger's tests (issue 38.3), no mocks.

Debian's server (scripts/ensure-postgresql.sh installs it): ``initdb`` and ``pg_ctl`` into a
temporary directory, as a system user of our own (initdb refuses root; tests run as root
in CI), listening only on a unix socket in that directory; waits are bounded, the server
is stopped at the end. Each test gets a database of its own (``fresh_database``).
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.users import ensure_users

USER = "gputoppgtest"  # this file's own: no other test creates it
ROLE = "gputop"  # the server's superuser, trusted on the socket
SECRET_ROLE = "gputop_pw"  # a role that must give its password (a passfile's test)
SECRET = "s3cret-for-tests"
START_S = 60


def _bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return os.path.dirname(found[-1]) if found else None


@dataclass
class Server:
    folder: Path
    socket_dir: Path
    port: int = 5432
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def url(self, database: str = "postgres", role: str = ROLE) -> str:
        return f"postgresql://{role}@/{database}?host={self.socket_dir}&port={self.port}"

    def sql(self, statement: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True, connect_timeout=10) as c:
            c.execute(statement.encode())

    def fresh_database(self) -> str:
        name = f"ledger_{os.getpid()}_{next(self._names)}"
        self.sql(f"CREATE DATABASE {name}")
        return self.url(name)


def _run(argv: list[str], timeout: float) -> None:
    done = subprocess.run(["runuser", "-u", USER, "--", *argv], capture_output=True,
                          text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {(done.stderr or done.stdout).strip()[-500:]}")


def start_server() -> Iterator[Server]:
    """A started server for the block; stopped and removed at the end."""
    bindir = _bin()
    if bindir is None or not shutil.which("runuser"):
        pytest.skip("PostgreSQL's server (Debian's postgresql) or runuser missing:"
                    " scripts/ensure-postgresql.sh installs it")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg missing: the test extra installs it")
    with ensure_users([USER]) as (entry,):
        folder = Path(tempfile.mkdtemp(prefix="gputop-pg-"))
        try:
            os.chown(folder, entry.pw_uid, entry.pw_gid)
            data, sock = folder / "data", folder / "sock"
            sock.mkdir()
            os.chown(sock, entry.pw_uid, entry.pw_gid)
            _run([f"{bindir}/initdb", "-D", str(data), "-U", ROLE, "--auth=trust",
                  "--no-sync", "-E", "UTF8", "--locale=C"],
                 timeout=120)
            hba = data / "pg_hba.conf"
            hba.write_text(f"local all {SECRET_ROLE} scram-sha-256\nlocal all all trust\n")
            _run([f"{bindir}/pg_ctl", "-D", str(data), "-l", str(folder / "log"), "-w",
                  "-t", str(START_S), "-o",
                  f"-k {sock} -c listen_addresses='' -c fsync=off -p 5432", "start"],
                 timeout=START_S + 30)
            server = Server(folder, sock)
            try:
                server.sql(f"CREATE ROLE {SECRET_ROLE} LOGIN SUPERUSER PASSWORD '{SECRET}'")
                yield server
            finally:
                _run([f"{bindir}/pg_ctl", "-D", str(data), "-w", "-t", str(START_S), "-m",
                      "fast", "stop"], timeout=START_S + 30)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
