"""Real processes for the kill and orphan tests: sleepers, TERM-ignorers, zombies, kernels.

Everything here starts an actual process and waits until /proc shows it in the wanted
state, so the tests look at the system the way gputop does.  Each helper returns what
the test needs to clean up; ``Reaper`` collects them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gputop.actions.kill import read_stat
from gputop.model import Gpu, GpuProcess, HostSnapshot
from gputop.sources.procfs import ProcFs

PYTHON = sys.executable
# Our virtualenv's interpreter lives under /root (mode 700); processes that run as another
# user need one they can execute.  The helpers only use the standard library.
SYSTEM_PYTHON = "/usr/bin/python3"
GIB = 1024**3

_SLEEPER = "import sys,time\nprint('ready', flush=True)\nwhile True: time.sleep(60)\n"
_TERM_IGNORER = (
    "import signal,sys,time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "while True: time.sleep(60)\n"
)
# Lives until stdin closes: an intermediate parent that the test can make exit at will.
_FAKE_SERVER = textwrap.dedent(
    """
    import subprocess, sys
    child = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL)
    print(child.pid, flush=True)
    sys.stdin.read()
    """
)
_FAKE_KERNEL_MODULE = textwrap.dedent(
    """
    # Looks like `python -m ipykernel_launcher -f kernel-x.json` to anyone reading /proc.
    import time
    while True:
        time.sleep(60)
    """
)


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def start_ticks(pid: int) -> int:
    info = read_stat(pid)
    assert info is not None, f"pid {pid} does not exist"
    return int(info["start_ticks"])


def state(pid: int) -> str | None:
    info = read_stat(pid)
    return None if info is None else str(info["state"])


def alive(pid: int) -> bool:
    """Running in any way but exited (a zombie has exited)."""
    return state(pid) not in (None, "Z", "X")


class Reaper:
    """Kills and reaps whatever a test started, also when the test fails."""

    def __init__(self) -> None:
        self.popens: list[subprocess.Popen[Any]] = []
        self.pids: list[int] = []

    def add(self, proc: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
        self.popens.append(proc)
        return proc

    def close(self) -> None:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for proc in self.popens:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(5)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(Exception):
                        stream.close()


def _python(
    reaper: Reaper, code: str, *args: str, user: int | None = None, **kwargs: Any
) -> subprocess.Popen[str]:
    python = PYTHON if user is None else SYSTEM_PYTHON
    proc = subprocess.Popen(
        [python, "-c", code, *args],
        stdout=subprocess.PIPE,
        text=True,
        user=user,
        cwd="/",
        **kwargs,
    )
    reaper.add(proc)
    return proc


def _ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", f"child did not start: {line!r}"


def start_sleeper(
    reaper: Reaper, user: int | None = None, args: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    """A plain sleeping process; ``args`` show up in its command line."""
    proc = _python(reaper, _SLEEPER, *args, user=user)
    _ready(proc)
    return proc


def start_term_ignorer(reaper: Reaper, user: int | None = None) -> subprocess.Popen[str]:
    """A process that ignores SIGTERM and SIGINT: only SIGKILL ends it."""
    proc = _python(reaper, _TERM_IGNORER, user=user)
    _ready(proc)
    return proc


def start_zombie(reaper: Reaper) -> subprocess.Popen[str]:
    """A child that exits at once and that we do not reap (until cleanup): state Z."""
    proc = subprocess.Popen([PYTHON, "-c", "pass"])
    reaper.add(proc)  # type: ignore[arg-type]
    wait_for(lambda: state(proc.pid) == "Z", what=f"pid {proc.pid} to become a zombie")
    return proc  # type: ignore[return-value]


@dataclass
class FakeKernel:
    pid: int
    connection_file: Path
    server: subprocess.Popen[str]  # its parent until ``orphan()``

    def orphan(self) -> None:
        """The notebook server dies: the kernel is re-parented (to init or a subreaper)."""
        assert self.server.stdin is not None
        self.server.stdin.close()
        self.server.wait(10)
        wait_for(
            lambda: (read_stat(self.pid) or {}).get("ppid") != self.server.pid,
            what="the kernel to be re-parented",
        )


def start_fake_kernel(reaper: Reaper, tmp: Path, server_name: str = "jupyter-lab") -> FakeKernel:
    """`python -m ipykernel_launcher -f TMP/kernel-x.json`, started by a fake server.

    The server is a python script named like Jupyter's (``server_name``), so its command
    line reads like a notebook server's.  It stays alive until ``FakeKernel.orphan()``.
    """
    pkg = tmp / "fakekernel"
    pkg.mkdir(exist_ok=True)
    (pkg / "ipykernel_launcher.py").write_text(_FAKE_KERNEL_MODULE)
    server_script = tmp / server_name
    server_script.write_text(_FAKE_SERVER)
    connection = tmp / "kernel-4f2a.json"
    connection.write_text('{"shell_port": 0, "transport": "tcp"}\n')
    env = dict(os.environ, PYTHONPATH=str(pkg))
    server = subprocess.Popen(
        [PYTHON, str(server_script), PYTHON, "-m", "ipykernel_launcher", "-f", str(connection)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(tmp),
    )
    reaper.add(server)
    assert server.stdout is not None
    pid = int(server.stdout.readline())
    reaper.pids.append(pid)
    wait_for(
        lambda: "ipykernel_launcher" in _cmdline(pid),
        what="the fake kernel to start",
    )
    return FakeKernel(pid, connection, server)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def snapshot_of(
    gpu_mem: dict[int, int],
    *,
    host: str = "testhost",
    time_: float | None = None,
    sm_util: dict[int, int] | None = None,
    extra: tuple[GpuProcess, ...] = (),
    procfs: ProcFs | None = None,
) -> HostSnapshot:
    """A snapshot whose GPU 0 processes are these real pids, with /proc facts read live.

    This is what the collector does (NVML gives pid + memory, ProcFs the rest), minus
    NVML: the GPU side is made up, the process side is real.
    """
    procfs = procfs or ProcFs()
    infos = procfs.process_info(list(gpu_mem))
    rows = []
    for pid, mem in gpu_mem.items():
        info = infos.get(pid)
        fields = {
            "pid": pid,
            "gpu": 0,
            "gpu_mem": mem,
            "sm_util": (sm_util or {}).get(pid, 0),
            "visible": info is not None,
        }
        if info is not None:
            fields.update(info)
        rows.append(GpuProcess.from_dict(fields))
    rows.extend(extra)
    used = sum(p.gpu_mem or 0 for p in rows if p.gpu == 0)
    gpu = Gpu(index=0, name="Test GPU", mem_used=used, mem_total=80 * GIB, util_gpu=0)
    return HostSnapshot(
        host=host,
        time=time.time() if time_ is None else time_,
        gpus=(gpu,),
        processes=tuple(rows),
    )
