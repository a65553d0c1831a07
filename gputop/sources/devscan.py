"""Who holds a GPU device file open (/dev/nvidia*, gputop.vendors), found by scanning
/proc/*/fd.

Stdlib-only: shipped to remote hosts inside the SSH probe.

NVML lists only processes with a CUDA context it can attribute; processes in another PID
namespace, or stuck in D state, still hold the device files.  This scan finds them where
permissions allow, and says how many processes it could not look into.
"""

from __future__ import annotations

import os
import pwd

from gputop.vendors import DEVICE_NODES


def scan_device_holders(root: str = "/proc") -> tuple[list[dict], str | None]:
    """(holders, note): holders are {pid, user, command, devices}; note counts unreadables."""
    holders: list[dict] = []
    unreadable = 0
    users: dict[int, str | None] = {}
    # Our own NVML handle holds /dev/nvidiactl; listing gputop itself would only confuse.
    me = os.getpid() if os.path.realpath(root) == "/proc" else None
    try:
        entries = os.listdir(root)
    except OSError:
        return ([], f"cannot read {root}")
    for name in entries:
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me:
            continue
        fd_dir = os.path.join(root, name, "fd")
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            unreadable += 1
            continue
        except OSError:
            continue  # exited while we looked
        devices: set[str] = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith(DEVICE_NODES):
                devices.add(target)
        if devices:
            holders.append(
                {
                    "pid": pid,
                    "user": _user(os.path.join(root, name), users),
                    "command": _command(os.path.join(root, name)),
                    "devices": sorted(devices),
                }
            )
    holders.sort(key=lambda h: h["pid"])
    note = None
    if unreadable:
        noun = "process" if unreadable == 1 else "processes"
        note = f"{unreadable} {noun} not readable (not root)"
    return (holders, note)


def _user(base: str, cache: dict[int, str | None]) -> str | None:
    try:
        uid = os.stat(base).st_uid
    except OSError:
        return None
    if uid not in cache:
        try:
            cache[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            cache[uid] = str(uid)
    return cache[uid]


def _command(base: str) -> str | None:
    try:
        with open(os.path.join(base, "cmdline"), "rb") as f:
            raw = f.read()
    except OSError:
        return None
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    if text:
        return text
    try:
        with open(os.path.join(base, "comm")) as f:
            return f"[{f.read().strip()}]"
    except OSError:
        return None
