"""A failed connection in words, with what to do: the one wording of SSH, `gputop serve`
and Prometheus connection errors.

The operating system's texts are not for people: asyncio says "Connect call failed
('127.0.0.9', 1)", the resolver "[Errno -2] Name or service not known".  A host's state
(unreachable, timed out) is shown next to this text, so the text never repeats it.
Standard library only.
"""

from __future__ import annotations

import errno
import socket

# What answers at the other end, as the sentence names it.
SSH = "SSH server"
SERVE = "gputop serve"
PROMETHEUS = "Prometheus server"

_NO_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
_DNS_DOWN = {socket.EAI_AGAIN, getattr(socket, "EAI_FAIL", socket.EAI_AGAIN)}


def host_of(target: str) -> str:
    """``host`` of ``host:port``, ``[::1]:22`` or ``http://host:port/path``."""
    rest = target.split("://", 1)[-1].split("/", 1)[0].rpartition("@")[2]
    if rest.startswith("["):
        return rest[1:].partition("]")[0]
    return rest.rpartition(":")[0] if rest.count(":") == 1 else rest


def problem(exc: BaseException, target: str, service: str = SSH) -> str:
    """Why connecting to ``target`` (``host:port`` or a URL) failed, and what to do."""
    host = host_of(target)
    if isinstance(exc, socket.gaierror):
        if exc.errno in _DNS_DOWN:
            return f"cannot look up {host}: no DNS server answered; check the network"
        return (f"the name {host} is not known (no DNS entry): check its spelling, "
                f"or give its address")
    if isinstance(exc, UnicodeError):  # the resolver's IDNA step
        return f"{host!r} is not a valid host name"
    if isinstance(exc, TimeoutError):
        return f"{target} did not answer in time: check that the host is up"
    code = exc.errno if isinstance(exc, OSError) else None
    if isinstance(exc, ConnectionRefusedError) or code == errno.ECONNREFUSED:
        return (f"connection refused by {target}: no {service} listens there; check the "
                f"port and that the {service} runs")
    if code in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN):
        return f"no route to {host}: the host is down or the network (VPN?) does not reach it"
    if isinstance(exc, ConnectionResetError) or code == errno.ECONNRESET:
        return f"{target} closed the connection at once; the {service} may be overloaded"
    if code == errno.ETIMEDOUT:
        return f"{target} did not answer in time: check that the host is up"
    if isinstance(exc, OSError) and exc.strerror and "Connect call failed" not in exc.strerror:
        return f"cannot connect to {target}: {exc.strerror.lower()}"
    text = str(exc)
    if "Multiple exceptions" in text or "Connect call failed" in text:
        # asyncio tried every address of the name and names none of the reasons in words.
        return f"cannot connect to {target}: no address of {host} accepted the connection"
    return f"cannot connect to {target}: {text or type(exc).__name__}"


def url_problem(err: Exception, url: str, service: str) -> str:
    """:func:`problem` for urllib's error (a URLError wraps the socket's in ``reason``)."""
    reason = getattr(err, "reason", err)
    netloc = url.split("://", 1)[-1].split("/", 1)[0].rpartition("@")[2]
    return problem(reason if isinstance(reason, BaseException) else err, netloc, service)
