#!/usr/bin/env bash
# The SSH tests run a real OpenSSH sshd on loopback. Install Debian's openssh-server
# when it is missing and we are root; otherwise the sshd tests skip with a reason.
set -u
if [ -x /usr/sbin/sshd ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing openssh-server for the SSH tests"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends openssh-server >/dev/null \
    || echo "warning: could not install openssh-server; SSH tests will be skipped" >&2
else
  echo "note: /usr/sbin/sshd missing and not root; SSH tests will be skipped" >&2
fi
exit 0
