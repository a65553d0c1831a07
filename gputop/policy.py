"""A host's rules for `gputop run`: /etc/gputop/policy.yaml (docs/queue.md).

The file is the admin's: it counts only when root owns it and nobody else may write it
(otherwise a user could write the rules everyone's `gputop run` follows); such a file is
ignored with one line of warning. A bad file is a ``PolicyError`` naming FILE:LINE.
``$GPUTOP_POLICY`` names another file (tests, hosts that keep /etc read-only): for root,
or a root-owned file nobody else may write (``policy_path``).

Example::

    max_gpus_per_user: 4          # at once, waiting jobs' requests included
    max_duration: 24h             # the longest --for; jobs must give one
    starvation_limit: 30m         # a job waiting longer holds back the jobs behind it
    turn_limit: 60s               # a job given cards that does not take them loses its turn
    high_priority: [alice, bob]   # who may use --priority high (absent: everyone)
    big_jobs: {gpus: 2, hours: "20:00-08:00", weekends: true}
    fair_share: {half_life: 7d}   # equal priorities: fewer recent GPU-hours first
    fair_share:                   # ...weighed against shares (docs/ledger.md "Fair share")
      half_life: 7d
      accounts:
        nlp: {shares: 60, group: nlp, members: {alice: 2}}
        vision: {shares: 30, members: [carol, dave]}
        other: {shares: 10}
      default_account: other      # users in no account

The accounting sections (issue 28; read by ``load_accounting``, docs/ledger.md)::

    quotas: {users: {alice: 200}, groups: {nlp: 1000}, period: week, over: wait}
    cost: {per_gpu_hour: {"H100": 2.5, default: 1.0}, currency: EUR}
    idle: {warn_after: 2h, release_after: 8h, action: kill,
           notify: [/usr/bin/mail, -s, "idle GPU on {host}", "{user}"], include: [slurm]}
"""

from __future__ import annotations

import dataclasses
import grp
import os
import pwd
import re
import stat
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from gputop.analysis.cost import CostRates
from gputop.analysis.durations import parse_duration
from gputop.analysis.fair_share import Account, Accounts
from gputop.analysis.idle_policy import ACTIONS, WORKLOAD_KINDS, IdlePolicy
from gputop.analysis.queue_plan import DEFAULT_STARVATION_S, MIN_TURN_S, Policy, Window
from gputop.analysis.quota import OVER_ACTIONS, PERIODS, Quotas
from gputop.yamlnodes import compose, line_of, mapping_items, scalar_value

DEFAULT_PATH = "/etc/gputop/policy.yaml"
MAX_BYTES = 64 * 1024
MAX_USERS = 1000
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
KEYS = ("max_gpus_per_user", "max_duration", "starvation_limit", "high_priority", "big_jobs",
        "fair_share", "turn_limit")
_SECONDS = {"max_duration": "max_duration_s", "starvation_limit": "starvation_s",
            "turn_limit": "turn_s"}
ACCOUNTING_KEYS = ("quotas", "cost", "idle", "ledger")  # parse_accounting's
# A lab's ledger in PostgreSQL (issue 38.3): these URLs (gputop.ledger.engine.SCHEMES, which
# this layer may not import).
LEDGER_SCHEMES = ("postgresql://", "postgres://")
MAX_URL = 1000
MAX_HOURS = 10_000_000.0
MAX_TURN_S = 3600.0
MAX_SHARES = 1_000_000
_GROUP = _USER  # Unix group names follow the same rule here


class PolicyError(Exception):
    """A bad policy file; str() is one line naming file and line."""


def policy_path() -> str:
    """The file that would be read: ``$GPUTOP_POLICY`` or the fixed place (whether the
    override counts is ``_locate``'s, on the opened file)."""
    return os.environ.get("GPUTOP_POLICY") or DEFAULT_PATH


def _locate(path: str | None) -> tuple[str, str | None, str | None]:
    """The policy's path, its text (None: no file, or one that does not count) and a
    warning line.

    The place is fixed for everyone but root: a user who could name another file (one
    that does not exist, or their own) would opt out of the rules. So for a non-root
    user ``$GPUTOP_POLICY`` counts only when the file it names, as opened, is root's,
    writable by nobody else, and states a rule (an empty root-owned file is no
    policy); otherwise the fixed place is read, and the warning says why."""
    if path is not None:
        return (path, *_read(path))
    override = policy_path()
    text, warning = _read(override)
    if override == DEFAULT_PATH or os.geteuid() == 0:
        return override, text, warning
    if text is not None and compose(text, override, PolicyError) is not None:
        return override, text, None
    why = warning or ("no such file" if text is None else "it states no rule")
    ignored = f"GPUTOP_POLICY={override!r} ignored ({why}); using {DEFAULT_PATH}"
    text, warning = _read(DEFAULT_PATH)
    return DEFAULT_PATH, text, "; ".join(w for w in (ignored, warning) if w)


def load_policy(path: str | None = None) -> tuple[Policy, str | None]:
    """The host's policy and a warning line (a file that does not count, an ignored
    ``$GPUTOP_POLICY``), or raises.  Accounts of Unix groups get the groups' members."""
    path, text, warning = _locate(path)
    if text is None:
        return Policy(), warning
    policy = parse_policy(text, path)
    accounts = policy.fair_share_accounts
    if accounts is not None and any(a.group for a in accounts.accounts):
        found = memberships()
        groups = {a.group: frozenset(found.get(a.group, ())) for a in accounts.accounts
                  if a.group}
        policy = dataclasses.replace(
            policy, fair_share_accounts=dataclasses.replace(accounts, groups=groups))
    return policy, warning


def memberships() -> dict[str, set[str]]:
    """Unix group -> its members (listed members and those whose primary group it is):
    what quotas of groups and accounts of groups count."""
    members: dict[str, set[str]] = {}
    by_gid: dict[int, str] = {}
    for group in grp.getgrall():
        members.setdefault(group.gr_name, set()).update(group.gr_mem)
        by_gid[group.gr_gid] = group.gr_name
    for entry in pwd.getpwall():
        name = by_gid.get(entry.pw_gid)
        if name is not None:
            members[name].add(entry.pw_name)
    return members


@dataclass(frozen=True)
class Accounting:
    """The policy's accounting sections: quotas and cost rates (none by default)."""

    quotas: Quotas = field(default_factory=Quotas)
    cost: CostRates | None = None
    idle: IdlePolicy | None = None  # opt-in: none unless the admin writes the section
    source: str | None = None
    ledger: str | None = None  # the lab's ledger (a PostgreSQL location), if any


def load_accounting(path: str | None = None) -> tuple[Accounting, str | None]:
    """The host's quotas and cost rates, from the same root-owned file as the rules."""
    path, text, warning = _locate(path)
    return (Accounting(), warning) if text is None else (parse_accounting(text, path), warning)


def _read(path: str) -> tuple[str | None, str | None]:
    """The policy file's text, or None and why not (None: no file, no warning)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}; no policy applied"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PolicyError(f"{path}:1: not a regular file")
        if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return None, (f"{path}: ignored: it must be owned by root and writable by"
                          " nobody else")
        raw = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        raise PolicyError(f"{path}:1: larger than {MAX_BYTES // 1024} KiB")
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        raise PolicyError(f"{path}:1: not UTF-8 text") from None


def parse_policy(text: str, name: str) -> Policy:
    root = compose(text, name, PolicyError)
    if root is None:
        return Policy(source=name)
    values: dict[str, Any] = {"source": name}
    for key, _knode, vnode, full in mapping_items(root, name, PolicyError,
                                                  known=KEYS + ACCOUNTING_KEYS):
        at = f"{name}:{line_of(vnode)}: key '{full}'"
        if key == "ledger":  # the lab's ledger is fair share's, unless it names its own
            values.setdefault("fair_share_ledger", _ledger(vnode, name))
            continue
        if key in ACCOUNTING_KEYS:
            continue
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
            if key == "turn_limit" and not MIN_TURN_S <= seconds <= MAX_TURN_S:
                raise PolicyError(f"{at}: expected {MIN_TURN_S:.0f}s..{MAX_TURN_S / 60:.0f}m")
            values[_SECONDS[key]] = seconds
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
    # No 'ledger': the system's (gputop.ledger.paths.SYSTEM_PATH), one for every user.
    out: dict[str, Any] = {}
    accounts: list[Account] = []
    default: tuple[str, str] | None = None  # the name, and where it was given
    for key, _k, vnode, full in mapping_items(
            node, name, PolicyError, "fair_share",
            known=("half_life", "ledger", "accounts", "default_account")):
        at = f"{name}:{line_of(vnode)}: key '{full}'"
        if key == "accounts":
            accounts = _accounts(vnode, name, full)
            continue
        value = scalar_value(vnode, name, PolicyError) if vnode.id == "scalar" else None
        if key == "default_account":
            if not isinstance(value, str) or not _GROUP.fullmatch(value):
                raise PolicyError(f"{at}: expected an account's name")
            default = (value, at)
        elif key == "half_life":
            seconds = _duration(value, at)
            if not 3600 <= seconds <= 365 * 86400:
                raise PolicyError(f"{at}: expected 1h..365d")
            out["fair_share_half_life_s"] = seconds
        else:
            if not isinstance(value, str) or not value.startswith("/") or len(value) > 4096:
                raise PolicyError(f"{at}: expected an absolute path")
            out["fair_share_ledger"] = value
    where = f"{name}:{line_of(node)}: key 'fair_share'"
    if "fair_share_half_life_s" not in out:
        raise PolicyError(f"{where}: needs 'half_life'")
    if accounts and default is None:
        raise PolicyError(f"{where}: 'accounts' needs 'default_account' (the account of"
                          " users in none)")
    if default is not None:
        if default[0] not in {a.name for a in accounts}:
            raise PolicyError(f"{default[1]}: {default[0]!r} is not one of 'accounts'")
        out["fair_share_accounts"] = Accounts(tuple(accounts), default[0])
    return out


def _accounts(node: Any, name: str, key: str) -> list[Account]:
    """Each account: ``shares`` (required), ``group`` (a Unix group's members belong),
    ``members`` (users, each with share 1, or user: share).  A user the file names in
    two accounts is refused: a user's use is charged to one account."""
    items = mapping_items(node, name, PolicyError, key)
    if not items or len(items) > MAX_USERS:
        raise PolicyError(f"{name}:{line_of(node)}: key '{key}': expected 1..{MAX_USERS}"
                          " accounts")
    named: dict[str, tuple[str, int]] = {}  # user -> (account, line)
    out = []
    for account, knode, vnode, full in items:
        if not _GROUP.fullmatch(account):
            raise PolicyError(f"{name}:{line_of(knode)}: key '{full}': not an account name")
        values: dict[str, Any] = {}
        for field_name, _fk, fnode, ffull in mapping_items(
                vnode, name, PolicyError, full, known=("shares", "group", "members")):
            at = f"{name}:{line_of(fnode)}: key '{ffull}'"
            if field_name == "shares":
                values["shares"] = _shares(_scalar(fnode, name), at)
            elif field_name == "group":
                group = _scalar(fnode, name)
                if not isinstance(group, str) or not _GROUP.fullmatch(group):
                    raise PolicyError(f"{at}: not a group name: {group!r}")
                values["group"] = group
            else:
                values["members"] = _members(fnode, name, ffull)
        if "shares" not in values:
            raise PolicyError(f"{name}:{line_of(vnode)}: key '{full}': needs 'shares'")
        members: dict[str, int] = {}
        for user, (share, line) in values.pop("members", {}).items():
            if user in named:
                first, first_line = named[user]
                raise PolicyError(f"{name}:{line}: key '{full}.members': {user!r} is already"
                                  f" a member of account {first!r} (line {first_line}); a"
                                  " user belongs to one account")
            named[user] = (account, line)
            members[user] = share
        out.append(Account(account, members=members, **values))
    return out


def _members(node: Any, name: str, key: str) -> dict[str, tuple[int, int]]:
    """user -> (share within the account, line)."""
    found: dict[str, tuple[int, int]] = {}
    if node.id == "sequence":
        pairs = [(_scalar(item, name), item, 1) for item in node.value]
    else:
        pairs = [(user, knode, _shares(_scalar(vnode, name),
                                       f"{name}:{line_of(vnode)}: key '{full}'"))
                 for user, knode, vnode, full in mapping_items(node, name, PolicyError, key)]
    if len(pairs) > MAX_USERS:
        raise PolicyError(f"{name}:{line_of(node)}: key '{key}': more than {MAX_USERS} users")
    for user, unode, share in pairs:
        if not isinstance(user, str) or not _USER.fullmatch(user):
            raise PolicyError(f"{name}:{line_of(unode)}: key '{key}': not a user name: {user!r}")
        if user in found:
            raise PolicyError(f"{name}:{line_of(unode)}: key '{key}': {user!r} twice")
        found[user] = (share, line_of(unode))
    return found


def _shares(value: object, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SHARES:
        raise PolicyError(f"{at}: expected shares, a whole number 1..{MAX_SHARES}")
    return value


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


# -- the accounting sections (issue 28) ------------------------------------------------------


def parse_accounting(text: str, name: str) -> Accounting:
    root = compose(text, name, PolicyError)
    if root is None:
        return Accounting(source=name)
    values: dict[str, Any] = {"source": name}
    for key, _knode, vnode, _full in mapping_items(root, name, PolicyError,
                                                   known=KEYS + ACCOUNTING_KEYS):
        if key == "quotas":
            values["quotas"] = _quotas(vnode, name)
        elif key == "cost":
            values["cost"] = _cost(vnode, name)
        elif key == "idle":
            values["idle"] = _idle(vnode, name)
        elif key == "ledger":
            values["ledger"] = _ledger(vnode, name)
    quotas = values.get("quotas") or Quotas()
    if values.get("ledger") and quotas.ledger is None:
        # The lab's ledger is what quotas count, unless the quotas name their own.
        values["quotas"] = dataclasses.replace(quotas, ledger=values["ledger"])
    return Accounting(**values)


def _ledger(node: Any, name: str) -> str:
    """``ledger: {url: postgresql://host/db, passfile: /etc/gputop/pgpass}``: the lab's
    ledger (docs/ledger.md) as one libpq location. No password in the URL (the policy is
    world-readable); a passfile must be root's regular file that only root may read."""
    url = passfile = None
    for key, _k, vnode, full in mapping_items(node, name, PolicyError, "ledger",
                                              known=("url", "passfile")):
        at = f"{name}:{line_of(vnode)}: key '{full}'"
        value = _scalar(vnode, name)
        if not isinstance(value, str) or len(value) > MAX_URL \
                or not value.isprintable() or not value.isascii():
            raise PolicyError(f"{at}: expected printable text of at most {MAX_URL} characters")
        if key == "url":
            parts = urllib.parse.urlsplit(value)
            query = urllib.parse.parse_qs(parts.query)
            if not value.startswith(LEDGER_SCHEMES):
                raise PolicyError(f"{at}: expected a postgresql:// URL")
            if parts.password is not None or "password" in query or "passfile" in query:
                raise PolicyError(f"{at}: no password here (this file is readable by all):"
                                  " use 'passfile' or libpq's PGPASSFILE / PGSERVICE")
            url = value
        else:
            if not value.startswith("/"):
                raise PolicyError(f"{at}: expected an absolute path")
            try:
                info = os.lstat(value)
            except OSError as exc:
                raise PolicyError(f"{at}: {value}: {exc.strerror or exc}") from None
            if not stat.S_ISREG(info.st_mode) or info.st_uid != 0 \
                    or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise PolicyError(f"{at}: {value} must be a regular file of root's that only"
                                  " root may read (mode 600)")
            passfile = value
    if url is None:
        raise PolicyError(f"{name}:{line_of(node)}: key 'ledger': needs 'url'")
    if passfile is not None:
        url += ("&" if "?" in url else "?") + "passfile=" + urllib.parse.quote(passfile)
    return url


def _scalar(node: Any, name: str) -> object:
    return scalar_value(node, name, PolicyError) if node.id == "scalar" else None


def _amount(value: object, at: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 <= value <= MAX_HOURS or value != value:
        raise PolicyError(f"{at}: expected {what}, a number 0..{MAX_HOURS:g}")
    return float(value)


def _names(node: Any, name: str, key: str, rule: re.Pattern[str],
           what: str) -> dict[str, float]:
    items = mapping_items(node, name, PolicyError, key)
    if len(items) > MAX_USERS:
        raise PolicyError(f"{name}:{line_of(node)}: key '{key}': more than {MAX_USERS} entries")
    out = {}
    for entry, knode, vnode, full in items:
        if not rule.fullmatch(entry):
            raise PolicyError(f"{name}:{line_of(knode)}: key '{full}': not a {what} name")
        out[entry] = _amount(_scalar(vnode, name), f"{name}:{line_of(vnode)}: key '{full}'",
                             "GPU-hours")
    return out


def _quotas(node: Any, name: str) -> Quotas:
    values: dict[str, Any] = {}
    for key, _k, vnode, full in mapping_items(node, name, PolicyError, "quotas",
                                              known=("users", "groups", "period", "over",
                                                     "ledger")):
        at = f"{name}:{line_of(vnode)}: key '{full}'"
        if key in ("users", "groups"):
            values[key] = _names(vnode, name, full, _USER if key == "users" else _GROUP,
                                 "user" if key == "users" else "group")
            continue
        value = _scalar(vnode, name)
        if key == "period":
            if value not in PERIODS:
                raise PolicyError(f"{at}: expected one of {', '.join(PERIODS)}")
            values[key] = value
        elif key == "over":
            if value not in OVER_ACTIONS:
                raise PolicyError(f"{at}: expected one of {', '.join(OVER_ACTIONS)}")
            values[key] = value
        else:
            if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
                raise PolicyError(f"{at}: expected an absolute path")
            values[key] = value
    return Quotas(**values)


def _cost(node: Any, name: str) -> CostRates:
    rates: dict[str, float] = {}
    default, currency = 0.0, ""
    for key, _k, vnode, full in mapping_items(node, name, PolicyError, "cost",
                                              known=("per_gpu_hour", "currency")):
        at = f"{name}:{line_of(vnode)}: key '{full}'"
        if key == "currency":
            value = _scalar(vnode, name)
            if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z$€£¥]{1,8}", value):
                raise PolicyError(f"{at}: expected a currency like EUR")
            currency = value
            continue
        items = mapping_items(vnode, name, PolicyError, full)
        if len(items) > MAX_USERS:
            raise PolicyError(f"{at}: more than {MAX_USERS} models")
        for model, knode, mnode, mfull in items:
            mat = f"{name}:{line_of(mnode)}: key '{mfull}'"
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}", model):
                raise PolicyError(f"{name}:{line_of(knode)}: key '{mfull}': not a GPU model")
            rate = _amount(_scalar(mnode, name), mat, "a rate per GPU-hour")
            if model == "default":
                default = rate
            else:
                rates[model] = rate
    return CostRates(rates, default, currency)


# What a notify command's arguments may name: values gputop checked, never untrusted text
# (the message, with the process's command line, goes to the command's stdin).
NOTIFY_FIELDS = ("{user}", "{host}", "{pid}", "{gpu}", "{step}")
MAX_NOTIFY_ARGS = 32


def _idle(node: Any, name: str) -> IdlePolicy:
    values: dict[str, Any] = {}
    for key, _k, vnode, full in mapping_items(
            node, name, PolicyError, "idle",
            known=("warn_after", "release_after", "action", "notify", "include", "grace")):
        at = f"{name}:{line_of(vnode)}: key '{full}'"
        if key == "notify":
            values["notify"] = _notify(vnode, name, full)
        elif key == "include":
            if vnode.id != "sequence":
                raise PolicyError(f"{at}: expected a list of workload kinds")
            kinds = [_scalar(item, name) for item in vnode.value]
            bad = [k for k in kinds if k not in WORKLOAD_KINDS]
            if bad:
                raise PolicyError(f"{at}: {bad[0]!r} is not one of {', '.join(WORKLOAD_KINDS)}")
            values["include"] = frozenset(str(k) for k in kinds)
        elif key == "action":
            value = _scalar(vnode, name)
            if value not in ACTIONS:
                raise PolicyError(f"{at}: expected one of {', '.join(ACTIONS)}")
            values["action"] = value
        else:
            seconds = _duration(_scalar(vnode, name), at)
            if key == "grace" and seconds > 300:
                raise PolicyError(f"{at}: at most 5m")
            values[{"warn_after": "warn_after_s", "release_after": "release_after_s",
                    "grace": "grace_s"}[key]] = seconds
    where = f"{name}:{line_of(node)}: key 'idle'"
    if "warn_after_s" not in values or "release_after_s" not in values:
        raise PolicyError(f"{where}: needs 'warn_after' and 'release_after'")
    if values["release_after_s"] <= values["warn_after_s"]:
        raise PolicyError(f"{where}: 'release_after' must be longer than 'warn_after'")
    return IdlePolicy(**values)


def _notify(node: Any, name: str, key: str) -> tuple[str, ...]:
    at = f"{name}:{line_of(node)}: key '{key}'"
    if node.id != "sequence" or not node.value:
        raise PolicyError(f"{at}: expected a command as a list: [/usr/bin/mail, -s, ...]")
    if len(node.value) > MAX_NOTIFY_ARGS:
        raise PolicyError(f"{at}: more than {MAX_NOTIFY_ARGS} arguments")
    argv = []
    for item in node.value:
        value = _scalar(item, name)
        item_at = f"{name}:{line_of(item)}: key '{key}'"
        if not isinstance(value, str) or not value or len(value) > 512 \
                or any(ord(ch) < 32 for ch in value):
            raise PolicyError(f"{item_at}: expected text of 1..512 printable characters")
        rest = value
        for placeholder in NOTIFY_FIELDS:
            rest = rest.replace(placeholder, "")
        if "{" in rest or "}" in rest:
            raise PolicyError(f"{item_at}: {value!r}: only {', '.join(NOTIFY_FIELDS)} may be"
                              " filled in")
        argv.append(value)
    if not argv[0].startswith("/"):
        raise PolicyError(f"{at}: the command must be an absolute path, got {argv[0]!r}")
    return tuple(argv)
