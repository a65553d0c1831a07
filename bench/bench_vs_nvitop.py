"""gputop next to nvitop on the same simulated GPUs: run by hand, prints a table.

Both tools load gputop's fake driver (tests/fakenvml), so both go through the real pynvml
ctypes path against the same GPUs and the same real processes.  By default every row is
measured twice: on live GPUs (dgx8 with its values on 20-60 s waveforms, bench/livegpus.py;
both tools see the same values at the same moment), as real GPUs change every sample, then
on static ones (every read the same) as a second column; ``--values live`` for the first.
nvitop lives in its own virtual environment, never in gputop's dependencies:

    python bench/bench_vs_nvitop.py --setup          # builds the fake driver, makes the venv
    python bench/bench_vs_nvitop.py                  # every row of issue 27's table (~15 min)
    python bench/bench_vs_nvitop.py --tui-seconds 20 --long-uptime 60 --runs 5  # quicker
    python bench/bench_vs_nvitop.py --tree /other/checkout   # that checkout's gputop

Every row runs the two tools interleaved (gputop, nvitop, gputop, ...): ``--runs`` pairs
for the one-shot rows, ``--tui-runs`` for the dashboards.  A row prints both medians and
the ratio gputop/nvitop of each pair as min / median / max, and the load average it ran
under.  CPU is the child's user+system time (rusage, /proc), never wall time, except the
first frames, wall time from the start to the first frame showing the processes (gputop:
its start-up skeleton) and to gputop's complete dashboard (its GPU panels drawn).

Each tool runs as pip installed it: nvitop 1.7.2 in BENCH_VENV (default .venv-nvitop here,
made by `--setup`), gputop from ``--tree`` in build/bench-gputop-venv (bench/compiled.py:
not editable, byte-compiled, reinstalled at every start of this script).
The fake driver is built into build/fakenvml/ when missing.  Without nvitop it says so and
exits 0: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pty
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from helpers import fakenvml  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from compiled import installed  # noqa: E402
from livegpus import live  # noqa: E402

BENCH_VENV = Path(os.environ.get("BENCH_VENV", ROOT / ".venv-nvitop"))
NVITOP_VERSION = "1.7.2"
COLS, ROWS = 200, 50
# Shown by gputop's GPU panels, never by its start-up skeleton: the complete dashboard.
GPUTOP_PANELS = b"UTIL"
TICK = os.sysconf("SC_CLK_TCK")


def nvitop() -> list[str]:
    return [str(BENCH_VENV / "bin" / "nvitop")]


def minimal(gputop: list[str]) -> list[str]:
    """bench/minimal_app.py with the installed gputop's interpreter (its Textual, pynvml)."""
    return [str(Path(gputop[0]).with_name("python")), str(ROOT / "bench" / "minimal_app.py")]


def profiled(gputop: list[str], name: str) -> list[str]:
    """gputop's TUI command; with BENCH_PROFILE=DIR, under bench/profiled.py (cProfile of
    every thread) writing DIR/NAME.prof: where a row's CPU goes, not the row's figure."""
    out = os.environ.get("BENCH_PROFILE")
    if not out:
        return gputop
    Path(out).mkdir(parents=True, exist_ok=True)
    return [str(Path(gputop[0]).with_name("python")), str(ROOT / "bench" / "profiled.py"),
            str(Path(out).resolve() / f"{name}.prof")]


def setup() -> None:
    fakenvml.library_dir()
    if not (BENCH_VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    subprocess.run([str(BENCH_VENV / "bin" / "pip"), "install", "-q",
                    f"nvitop=={NVITOP_VERSION}"], check=True)


@contextlib.contextmanager
def fake_gpus(scenario: dict[str, Any], moving: bool = False) -> Iterator[dict[str, str]]:
    """The tools' environment on ``scenario``, its processes real (sleeping) ones;
    ``moving``: its values on waveforms (bench/livegpus.py)."""
    with tempfile.TemporaryDirectory() as tmp, fakenvml.processes(scenario) as filled:
        machine = live(filled) if moving else filled
        env = fakenvml.environment(fakenvml.write_scenario(Path(tmp) / "scenario", machine))
        env.pop("PYTHONPATH", None)  # the installed gputop, never the checkout beside it
        env.pop("GPUTOP_HOSTS", None)
        yield env


@contextlib.contextmanager
def host_processes(count: int) -> Iterator[list[int]]:
    """``count`` sleeping processes: a busy host's /proc, not on any GPU; their pids."""
    procs = [subprocess.Popen(["sleep", "3600"]) for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def crowded(gpus: int, per_gpu: int, pids: list[int]) -> dict[str, Any]:
    """``gpus`` busy H100s with ``per_gpu`` processes each, their pids cycled over ``pids``."""
    return {"devices": [
        {"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "util_gpu": 90,
         "processes": [{"pid": pids[(g * per_gpu + i) % len(pids)], "used_mib": 150,
                        "sm_util": 20} for i in range(per_gpu)]}
        for g in range(gpus)]}


def once_cpu(cmd: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + system) of one run of ``cmd``, from its own rusage."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-500:]}")
    proc.stderr.close()
    return usage.ru_utime + usage.ru_stime


def nvml_calls(cmd: list[str], env: dict[str, str]) -> int:
    with tempfile.NamedTemporaryFile() as trace:
        subprocess.run(cmd, env=dict(env, FAKENVML_TRACE=trace.name),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        with open(trace.name) as lines:
            return sum(1 for line in lines if line.startswith("nvml"))


def _lines(path: str) -> int:
    with open(path) as f:
        return sum(1 for _ in f)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def tui(cmd: list[str], env: dict[str, str], warmup: float, seconds: float,
        trace: bool = False, marker: bytes | None = None,
        full_marker: bytes | None = None, keep: bytearray | None = None) -> dict[str, float]:
    """Run a TUI in a 200x50 pty: CPU ms/s, terminal KiB/s, RSS after, NVML calls/s, and
    with ``marker`` the seconds until the output first showed it (the first frame with
    the processes: gputop's start-up skeleton, or a dashboard), with ``full_marker``
    until that showed too (gputop's complete dashboard: its GPU panels).  ``keep``: gets
    the bytes written in the measured seconds (bench_bytes.py reads where they go)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    env = dict(env, TERM="xterm-256color", COLUMNS=str(COLS), LINES=str(ROWS))
    trace_dir = tempfile.mkdtemp()
    trace_path = os.path.join(trace_dir, "trace") if trace else None
    if trace_path is not None:
        env["FAKENVML_TRACE"] = trace_path
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    calls_at = 0
    seen = bytearray()
    first_frame = full_frame = float("nan")

    def drain(until: float, into: bytearray | None = None) -> int:
        nonlocal first_frame, full_frame
        got = 0
        while (left := until - time.monotonic()) > 0:
            ready, _, _ = select.select([master], [], [], left)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                got += len(chunk)
                if into is not None:
                    into.extend(chunk)
                waiting = [m for m, t in ((marker, first_frame), (full_marker, full_frame))
                           if m is not None and t != t]  # still NaN
                if waiting:
                    seen.extend(chunk)
                    shown = _plain(bytes(seen))
                    if marker is not None and first_frame != first_frame and marker in shown:
                        first_frame = time.monotonic() - started
                    if full_marker is not None and full_frame != full_frame and (
                            full_marker in shown and first_frame == first_frame):
                        full_frame = time.monotonic() - started
        return got

    try:
        drain(time.monotonic() + warmup)
        cpu0 = _cpu_s(proc.pid)
        if trace_path is not None:
            calls_at = _lines(trace_path)
        counted = drain(time.monotonic() + seconds, keep)
        cpu1 = _cpu_s(proc.pid)
        rss = _rss_mib(proc.pid)
        calls = (_lines(trace_path) - calls_at) if trace_path else 0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
        shutil.rmtree(trace_dir, ignore_errors=True)
    return {"cpu": 1000 * (cpu1 - cpu0) / seconds, "kib": counted / 1024 / seconds,
            "rss": rss, "calls": calls / seconds, "first": first_frame, "full": full_frame}


def _plain(data: bytes) -> bytes:
    """Terminal output without its escape sequences: what the screen shows, in order."""
    import re

    return re.sub(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]", b"", data)


class Row:
    """One measure: pairs of (gputop, nvitop) values, printed as medians and ratios."""

    def __init__(self, name: str, unit: str, goal: str, scale: float = 1.0,
                 digits: int = 1) -> None:
        self.name, self.unit, self.goal, self.scale, self.digits = (
            name, unit, goal, scale, digits)
        self.pairs: list[tuple[float, float]] = []
        self.loads: list[float] = []

    def add(self, ours: float, theirs: float) -> None:
        self.pairs.append((ours * self.scale, theirs * self.scale))
        self.loads.append(os.getloadavg()[0])

    def cells(self) -> str:
        """gputop's median | nvitop's median | the ratio, median (min-max) of pairs."""
        ours = statistics.median(p[0] for p in self.pairs)
        theirs = statistics.median(p[1] for p in self.pairs)
        ratios = sorted(a / b for a, b in self.pairs if b)
        if not ratios:
            ratio = "n/a"
        elif len(ratios) == 1:
            ratio = f"{ratios[0]:.2f}"
        else:
            ratio = (f"{statistics.median(ratios):.2f} "
                     f"({ratios[0]:.2f}-{ratios[-1]:.2f})")
        unit = f" {self.unit}" if self.unit else ""
        return (f"{ours:,.{self.digits}f}{unit} | {theirs:,.{self.digits}f}{unit} | {ratio}")

    @staticmethod
    def joined(same: tuple[Row, ...]) -> str:
        """One table line: a measure's cells on each machine (live, static)."""
        loads = [load for r in same for load in r.loads]
        load = f"{statistics.median(loads):.1f}" if loads else "n/a"
        cells = " | ".join(r.cells() for r in same)
        return (f"| {same[0].name} | {cells} | {same[0].goal} | {len(same[0].pairs)} | "
                f"{load} |")


def measure(args: argparse.Namespace, gputop: list[str], moving: bool) -> list[Row]:
    """Every row, both tools interleaved, on the dgx8 machine: live (its values on
    waveforms, bench/livegpus.py) or static (every read the same)."""
    rows: list[Row] = []

    def row(*a: Any, **k: Any) -> Row:
        rows.append(Row(*a, **k))
        return rows[-1]

    template = fakenvml.template("dgx8")
    with fake_gpus(template, moving) as env:
        marker = str(template["devices"][-1]["processes"][-1]["pid"]).encode()
        once = row("`--once` CPU, quiet host, bytecode cached", "s", "<= 0.5", digits=3)
        calls = row("NVML calls, `--once`", "", "<= 1.0", digits=0)
        json_calls = row("NVML calls, `--json` (nvitop: `-1`)", "", "<= 1.0", digits=0)
        once_cpu([*gputop, "--once"], env)  # bytecode and page cache warm
        once_cpu([*nvitop(), "-1"], env)
        for _ in range(args.runs):
            once.add(once_cpu([*gputop, "--once"], env), once_cpu([*nvitop(), "-1"], env))
        calls.add(nvml_calls([*gputop, "--once"], env), nvml_calls([*nvitop(), "-1"], env))
        json_calls.add(nvml_calls([*gputop, "--json"], env),
                       nvml_calls([*nvitop(), "-1"], env))
        with host_processes(args.host_procs):
            busy = row(f"`--json` CPU, {args.host_procs:,} other processes (nvitop: `-1`)",
                       "s", "<= 1.0", digits=3)
            for _ in range(args.runs):
                busy.add(once_cpu([*gputop, "--json"], env),
                         once_cpu([*nvitop(), "-1"], env))
        first = row("first frame with the processes (wall)", "s", "<= 1.5", digits=2)
        full = row("first complete dashboard frame (wall; nvitop: its first frame)", "s", "",
                   digits=2)
        cpu1 = row("TUI CPU, 1 s refresh", "ms/s", "<= 0.8")
        kib1 = row("bytes to the terminal, 1 s refresh", "KiB/s", "<= 1.0")
        rss = row(f"RSS after {args.warmup + args.tui_seconds:g} s", "MiB", "")
        # The floor (issue 42.4): a minimal Textual app with pynvml, in nvitop's column
        floor = row(f"RSS after {args.warmup + args.tui_seconds:g} s, gputop - a minimal "
                    "Textual app with pynvml (bench/minimal_app.py) in nvitop's columns",
                    "MiB", "<= 4 MiB more")
        tcalls = row("NVML calls per second, TUI 1 s", "", "<= 1.0", digits=0)
        for _ in range(args.tui_runs):
            g = tui([*profiled(gputop, "tui-1s"), "--interval", "1"], env, args.warmup,
                    args.tui_seconds, trace=True, marker=marker, full_marker=GPUTOP_PANELS)
            n = tui([*nvitop(), "--interval", "1"], env, args.warmup, args.tui_seconds,
                    trace=True, marker=marker)
            first.add(g["first"], n["first"])
            full.add(g["full"], n["first"])
            cpu1.add(g["cpu"], n["cpu"])
            kib1.add(g["kib"], n["kib"])
            rss.add(g["rss"], n["rss"])
            tcalls.add(g["calls"], n["calls"])
            m = tui([*minimal(gputop), "--interval", "1"], env, args.warmup, args.tui_seconds)
            floor.add(g["rss"], m["rss"])
        for _ in range(args.frame_runs):  # the first frames alone: more pairs, cheaply
            g = tui([*gputop, "--interval", "1"], env, 5.0, 0.1, marker=marker,
                    full_marker=GPUTOP_PANELS)
            n = tui([*nvitop(), "--interval", "1"], env, 5.0, 0.1, marker=marker)
            first.add(g["first"], n["first"])
            full.add(g["full"], n["first"])
        fast = row(f"TUI CPU, 0.25 s refresh, {args.long_uptime:g} s uptime", "ms/s",
                   "<= 1.0")
        kib4 = row("bytes to the terminal, 0.25 s refresh", "KiB/refresh", "<= 2",
                   scale=0.25)
        for _ in range(args.tui_runs):
            g = tui([*profiled(gputop, "tui-0.25s"), "--interval", "0.25"], env,
                    args.long_uptime, args.tui_seconds)
            n = tui([*nvitop(), "--interval", "0.25"], env, args.long_uptime,
                    args.tui_seconds)
            fast.add(g["cpu"], n["cpu"])
            kib4.add(g["kib"], n["kib"])
    if not args.skip_big:
        with host_processes(256) as pids, fake_gpus(crowded(8, 500, pids), moving) as env:
            big = row("TUI CPU, 8 GPUs x 500 processes", "ms/s", "<= 0.3")
            for _ in range(args.tui_runs):
                g = tui([*profiled(gputop, "tui-8x500"), "--interval", "1"], env, args.warmup,
                        args.tui_seconds)
                n = tui([*nvitop(), "--interval", "1"], env, args.warmup, args.tui_seconds)
                big.add(g["cpu"], n["cpu"])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setup", action="store_true", help="build the fake driver, install nvitop")
    ap.add_argument("--runs", type=int, default=7, help="one-shot pairs per row (7)")
    ap.add_argument("--tui-runs", type=int, default=1, help="dashboard pairs per row (1)")
    ap.add_argument("--frame-runs", type=int, default=0,
                    help="extra pairs of 5 s dashboard starts for the first-frame rows (0)")
    ap.add_argument("--tui-seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--long-uptime", type=float, default=150.0,
                    help="seconds of uptime before the 0.25 s refresh row is measured")
    ap.add_argument("--host-procs", type=int, default=4000)
    ap.add_argument("--skip-big", action="store_true", help="skip the 8x500 TUI case")
    ap.add_argument("--values", choices=("live", "static", "both"), default="both",
                    help="the GPUs' values: on waveforms (live, as real GPUs), every read "
                         "the same (static), or live then static as a second column (both)")
    ap.add_argument("--write-readme", action="store_true",
                    help="also put the table into README.md, between its bench_vs_nvitop marks")
    ap.add_argument("--one-shots", action="store_true",
                    help="only the one-shot rows (--once, --json, NVML calls): a minute")
    ap.add_argument("--tree", type=Path, default=ROOT,
                    help="the gputop checkout to measure (default: this one)")
    args = ap.parse_args()
    if args.one_shots and args.write_readme:
        ap.error("--one-shots makes part of the table: the README keeps the whole one")
    if args.setup:
        setup()
        return 0
    if not shutil.which(nvitop()[0]):
        print(f"needs nvitop in {BENCH_VENV}: run --setup")
        return 0
    if args.one_shots:
        args.tui_runs = args.frame_runs = 0
        args.skip_big = True
    source = str(args.tree.resolve())
    gputop = [str(installed(args.tree.resolve()))]
    kinds = ["live", "static"] if args.values == "both" else [args.values]
    columns = [measure(args, gputop, kind == "live") for kind in kinds]
    head = " | ".join(f"gputop {k} | nvitop {k} | ratio {k}, median (min-max)" for k in kinds)
    table = [
        f"gputop from {source} (pip-installed, not editable); nvitop {NVITOP_VERSION}; "
        f"{os.cpu_count()} CPUs; TUI {COLS}x{ROWS}, {args.warmup:g} s warm-up then "
        f"{args.tui_seconds:g} s measured; live: bench/livegpus.py's waveforms",
        f"| measure | {head} | goal | pairs | load |",
        "|---|" + "---|---|---|" * len(kinds) + "---|---|---|",
        *(Row.joined(same) for same in zip(*columns, strict=True) if same[0].pairs),
    ]
    print("\n".join(table))
    if args.write_readme:
        write_readme(table[1:], " ".join(sys.argv[1:]))
    return 0


README_MARKS = ("<!-- bench_vs_nvitop -->", "<!-- /bench_vs_nvitop -->")


def write_readme(table: list[str], arguments: str) -> None:
    """The README's table, between its marks, with the date and the command that made it
    (the prose around it is the README's own)."""
    readme = ROOT / "README.md"
    text = readme.read_text()
    start, end = (text.index(mark) for mark in README_MARKS)
    made = (f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPUs, load in the "
            f"last column: `python bench/bench_vs_nvitop.py {arguments}`.")
    block = "\n".join([README_MARKS[0], made, "", *table, README_MARKS[1]])
    readme.write_text(text[:start] + block + text[end + len(README_MARKS[1]):])


if __name__ == "__main__":
    sys.exit(main())
