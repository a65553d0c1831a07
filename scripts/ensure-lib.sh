# Sourced by scripts/ensure-*.sh: install Debian packages with apt-get, waiting (bounded)
# for another apt or dpkg to let go of its lock. A fresh cloud VM runs unattended
# upgrades on first boot; giving up at once made `make test` fail on machine state.

# How long to wait for the lock in all, in seconds ($APT_LOCK_WAIT_S).
APT_LOCK_WAIT_S=${APT_LOCK_WAIT_S:-300}

# apt_install PACKAGE...: installs PACKAGEs; on failure returns 1 with why in
# $apt_problem, for the caller's one warning line.
apt_problem=""
apt_install() {
  local what out left last
  what=$(basename "$0")
  local deadline=$(( $(date +%s) + APT_LOCK_WAIT_S )) waited=0
  export DEBIAN_FRONTEND=noninteractive
  while :; do
    left=$(( deadline - $(date +%s) ))
    (( left < 0 )) && left=0
    # DPkg::Lock::Timeout makes install wait for dpkg's lock itself; `update`'s lists
    # lock has no such option, hence the loop.
    if out=$( { apt-get -qq -o DPkg::Lock::Timeout="$left" update &&
                apt-get -y -qq -o DPkg::Lock::Timeout="$left" install --no-install-recommends "$@"
              } 2>&1 >/dev/null ); then
      return 0
    fi
    if ! grep -qE 'Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock' <<<"$out"; then
      break
    fi
    if (( $(date +%s) >= deadline )); then
      last=$(grep -m1 -oE 'held by process [0-9]+( \([^)]*\))?' <<<"$out")
      apt_problem="$what: could not install $*: another apt/dpkg${last:+ (${last#held by })} held its lock for ${APT_LOCK_WAIT_S} s (APT_LOCK_WAIT_S)"
      return 1
    fi
    if (( ! waited )); then
      echo "$what: waiting up to ${APT_LOCK_WAIT_S} s for another apt/dpkg to finish" >&2
      waited=1
    fi
    sleep 3
  done
  last=$(grep -E '^(E|W): ' <<<"$out" | tail -n1)
  apt_problem="$what: could not install $*: ${last:-$(tail -n1 <<<"$out")}"
  return 1
}
