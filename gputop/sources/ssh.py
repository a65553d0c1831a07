"""Remote hosts over SSH: one asyncssh connection and one long-lived probe per host.

``SshFeed`` implements the Feed protocol (docs/architecture.md).  Per host it connects
(honouring ~/.ssh/config, verifying host keys against known_hosts), starts the probe with
a fixed bootstrap command (sources/bundle.py) and turns each JSON line into a
HostSnapshot.  Everything that goes wrong becomes that host's state, emitted as an error
snapshot: connecting, auth failed, host key unknown/changed (with the fingerprint and the
command to trust it), unreachable, timed out, stale (no line for 3 intervals), no
GPU/driver, fallback (no python3: nvidia-smi + ps, parsed by sources/smi.py).

Rules that keep a lab of 200 hosts healthy:
- handshakes in flight are capped per target (or jump host) and overall, and staggered,
  because sshd drops connections beyond MaxStartups (10 by default);
- a lost connection is retried with exponential backoff and jitter; a refused key or a
  host key that does not match is never retried by itself (it needs a human);
- one hung or dead host never delays another: each host is its own task.

Nothing from the hosts file reaches a shell: the remote command is a module constant,
host names and users are asyncssh arguments, requests are JSON on the probe's stdin.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import getpass
import json
import os
import random
import shlex
import time
from collections.abc import Callable, Sequence
from typing import Any

import asyncssh

from gputop import model
from gputop.hosts import HostSpec
from gputop.model import HostSnapshot, error_snapshot
from gputop.sources import bundle, networds, smi
from gputop.sources.feed import READONLY_WHY, Capabilities, ProcessDetails
from gputop.sources.hostsource import fallback_snapshot
from gputop.sources.identity import Identity, named_identity

DEFAULT_KNOWN_HOSTS = (
    "~/.ssh/known_hosts",
    "~/.ssh/known_hosts2",
    "/etc/ssh/ssh_known_hosts",
    "/etc/ssh/ssh_known_hosts2",
)
MAX_INFLIGHT = 32  # handshakes at once, overall
MAX_INFLIGHT_PER_TARGET = 10  # per sshd or jump host: sshd's MaxStartups starts at 10
STALE_AFTER = 3  # intervals without a line


class HostKeyError(Exception):
    def __init__(self, state: str, message: str) -> None:
        super().__init__(message)
        self.state = state


class _ProbeGone(Exception):
    """The probe's stream ended; the connection may still be fine."""


def known_hosts_files(spec: HostSpec) -> list[str]:
    """The known_hosts files that apply to a host: its own list, else user's and system's."""
    paths = spec.known_hosts if spec.known_hosts is not None else DEFAULT_KNOWN_HOSTS
    return [p for p in (os.path.expanduser(x) for x in paths) if os.path.isfile(p)]


class _KeyWitness(asyncssh.SSHClient):
    """Remembers the host key a server presented when known_hosts did not trust it."""

    def __init__(self) -> None:
        self.seen: tuple[str, str, int, asyncssh.SSHKey] | None = None

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        self.seen = (host, addr, port, key)
        return False  # never accept an unknown key; the user decides


def _host_key_error(spec: HostSpec, witness: _KeyWitness, files: list[str]) -> HostKeyError:
    if witness.seen is None:
        return HostKeyError(model.HOST_KEY_UNKNOWN, "host key not trusted")
    host, addr, port, key = witness.seen
    fingerprint = key.get_fingerprint("sha256")
    algorithm = key.get_algorithm()
    known: Sequence[Any] = ()
    if files:
        with contextlib.suppress(Exception):
            known = asyncssh.match_known_hosts(files, host, addr, port if port != 22 else None)[0]
    scan = "ssh-keyscan " + (f"-p {port} " if port != 22 else "") + shlex.quote(host)
    if known:
        entry = f"[{host}]:{port}" if port != 22 else host
        return HostKeyError(
            model.HOST_KEY_CHANGED,
            f"HOST KEY CHANGED: the server offers {algorithm} {fingerprint}, known_hosts has "
            f"another key. If the change is expected: ssh-keygen -R {shlex.quote(entry)}; "
            f"{scan} >> ~/.ssh/known_hosts",
        )
    return HostKeyError(
        model.HOST_KEY_UNKNOWN,
        f"host key not in known_hosts: {algorithm} {fingerprint}. After checking it: "
        f"{scan} >> ~/.ssh/known_hosts",
    )


@dataclasses.dataclass
class _Host:
    spec: HostSpec
    index: int
    state: str = model.HOST_CONNECTING
    last: HostSnapshot | None = None
    last_line: float | None = None  # monotonic time of the last line from the probe
    conn: asyncssh.SSHClientConnection | None = None
    process: asyncssh.SSHClientProcess[bytes] | None = None
    fallback: bool = False
    old_python: bool = False
    pending: dict[int, asyncio.Future[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    connect_attempts: int = 0


class SshFeed:
    """Snapshots of many SSH hosts, one probe stream each (the Feed protocol)."""

    def __init__(
        self,
        specs: Sequence[HostSpec],
        *,
        readonly: bool = False,
        retry: bool = True,
        backoff: tuple[float, float] = (1.0, 60.0),
        max_inflight: int = MAX_INFLIGHT,
        max_inflight_per_target: int = MAX_INFLIGHT_PER_TARGET,
        stagger: float = 0.003,
        warmup: float = 0.0,
        first_line_timeout: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError("duplicate host names")
        self.hosts = names
        self._hosts = {s.name: _Host(s, i) for i, s in enumerate(specs)}
        self.readonly = readonly
        self.retry = retry
        self.backoff = backoff
        self.stagger = stagger
        self.warmup = warmup
        self.first_line_timeout = first_line_timeout
        self.clock = clock
        self._max_inflight = max_inflight
        self._per_target = max_inflight_per_target
        self._gate: asyncio.Semaphore | None = None
        self._target_gates: dict[str, asyncio.Semaphore] = {}
        self._jumps: dict[str, asyncssh.SSHClientConnection] = {}
        self._jump_locks: dict[str, asyncio.Lock] = {}
        self._closed = asyncio.Event()
        self._next_id = 0
        self._inflight = 0
        self.peak_inflight = 0  # most handshakes at once so far (tests, bench)
        self._interval = 1.0
        self._emit: Callable[[HostSnapshot], None] = lambda _s: None

    # -- the Feed protocol ---------------------------------------------------------

    async def run(self, interval: float, emit: Callable[[HostSnapshot], None]) -> None:
        self._interval = max(0.05, float(interval))
        self._emit = emit
        self._gate = asyncio.Semaphore(self._max_inflight)
        for host in self._hosts.values():
            host.task = asyncio.create_task(self._host_loop(host), name=f"ssh:{host.spec.name}")
        watchdog = asyncio.create_task(self._watchdog(), name="ssh:watchdog")
        try:
            await self._closed.wait()
        finally:
            watchdog.cancel()
            await self._shutdown()

    async def request(self, host: str, request: dict[str, Any]) -> dict[str, Any]:
        entry = self._hosts.get(host)
        if entry is None:
            return {"ok": False, "message": f"unknown host {host!r}"}
        if entry.fallback:
            return {"ok": False, "message": f"{host}: fallback mode (no python3): no actions"}
        process = entry.process
        if process is None or entry.state not in (model.HOST_OK, model.HOST_STALE):
            return {"ok": False, "message": f"{host}: not connected ({entry.state})"}
        self._next_id += 1
        ident = self._next_id
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        entry.pending[ident] = future
        line = json.dumps({"id": ident, "request": request}).encode("ascii") + b"\n"
        grace = request.get("grace", 0) if isinstance(request, dict) else 0
        timeout = 30.0 + (float(grace) if isinstance(grace, (int, float)) else 0.0)
        try:
            process.stdin.write(line)
            return await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            return {"ok": False, "message": f"{host}: no answer within {timeout:.0f} s"}
        except (OSError, asyncssh.Error) as exc:
            return {"ok": False, "message": f"{host}: connection lost: {exc}"}
        finally:
            entry.pending.pop(ident, None)

    async def close(self) -> None:
        self._closed.set()
        await self._shutdown()

    # -- per host ------------------------------------------------------------------

    def _publish(self, host: _Host, snapshot: HostSnapshot) -> None:
        host.state = snapshot.state
        host.last = snapshot
        self._emit(snapshot)

    def _state(self, host: _Host, state: str, message: str) -> None:
        spec = host.spec
        self._publish(
            host,
            error_snapshot(spec.name, self.clock(), state, message, source="probe",
                           labels=spec.labels, hostname=spec.target),
        )

    async def _host_loop(self, host: _Host) -> None:
        failures = 0
        # Spread the first handshakes a little: sshd and the network see a ramp, not a wall.
        await self._sleep(host.index * self.stagger)
        while not self._closed.is_set():
            if host.conn is None:
                self._state(host, model.HOST_CONNECTING, "connecting")
                try:
                    host.conn = await self._connect(host)
                except HostKeyError as exc:
                    self._state(host, exc.state, str(exc))
                    return  # a person must look at the key: never retried
                except asyncssh.PermissionDenied as exc:
                    user = host.spec.user or "(default user)"
                    self._state(host, model.HOST_AUTH_FAILED,
                                f"authentication failed for {user}: {exc.reason}")
                    return  # retrying a refused key only fills the server's auth log
                except asyncio.TimeoutError:
                    self._state(host, model.HOST_TIMEOUT,
                                f"no SSH handshake within {host.spec.connect_timeout:g} s")
                except (OSError, asyncssh.Error) as exc:
                    self._state(host, model.HOST_UNREACHABLE, _describe(exc, host.spec))
                except UnicodeError as exc:  # the resolver's IDNA step: not a host name
                    self._state(host, model.HOST_UNREACHABLE, _describe(exc, host.spec))
                    return
                except Exception as exc:  # a bad key file, an option asyncssh refuses...
                    self._state(host, model.HOST_ERROR, _describe(exc, host.spec))
                    return  # a configuration problem: retrying cannot fix it
            if host.conn is not None:
                seen = host.last_line
                try:
                    await self._stream(host)
                except _ProbeGone as exc:
                    if host.conn.is_closed():
                        self._state(host, model.HOST_UNREACHABLE, "connection lost")
                        await self._drop(host)
                    else:
                        self._state(host, model.HOST_ERROR, str(exc))
                except asyncio.TimeoutError:
                    self._state(host, model.HOST_TIMEOUT, "the probe sent nothing in time")
                    await self._drop(host)
                except (OSError, asyncssh.Error) as exc:
                    lost = "the connection was lost"
                    if not isinstance(exc, asyncssh.ConnectionLost):
                        lost += f": {_describe(exc, host.spec)}"
                    self._state(host, model.HOST_UNREACHABLE, lost)
                    await self._drop(host)
                except Exception as exc:  # one host's surprise must not end the others
                    self._state(host, model.HOST_ERROR, f"{type(exc).__name__}: {exc}")
                    await self._drop(host)
                if host.last_line != seen:
                    # It worked for a while: this is a new incident, not the same one again
                    # (a probe that dies at start-up keeps backing off).
                    failures = 0
            if not self.retry or self._closed.is_set():
                return
            failures += 1
            await self._sleep(self._backoff_delay(failures))

    def _backoff_delay(self, failures: int) -> float:
        base, cap = self.backoff
        delay = min(cap, base * 2 ** max(0, failures - 1))
        return delay * random.uniform(0.5, 1.0)  # jitter: a rack that rebooted must not stampede

    async def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._closed.wait(), seconds)

    def _target_gate(self, spec: HostSpec) -> asyncio.Semaphore:
        key = spec.jump or f"{spec.target}:{spec.port or 22}"
        gate = self._target_gates.get(key)
        if gate is None:
            gate = self._target_gates[key] = asyncio.Semaphore(self._per_target)
        return gate

    def _options(self, spec: HostSpec) -> tuple[dict[str, Any], _KeyWitness, list[str]]:
        witness = _KeyWitness()
        files = known_hosts_files(spec)
        options: dict[str, Any] = {
            # An empty list would mean "no known hosts file" to asyncssh, which then
            # falls back to ~/.ssh/known_hosts; b"" is an explicit empty set of keys.
            "known_hosts": files or b"",
            "agent_forwarding": False,
            "x11_forwarding": False,
            "kbdint_auth": False,
            "connect_timeout": spec.connect_timeout,
            "keepalive_interval": spec.keepalive,
            "keepalive_count_max": 3,
            "client_factory": lambda: witness,
        }
        password = os.environ.get(spec.password_env) if spec.password_env else None
        if password:
            options["password"] = password
        else:
            options["password_auth"] = False
        if spec.ssh_config:
            options["config"] = [spec.ssh_config]
        if spec.user:
            options["username"] = spec.user
        if spec.port:
            options["port"] = spec.port
        if spec.identity_file:
            if not os.path.isfile(spec.identity_file):
                raise ValueError(
                    f"no key file {spec.identity_file} (identity_file): create it with "
                    f"ssh-keygen, or drop identity_file to use ssh-agent and ~/.ssh/config")
            options["client_keys"] = [spec.identity_file]
        return options, witness, files

    async def _connect(self, host: _Host) -> asyncssh.SSHClientConnection:
        spec = host.spec
        assert self._gate is not None
        tunnel = await self._jump(spec) if spec.jump else None
        options, witness, files = self._options(spec)
        if tunnel is not None:
            options["tunnel"] = tunnel
        async with self._target_gate(spec), self._gate:
            host.connect_attempts += 1
            self._inflight += 1
            self.peak_inflight = max(self.peak_inflight, self._inflight)
            try:
                # asyncssh's connect_timeout covers TCP and the SSH handshake; the outer
                # limit also covers a jump host that stalls the forwarded channel.
                return await asyncio.wait_for(
                    asyncssh.connect(spec.target, **options), spec.connect_timeout + 5
                )
            except asyncssh.HostKeyNotVerifiable:
                raise _host_key_error(spec, witness, files) from None
            finally:
                self._inflight -= 1

    async def _jump(self, spec: HostSpec) -> asyncssh.SSHClientConnection:
        """One shared connection per jump host, opened on first use, reopened if lost."""
        assert spec.jump is not None
        lock = self._jump_locks.setdefault(spec.jump, asyncio.Lock())
        async with lock:
            conn = self._jumps.get(spec.jump)
            if conn is not None and not conn.is_closed():
                return conn
            user, _, rest = spec.jump.rpartition("@")
            hostname, port = rest, None
            if rest.count(":") == 1:
                hostname, _, port_text = rest.partition(":")
                port = int(port_text) if port_text.isdigit() else None
            jump_spec = dataclasses.replace(
                spec, name=spec.jump, hostname=hostname, user=user or spec.user, port=port,
                jump=None,
            )
            options, witness, files = self._options(jump_spec)
            async with self._target_gate(jump_spec):
                try:
                    conn = await asyncio.wait_for(
                        asyncssh.connect(hostname, **options), jump_spec.connect_timeout + 5
                    )
                except asyncssh.HostKeyNotVerifiable:
                    err = _host_key_error(jump_spec, witness, files)
                    raise HostKeyError(err.state, f"jump host {spec.jump}: {err}") from None
                except (OSError, asyncssh.Error) as exc:
                    raise _JumpFailed(jump_spec, exc) from None
            self._jumps[spec.jump] = conn
            return conn

    async def _stream(self, host: _Host) -> None:
        """Run the probe on the open connection and emit what it sends until it stops."""
        assert host.conn is not None
        spec = host.spec
        process = await host.conn.create_process(bundle.BOOTSTRAP, encoding=None)
        host.process = process
        config = {
            "interval": self._interval,
            "host": spec.name,
            "readonly": self.readonly,
            "warmup": self.warmup,
        }
        try:
            process.stdin.write(bundle.stdin_preamble(config))
            # Generous: python start-up on a loaded host, NVML init on 8 cards, a slow disk.
            first_timeout = self.first_line_timeout or max(30.0, 3 * self._interval + 5)
            first = True
            while True:
                timeout = first_timeout if first else None
                line = await asyncio.wait_for(process.stdout.readline(), timeout)
                if not line:
                    break
                first = False
                host.last_line = time.monotonic()
                self._line(host, line)
        finally:
            host.process = None
            for future in host.pending.values():
                if not future.done():
                    future.set_result({"ok": False, "message": f"{spec.name}: probe stopped"})
        status = await self._exit_status(process)
        if status == bundle.NO_PYTHON_STATUS or (
            status == bundle.OLD_PYTHON_STATUS and host.old_python
        ):
            host.fallback = True
            await self._fallback(host)
            return
        stderr = b""
        with contextlib.suppress(Exception):
            stderr = await asyncio.wait_for(process.stderr.read(2000), 1.0)
        tail = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        why = f"exit status {status}" if status is not None else (
            f"signal {process.exit_signal[0]}" if process.exit_signal else "channel closed"
        )
        raise _ProbeGone(f"the probe stopped ({why}) {tail[0]}".strip())

    async def _exit_status(self, process: asyncssh.SSHClientProcess[bytes]) -> int | None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(process.wait_closed(), 5.0)
        return process.exit_status

    def _line(self, host: _Host, line: bytes) -> None:
        try:
            data = json.loads(line)
        except ValueError:
            return  # stray output (a login banner, a warning): not ours
        if not isinstance(data, dict):
            return
        if "reply" in data and "id" in data:
            future = host.pending.get(data["id"])
            if future is not None and not future.done():
                reply = data["reply"] if isinstance(data["reply"], dict) else {"ok": False}
                future.set_result(reply)
            return
        if "fatal" in data:
            if data.get("code") == "old-python":
                host.old_python = True  # the nvidia-smi fallback follows: not an error
            else:
                self._state(host, model.HOST_ERROR, str(data["fatal"]))
            return
        data["host"] = host.spec.name  # the name the user knows, whatever the probe says
        data["labels"] = list(host.spec.labels)
        try:
            snapshot = HostSnapshot.from_dict(data)
        except (TypeError, ValueError) as exc:
            self._state(host, model.HOST_ERROR, f"bad snapshot from the probe: {exc}")
            return
        self._publish(host, snapshot)

    async def _fallback(self, host: _Host) -> None:
        """No python3 on the host: one nvidia-smi + ps command per poll."""
        assert host.conn is not None
        xml = False
        reason = "python3 on this host is older than 3.10" if host.old_python else smi.NO_PYTHON
        while not self._closed.is_set():
            started = time.monotonic()
            command = smi.XML_FALLBACK_COMMAND if xml else smi.FALLBACK_COMMAND
            result = await host.conn.run(
                command, check=False, timeout=max(10.0, 3 * self._interval)
            )
            output = result.stdout if isinstance(result.stdout, str) else ""
            data = fallback_snapshot(host.spec.name, output, self.clock(), reason, xml=xml)
            if not xml and smi.wants_xml(data):
                xml = True  # an older driver: its CSV lacks a field we ask for
                continue
            data["labels"] = list(host.spec.labels)
            host.last_line = time.monotonic()
            self._publish(host, HostSnapshot.from_dict(data))
            await self._sleep(max(0.0, self._interval - (time.monotonic() - started)))

    async def _watchdog(self) -> None:
        """Mark hosts stale when their stream has been silent for STALE_AFTER intervals."""
        while True:
            await asyncio.sleep(self._interval)
            now = time.monotonic()
            for host in self._hosts.values():
                if host.state not in (model.HOST_OK, model.HOST_FALLBACK, model.HOST_STALE):
                    continue
                if host.last is None or host.last_line is None:
                    continue
                age = now - host.last_line
                if age > STALE_AFTER * self._interval:
                    stale = dataclasses.replace(
                        host.last, state=model.HOST_STALE, error=f"no update for {age:.0f} s"
                    )
                    host.state = model.HOST_STALE
                    self._emit(stale)

    async def _drop(self, host: _Host) -> None:
        conn, host.conn, host.process = host.conn, None, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 2.0)

    async def _shutdown(self) -> None:
        tasks = [h.task for h in self._hosts.values() if h.task is not None]
        for host in self._hosts.values():
            if host.process is not None:
                # EOF on its stdin is what tells the probe to exit.
                with contextlib.suppress(Exception):
                    host.process.stdin.write_eof()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for host in self._hosts.values():
            host.task = None
            await self._drop(host)
        for conn in list(self._jumps.values()):
            conn.close()
        self._jumps.clear()

    # -- what it declares ---------------------------------------------------------

    def capabilities(self, host: str) -> Capabilities:
        entry = self._hosts.get(host)
        if entry is None:
            return Capabilities(why_not=f"unknown host {host!r}")
        if self.readonly:
            return Capabilities(why_not=READONLY_WHY)
        if entry.fallback:
            return Capabilities(why_not="fallback mode (no python3 on the host)")
        return Capabilities(kill=True, reserve=True)

    def identity(self, host: str) -> Identity:
        """The user the probe on ``host`` runs as.

        The kill dialog offers only that user's processes (all for root); the probe
        checks again on the host."""
        entry = self._hosts.get(host)
        name = None
        if entry is not None:
            if entry.conn is not None:
                # The name asyncssh logged in with: also right when ~/.ssh/config chose it.
                name = entry.conn.get_extra_info("username")
            name = name or entry.spec.user
        # Without a user in the hosts file, ssh logs in with ~/.ssh/config's or our own
        # name; a wrong guess only changes what is offered: the probe decides.
        return named_identity(str(name or getpass.getuser()))

    def process_details(self, host: str, pid: int, start_ticks: int | None) -> ProcessDetails:
        # The probe streams snapshots only: a remote parent chain is not read.
        return ProcessDetails(None, None)

    # -- introspection (tests, bench) -----------------------------------------------

    def connect_attempts(self, host: str) -> int:
        return self._hosts[host].connect_attempts

    def state(self, host: str) -> str:
        return self._hosts[host].state

    def connected(self, host: str) -> bool:
        """The SSH connection is up (the probe may still be starting)."""
        return self._hosts[host].conn is not None


class _JumpFailed(OSError):
    """The jump host, not the host behind it, could not be reached: say which."""

    def __init__(self, jump: HostSpec, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.jump, self.cause = jump, cause


def _describe(exc: BaseException, spec: HostSpec) -> str:
    """One line in words, never the socket's text ("Connect call failed (...)")."""
    target = f"{spec.target}:{spec.port or 22}"
    if isinstance(exc, _JumpFailed):
        return f"jump host {spec.jump}: {_describe(exc.cause, exc.jump)}"
    if isinstance(exc, asyncssh.ConnectionLost):
        return (f"{target} closed the connection before SSH began: is it an SSH server, "
                f"on this port?")
    if isinstance(exc, asyncssh.DisconnectError):
        return exc.reason or type(exc).__name__
    if isinstance(exc, (OSError, UnicodeError)):
        return networds.problem(exc, target, networds.SSH)
    if isinstance(exc, ValueError):  # ours or asyncssh's about an option: already words
        return str(exc)
    return f"cannot connect: {exc or type(exc).__name__}"
