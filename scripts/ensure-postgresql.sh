#!/usr/bin/env bash
# The ledger's PostgreSQL tests (issue 38.3) run a real server from Debian's postgresql
# package: initdb and pg_ctl into a temporary directory (tests/helpers/postgres.py). Install
# it when missing and we are root; otherwise those tests skip with a reason (a failure
# under CI=true, see tests/conftest.py).
set -u
. "$(dirname "$0")/ensure-lib.sh"
if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing postgresql for the ledger's PostgreSQL tests"
  apt_install postgresql || echo "warning: $apt_problem; PostgreSQL tests will be skipped" >&2
  # The package's own cluster and service are not wanted: the tests start their own.
  command -v systemctl >/dev/null && systemctl disable --now postgresql >/dev/null 2>&1
else
  echo "note: postgresql missing and not root; PostgreSQL tests will be skipped" >&2
fi
exit 0
