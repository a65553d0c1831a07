"""A host's rules for `gputop run`: /etc/gputop/policy.yaml (docs/queue.md).

The file is the admin's: it counts only when root owns it and nobody else may write it
(otherwise a user could write the rules everyone's `gputop run` follows); such a file is
ignored with one line of warning. A bad file is a ``PolicyError`` naming FILE:LINE.
``$GPUTOP_POLICY`` names another file (tests, hosts that keep /etc read-only).

Example::

    max_gpus_per_user: 4          # at once, waiting jobs' requests included
    max_duration: 24h             # the longest --for; jobs must give one
    starvation_limit: 30m         # a job waiting longer holds back the jobs behind it
    high_priority: [alice, bob]   # who may use --priority high (absent: everyone)
    big_jobs: {gpus: 2, hours: "20:00-08:00", weekends: true}
    fair_share: {half_life: 7d}   # equal priorities: fewer recent GPU-hours first
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

from gputop.analysis.durations import parse_duration
from gputop.analysis.queue_plan import DEFAULT_STARVATION_S, Policy, Window
from gputop.yamlnodes import compose, line_of, mapping_items, scalar_value

DEFAULT_PATH = "/etc/gputop/policy.yaml"
MAX_BYTES = 64 * 1024
MAX_USERS = 1000
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
KEYS = ("max_gpus_per_user", "max_duration", "starvation_limit", "high_priority", "big_jobs",
        "fair_share")


class PolicyError(Exception):
    """A bad policy file; str() is one line naming file and line."""


def policy_path() -> str:
    return os.environ.get("GPUTOP_POLICY") or DEFAULT_PATH


def load_policy(path: str | None = None) -> tuple[Policy, str | None]:
    """The host's policy and a warning line (a file that does not count), or raises."""
    path = path or policy_path()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return Policy(), None
    except OSError as exc:
        return Policy(), f"{path}: {exc.strerror or exc}; no policy applied"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PolicyError(f"{path}:1: not a regular file")
        if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return Policy(), (f"{path}: ignored: it must be owned by root and writable by"
                              " nobody else")
        raw = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        raise PolicyError(f"{path}:1: larger than {MAX_BYTES // 1024} KiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(f"{path}:1: not UTF-8 text") from None
    return parse_policy(text, path), None


def parse_policy(text: str, name: str) -> Policy:
    root = compose(text, name, PolicyError)
    if root is None:
        return Policy(source=name)
    values: dict[str, Any] = {"source": name}
    for key, _knode, vnode, full in mapping_items(root, name, PolicyError, known=KEYS):
        at = f"{name}:{line_of(vnode)}: key '{full}'"
        if key == "high_priority":
            values["high_priority_users"] = _users(vnode, name, full)
            continue
        if key == "big_jobs":
            values.update(_big_jobs(vnode, name))
            continue
        if key == "fair_share":
            values.update(_fair_share(vnode, name))
            continue
        value = scalar_value(vnode, name, PolicyError) if vnode.id == "scalar" else None
        if key == "max_gpus_per_user":
            values[key] = _count(value, at)
        else:
            seconds = _duration(value, at)
            values["max_duration_s" if key == "max_duration" else "starvation_s"] = seconds
    values.setdefault("starvation_s", DEFAULT_STARVATION_S)
    return Policy(**values)


def _count(value: object, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise PolicyError(f"{at}: expected a whole number 1..4096")
    return value


def _duration(value: object, at: str) -> float:
    if not isinstance(value, str):
        raise PolicyError(f"{at}: expected a duration like 24h or 30m")
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise PolicyError(f"{at}: {exc}") from None


def _users(node: Any, name: str, key: str) -> frozenset[str]:
    if node.id != "sequence":
        raise PolicyError(f"{name}:{line_of(node)}: key '{key}': expected a list of user names")
    if len(node.value) > MAX_USERS:
        raise PolicyError(f"{name}:{line_of(node)}: key '{key}': more than {MAX_USERS} users")
    users = set()
    for item in node.value:
        value = scalar_value(item, name, PolicyError) if item.id == "scalar" else None
        if not isinstance(value, str) or not _USER.fullmatch(value):
            raise PolicyError(f"{name}:{line_of(item)}: key '{key}': not a user name: {value!r}")
        users.add(value)
    return frozenset(users)


def _fair_share(node: Any, name: str) -> dict[str, Any]:
    # No 'ledger': the system's (gputop.ledger.store.SYSTEM_PATH), one for every user.
    out: dict[str, Any] = {}
    for key, _k, vnode, full in mapping_items(node, name, PolicyError, "fair_share",
                                              known=("half_life", "ledger")):
        at = f"{name}:{line_of(vnode)}: key '{full}'"
        value = scalar_value(vnode, name, PolicyError) if vnode.id == "scalar" else None
        if key == "half_life":
            seconds = _duration(value, at)
            if not 3600 <= seconds <= 365 * 86400:
                raise PolicyError(f"{at}: expected 1h..365d")
            out["fair_share_half_life_s"] = seconds
        else:
            if not isinstance(value, str) or not value.startswith("/") or len(value) > 4096:
                raise PolicyError(f"{at}: expected an absolute path")
            out["fair_share_ledger"] = value
    if "fair_share_half_life_s" not in out:
        raise PolicyError(f"{name}:{line_of(node)}: key 'fair_share': needs 'half_life'")
    return out


def _big_jobs(node: Any, name: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    hours, weekends = None, True
    for key, _k, vnode, full in mapping_items(node, name, PolicyError, "big_jobs",
                                              known=("gpus", "hours", "weekends")):
        at = f"{name}:{line_of(vnode)}: key '{full}'"
        value = scalar_value(vnode, name, PolicyError) if vnode.id == "scalar" else None
        if key == "gpus":
            out["big_job_gpus"] = _count(value, at)
        elif key == "weekends":
            if not isinstance(value, bool):
                raise PolicyError(f"{at}: expected true or false")
            weekends = value
        else:
            match = re.fullmatch(r"(\d\d):(\d\d)-(\d\d):(\d\d)", str(value))
            minutes = [int(g) for g in match.groups()] if match else []
            if not match or minutes[0] > 23 or minutes[2] > 23 or minutes[1] > 59 \
                    or minutes[3] > 59:
                raise PolicyError(f"{at}: expected hours like \"20:00-08:00\"")
            hours = (minutes[0] * 60 + minutes[1], minutes[2] * 60 + minutes[3])
    if "big_job_gpus" not in out or hours is None:
        raise PolicyError(f"{name}:{line_of(node)}: key 'big_jobs': needs 'gpus' and 'hours'")
    out["big_job_window"] = Window(hours[0], hours[1], weekends)
    return out
