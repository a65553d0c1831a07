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
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from gputop import model
from gputop.hosts import HostSpec, split_target
from gputop.model import HostSnapshot, error_snapshot
from gputop.sources import bundle, networds, smi, untrusted
from gputop.sources.fallback import fallback_snapshot
from gputop.sources.feed import READONLY_WHY, Capabilities, ProcessDetails
from gputop.sources.identity import Identity, named_identity

# cryptography 51 warns that DSA is deprecated whenever asyncssh (2.24) merely names its
# DSA classes at import: five lines on stderr before every `--hosts` run, about keys
# nobody here chose.  Silenced for warnings raised from asyncssh's modules only.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh\..*")

import asyncssh  # noqa: E402  (after the filter above)

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


# A fallback command's output beyond this is not read: an 8-GPU `nvidia-smi -q -x` is
# ~0.5 MB, a `ps` of 100,000 processes ~15 MB.
MAX_FALLBACK_OUTPUT = 32 << 20
_STRAY_KEEP = 4096  # bytes of non-JSON probe output kept to explain a failed start


# A snapshot line longer than this is not read: 8 cards and a few hundred processes are
# ~50 KB, 4,096 processes (what untrusted.py keeps) ~1.5 MB; parsing a 10 MB line costs
# ~0.3 s of the client's CPU (bench/bench_probe_lines.py), skipping it almost nothing.
MAX_LINE = 4 << 20


class _Lines:
    """Lines of a stream, each at most ``limit`` bytes: a longer one is skipped up to its
    end (``skipped`` counts them), so a host cannot make the client hold 100 MB."""

    def __init__(self, stream: Any, limit: int, on_skip: Callable[[], None]) -> None:
        self.stream = stream
        self.limit = limit
        self.on_skip = on_skip  # called as soon as a line is known to be too long
        self.buffer = bytearray()
        self.skipping = False
        self.skipped = 0
        self.eof = False

    async def next(self) -> bytes | None:
        """The next line (with its newline), or None at the end of the stream."""
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[: end + 1])
                del self.buffer[: end + 1]
                if self.skipping:
                    self.skipping = False
                    continue
                return line
            if self.skipping:
                self.buffer.clear()
            elif len(self.buffer) > self.limit:
                self.buffer.clear()
                self.skipping = True
                self.skipped += 1
                self.on_skip()
            if self.eof:
                if self.buffer and not self.skipping:
                    line = bytes(self.buffer)
                    self.buffer.clear()
                    return line
                return None
            chunk = await self.stream.read(1 << 16)
            if not chunk:
                self.eof = True
            self.buffer += chunk


def _what(stray: bytes | bytearray, skipped: int) -> str:
    """What a probe sent instead of snapshots, for its host's error."""
    parts = []
    if stray:
        first = stray.decode("utf-8", "replace").strip().splitlines()[:1] or [""]
        parts.append(f"other output ({first[0][:80]!r} ...)")
    if skipped:
        parts.append(f"{skipped} line(s) over {MAX_LINE >> 20} MiB")
    return " and ".join(parts) or "nothing"


@dataclasses.dataclass
class _Output:
    """What one fallback command printed, or why it could not be read."""

    text: str
    status: int | None = None
    state: str = model.HOST_ERROR
    error: str | None = None


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
    windows: str | None = None  # the Windows shell that refused the probe: nvidia-smi only
    stray: bytearray = dataclasses.field(default_factory=bytearray)  # non-JSON output, capped
    parsed_at: float | None = None  # monotonic time the last snapshot line was parsed
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
        self._interval = model.DEFAULT_INTERVAL_S
        self._emit: Callable[[HostSnapshot], None] = lambda _s: None

    # -- the Feed protocol ---------------------------------------------------------

    async def run(self, interval: float, emit: Callable[[HostSnapshot], None]) -> None:
        self._interval = max(model.MIN_INTERVAL_S, float(interval))
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
            # The hosts file checked it already (HostSpec.jump is [user@]host[:port]).
            user, hostname, port = split_target(spec.jump, "jump host")
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
        process = await self._open_probe(host)
        host.process = process
        config = {
            "interval": self._interval,
            "host": spec.name,
            "readonly": self.readonly,
            "warmup": self.warmup,
        }
        host.stray.clear()
        host.parsed_at = None
        try:
            # The remote shell may have ended before its stdin is written (about 1 start
            # in 20 on a host without python3 or with a Windows shell): what it printed
            # and its exit status, read below, say why; the connection is fine.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                process.stdin.write(bundle.stdin_preamble(config))
            # Generous: python start-up on a loaded host, NVML init on 8 cards, a slow disk.
            first_timeout = self.first_line_timeout or max(30.0, 3 * self._interval + 5)
            lines = _Lines(process.stdout, MAX_LINE, lambda: self._state(
                host, model.HOST_ERROR,
                f"the probe sent a line of more than {MAX_LINE >> 20} MiB: not read"))
            # The first snapshot's deadline cancels this task's read rather than wrapping
            # each read in wait_for: a wait_for whose read completes just as the feed is
            # closed swallows that cancellation (Python < 3.12), and a host flooding lines
            # makes the race likely enough to leave the task running forever.
            expired = False
            me = asyncio.current_task()

            def expire() -> None:
                nonlocal expired
                expired = True
                if me is not None:
                    me.cancel()

            timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
                first_timeout, expire)
            try:
                while True:
                    line = await lines.next()
                    if line is None:
                        break
                    if self._line(host, line):
                        host.last_line = time.monotonic()
                        if timer is not None:
                            timer.cancel()
                            timer = None
            except asyncio.CancelledError:
                if not expired or self._closed.is_set():
                    raise
                uncancel = getattr(me, "uncancel", None)  # Python 3.11+
                if uncancel is not None:
                    uncancel()
            finally:
                if timer is not None:
                    timer.cancel()
            if expired:
                process.close()  # its channel and the remote command end with it
                if not host.stray and not lines.skipped:
                    raise asyncio.TimeoutError  # silence: "the probe sent nothing in time"
                raise _ProbeGone(f"no snapshot from the probe within {first_timeout:g} s; "
                                 f"it sent {_what(host.stray, lines.skipped)}")
        finally:
            host.process = None
            for future in host.pending.values():
                if not future.done():
                    future.set_result({"ok": False, "message": f"{spec.name}: probe stopped"})
        status = await self._exit_status(process)
        stderr = b""
        with contextlib.suppress(Exception):
            stderr = await asyncio.wait_for(process.stderr.read(4000), 1.0)
        said = (bytes(host.stray) + b"\n" + stderr).decode("utf-8", "replace")
        shell = smi.windows_shell(status, said)
        if shell is not None or status == bundle.NO_PYTHON_STATUS or (
            status == bundle.OLD_PYTHON_STATUS and host.old_python
        ):
            # cmd.exe or PowerShell cannot run the bootstrap's `exec`: the host is read
            # through nvidia-smi directly, whatever python it has.
            host.fallback = True
            host.windows = shell
            await self._fallback(host)
            return
        tail = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        why = f"exit status {status}" if status is not None else (
            f"signal {process.exit_signal[0]}" if process.exit_signal else "channel closed"
        )
        raise _ProbeGone(f"the probe stopped ({why}) {tail[0]}".strip())

    async def _open_probe(self, host: _Host) -> asyncssh.SSHClientProcess[bytes]:
        """The probe's channel, its bootstrap started (its stdin not written yet)."""
        assert host.conn is not None
        return await host.conn.create_process(bundle.BOOTSTRAP, encoding=None)

    async def _exit_status(self, process: asyncssh.SSHClientProcess[bytes]) -> int | None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(process.wait_closed(), 5.0)
        return process.exit_status

    def _line(self, host: _Host, line: bytes) -> bool:
        """Handle one line of the probe's stdout; True when it was a snapshot or a reply
        (what keeps the host from going stale).  The probe runs whatever python3 the host
        has: every line is untrusted (sources/untrusted.py)."""
        reply = line.startswith(b'{"id"')
        if not reply and line.startswith(b"{") and b'"fatal"' not in line[:40]:
            now = time.monotonic()
            if host.parsed_at is not None and now - host.parsed_at < self._interval / 2:
                return True  # more snapshots than asked for: not parsed, not piled up
            host.parsed_at = now
        try:
            data = json.loads(line, parse_constant=untrusted.json_constant)
        except (ValueError, RecursionError) as exc:
            if line.lstrip().startswith(b"{"):
                self._state(host, model.HOST_ERROR,
                            f"malformed JSON from the probe: {str(exc)[:120]}")
                return False
            # Stray output (a login banner, a warning): not ours, but kept (the first few
            # KB) in case the probe never starts: a Windows shell says why on stdout too.
            if len(host.stray) < _STRAY_KEEP:
                host.stray += line[: _STRAY_KEEP - len(host.stray)]
                if len(host.stray) >= _STRAY_KEEP and host.parsed_at is None:
                    # More than any login banner, and no snapshot yet: say so now (a
                    # one-shot command would otherwise only see "no answer").
                    self._state(host, model.HOST_ERROR, "the probe's output is not "
                                f"gputop's: it sent {_what(host.stray, 0)}")
            return False
        if not isinstance(data, dict):
            self._state(host, model.HOST_ERROR, "a line from the probe that is not an object")
            return False
        if "reply" in data and "id" in data:
            future = host.pending.get(data["id"]) if isinstance(data["id"], int) else None
            if future is not None and not future.done():
                reply_data = data["reply"] if isinstance(data["reply"], dict) else {"ok": False}
                future.set_result(reply_data)
            return True
        if "fatal" in data:
            if data.get("code") == "old-python":
                host.old_python = True  # the nvidia-smi fallback follows: not an error
            else:
                self._state(host, model.HOST_ERROR, str(data["fatal"])[:500])
            return True
        data, notes = untrusted.clean_snapshot(data)
        data["host"] = host.spec.name  # the name the user knows, whatever the probe says
        data["labels"] = list(host.spec.labels)
        data.setdefault("time", self.clock())
        try:
            snapshot = HostSnapshot.from_dict(untrusted.say_notes(data, notes, "probe data"))
        except (TypeError, ValueError) as exc:
            self._state(host, model.HOST_ERROR, f"bad snapshot from the probe: {exc}")
            return False
        self._publish(host, snapshot)
        return True

    async def _fallback(self, host: _Host) -> None:
        """No usable python3 (or a Windows shell): nvidia-smi (and ps) once per poll."""
        assert host.conn is not None
        if host.windows:
            reason = f"a Windows host ({host.windows})"
        elif host.old_python:
            reason = "python3 on this host is older than 3.10"
        else:
            reason = smi.NO_PYTHON
        mode = smi.Mode(windows=host.windows is not None)
        extras: smi.Extras | None = None
        extras_at: float | None = None
        while not self._closed.is_set():
            started = time.monotonic()
            if extras_at is None or started - extras_at >= smi.EXTRA_EVERY_S:
                # The GPU list with its MIG devices, topology, NVLinks: rarely changing.
                extras_at = started
                got = await self._smi_output(host, smi.EXTRA_COMMANDS,
                                             None if mode.windows else smi.EXTRA_COMMAND)
                if got.error is None:
                    extras = smi.Extras.parse(got.text)
            got = await self._smi_output(host, mode.commands(), None if mode.windows
                                         else mode.command())
            if got.error is not None:
                self._state(host, got.state, got.error)
            else:
                data = fallback_snapshot(host.spec.name, got.text, self.clock(), reason,
                                         mode=mode, extras=extras)
                after = mode.after(data)
                if after is not None:
                    mode = after  # an older driver: it lacks a field we ask for
                    continue
                data["labels"] = list(host.spec.labels)
                host.last_line = time.monotonic()
                self._publish(host, HostSnapshot.from_dict(data))
            await self._sleep(max(0.0, self._interval - (time.monotonic() - started)))

    async def _smi_output(
        self, host: _Host, commands: tuple[str, ...], sh_command: str | None
    ) -> _Output:
        """One poll's output: ``sh_command`` in one go, or (Windows: no sh) each command
        on its own, joined as sh would print them.  Bounded in time and size."""
        timeout = max(10.0, 3 * self._interval)
        if sh_command is not None:
            return await self._run_capped(host, sh_command, timeout)
        parts = []
        for command in commands:
            got = await self._run_capped(host, command, timeout)
            if got.error is not None:
                return got
            parts.append((got.text, got.status))
        return _Output(smi.join_outputs(parts))

    async def _run_capped(self, host: _Host, command: str, timeout: float) -> _Output:
        """Run a fixed command; its stdout and stderr, at most MAX_FALLBACK_OUTPUT bytes
        within ``timeout`` (a host that prints forever or never ends is an error state,
        not a client that grows or hangs)."""
        assert host.conn is not None
        process = await host.conn.create_process(command, encoding=None,
                                                 stderr=asyncssh.STDOUT)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    raise asyncio.TimeoutError
                chunk = await asyncio.wait_for(process.stdout.read(1 << 16), left)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_FALLBACK_OUTPUT:
                    return _Output("", None, model.HOST_ERROR,
                                   f"more than {MAX_FALLBACK_OUTPUT >> 20} MiB of output from "
                                   f"`{command.split()[0]} ...`: not read")
                chunks.append(chunk)
            await asyncio.wait_for(process.wait_closed(), max(0.5, deadline - loop.time()))
        except asyncio.TimeoutError:
            return _Output("", None, model.HOST_TIMEOUT,
                           f"nvidia-smi gave no complete answer within {timeout:.0f} s")
        finally:
            process.close()
        return _Output(b"".join(chunks).decode("utf-8", "replace"), process.exit_status)

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
            where = "a Windows host" if entry.windows else "no python3 on the host"
            return Capabilities(why_not=f"fallback mode ({where})")
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
    host = f"[{spec.target}]" if ":" in spec.target else spec.target  # IPv6: [::1]:22
    target = f"{host}:{spec.port or 22}"
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
