"""The user's config file: ~/.config/gputop/config.yaml (XDG_CONFIG_HOME honoured) or --config.

Every key is checked; an unknown key or a bad value is a ``ConfigError`` whose message
is "FILE:LINE: key 'a.b': problem", so a typo in a file edited months ago is found at
once.  Line numbers come from the YAML node tree (gputop/yamlnodes.py).

Sections other modules read:
- ``health``: a plain dict for ``gputop.analysis.health.Thresholds.from_config``; the
  health rules define the names and defaults, and each key is checked against them here
  so that a mistake is reported with its line.
- ``reclaim``: ``ReclaimConfig`` (idle rule and kill grace).
- ``reservations``: ``ReservationsConfig`` (where the store lives).

The complete commented example is gputop/examples/config.example.yaml (`gputop config
--example` prints it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from gputop.columns import COLUMNS, DEFAULT_COLUMNS
from gputop.model import DEFAULT_INTERVAL_S, MAX_INTERVAL_S, MIN_INTERVAL_S
from gputop.records import MutableRecord, field, record
from gputop.storedir import RESERVATIONS_DIR
from gputop.yamlnodes import compose, line_of, mapping_items, read_file, scalar_value

if TYPE_CHECKING:
    from gputop.analysis.pipeline import Settings

# Gauges with a threshold colour: value >= warn is the warn colour, >= crit the crit one.
DEFAULT_THRESHOLDS: dict[str, tuple[float, float]] = {
    "util": (50.0, 90.0),
    "mem": (50.0, 90.0),
    "temp": (75.0, 85.0),
    "power": (70.0, 95.0),  # percent of the enforced limit
    "fan": (70.0, 90.0),
}

DEFAULT_COLORS: dict[str, str] = {
    "ok": "green",
    "warn": "yellow",
    "crit": "red",
    "idle": "bright_black",
}


class ConfigError(Exception):
    """A bad config file; str() is one line naming file, line and key."""


@record(frozen=False, slots=True)
class ReclaimConfig(MutableRecord):
    idle_minutes: float = 30.0
    idle_min_mem_mib: float = 1024.0
    kill_grace_s: float = 5.0


@record(frozen=False, slots=True)
class ReservationsConfig(MutableRecord):
    """Where the store lives when ``$GPUTOP_RESERVATIONS_DIR`` does not say (that variable
    wins, everywhere: ``gputop.actions.store.store_directory`` holds the rule)."""

    dir: str = RESERVATIONS_DIR
    # "FILE:LINE" of `reservations: dir:`; None: the default.  Where, not what: a file
    # that spells out the default is the same config.
    dir_from: str | None = field(default=None, compare=False)


# -- `gputop serve` and the Prometheus source --------------------------------


@record(frozen=False, slots=True)
class ServeConfig(MutableRecord):
    lowercase_hostname: bool = False  # also a `hostname` label, as newer dcgm-exporters do
    max_process_series: int = 1000  # per-process series per scrape, biggest holders first


@record(frozen=False, slots=True)
class PrometheusConfig(MutableRecord):
    selector: str = ""  # label matchers that narrow the query, e.g. cluster="a"
    username: str = ""  # basic auth; the password from password_env or password_file
    password_env: str = ""
    password_file: str = ""
    token_env: str = ""  # bearer token from an environment variable or a file
    token_file: str = ""
    ca_file: str = ""
    cert_file: str = ""  # a client certificate for https:// (its key in it, or key_file)
    key_file: str = ""
    # Sent with every query: a Mimir/Cortex/Thanos tenant (X-Scope-OrgID) and the like.
    headers: dict[str, str] = field(default_factory=dict)
    stale_after_s: float = 60.0  # series older than this: the host is stale


# An HTTP header name (RFC 9110's token, the usual subset), and the headers the
# Prometheus client sets itself.
_HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$%&'*+.^_`|~-]*")
_OWN_HEADERS = frozenset({"authorization", "accept", "accept-encoding", "content-type",
                          "content-length", "host", "connection", "transfer-encoding"})


@record(frozen=False, slots=True)
class Config(MutableRecord):
    path: str | None = None  # the file it came from; None: built-in defaults
    interval: float = DEFAULT_INTERVAL_S
    thresholds: dict[str, tuple[float, float]] = field(
        default_factory=lambda: dict(DEFAULT_THRESHOLDS)
    )
    colors: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_COLORS))
    columns: tuple[str, ...] = DEFAULT_COLUMNS
    keys: dict[str, str] = field(default_factory=dict)  # binding id -> "k,f9"
    history_minutes: float = 10.0
    health: dict[str, Any] = field(default_factory=dict)
    reclaim: ReclaimConfig = field(default_factory=ReclaimConfig)
    reservations: ReservationsConfig = field(default_factory=ReservationsConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)


def default_path() -> str:
    """~/.config/gputop/config.yaml, XDG_CONFIG_HOME honoured.  (A string: every start
    asks, and pathlib is 2 ms of a one-shot's imports.)"""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "gputop", "config.yaml")


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """The config from ``path`` (must exist) or the default file (may be absent)."""
    if path is None:
        candidate = default_path()
        if not os.path.exists(candidate):
            return Config()
        path = candidate
    name = str(path)
    if not os.path.lexists(path):
        raise ConfigError(f"{name}: no such file")
    return parse_config(read_file(path, name, ConfigError), name)


def parse_config(text: str, name: str = "<config>") -> Config:
    root = compose(text, name, ConfigError)
    config = Config(path=name)
    if root is not None and root.value != "":  # `---` alone: an empty scalar, no settings
        _Reader(name).apply(root, config)
    return config


class _Reader:
    """Walks the node tree; every error carries the node's line."""

    def __init__(self, name: str) -> None:
        self.name = name

    def fail(self, node: Any, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.name}:{line_of(node)}: key '{key}': {problem}")

    def mapping(self, node: Any, key: str, known: Collection[str] = ()) -> list[Any]:
        return mapping_items(node, self.name, ConfigError, key, known)

    def scalar(self, node: Any, key: str) -> Any:
        if node.id != "scalar":
            raise self.fail(node, key, "expected a single value")
        return scalar_value(node, self.name, ConfigError) if node.value != "" else None

    def number(self, node: Any, key: str, low: float, high: float) -> float:
        value = self.scalar(node, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(node, key, f"expected a number, got {node.value!r}")
        if not low <= value <= high:
            raise self.fail(node, key, f"{value} is out of range {low:g}..{high:g}")
        return float(value)

    def string(self, node: Any, key: str) -> str:
        value = self.scalar(node, key)
        if not isinstance(value, str) or not value:
            raise self.fail(node, key, f"expected a non-empty string, got {node.value!r}")
        return value

    def apply(self, root: Any, config: Config) -> None:
        sections: dict[str, Callable[[Any, Any, str, Config], None]] = {
            "interval": self._interval,
            "history_minutes": self._history,
            "thresholds": self._thresholds,
            "colors": self._colors,
            "columns": self._columns,
            "keys": self._keys,
            "health": self._health,
            "reclaim": self._reclaim,
            "reservations": self._reservations,
            "serve": self._serve,
            "prometheus": self._prometheus,
        }
        for name, knode, vnode, full in self.mapping(root, "", sections):
            sections[name](knode, vnode, full, config)

    def _interval(self, knode: Any, vnode: Any, key: str, config: Config) -> None:
        config.interval = self.number(vnode, key, MIN_INTERVAL_S, MAX_INTERVAL_S)

    def _history(self, knode: Any, vnode: Any, key: str, config: Config) -> None:
        config.history_minutes = self.number(vnode, key, 2, 24 * 60)

    def _thresholds(self, knode: Any, vnode: Any, key: str, config: Config) -> None:
        for name, k, v, full in self.mapping(vnode, key):
            if name not in DEFAULT_THRESHOLDS:
                known = ", ".join(DEFAULT_THRESHOLDS)
                raise self.fail(k, full, f"unknown gauge (known: {known})")
            warn, crit = DEFAULT_THRESHOLDS[name]
            if v.id == "sequence":
                if len(v.value) != 2:
                    raise self.fail(v, full, "expected [warn, crit]")
                warn = self.number(v.value[0], full, 0, 1000)
                crit = self.number(v.value[1], full, 0, 1000)
            else:
                parts = {"warn": warn, "crit": crit}
                for part, _pk, pv, pfull in self.mapping(v, full, parts):
                    parts[part] = self.number(pv, pfull, 0, 1000)
                warn, crit = parts["warn"], parts["crit"]
            if warn > crit:
                raise self.fail(v, full, f"warn ({warn:g}) is above crit ({crit:g})")
            config.thresholds[name] = (warn, crit)

    def _colors(self, knode: Any, vnode: Any, key: str, config: Config) -> None:
        from rich.color import Color, ColorParseError

        for name, _k, v, full in self.mapping(vnode, key, DEFAULT_COLORS):
            value = self.string(v, full)
            try:
                Color.parse(value)
            except ColorParseError:
                raise self.fail(v, full, f"{value!r} is not a colour") from None
            config.colors[name] = value

    def _columns(self, knode: Any, vnode: Any, key: str, config: Config) -> None:
        if vnode.id != "sequence" or not vnode.value:
            raise self.fail(vnode, key, "expected a non-empty list of column names")
        columns = []
        for item in vnode.value:
            name = self.string(item, key)
            if name not in COLUMNS:
                raise self.fail(item, key, f"unknown column {name!r} (known: {', '.join(COLUMNS)})")
            if name in columns:
                raise self.fail(item, key, f"column {name!r} given twice")
            columns.append(name)
        config.columns = tuple(columns)

    def _keys(self, knode: Any, vnode: Any, key: str, config: Config) -> None:
        # The dashboard's key map, loaded for a file that rebinds keys (most have none)
        from gputop.keymap import BINDING_IDS, key_name_problem, new_conflicts

        for name, k, v, full in self.mapping(vnode, key):
            if name not in BINDING_IDS:
                raise self.fail(k, full, "unknown binding id (see the help screen, '?')")
            value = self.scalar(v, full)
            if isinstance(value, bool) or value is None:
                raise self.fail(v, full, "expected key names such as 'k' or 'k,f9'")
            keys = [part.strip() for part in str(value).split(",")]
            if not all(keys):
                raise self.fail(v, full, f"empty key name in {value!r}")
            for one in keys:
                problem = key_name_problem(one)
                if problem:
                    raise self.fail(v, full, problem)
            config.keys[name] = ",".join(keys)
        for clash, first, second in new_conflicts(config.keys):
            # A silent "q no longer quits" is worse than refusing the file.
            raise self.fail(vnode, key, f"key {clash!r} bound to both {first!r} and {second!r}")

    def _health(self, knode: Any, vnode: Any, key: str, config: Config) -> None:
        # The health rules own the names and limits; checking here gives the error a line.
        from gputop.analysis.health import Thresholds

        for name, k, v, full in self.mapping(vnode, key):
            value = self.scalar(v, full)
            if value is None or isinstance(value, (list, dict)):
                raise self.fail(v, full, "expected a number, true/false or a string")
            try:
                Thresholds.from_config({name: value})
            except ValueError as err:
                problem = str(err).split(": ", 1)[-1]
                raise self.fail(k if "unknown key" in problem else v, full, problem) from None
            config.health[name] = value

    def _reclaim(self, knode: Any, vnode: Any, key: str, config: Config) -> None:
        limits = {
            "idle_minutes": (0, 7 * 24 * 60),
            "idle_min_mem_mib": (0, 1 << 30),
            "kill_grace_s": (0, 600),
        }
        for name, _k, v, full in self.mapping(vnode, key, limits):
            setattr(config.reclaim, name, self.number(v, full, *limits[name]))

    def _reservations(self, knode: Any, vnode: Any, key: str, config: Config) -> None:
        for _name, _k, v, full in self.mapping(vnode, key, ("dir",)):
            path = os.path.expanduser(self.string(v, full))
            if not os.path.isabs(path):
                # A relative store would be another directory in every working directory.
                raise self.fail(v, full, f"expected an absolute path, got {path!r}")
            config.reservations.dir = path
            config.reservations.dir_from = f"{self.name}:{line_of(v)}"


    # -- `gputop serve` and the Prometheus source --------------------

    def _serve(self, knode: Any, vnode: Any, key: str, config: Config) -> None:
        known = ("lowercase_hostname", "max_process_series")
        for name, _k, v, full in self.mapping(vnode, key, known):
            if name == "lowercase_hostname":
                value = self.scalar(v, full)
                if not isinstance(value, bool):
                    raise self.fail(v, full, f"expected true or false, got {v.value!r}")
                config.serve.lowercase_hostname = value
            else:
                config.serve.max_process_series = int(self.number(v, full, 0, 1_000_000))

    def _prometheus(self, knode: Any, vnode: Any, key: str, config: Config) -> None:
        strings = ("selector", "username", "password_env", "password_file", "token_env",
                   "token_file", "ca_file", "cert_file", "key_file")
        for name, _k, v, full in self.mapping(vnode, key,
                                              (*strings, "stale_after_s", "headers")):
            if name == "stale_after_s":
                config.prometheus.stale_after_s = self.number(v, full, 1, 86400)
            elif name == "headers":
                self._prometheus_headers(v, full, config)
            elif name.endswith("_file"):
                setattr(config.prometheus, name, os.path.expanduser(self.string(v, full)))
            else:
                setattr(config.prometheus, name, self.string(v, full))
        if config.prometheus.key_file and not config.prometheus.cert_file:
            raise self.fail(vnode, key, "key_file needs cert_file (the client certificate)")

    def _prometheus_headers(self, vnode: Any, key: str, config: Config) -> None:
        headers = config.prometheus.headers
        for name, k, v, full in self.mapping(vnode, key):
            if not _HEADER_NAME.fullmatch(name) or len(name) > 100:
                raise self.fail(k, full, "expected an HTTP header name (letters, digits, -)")
            if name.lower() in _OWN_HEADERS:
                # Credentials come from token_*/password_* (never in this file's text),
                # and the rest is the client's own.
                raise self.fail(k, full, f"{name} is set by gputop itself"
                                + (": use token_env/token_file or username/password_env"
                                   if name.lower() == "authorization" else ""))
            raw = self.scalar(v, full)
            if isinstance(raw, bool) or not isinstance(raw, (str, int)) or raw == "":
                raise self.fail(v, full, f"expected a non-empty string, got {v.value!r}")
            value = str(raw) if isinstance(raw, int) else raw
            if len(value) > 4096 or any(ord(c) < 32 or ord(c) == 127 for c in value):
                raise self.fail(v, full, "expected one line of text (no control characters)")
            if len(headers) >= 32:
                raise self.fail(k, full, "at most 32 headers")
            headers[name] = value


def analysis_settings(config: Config) -> Settings:
    """The analysis pipeline's settings from the health:, reclaim: and history keys; a
    bad ``health:`` value raises ConfigError (the file's loader checks types only)."""
    from gputop.analysis import health, orphans
    from gputop.analysis.pipeline import Settings

    try:
        thresholds = health.Thresholds.from_config(config.health)
    except ValueError as err:
        raise ConfigError(f"{config.path or 'config'}: {err}") from None
    rules = orphans.OrphanRules(idle_minutes=config.reclaim.idle_minutes,
                                idle_min_mem_mib=int(config.reclaim.idle_min_mem_mib))
    return Settings(thresholds=thresholds, rules=rules, history_minutes=config.history_minutes)
