#!/usr/bin/env bash
# The HTML report test renders with a real headless browser. Install Debian's
# chromium-headless-shell when it is missing and we are root; otherwise that test skips
# (and fails under CI=true, like every real-part test).
set -u
. "$(dirname "$0")/ensure-lib.sh"
if command -v chromium-headless-shell >/dev/null || [ -x /usr/lib/chromium/chromium-headless-shell ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing chromium-headless-shell for the HTML report test"
  apt_install chromium-headless-shell || echo "warning: $apt_problem; the HTML render test will be skipped" >&2
else
  echo "note: chromium-headless-shell missing and not root; the HTML render test will be skipped" >&2
fi
exit 0
