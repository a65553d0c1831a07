"""A real OpenSSH sshd on loopback addresses, for tests that go over SSH.

Each "host" is one loopback address (127.0.0.2, 127.0.0.3, ...) with its own sshd
process (or a shared one, see ``per_daemon``), its own environment (a ``Match
LocalAddress`` block with ``SetEnv``) and therefore its own simulated GPUs: the
remote probe reads ``GPUTOP_PROBE_SIM`` and uses that sim scenario instead of NVML.

Use it from a test::

    def test_something(sshd_hosts):            # 3 hosts, session-scoped
        specs = sshd_hosts.specs()             # list[gputop.hosts.HostSpec]
        sshd_hosts.hosts[0].name               # "gpu-a"
        sshd_hosts.user, sshd_hosts.key, sshd_hosts.known_hosts, sshd_hosts.ssh_config

or build a cluster of your own (module scope, when a test stops daemons)::

    @pytest.fixture(scope="module")
    def lab(tmp_path_factory):
        with SshdCluster(tmp_path_factory.mktemp("lab"),
                         [HostConf("a", env={"GPUTOP_RESERVATIONS_DIR": "/tmp/x"})]) as c:
            yield c

The remote python is the system /usr/bin/python3 (no gputop, no pynvml installed), so
the tests exercise the real bundle shipping; ``PYTHONPATH`` on the remote side points at
a directory holding only pyyaml (the sim loads YAML scenarios).

Actions through SSH (kill, reserve, release), as the one-shot commands send them::

    from gputop.sources.oneshot import Session
    spec = sshd_hosts.specs(["gpu-b"])[0]                  # gpu-b serves the "lab" scenario
    async with Session([SshFeed([spec], retry=False)], timeout=20) as session:
        reply = await session.request(spec.name, {"op": "reservations"})

A sim host's probe acts on the simulation (a kill changes SimProcs, never a real pid) and
keeps reservations in $GPUTOP_RESERVATIONS_DIR when the host's ``env`` sets it (values
without spaces: they go into sshd_config's SetEnv), else in a per-scenario directory under
/tmp.  ``HostConf(scenario=None)`` runs the probe on real NVML (no driver here: state
"no GPU/driver").  ``cluster.probe_processes(name)`` lists the python processes running
on a host (psutil), ``cluster.stop(daemon)`` / ``start(daemon)`` take a host down and up.

Root needs /run/sshd (privilege separation directory) and StrictModes off because the
keys live under /tmp; both are handled here. When sshd cannot run, the fixtures skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
SYSTEM_PYTHON = "/usr/bin/python3"
REPO = Path(__file__).resolve().parent.parent
SMI_FIXTURES = REPO / "tests" / "fixtures" / "nvidia-smi"


def sshd_unavailable() -> str | None:
    """Why sshd cannot run here, or None when it can."""
    if not os.path.exists(SSHD):
        return f"{SSHD} not installed (apt-get install openssh-server)"
    if not os.path.exists(SSH_KEYGEN):
        return "ssh-keygen not installed"
    if not os.path.exists(SYSTEM_PYTHON):
        return f"{SYSTEM_PYTHON} missing (the fake remote hosts run it)"
    # As a normal user sshd can only log in as that same user; it works but the
    # privilege-separation directory must exist already.
    if os.geteuid() != 0 and not os.path.isdir("/run/sshd"):
        return "/run/sshd missing and not root"
    return None


def _yaml_dir(tmp: Path) -> Path:
    """A PYTHONPATH directory with pyyaml only: no gputop, no pynvml on the 'remote'."""
    import yaml

    target = tmp / "pylib"
    target.mkdir(exist_ok=True)
    link = target / "yaml"
    if not link.exists():
        link.symlink_to(Path(yaml.__file__).parent)
    return target


@dataclass
class HostConf:
    """What one fake host looks like."""

    name: str
    scenario: str | None = "dgx-h100"  # GPUTOP_PROBE_SIM on the host; None: real NVML
    python: str | None = SYSTEM_PYTHON  # None: no python3 on the host (nvidia-smi fallback)
    trusted: bool = True  # host key in the client's known_hosts
    changed_key: bool = False  # known_hosts holds a different key for it
    env: dict[str, str] = field(default_factory=dict)  # extra SetEnv on the host
    labels: tuple[str, ...] = ()
    # for python=None hosts: which recorded capture (tests/fixtures/nvidia-smi/) to replay
    smi_capture: str = "capture-h100-80gb-hbm3-590.txt"
    # set: an "old driver" whose --query-gpu rejects a field; `nvidia-smi -q -x` replays this
    smi_xml: str | None = None
    # "cmd": the host answers as OpenSSH for Windows with cmd.exe does (see _FAKE_CMD)
    shell: str = "sh"
    # a login shell that prints before any command runs, as cluster logins do: a real
    # bash under a locale that is not installed (its "setlocale" warning on stderr) whose
    # ~/.bashrc echoes a greeting on stdout (see _NOISY_RC)
    noisy_login: bool = False
    # for python=None hosts: what the fake nvidia-smi prints before each reply (its own
    # warnings, "Unable to determine the device handle ..." lines) and the exit status
    # it then gives instead of the capture's
    smi_says: str = ""
    smi_exit: int | None = None


@dataclass
class SshHost:
    conf: HostConf
    address: str
    port: int
    daemon: int  # index into SshdCluster.daemons
    bin_dir: Path

    @property
    def name(self) -> str:
        return self.conf.name


@dataclass
class _Daemon:
    index: int
    config: Path
    log: Path
    hosts: list[SshHost]
    proc: subprocess.Popen[bytes] | None = None


class SshdCluster:
    """N fake hosts behind real sshd processes; a context manager that cleans up."""

    def __init__(
        self,
        tmp: Path,
        hosts: list[HostConf],
        *,
        per_daemon: int = 1,
        first_address: int = 2,
        user: str | None = None,
        max_startups: str = "200:30:400",
    ) -> None:
        reason = sshd_unavailable()
        if reason:
            pytest.skip(reason)
        self.tmp = Path(tmp)
        self.user = user or _current_user()
        self.max_startups = max_startups
        self.daemons: list[_Daemon] = []
        self.hosts: list[SshHost] = []
        self._first_address = first_address
        self._per_daemon = max(1, per_daemon)
        self._confs = hosts
        self.key = self.tmp / "id_ed25519"
        self.known_hosts = self.tmp / "known_hosts"
        self.ssh_config = self.tmp / "ssh_config"
        self.authorized_keys = self.tmp / "authorized_keys"
        self.host_key = self.tmp / "ssh_host_ed25519_key"
        self.other_host_key = self.tmp / "other_host_ed25519_key"
        self._setup()

    # -- building -----------------------------------------------------------------

    def _setup(self) -> None:
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        for path in (self.key, self.host_key, self.other_host_key):
            if not path.exists():
                subprocess.run(
                    [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "gputop-test",
                     "-f", str(path)],
                    check=True,
                )
        shutil.copyfile(f"{self.key}.pub", self.authorized_keys)
        pylib = _yaml_dir(self.tmp)
        for start in range(0, len(self._confs), self._per_daemon):
            confs = self._confs[start : start + self._per_daemon]
            index = len(self.daemons)
            addresses = [f"127.0.0.{self._first_address + start + i}" for i in range(len(confs))]
            port = _free_port(addresses)
            daemon = _Daemon(
                index,
                self.tmp / f"sshd_config.{index}",
                self.tmp / f"sshd.{index}.log",
                [],
            )
            for conf, address in zip(confs, addresses, strict=True):
                bin_dir = self._make_bin(conf)
                host = SshHost(conf, address, port, index, bin_dir)
                daemon.hosts.append(host)
                self.hosts.append(host)
            daemon.config.write_text(self._sshd_config(daemon, pylib))
            self.daemons.append(daemon)
        self._write_known_hosts()
        self._write_ssh_config()

    def _make_bin(self, conf: HostConf) -> Path:
        """The host's PATH: python3 (or not) and, without python, a fake nvidia-smi."""
        bin_dir = self.tmp / "hosts" / _safe(conf.name) / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        if conf.python:
            _relink(bin_dir / "python3", conf.python)
        else:
            for tool in ("ps", "cat", "sh", "echo", "true", "grep", "sed"):
                real = shutil.which(tool, path="/usr/bin:/bin")
                if real:
                    _relink(bin_dir / tool, real)
            capture = (SMI_FIXTURES / conf.smi_capture).read_text()
            replies: dict[str, Path] = {}
            for key, title in _SMI_SECTIONS.items():
                with contextlib.suppress(KeyError):
                    replies[key] = bin_dir.parent / f"{key}.txt"
                    replies[key].write_text(capture_section(capture, title))
            replies = {k: v for k, v in replies.items() if v.exists()}
            xml = SMI_FIXTURES / conf.smi_xml if conf.smi_xml else None
            says = bin_dir.parent / "says.txt"
            says.write_text(conf.smi_says)
            smi = bin_dir / "nvidia-smi"
            smi.write_text(_fake_smi_script(replies, xml, says, conf.smi_exit))
            smi.chmod(0o755)
        if conf.shell == "cmd":
            (bin_dir.parent / "cmd.sh").write_text(_FAKE_CMD)
        if conf.noisy_login:
            (bin_dir.parent / ".bashrc").write_text(_NOISY_RC)
        return bin_dir

    def _sshd_config(self, daemon: _Daemon, pylib: Path) -> str:
        lines = [f"ListenAddress {h.address}:{h.port}" for h in daemon.hosts]
        lines += [
            f"HostKey {self.host_key}",
            "PidFile none",
            "UsePAM no",
            "StrictModes no",
            "PermitRootLogin yes",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            f"AuthorizedKeysFile {self.authorized_keys}",
            # The bench opens 64 handshakes at once; the default 10:30:100 drops some.
            f"MaxStartups {self.max_startups}",
            "MaxSessions 50",
            "LogLevel VERBOSE",
            "PrintMotd no",
            "PrintLastLog no",
            "UseDNS no",
            "ClientAliveInterval 0",
        ]
        for host in daemon.hosts:
            path = str(host.bin_dir) + ("" if host.conf.python is None else ":/usr/bin:/bin")
            env: dict[str, str] = {}
            if host.conf.python:
                env["PYTHONPATH"] = str(pylib)
            if host.conf.scenario:
                env["GPUTOP_PROBE_SIM"] = host.conf.scenario
            env.update(host.conf.env)
            lines.append(f"Match LocalAddress {host.address}")
            if env:
                lines.append("    SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()))
            # The login shell's rc files (root's .bashrc puts pyenv shims first) would
            # decide which python3 runs; the host's PATH is set after them instead.
            if host.conf.shell == "cmd":
                cmd = host.bin_dir.parent / "cmd.sh"
                lines.append(f"    ForceCommand exec /usr/bin/env PATH={path} /bin/sh {cmd}")
                continue
            if host.conf.noisy_login:
                # bash run by sshd reads ~/.bashrc: the host's own, in its own HOME
                home = host.bin_dir.parent
                lines.append(f"    ForceCommand exec /usr/bin/env PATH={path} LC_ALL={_NO_LOCALE}"
                             f' HOME={home} /bin/bash -c "$SSH_ORIGINAL_COMMAND"')
                continue
            lines.append(
                f'    ForceCommand exec /usr/bin/env PATH={path} /bin/sh -c "$SSH_ORIGINAL_COMMAND"'
            )
        return "\n".join(lines) + "\n"

    def _write_known_hosts(self) -> None:
        good = _pub(self.host_key)
        other = _pub(self.other_host_key)
        lines = []
        for host in self.hosts:
            if not host.conf.trusted:
                continue
            key = other if host.conf.changed_key else good
            lines.append(f"[{host.address}]:{host.port} {key}")
        self.known_hosts.write_text("\n".join(lines) + "\n")

    def _write_ssh_config(self) -> None:
        blocks = []
        for host in self.hosts:
            blocks.append(
                f"Host {host.name}\n"
                f"    HostName {host.address}\n"
                f"    Port {host.port}\n"
                f"    User {self.user}\n"
                f"    IdentityFile {self.key}\n"
                f"    IdentitiesOnly yes\n"
                f"    UserKnownHostsFile {self.known_hosts}\n"
            )
        self.ssh_config.write_text("\n".join(blocks))

    # -- running ------------------------------------------------------------------

    def start(self, daemon: int | None = None) -> None:
        targets = self.daemons if daemon is None else [self.daemons[daemon]]
        for d in targets:
            if d.proc is not None and d.proc.poll() is None:
                continue
            log = open(d.log, "ab")  # noqa: SIM115 - sshd writes it for its whole life
            d.proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(d.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
            log.close()
        for d in targets:
            for host in d.hosts:
                _wait_listening(host.address, host.port, d)

    def stop(self, daemon: int | None = None, *, sessions: bool = True) -> None:
        """Stop sshd; with ``sessions`` also every session it started (a host going down)."""
        targets = self.daemons if daemon is None else [self.daemons[daemon]]
        for d in targets:
            if d.proc is None:
                continue
            if sessions:
                for proc in self.processes(d.index):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(proc.pid, signal.SIGKILL)
            if d.proc.poll() is None:
                d.proc.terminate()
                try:
                    d.proc.wait(5)
                except subprocess.TimeoutExpired:
                    d.proc.kill()
                    d.proc.wait(5)
            d.proc = None

    def host(self, name: str) -> SshHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def daemon_of(self, name: str) -> int:
        return self.host(name).daemon

    def processes(self, daemon: int) -> list[Any]:
        """Every process below one sshd: its sessions, shells and probes (psutil objects)."""
        import psutil

        d = self.daemons[daemon]
        if d.proc is None:
            return []
        try:
            return psutil.Process(d.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def probe_processes(self, name: str) -> list[Any]:
        """Python processes running on one host (the probes), as psutil objects."""
        import psutil

        found = []
        for proc in self.processes(self.daemon_of(name)):
            with contextlib.suppress(psutil.Error):
                if "python" in proc.name() or "gputop" in " ".join(proc.cmdline()):
                    found.append(proc)
        return found

    def connection_count(self, daemon: int) -> int:
        """How many TCP connections this sshd has accepted (from its VERBOSE log)."""
        text = self.daemons[daemon].log.read_text(errors="replace")
        return text.count("Connection from ")

    def log_text(self, daemon: int) -> str:
        return self.daemons[daemon].log.read_text(errors="replace")

    # -- what clients use ---------------------------------------------------------

    def spec_kwargs(self, host: SshHost, **overrides: Any) -> dict[str, Any]:
        """Keyword arguments for gputop.hosts.HostSpec that reach this host directly."""
        kwargs: dict[str, Any] = {
            "name": host.name,
            "hostname": host.address,
            "port": host.port,
            "user": self.user,
            "identity_file": str(self.key),
            "known_hosts": (str(self.known_hosts),),
            "ssh_config": None,
            "labels": host.conf.labels,
        }
        kwargs.update(overrides)
        return kwargs

    def specs(self, names: list[str] | None = None, **overrides: Any) -> list[Any]:
        """gputop.hosts.HostSpec objects for (some of) the hosts."""
        from gputop.hosts import HostSpec

        chosen = self.hosts if names is None else [self.host(n) for n in names]
        return [HostSpec(**self.spec_kwargs(h, **overrides)) for h in chosen]

    def hosts_yaml(self, path: Path | None = None, names: list[str] | None = None) -> Path:
        """A hosts file for `gputop --hosts`, with keys and known_hosts set in defaults."""
        path = path or self.tmp / "hosts.yaml"
        chosen = self.hosts if names is None else [self.host(n) for n in names]
        lines = [
            "defaults:",
            f"  user: {_yaml_str(self.user)}",
            f"  identity_file: {_yaml_str(str(self.key))}",
            f"  known_hosts: {_yaml_str(str(self.known_hosts))}",
            "hosts:",
        ]
        for h in chosen:
            lines += [
                f"  - name: {_yaml_str(h.name)}",
                f"    hostname: {h.address}",
                f"    port: {h.port}",
            ]
            if h.conf.labels:
                lines.append(f"    labels: [{', '.join(_yaml_str(x) for x in h.conf.labels)}]")
        path.write_text("\n".join(lines) + "\n")
        return path

    def env(self) -> dict[str, str]:
        """Environment for a gputop subprocess: HOME in the tmp dir with our ssh config."""
        home = self.tmp / "home"
        (home / ".ssh").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.ssh_config, home / ".ssh" / "config")
        shutil.copyfile(self.known_hosts, home / ".ssh" / "known_hosts")
        env = dict(os.environ)
        env["HOME"] = str(home)
        env.pop("GPUTOP_HOSTS", None)
        return env

    def close(self) -> None:
        self.stop()

    def __enter__(self) -> SshdCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Blackhole:
    """A TCP listener that accepts connections and never says a word (a hung host)."""

    def __init__(self, address: str = "127.0.0.250") -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()

    def __enter__(self) -> Blackhole:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


DEFAULT_HOSTS = [
    HostConf("gpu-a", scenario="dgx-h100", labels=("h100", "train")),
    HostConf("gpu-b", scenario="lab", labels=("lab",)),
    HostConf("gpu-c", scenario="faulty", labels=("lab", "broken")),
]


@pytest.fixture(scope="session")
def sshd_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    """Three loopback hosts gpu-a/b/c with simulated GPUs; shared by the whole session.

    Do not stop its daemons in a test (build your own SshdCluster for that).
    """
    confs = [_scenario_fallback(c) for c in DEFAULT_HOSTS]
    with SshdCluster(tmp_path_factory.mktemp("sshd"), confs) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def sshd_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Build more clusters: ``sshd_factory([HostConf(...), ...], per_daemon=1)``."""
    made: list[SshdCluster] = []

    def make(confs: list[HostConf], **kwargs: Any) -> SshdCluster:
        cluster = SshdCluster(tmp_path_factory.mktemp("sshd"), confs, **kwargs)
        made.append(cluster)
        cluster.start()
        return cluster

    yield make
    for cluster in made:
        cluster.close()


# -- helpers ------------------------------------------------------------------------


def _scenario_fallback(conf: HostConf) -> HostConf:
    """Use an existing sim scenario when the wished-for one is not written (yet)."""
    try:
        from gputop.sources import sim
    except ImportError:
        return conf
    try:
        names = [name for name, _description in sim.list_scenarios()]
    except Exception:
        return conf
    if conf.scenario is None or conf.scenario in names or not names:
        return conf
    return HostConf(**{**conf.__dict__, "scenario": names[0]})


def _current_user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "host"


def _relink(link: Path, target: str) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def _pub(key: Path) -> str:
    text = Path(f"{key}.pub").read_text().split()
    return f"{text[0]} {text[1]}"


def _yaml_str(text: str) -> str:
    import json

    return json.dumps(text)  # JSON strings are YAML strings


def _free_port(addresses: list[str]) -> int:
    """A port free on every one of the addresses."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((addresses[0], 0))
            port = probe.getsockname()[1]
        ok = True
        for address in addresses[1:]:
            with socket.socket() as s:
                try:
                    s.bind((address, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RuntimeError("no free port")


def _wait_listening(address: str, port: int, daemon: _Daemon, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.proc is not None and daemon.proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {daemon.log.read_text(errors='replace')[-2000:]}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((address, port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"sshd not listening on {address}:{port}")


def capture_section(text: str, title: str) -> str:
    """One command's output from a capture file (the lines after its '# title' banner)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# ") and line[2:].strip().startswith(title):
            body = []
            j = i + 1
            while j < len(lines) and lines[j].startswith("#"):  # the "$ command" and rule
                j += 1
            while j < len(lines) and not lines[j].startswith("####"):
                body.append(lines[j])
                j += 1
            return "\n".join(body).strip("\n") + "\n"
    raise KeyError(title)


# What the fake nvidia-smi replays for each command, from a capture file's sections.
_SMI_SECTIONS = {
    "query-gpu": "load :: query-gpu",
    "query-compute-apps": "load :: query-compute-apps",
    "list": "capabilities :: list (-L)",
    "topo": "capabilities :: topo -m",
    "nvlink": "capabilities :: nvlink -s",
    "table": "load :: nvidia-smi (default table)",
    "query": "load :: query (-q)",
}


def _fake_smi_script(replies: dict[str, Path], xml: Path | None = None,
                     says: Path | None = None, exit_status: int | None = None) -> str:
    """nvidia-smi that replays recorded output, whatever fields are asked for.

    With ``xml`` it plays an older driver: --query-gpu fails the way nvidia-smi does for
    a field it does not know, and ``-q -x`` prints the XML capture.  A capture's
    "# (exit code: N)" line (a command that failed when it was recorded) is its exit
    status here.  ``says`` is printed before each reply, and ``exit_status`` replaces the
    capture's.
    """
    prefix = f"cat '{says}'; " if says is not None else ""
    forced = "" if exit_status is None else f"code={exit_status}; "

    def play(key: str) -> str:
        path = replies.get(key)
        if path is None:
            return "echo 'nvidia-smi (fake): nothing recorded' >&2; exit 2"
        return (f"{prefix}grep -v '^# (exit code:' '{path}'; "
                f"code=$(sed -n 's/^# (exit code: \\([0-9]*\\)).*/\\1/p' '{path}'); "
                f'{forced}exit "${{code:-0}}"')

    if xml is None:
        query_gpu = play("query-gpu")
    else:
        query_gpu = "echo 'Field \"clocks.max.sm\" is not a valid field to query.'; exit 2"
    return (
        "#!/bin/sh\n"
        "# Replays a recorded capture; which table depends on the query asked for.\n"
        f'[ "$#" = 0 ] && {{ {play("table")}; }}\n'
        # `-q -x` is the XML document (an "old driver" host), `-q [-d ...]` the text
        + (f"case \" $* \" in *' -x '*) exec /bin/cat '{xml}' ;; esac\n" if xml is not None
           else "")
        + f"case \" $* \" in *' -q '*) {play('query')} ;; esac\n"
        'for arg in "$@"; do\n'
        "  case \"$arg\" in\n"
        f"    --query-gpu=*) {query_gpu} ;;\n"
        f"    --query-compute-apps=*) {play('query-compute-apps')} ;;\n"
        f"    -L) {play('list')} ;;\n"
        f"    topo) {play('topo')} ;;\n"
        f"    nvlink) {play('nvlink')} ;;\n"
        "  esac\n"
        "done\n"
        "echo 'nvidia-smi (fake): unsupported arguments' >&2\n"
        "exit 2\n"
    )


# A login shell that answers as cmd.exe does under OpenSSH for Windows: a command line
# that starts with nvidia-smi runs it (split into words as the program's C runtime
# splits cmd.exe's line: at spaces, double quotes removed; no globbing); a command line
# that starts with anything else, such as the probe's `exec python3 ...` or `exec sh -c`,
# is a command cmd.exe does not know: its message on stderr and exit status 1.
_FAKE_CMD = r"""set -f
case "$SSH_ORIGINAL_COMMAND" in
  nvidia-smi|"nvidia-smi "*) eval "set -- $SSH_ORIGINAL_COMMAND"; exec "$@" ;;
esac
word=${SSH_ORIGINAL_COMMAND%% *}
printf "'%s' is not recognized as an internal or external command,
" "$word" >&2
printf 'operable program or batch file.
' >&2
exit 1
"""


# A locale no test machine has installed: bash warns on stderr that it cannot set it, as
# on a login node whose users' LC_ALL (sent by their ssh client) is not installed there.
_NO_LOCALE = "de_DE.UTF-8"
# A ~/.bashrc that greets on stdout, as many a cluster's does (bash started by sshd reads
# it even for a command: Debian's bash is built with SSH_SOURCE_BASHRC).
_NOISY_RC = """echo "Welcome to the cluster login node. Quota: 12.1 GB of 50 GB used."
"""


if __name__ == "__main__":  # manual check: python tests/sshd.py
    import tempfile

    with tempfile.TemporaryDirectory() as d, SshdCluster(Path(d), DEFAULT_HOSTS) as c:
        for h in c.hosts:
            print(h.name, h.address, h.port)
        print(c.ssh_config.read_text())
        sys.stdout.flush()
        subprocess.run(["ssh", "-F", str(c.ssh_config), c.hosts[0].name, "env"], check=False)


async def collect_round(specs: list[Any], timeout: float = 10.0) -> list[Any]:
    """Each host's first answer, as a one-shot command collects it (no retries)."""
    from gputop.sources.oneshot import first_round
    from gputop.sources.ssh import SshFeed

    snapshots, _who = await first_round([SshFeed(specs, retry=False, warmup=0.2)], timeout)
    return snapshots
