#!/usr/bin/env bash
# The Prometheus tests run a real Prometheus server and promtool (Debian's `prometheus`
# package). Install it when missing and we are root; otherwise those tests skip with a
# reason (a failure under CI=true, see tests/conftest.py).
set -u
. "$(dirname "$0")/ensure-lib.sh"
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing prometheus for the Prometheus tests"
  apt_install prometheus || echo "warning: $apt_problem; Prometheus tests will be skipped" >&2
  # The package's own service is not wanted: the tests start their own servers.
  command -v systemctl >/dev/null && systemctl disable --now prometheus >/dev/null 2>&1
else
  echo "note: prometheus missing and not root; Prometheus tests will be skipped" >&2
fi
exit 0
