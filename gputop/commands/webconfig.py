"""`gputop serve --web-config-file`: TLS and basic auth, in Prometheus's web config format.

The file is the one Prometheus's exporter-toolkit reads (``--web.config.file`` of
node_exporter, dcgm-exporter, Prometheus itself), so a site reuses the file it has:

    tls_server_config: {cert_file, key_file, client_auth_type, client_ca_file,
                        client_allowed_sans, min_version, max_version,
                        prefer_server_cipher_suites}
    http_server_config: {http2, headers}
    basic_auth_users: {NAME: BCRYPT_HASH}

Relative paths are relative to the file's folder, as there.  Go's TLS names for
cipher suites and curves mean nothing to OpenSSL: those keys are refused with a line
rather than ignored, since a security setting silently dropped is worse than none.
Every field is checked; a problem is ``FILE:LINE: problem`` and exit 2.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gputop.yamlnodes import compose, line_of, mapping_items, read_file, scalar_value

MAX_USERS = 1000
_CACHE_MAX = 256  # remembered password checks: bcrypt costs ~0.1 s, a scrape every 15 s

_TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file",
             "client_allowed_sans", "min_version", "max_version", "cipher_suites",
             "curve_preferences", "prefer_server_cipher_suites")
_HTTP_KEYS = ("http2", "headers")
# exporter-toolkit's list: the headers a config may set on every answer.
_HEADERS = ("Strict-Transport-Security", "X-Content-Type-Options", "X-Frame-Options",
            "X-XSS-Protection", "Content-Security-Policy")
_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
             "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# client_auth_type -> (ask for a certificate, require one, verify it against the CA)
_CLIENT_AUTH = {
    "NoClientCert": (False, False, False),
    "RequestClientCert": (True, False, False),
    "RequireAnyClientCert": (True, True, False),
    "VerifyClientCertIfGiven": (True, False, True),
    "RequireAndVerifyClientCert": (True, True, True),
}
# A well-formed hash to check against for unknown users, so that a wrong name costs
# the same time as a wrong password (bcrypt of "x", cost 10).
_DUMMY_HASH = b"$2b$10$j6wmnWl3RIINazPom.met.SbgQRQ2ndcZ.1qCPwpx4f5xsP67dMse"


class WebConfigError(Exception):
    """One line, FILE:LINE: problem."""


@dataclass(frozen=True)
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    allowed_sans: tuple[str, ...] = ()  # client certificates must name one of these
    users: dict[str, bytes] = field(default_factory=dict)  # name -> bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None


def load(path: str) -> WebConfig:
    """The web config in ``path``; WebConfigError naming the line of the first problem."""
    name = path
    text = read_file(path, name, WebConfigError)
    root = compose(text, name, WebConfigError)
    if root is None:
        return WebConfig()  # an empty file: plain HTTP, no auth, as exporter-toolkit does
    base = os.path.dirname(os.path.abspath(os.path.expanduser(path)))
    context: ssl.SSLContext | None = None
    sans: tuple[str, ...] = ()
    users: dict[str, bytes] = {}
    headers: tuple[tuple[str, str], ...] = ()
    for key, _knode, vnode, _full in mapping_items(
            root, name, WebConfigError, known=("tls_server_config", "http_server_config",
                                                "basic_auth_users")):
        if key == "tls_server_config":
            context, sans = _tls(vnode, name, base)
        elif key == "http_server_config":
            headers = _http(vnode, name)
        else:
            users = _users(vnode, name)
    return WebConfig(context, sans, users, headers)


def _text(node: Any, name: str, key: str) -> str:
    value = scalar_value(node, name, WebConfigError) if node.id == "scalar" else None
    if not isinstance(value, str) or not value or len(value) > 4096 or "\0" in value:
        raise WebConfigError(f"{name}:{line_of(node)}: {key}: expected text")
    return value


def _bool(node: Any, name: str, key: str) -> bool:
    value = scalar_value(node, name, WebConfigError) if node.id == "scalar" else None
    if not isinstance(value, bool):
        raise WebConfigError(f"{name}:{line_of(node)}: {key}: expected true or false")
    return value


def _file(node: Any, name: str, key: str, base: str) -> str:
    path = os.path.join(base, os.path.expanduser(_text(node, name, key)))
    if not os.path.isfile(path):
        raise WebConfigError(f"{name}:{line_of(node)}: {key}: {path}: no such file")
    return path


def _tls(node: Any, name: str, base: str) -> tuple[ssl.SSLContext, tuple[str, ...]]:
    values: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for key, _knode, vnode, full in mapping_items(node, name, WebConfigError,
                                                  "tls_server_config", _TLS_KEYS):
        lines[key] = line_of(vnode)
        if key in ("cipher_suites", "curve_preferences"):
            raise WebConfigError(f"{name}:{line_of(vnode)}: {full}: not supported by gputop "
                                 "serve (Go's TLS names; OpenSSL's defaults apply)")
        if key in ("cert_file", "key_file", "client_ca_file"):
            values[key] = _file(vnode, name, full, base)
        elif key == "prefer_server_cipher_suites":
            values[key] = _bool(vnode, name, full)
        elif key == "client_allowed_sans":
            if vnode.id != "sequence" or len(vnode.value) > 256:
                raise WebConfigError(f"{name}:{line_of(vnode)}: {full}: expected a list of names")
            values[key] = tuple(_text(item, name, full) for item in vnode.value)
        elif key == "client_auth_type":
            values[key] = _text(vnode, name, full)
            if values[key] not in _CLIENT_AUTH:
                raise WebConfigError(f"{name}:{line_of(vnode)}: {full}: expected one of "
                                     f"{', '.join(_CLIENT_AUTH)}")
        else:  # min_version, max_version
            values[key] = _text(vnode, name, full)
            if values[key] not in _VERSIONS:
                raise WebConfigError(f"{name}:{line_of(vnode)}: {full}: expected one of "
                                     f"{', '.join(_VERSIONS)}")
    where = f"{name}:{line_of(node)}: tls_server_config"
    if "cert_file" not in values or "key_file" not in values:
        raise WebConfigError(f"{where}: needs both cert_file and key_file")
    ask, require, verify = _CLIENT_AUTH[values.get("client_auth_type", "NoClientCert")]
    if verify and "client_ca_file" not in values:
        raise WebConfigError(f"{name}:{lines['client_auth_type']}: tls_server_config: "
                             "client_auth_type "
                             f"{values['client_auth_type']} needs client_ca_file")
    if values.get("client_allowed_sans") and not verify:
        raise WebConfigError(f"{where}: client_allowed_sans needs a verified client "
                             "certificate (client_auth_type RequireAndVerifyClientCert)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[values.get("min_version", "TLS12")]
    if "max_version" in values:
        context.maximum_version = _VERSIONS[values["max_version"]]
    if "max_version" in values and context.minimum_version > context.maximum_version:
        raise WebConfigError(f"{name}:{lines.get('max_version', line_of(node))}: "
                             "tls_server_config: max_version is below min_version")
    if values.get("prefer_server_cipher_suites", True):
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    try:
        context.load_cert_chain(values["cert_file"], values["key_file"])
    except (ssl.SSLError, OSError) as err:
        raise WebConfigError(f"{name}:{lines['cert_file']}: tls_server_config: cannot load "
                             f"the certificate and key: {_ssl_reason(err)}") from None
    if ask:
        if verify:
            try:
                context.load_verify_locations(cafile=values["client_ca_file"])
            except (ssl.SSLError, OSError) as err:
                raise WebConfigError(f"{name}:{lines['client_ca_file']}: tls_server_config."
                                     f"client_ca_file: {_ssl_reason(err)}") from None
            context.verify_mode = ssl.CERT_REQUIRED if require else ssl.CERT_OPTIONAL
        else:
            # Python's ssl cannot take a certificate without verifying it: "any client
            # certificate" is not available, and saying so beats trusting every one.
            raise WebConfigError(f"{name}:{lines['client_auth_type']}: tls_server_config."
                                 f"client_auth_type {values['client_auth_type']}: not "
                                 "supported by gputop serve (use VerifyClientCertIfGiven or "
                                 "RequireAndVerifyClientCert with client_ca_file)")
    return context, values.get("client_allowed_sans", ())


def _ssl_reason(err: BaseException) -> str:
    return str(getattr(err, "reason", None) or getattr(err, "strerror", None) or err)


def _http(node: Any, name: str) -> tuple[tuple[str, str], ...]:
    headers: list[tuple[str, str]] = []
    for key, _knode, vnode, full in mapping_items(node, name, WebConfigError,
                                                  "http_server_config", _HTTP_KEYS):
        if key == "http2":
            _bool(vnode, name, full)  # a preference: gputop serve speaks HTTP/1.1
            continue
        for header, _hk, hv, hfull in mapping_items(vnode, name, WebConfigError, full):
            canonical = {h.lower(): h for h in _HEADERS}.get(header.lower())
            if canonical is None:
                raise WebConfigError(f"{name}:{line_of(hv)}: {hfull}: not a header the "
                                     f"config may set (one of: {', '.join(_HEADERS)})")
            value = _text(hv, name, hfull)
            if any(c in value for c in "\r\n"):
                raise WebConfigError(f"{name}:{line_of(hv)}: {hfull}: one line expected")
            headers.append((canonical, value))
    return tuple(headers)


def _users(node: Any, name: str) -> dict[str, bytes]:
    users: dict[str, bytes] = {}
    items = mapping_items(node, name, WebConfigError, "basic_auth_users")
    if len(items) > MAX_USERS:
        raise WebConfigError(f"{name}:{line_of(node)}: basic_auth_users: more than "
                             f"{MAX_USERS} users")
    for user, _knode, vnode, full in items:
        if not user or ":" in user or len(user) > 256:
            raise WebConfigError(f"{name}:{line_of(vnode)}: {full}: a user name is 1 to 256 "
                                 "characters, without ':'")
        hashed = _text(vnode, name, full)
        if not _is_bcrypt(hashed):
            raise WebConfigError(f"{name}:{line_of(vnode)}: {full}: expected a bcrypt hash "
                                 "($2y$10$..., e.g. from htpasswd -nBC 10 USER)")
        users[user] = hashed.encode("ascii")
    return users


def _is_bcrypt(text: str) -> bool:
    parts = text.split("$")
    return (len(text) == 60 and len(parts) == 4 and parts[0] == ""
            and parts[1] in ("2a", "2b", "2y") and parts[2].isdigit()
            and 4 <= int(parts[2]) <= 31 and not set(parts[3]) - _BCRYPT_ALPHABET)


_BCRYPT_ALPHABET = frozenset("./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


class BasicAuth:
    """Checks ``Authorization: Basic`` against the users' bcrypt hashes.

    Answers are remembered (keyed by a SHA-256 of the credentials, never the password
    itself), so a scraper does not cost a bcrypt per scrape and a flood of wrong
    passwords costs one bcrypt per distinct guess; the cache is bounded."""

    def __init__(self, users: dict[str, bytes],
                 checkpw: Callable[[bytes, bytes], bool] | None = None) -> None:
        if checkpw is None:
            import bcrypt

            checkpw = bcrypt.checkpw
        self.users = users
        self._checkpw = checkpw
        self._cache: dict[bytes, bool] = {}
        self._lock = threading.Lock()
        self._check_lock = threading.Lock()

    def allows(self, header: str | None) -> bool:
        import base64
        import binascii

        if not header or header[:6].lower() != "basic ":
            return False
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        user, sep, password = decoded.partition(b":")
        if not sep or len(decoded) > 4096:
            return False
        name = user.decode("utf-8", "replace")
        hashed = self.users.get(name)
        key = hashlib.sha256(b"%s\0%s\0%s" % (user, password, hashed or b"")).digest()
        with self._lock:
            known = self._cache.get(key)
        if known is not None:
            return known
        # One bcrypt at a time: ten scrapers connecting at once with the same password
        # cost one check (the others find the answer), and a flood of guesses costs one
        # core at most, never all of them.
        with self._check_lock:
            with self._lock:
                known = self._cache.get(key)
            if known is not None:
                return known
            try:
                ok = self._checkpw(password, hashed or _DUMMY_HASH) and hashed is not None
            except ValueError:  # a hash bcrypt itself refuses: nobody gets in with it
                ok = False
            with self._lock:
                if len(self._cache) >= _CACHE_MAX:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = ok
        return ok


def allowed_san(cert: dict[str, Any] | None, allowed: tuple[str, ...]) -> bool:
    """Whether a verified client certificate names one of ``allowed`` (DNS, IP, e-mail
    or URI subject alternative names, as exporter-toolkit compares them)."""
    if not allowed:
        return True
    names = [value for _kind, value in (cert or {}).get("subjectAltName", ())]
    return any(hmac.compare_digest(n.encode(), a.encode()) for n in names for a in allowed)
