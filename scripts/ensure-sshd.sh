#!/usr/bin/env bash
# The SSH tests run a real OpenSSH sshd on loopback. Install Debian's openssh-server
# when it is missing and we are root; otherwise the sshd tests skip with a reason.
set -u
. "$(dirname "$0")/ensure-lib.sh"
if [ -x /usr/sbin/sshd ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing openssh-server for the SSH tests"
  apt_install openssh-server || echo "warning: $apt_problem; SSH tests will be skipped" >&2
else
  echo "note: /usr/sbin/sshd missing and not root; SSH tests will be skipped" >&2
fi
exit 0
