"""Issue 25, point 9: a remote host whose python3 is not the probe (tests/helpers/
hostile_probe.py, over a real sshd on loopback).  `--once`, `--json` and the dashboard's
feed stay up, bounded in memory and time, and each such host shows a clear state.

Bounds are generous (a loaded 2-core machine): what matters is that a 100 MB line or an
endless stream does not make the client hold it or wait for it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sshd import HostConf, SshdCluster

from gputop import model
from gputop.model import HostSnapshot
from gputop.sources import untrusted
from gputop.sources.hostsource import open_simulation
from gputop.sources.ssh import SshFeed

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "helpers" / "hostile_probe.py"
MODES = ("endless", "flood", "bigline", "malformed", "wrongtypes", "numbers", "escapes",
         "procs", "manyprocs", "silent")
TIMEOUT = 8  # --timeout of the one-shot commands
MAX_RSS_MB = 400  # the client's peak; a 100 MB line held once would pass 200


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    tmp = tmp_path_factory.mktemp("hostile")
    confs = []
    for mode in MODES:
        python = tmp / f"python3-{mode}"
        python.write_text(f"#!/bin/sh\nexec /usr/bin/python3 {HOSTILE} {mode}\n")
        python.chmod(0o755)
        confs.append(HostConf(mode, scenario=None, python=str(python)))
    confs.append(HostConf("good", scenario="lab"))
    with SshdCluster(tmp, confs, per_daemon=len(confs)) as cluster:
        yield cluster


# Runs its command and writes the command's own peak RSS (KiB) to argv[1]. A child's
# ru_maxrss on Linux starts from its parent's RSS at fork, and pytest's grows past 1 GB in
# a full run: measured from this small interpreter, the figure is gputop's own.
_PEAK = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[2:]);"
         " _, s, u = os.wait4(p.pid, 0); open(sys.argv[1], 'w').write(str(u.ru_maxrss));"
         " sys.exit(os.waitstatus_to_exitcode(s))")


def _run(cluster: SshdCluster, name: str, flag: str) -> tuple[int, float, int, str]:
    """gputop FLAG against one host: exit status, seconds, peak RSS in MB, stdout."""
    hosts = cluster.hosts_yaml(cluster.tmp / f"hosts-{name}.yaml", names=[name])
    out = cluster.tmp / f"out-{name}{flag}"
    peak = cluster.tmp / f"peak-{name}{flag}"
    started = time.monotonic()
    with open(out, "wb") as sink:
        done = subprocess.run(
            [sys.executable, "-c", _PEAK, str(peak), sys.executable, "-m", "gputop.cli",
             flag, "--hosts", str(hosts), "--timeout", str(TIMEOUT)],
            stdout=sink, stderr=subprocess.STDOUT, env=cluster.env(), cwd=ROOT, check=False)
    return (done.returncode, time.monotonic() - started, int(peak.read_text()) // 1024,
            out.read_text(errors="replace"))


# state and words of the error each host must show in --json
EXPECTED = {
    "endless": (model.HOST_ERROR, "not gputop's"),
    "flood": (model.HOST_OK, None),
    "bigline": (model.HOST_ERROR, "more than 4 MiB"),
    "malformed": (model.HOST_ERROR, "malformed JSON"),
    "wrongtypes": (model.HOST_ERROR, None),
    "numbers": (model.HOST_OK, "out of range ignored"),
    "escapes": (model.HOST_OK, None),
    "procs": (model.HOST_ERROR, "more than 4 MiB"),  # 100,000 processes: ~10 MB a line
    "manyprocs": (model.HOST_OK, "4,096 of 5,000 processes shown"),
    "silent": (model.HOST_TIMEOUT, "no answer"),
}


@pytest.mark.parametrize("mode", MODES)
def test_json_and_once_stay_bounded_with_a_clear_state(hostile: SshdCluster, mode: str) -> None:
    code, seconds, rss, out = _run(hostile, mode, "--json")
    assert seconds < TIMEOUT + 30, (mode, seconds)
    assert rss < MAX_RSS_MB, (mode, rss)
    (host,) = json.loads(out)["hosts"]
    state, words = EXPECTED[mode]
    if mode == "wrongtypes":
        # a snapshot whose every field is wrong: state "pwned" is not a state
        assert host["state"] == model.HOST_ERROR and "probe data not as expected" in host["error"]
        assert [g["index"] for g in host["gpus"]] == [1]  # the one with an integer index
        assert host["gpus"][0]["name"] is None and host["gpus"][0]["state"] == model.GPU_ERROR
        assert [p["pid"] for p in host["processes"]] == [2]
    else:
        assert host["state"] == state, host
        if words:
            assert words in (host["error"] or ""), host
    if mode == "numbers":
        (gpu,) = host["gpus"]
        assert (gpu["temp"], gpu["mem_total"], gpu["mem_used"], gpu["power_draw"],
                gpu["util_gpu"], gpu["fan"]) == (None,) * 6
        assert host["processes"][0]["gpu_mem"] is None
        assert host["time"] > 0
    if mode == "manyprocs":
        assert len(host["processes"]) == 4096
    readable = host["state"] == model.HOST_OK
    assert code == (0 if readable else 3), code  # 3: no host could be read
    code, seconds, rss, out = _run(hostile, mode, "--once")
    assert code == (0 if readable else 3), (code, out[-500:])
    assert seconds < TIMEOUT + 30 and rss < MAX_RSS_MB, (mode, seconds, rss)
    assert "Traceback" not in out
    assert "\x1b" not in out and "\u202e" not in out  # escapes are shown, not obeyed
    if mode == "escapes":
        assert "\\x1b" in out or "\\e" in out or "^[" in out, out


async def test_the_feed_stays_up_beside_hostile_hosts(hostile: SshdCluster) -> None:
    """The dashboard's feed: every hostile host at once beside a good one; the good one
    keeps its refreshes, each hostile one reaches its state, closing takes seconds."""
    seen: dict[str, list[HostSnapshot]] = {}
    feed = SshFeed(hostile.specs(), first_line_timeout=10)
    arrived: dict[str, list[float]] = {}

    def emit(snap: HostSnapshot) -> None:
        seen.setdefault(snap.host, []).append(snap)
        if snap.state == model.HOST_OK:
            arrived.setdefault(snap.host, []).append(time.monotonic())

    task = asyncio.create_task(feed.run(0.5, emit))
    deadline = time.monotonic() + 60
    # each hostile host reaches its state (the feed then retries it: connecting again)
    want = {m: EXPECTED[m][0] for m in MODES if m != "wrongtypes"}
    want["wrongtypes"] = model.HOST_ERROR

    def reached() -> dict[str, bool]:
        return {m: any(s.state == st for s in seen.get(m, ())) for m, st in want.items()}

    try:
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            good = [s for s in seen.get("good", []) if s.state == model.HOST_OK]
            if len(good) >= 6 and all(reached().values()):
                break
    finally:
        started = time.monotonic()
        await feed.close()
        await asyncio.wait_for(task, 20)
        closing = time.monotonic() - started
    assert all(reached().values()), {h: [s.state for s in v][-5:] for h, v in seen.items()}
    good = [s for s in seen["good"] if s.state == model.HOST_OK]
    assert len(good) >= 6, [s.state for s in seen["good"]]
    # a flood of snapshots is not passed on: at most about two per interval
    flood = arrived["flood"]
    span = flood[-1] - flood[0]
    assert len(flood) <= 2 * (span / 0.5) + 4, (len(flood), span)
    assert closing < 15, closing


# -- the checker itself -----------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["dgx-h100", "mig", "slurm", "faulty"])
def test_a_real_probe_snapshot_passes_unchanged(scenario: str) -> None:
    data = json.loads(json.dumps(open_simulation(scenario).collector.collect(), default=str))
    cleaned, notes = untrusted.clean_snapshot(data)
    assert notes == []
    assert HostSnapshot.from_dict(cleaned) == HostSnapshot.from_dict(data)


def test_checker_cuts_text_and_lists() -> None:
    data = {"host": "h", "time": 1.0, "gpus": [{"index": i} for i in range(100)],
            "processes": [{"pid": 1, "gpu": 0, "command": "x" * 100_000,
                           "cmdline": ["a"] * 10_000}]}
    cleaned, notes = untrusted.clean_snapshot(data)
    assert len(cleaned["gpus"]) == untrusted.MAX_ITEMS["gpus"]
    (proc,) = cleaned["processes"]
    assert len(proc["command"]) == untrusted.MAX_TEXT
    assert len(proc["cmdline"]) == untrusted.MAX_ITEMS["cmdline"]
    assert "64 of 100 gpus shown" in notes
    assert json.loads("[NaN, Infinity]", parse_constant=untrusted.json_constant) == [None, None]
