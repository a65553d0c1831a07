"""The hosts file: which GPU servers to watch over SSH, and how to reach them.

Two shapes are accepted (see hosts.example.yaml, at the root and in examples/, for every option)::

    - gpu01                      # names resolved through ~/.ssh/config
    - gpu02

    defaults: {user: alice, labels: [lab]}
    hosts:
      - gpu01
      - name: gpu02
        hostname: 10.0.0.12
        port: 2222
        labels: [a100]
    groups:
      train: [gpu01, gpu02]      # a group is a label given to several hosts

Every problem is a ``HostsFileError`` whose message is ``FILE:LINE: key 'x': problem``;
the lines come from the YAML node tree (gputop/yamlnodes.py).  Host names, users and
labels are data handed to asyncssh; but an ssh_config's ``ProxyCommand`` substitutes
them (``%h``, ``%r``) into a command line that a shell splits, so they are held to
OpenSSH's own rules for names (``ssh_word``).  ``ssh_config:`` names a file whose
``ProxyCommand`` runs: it is code, refused unless only its owner (the user or root)
can write it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from typing import Any

from gputop.records import MutableRecord, Record, record
from gputop.yamlnodes import compose, line_of, mapping_items, read_file, scalar_value


class HostsFileError(ValueError):
    """A bad hosts file or -H list; the message is one line naming file, line and key."""


# What OpenSSH 9.6 refuses in a host or user name given on its command line (ssh.c
# valid_hostname, valid_ruser): these would be split or run by the shell that runs a
# ProxyCommand after %h/%r substitution.
_SHELL_CHARS = frozenset("'`\"$\\;&<>|(){}*?[]!#~^")
MIN_KEEPALIVE_S = 1.0
MAX_SECONDS = 3600.0


def ssh_word(value: str, what: str = "host name") -> str:
    """`value` if it is a safe host or user name for ssh; ValueError saying why not."""
    if not value:
        raise ValueError(f"empty {what}")
    if value.startswith("-"):
        raise ValueError(f"{value!r}: a {what} may not start with '-'")
    for char in value:
        if char.isspace() or not char.isprintable() or char in _SHELL_CHARS:
            raise ValueError(f"{value!r}: a {what} may not contain {char!r}")
    return value


def split_target(text: str, what: str = "host") -> tuple[str | None, str, int | None]:
    """`[user@]host[:port]`, IPv6 as `[::1]:22` (or bare `::1`): (user, host, port)."""
    user = None
    host = text
    if "@" in host:
        user, _, host = host.rpartition("@")
        ssh_word(user, "user name")
    port_text = None
    if host.startswith("["):
        inside, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r} is not [user@]{what}[:port]")
        host, port_text = inside, rest[1:] if rest else None
        if ":" not in host:
            raise ValueError(f"{text!r}: brackets are for IPv6 addresses")
    elif host.count(":") == 1:
        host, _, port_text = host.partition(":")
    port = None
    if port_text is not None:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"{port_text!r} in {text!r} is not a port")
        port = int(port_text)
    if ":" not in host:
        ssh_word(host)
    elif not all(c in "0123456789abcdefABCDEF:." for c in host):
        raise ValueError(f"{host!r} is not an IPv6 address")
    return user, host, port


def target_parts(text: str) -> dict[str, Any]:
    """The HostSpec fields that ``[user@]host[:port]`` sets beside its name: the one
    syntax of a hosts-file entry (``- alice@127.0.0.9:2222``) and of ``-H``."""
    user, host, port = split_target(text)
    parts: dict[str, Any] = {}
    if host != text:
        parts["hostname"] = host
    if user is not None:
        parts["user"] = user
    if port is not None:
        parts["port"] = port
    return parts


@record(frozen=True, slots=True)
class HostSpec(Record):
    name: str  # what the user calls it; also the ssh alias when hostname is None
    hostname: str | None = None  # None: let ~/.ssh/config resolve `name`
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    jump: str | None = None  # ProxyJump: [user@]host[:port], shared per jump host
    labels: tuple[str, ...] = ()
    known_hosts: tuple[str, ...] | None = None  # None: the user's and the system's files
    ssh_config: str | None = None  # None: ~/.ssh/config
    password_env: str | None = None  # password auth only when this is set
    connect_timeout: float = 10.0
    keepalive: float = 15.0
    url: str | None = None  # read `gputop serve`'s snapshot API, not SSH

    @property
    def target(self) -> str:
        return self.hostname or self.name


_HOST_KEYS = (
    "name", "hostname", "user", "port", "identity_file", "jump", "labels", "groups",
    "known_hosts", "ssh_config", "password_env", "connect_timeout", "keepalive",
    "url",
)
_DEFAULT_KEYS = tuple(k for k in _HOST_KEYS if k not in ("name", "hostname", "url"))
_TOP_KEYS = ("defaults", "hosts", "groups")


@record(frozen=False, slots=True)
class _Node(MutableRecord):
    """A YAML value with the line it started on (1-based) and the node it came from."""

    value: Any
    line: int
    source: Any = None


def _convert(node: Any, path: str) -> _Node:
    if node.id == "mapping":
        items = mapping_items(node, path, HostsFileError)
        value: Any = {k: (_Node(k, line_of(kn)), _convert(vn, path)) for k, kn, vn, _ in items}
    elif node.id == "sequence":
        value = [_convert(item, path) for item in node.value]
    else:
        value = scalar_value(node, path, HostsFileError)
    return _Node(value, line_of(node), node)


def parse_text(text: str, path: str = "<hosts>") -> list[HostSpec]:
    """Parse hosts-file text; ``path`` is only used in error messages."""
    root = compose(text, path, HostsFileError)
    if root is None:
        raise HostsFileError(f"{path}:1: the file is empty: list at least one host")
    doc = _convert(root, path)
    defaults: dict[str, Any] = {}
    groups: list[tuple[str, _Node]] = []
    if isinstance(doc.value, list):
        host_items = doc
    elif isinstance(doc.value, dict):
        mapping_items(root, path, HostsFileError, known=_TOP_KEYS)  # only for the key check
        if "defaults" in doc.value:
            dnode = doc.value["defaults"][1]
            if dnode.value is not None:
                defaults = _options(dnode, path, "defaults", _DEFAULT_KEYS)
        if "groups" in doc.value:
            groups = _groups(doc.value["groups"][1], path)
        if "hosts" not in doc.value:
            raise HostsFileError(f"{path}:{doc.line}: key 'hosts': missing (list the hosts)")
        host_items = doc.value["hosts"][1]
    else:
        raise HostsFileError(
            f"{path}:{doc.line}: expected a list of hosts or a mapping with 'hosts', "
            f"got {_kind(doc.value)}"
        )

    entries = _host_entries(host_items, path)
    if not entries:
        raise HostsFileError(f"{path}:{host_items.line}: key 'hosts': no hosts listed")
    specs: list[HostSpec] = []
    seen: dict[str, int] = {}
    for name, line, options in entries:
        if name in seen:
            raise HostsFileError(
                f"{path}:{line}: key 'name': duplicate host '{name}' (first on line {seen[name]})"
            )
        seen[name] = line
        # The name's own user and port beat the defaults; the entry's keys beat both.
        merged = {**defaults, **target_parts(name), **options}
        labels = tuple(defaults.get("labels", ())) + tuple(
            x for x in options.get("labels", ()) if x not in defaults.get("labels", ())
        )
        merged["labels"] = labels + tuple(
            x for x in merged.pop("groups", ()) if x not in labels
        )
        specs.append(_spec(name, merged))
    by_name = {s.name: i for i, s in enumerate(specs)}
    for label, members in groups:
        for member in members.value:
            if member.value not in by_name:
                raise HostsFileError(
                    f"{path}:{member.line}: key 'groups': group '{label}' names "
                    f"unknown host '{member.value}'"
                )
            i = by_name[member.value]
            if label not in specs[i].labels:
                specs[i] = replace(specs[i], labels=(*specs[i].labels, label))
    return specs


def _spec(name: str, options: dict[str, Any]) -> HostSpec:
    kwargs = dict(options)
    kwargs["labels"] = tuple(kwargs.get("labels", ()))
    if "known_hosts" in kwargs:
        kwargs["known_hosts"] = tuple(kwargs["known_hosts"])
    return HostSpec(name=name, **kwargs)


def _host_entries(node: _Node, path: str) -> list[tuple[str, int, dict[str, Any]]]:
    entries: list[tuple[str, int, dict[str, Any]]] = []
    if isinstance(node.value, list):
        for item in node.value:
            if isinstance(item.value, str):
                entries.append((_name(item, path), item.line, {}))
            elif isinstance(item.value, dict):
                if "name" not in item.value:
                    raise HostsFileError(
                        f"{path}:{item.line}: key 'name': missing (each host needs a name)"
                    )
                name = _name(item.value["name"][1], path)
                entries.append((name, item.line, _options(item, path, "", _HOST_KEYS)))
            else:
                raise HostsFileError(
                    f"{path}:{item.line}: key 'hosts': each host is a name or a mapping, "
                    f"got {_kind(item.value)}"
                )
    elif isinstance(node.value, dict):
        for key, (knode, vnode) in node.value.items():
            name = _name(_Node(key, knode.line), path)
            if vnode.value is None:
                options: dict[str, Any] = {}
            elif isinstance(vnode.value, dict):
                if "name" in vnode.value:
                    raise HostsFileError(
                        f"{path}:{vnode.value['name'][0].line}: key 'name': the mapping key "
                        f"already names this host"
                    )
                options = _options(vnode, path, "", _HOST_KEYS)
            else:
                raise HostsFileError(
                    f"{path}:{vnode.line}: key '{key}': host options must be a mapping, "
                    f"got {_kind(vnode.value)}"
                )
            entries.append((name, knode.line, options))
    elif node.value is None:
        return []
    else:
        raise HostsFileError(
            f"{path}:{node.line}: key 'hosts': expected a list, got {_kind(node.value)}"
        )
    return entries


def _options(node: _Node, path: str, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(node.value, dict):
        raise HostsFileError(
            f"{path}:{node.line}: key '{where or 'hosts'}': expected a mapping, "
            f"got {_kind(node.value)}"
        )
    out: dict[str, Any] = {}
    for key, _k, _v, shown in mapping_items(node.source, path, HostsFileError, where, allowed):
        vnode = node.value[key][1]
        if key == "name":
            continue
        try:
            out[key] = _check(key, vnode.value)
        except ValueError as exc:
            raise HostsFileError(f"{path}:{vnode.line}: key '{shown}': {exc}") from None
    return out


def _check(key: str, value: Any) -> Any:
    if key in ("hostname", "user", "identity_file", "jump", "ssh_config", "password_env"):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"expected text, got {_kind(value)}")
        if any(c in value for c in "\n\r\0"):
            raise ValueError("must be one line")
        if key == "hostname":
            split_target(value)  # a bare name or an IPv6 address, nothing for a shell
        elif key == "user":
            ssh_word(value, "user name")
        elif key == "jump":
            split_target(value, "jump host")
        elif key == "ssh_config":
            return check_ssh_config(os.path.expanduser(value))
        return os.path.expanduser(value) if key == "identity_file" else value
    if key == "port":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a port number, got {_kind(value)}")
        if not 1 <= value <= 65535:
            raise ValueError(f"port {value} out of range 1-65535")
        return value
    if key in ("labels", "groups", "known_hosts"):
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or (not items and key == "known_hosts"):
            raise ValueError(f"expected a list of text, got {_kind(value)}")
        out = []
        for item in items:
            raw = item.value if isinstance(item, _Node) else item
            if not isinstance(raw, str) or not raw.strip():
                raise ValueError(f"expected text items, got {_kind(raw)}")
            out.append(os.path.expanduser(raw) if key == "known_hosts" else raw)
        return tuple(out)
    if key == "url":
        if not isinstance(value, str) or not value.startswith(("http://", "https://")):
            shown = repr(value) if isinstance(value, str) else _kind(value)
            raise ValueError(f"expected http://HOST:PORT or https://..., got {shown}")
        if any(c in value for c in "\n\r\0 "):
            raise ValueError("must be one line without spaces")
        return value.rstrip("/")
    if key in ("connect_timeout", "keepalive"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ValueError(f"expected a positive number of seconds, got {value!r}")
        # A keepalive every microsecond would be a busy loop against the server.
        low = MIN_KEEPALIVE_S if key == "keepalive" else 0.0
        if not low <= value <= MAX_SECONDS:
            raise ValueError(f"expected {low:g} to {MAX_SECONDS:g} seconds, got {value!r}")
        return float(value)
    raise ValueError("unknown key")  # pragma: no cover - _options filters first


def check_ssh_config(path: str) -> str:
    """An ssh_config runs its ProxyCommand and Match exec as the user: accept only a
    regular file that nobody but its owner, the user or root, can change."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path}: not a regular file")
    if info.st_uid not in (0, os.geteuid()):
        raise ValueError(f"{path}: owned by uid {info.st_uid}; its ProxyCommand would run as you")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ValueError(f"{path}: writable by others; its ProxyCommand would run as you "
                         f"(chmod go-w {path})")
    return path


def _groups(node: _Node, path: str) -> list[tuple[str, _Node]]:
    if not isinstance(node.value, dict):
        raise HostsFileError(
            f"{path}:{node.line}: key 'groups': expected a mapping of group -> hosts, "
            f"got {_kind(node.value)}"
        )
    out = []
    for label, (_knode, vnode) in node.value.items():
        if not isinstance(vnode.value, list) or not all(
            isinstance(m.value, str) for m in vnode.value
        ):
            raise HostsFileError(
                f"{path}:{vnode.line}: key 'groups.{label}': expected a list of host names"
            )
        out.append((label, vnode))
    return out


def _name(node: _Node, path: str) -> str:
    value = node.value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)  # `- 10.0.0.1` would be text anyway; `- 42` is a name too
    if not isinstance(value, str) or not value.strip():
        raise HostsFileError(f"{path}:{node.line}: key 'name': expected text, got {_kind(value)}")
    try:
        # Without `hostname:` the name is what ssh connects to ([user@]host[:port], as
        # -H takes it); with it, still the %n of a ProxyCommand.
        target_parts(value)
    except ValueError as exc:
        raise HostsFileError(f"{path}:{node.line}: key 'name': {exc}") from None
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"text ({value!r})"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def load(path: str | os.PathLike[str]) -> list[HostSpec]:
    shown = str(path)
    return parse_text(read_file(path, shown, HostsFileError), shown)


def parse_host_list(text: str) -> list[HostSpec]:
    """`-H alice@gpu01,gpu02:2222`: ad-hoc hosts, each [user@]host[:port]."""
    specs: list[HostSpec] = []
    seen: set[str] = set()
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        try:
            parts = target_parts(item)
        except ValueError as exc:
            raise HostsFileError(f"-H: {exc}") from None
        if item in seen:
            raise HostsFileError(f"-H: duplicate host {item!r}")
        seen.add(item)
        specs.append(HostSpec(name=item, **parts))
    if not specs:
        raise HostsFileError("-H: no hosts given; name them as [user@]host[:port],...")
    return specs
