"""What `gputop --once` and `--json` cost: the modules they load and the NVML calls they
make, on gputop's fake driver (tests/fakenvml) through the real pynvml (issue 27).

Counts, never clocks: the timings are bench/bench_vs_nvitop.py's.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import fakenvml

ROOT = Path(__file__).resolve().parent.parent

# A one-shot polls this machine in its own thread and prints: none of the event loop, the
# HTTP clients, the dashboard, the ledger or the job queue.
FORBIDDEN = ("asyncio", "http", "ssl", "email", "textual", "rich", "gputop.ui",
             "gputop.sources.prometheus", "gputop.sources.serveapi", "gputop.sources.ssh",
             "gputop.sources.oneshot", "gputop.ledger", "gputop.actions.queue",
             "gputop.commands.queue", "gputop.analysis.queue_plan",
             "difflib",  # only to suggest a command for a mistyped one
             "dataclasses", "inspect")  # records are built without (gputop/records.py)

# Runs gputop's main in this interpreter and writes the modules it loaded on the way out,
# a line each (so that the harness itself loads no json).
RUN_AND_LIST = """
import atexit, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write("\\n".join(sorted(sys.modules))))
sys.argv = ["gputop", *sys.argv[2:]]
from gputop.cli import main
sys.exit(main())
"""


def _env(tmp_path: Path, scenario: dict) -> dict[str, str]:
    env = fakenvml.environment(fakenvml.write_scenario(tmp_path / "scenario", scenario))
    env["PYTHONPATH"] = str(ROOT)
    env.pop("GPUTOP_HOSTS", None)
    env["HOME"] = str(tmp_path)  # no user's hosts or config file
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return env


def _run_listing(tmp_path: Path, env: dict[str, str],
                 *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """One run and the modules it loaded; without `site` (-S), whose editable-install hook
    in the test virtualenv loads pathlib and more before gputop starts (an installed
    gputop's does not), the libraries found on PYTHONPATH instead."""
    listing = tmp_path / "modules.txt"
    env = dict(env, PYTHONPATH=f"{env['PYTHONPATH']}:{sysconfig.get_paths()['purelib']}")
    done = subprocess.run([sys.executable, "-S", "-c", RUN_AND_LIST, str(listing), *args],
                          env=env, capture_output=True, text=True, timeout=120)
    return done, listing.read_text().splitlines() if listing.exists() else []


def _loaded_modules(tmp_path: Path, env: dict[str, str], *args: str) -> list[str]:
    done, modules = _run_listing(tmp_path, env, *args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), "printed nothing"
    return modules


# A plain table of this machine, with no hosts or config file and an empty store, needs
# neither: no JSON, no pathlib, no hosts file or key map reader, no calendar, no history
# rules, no device scan.
ONCE_FORBIDDEN = ("json", "pathlib", "datetime", "calendar", "gputop.hosts",
                  "gputop.keymap", "gputop.analysis.memtrend", "gputop.sources.devscan")


@pytest.mark.parametrize("mode", ["--once", "--json"])
def test_one_shot_loads_only_what_it_uses(tmp_path: Path, mode: str) -> None:
    with fakenvml.processes(fakenvml.template("dgx8")) as scenario:
        env = _env(tmp_path, scenario)
        env["GPUTOP_RESERVATIONS_DIR"] = str(tmp_path / "store")
        modules = _loaded_modules(tmp_path, env, mode)
    assert "gputop.sources.nvml" in modules and "pynvml" in modules  # it did read NVML
    forbidden = (*FORBIDDEN, *ONCE_FORBIDDEN) if mode == "--once" else FORBIDDEN
    bad = [m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden)]
    ours = [m for m in modules if m.startswith("gputop")]
    assert not bad, f"{mode} loaded {bad}; gputop modules: {ours}"


# Through Prometheus the HTTP client is the point; still none of the event loop, the
# dashboard, the thread pool (concurrent.futures: logging and traceback too) or the
# dashboard's history.
PROMETHEUS_FORBIDDEN = (*(f for f in FORBIDDEN if f not in ("http", "ssl", "email",
                                                           "gputop.sources.prometheus")),
                        "concurrent", "logging", "gputop.analysis.history")


@pytest.mark.parametrize("command", [["--once"], ["check"]])
def test_prometheus_one_shot_loads_only_what_it_uses(tmp_path: Path,
                                                     command: list[str]) -> None:
    from helpers.prom import FixedServer, Reply, instant, need_prometheus, start_prometheus

    need_prometheus()
    text = (ROOT / "tests" / "fixtures" / "prometheus" / "dcgm-exporter.txt").read_bytes()
    exporter = FixedServer(lambda path: Reply(body=text))
    prom, url = start_prometheus(tmp_path, {"dcgm": [exporter.url.removeprefix("http://")]})
    try:
        deadline = time.monotonic() + 60
        while not instant(url, "DCGM_FI_DEV_GPU_UTIL"):
            assert time.monotonic() < deadline, "Prometheus never scraped the exporter"
            time.sleep(0.3)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path),
               "XDG_CONFIG_HOME": str(tmp_path / "config")}
        env.pop("GPUTOP_HOSTS", None)
        done, modules = _run_listing(tmp_path, env, "--prometheus", url, *command)
    finally:
        prom.terminate()
        prom.wait(10)
        exporter.close()
    assert done.returncode in (0, 2), done.stderr  # check: 2 where a card is unhealthy
    assert "GPU" in done.stdout or "warning" in done.stdout.lower(), done.stdout
    assert "gputop.sources.prompivot" in modules  # it did read Prometheus
    bad = [m for m in modules
           if any(m == f or m.startswith(f + ".") for f in PROMETHEUS_FORBIDDEN)]
    assert not bad, f"{command} through Prometheus loaded {bad}"


# NVML calls of one process, by function name; FAKENVML_TRACE writes one line per call.
def _calls(tmp_path: Path, env: dict[str, str], *args: str) -> collections.Counter[str]:
    trace = tmp_path / "trace"
    trace.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-m", "gputop.cli", *args],
                          env=dict(env, FAKENVML_TRACE=str(trace)), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return collections.Counter(line.split()[0] for line in trace.read_text().splitlines()
                               if line.startswith("nvml"))


REMOTE_ENDS = ("nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemoteDeviceType")


def test_nvml_calls_of_once_json_and_json_topology(tmp_path: Path) -> None:
    template = fakenvml.template("dgx8")
    gpus = len(template["devices"])
    with fakenvml.processes(template) as scenario:
        env = _env(tmp_path, scenario)
        once = _calls(tmp_path, env, "--once")
        plain = _calls(tmp_path, env, "--json")
        linked = _calls(tmp_path, env, "--json", "--topology")
    # nvitop 1.7.2 `-1` makes 205 calls on this scenario (bench/bench_vs_nvitop.py): 25 a
    # card plus 5 for the driver.  gputop's table lists MPS clients too and shows XID
    # events as `check` does (issue 24.14), which nvitop does not (one registration a
    # card and the event set's create and wait), and still makes no more calls: its
    # list reads are one call each (sources/nvmlcalls.FastPynvml), pynvml's two.
    xid = once["nvmlDeviceRegisterEvents"] + once["nvmlEventSetCreate"] + \
        once["nvmlEventSetWait_v2"]
    assert xid <= gpus + 2, once
    assert sum(once.values()) <= 25 * gpus + 5, once
    for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetProcessUtilization"):
        assert once[name] == plain[name] == gpus, name
    # Fields that never change are asked once a card, and the system's versions once.
    for name in ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetHandleByIndex_v2"):
        assert once[name] == plain[name] == gpus, name
    assert once["nvmlDeviceGetCount_v2"] == 1
    # Remote NVLink ends only where the interconnect is printed.
    for name in REMOTE_ENDS:
        assert once[name] == plain[name] == 0 and linked[name] > 0, name
    assert sum(plain.values()) < sum(linked.values())


STATIC = ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetSerial",
          "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetTemperatureThreshold",
          "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetMaxPcieLinkGeneration",
          "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetPowerManagementLimitConstraints",
          "nvmlDeviceGetPowerManagementDefaultLimit", "nvmlDeviceGetCpuAffinity",
          "nvmlDeviceGetMemoryAffinity", "nvmlDeviceGetNumFans", *REMOTE_ENDS,
          "nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion")

# Two collects of one dashboard backend; the calls of the second, from the trace file.
TWO_READS = """
import json, os, sys
import pynvml
from gputop.sources.hostsource import nvml_collector
from gputop.sources.procfs import ProcFs
trace = os.environ["FAKENVML_TRACE"]
collector = nvml_collector(pynvml, ProcFs())
collector.collect()
first = len(open(trace).read().splitlines())
collector.collect()
print(json.dumps([line.split()[0] for line in open(trace).read().splitlines()[first:]]))
"""


def test_the_dashboard_reads_static_fields_once(tmp_path: Path) -> None:
    with fakenvml.processes(fakenvml.template("dgx8")) as scenario:
        env = dict(_env(tmp_path, scenario), FAKENVML_TRACE=str(tmp_path / "trace"))
        done = subprocess.run([sys.executable, "-c", TWO_READS], env=env, capture_output=True,
                              text=True, timeout=120, check=True)
    second = collections.Counter(json.loads(done.stdout))
    assert second["nvmlDeviceGetMemoryInfo_v2"] == len(scenario["devices"])  # it read again
    assert not {name: second[name] for name in STATIC if second[name]}


# The one-shot table and its warnings from a lean read and from a full one, at one time.
LEAN_EQUALS_FULL = """
import dataclasses, json, sys
import pynvml
from gputop.analysis.pipeline import warnings_once
from gputop.commands.common import settings
from gputop.commands.once import render_text
from gputop.config import Config
from gputop.model import HostSnapshot
from gputop.sources.hostsource import nvml_collector
from gputop.sources.procfs import ProcFs
now = 1_764_680_000.0
out = {}
for lean in (True, False):
    raw = nvml_collector(pynvml, ProcFs(), lean=lean).collect()
    snap = dataclasses.replace(HostSnapshot.from_dict(raw), time=now)
    warned = {snap.host: warnings_once(snap, settings(Config()), None, now)}
    out["lean" if lean else "full"] = render_text([snap], warned, width=None)
print(json.dumps(out))
"""


@pytest.mark.parametrize("template", ["dgx8", "faulty", "mig"])
def test_lean_once_prints_what_a_full_read_prints(tmp_path: Path, template: str) -> None:
    with fakenvml.processes(fakenvml.template(template)) as scenario:
        done = subprocess.run([sys.executable, "-c", LEAN_EQUALS_FULL],
                              env=_env(tmp_path, scenario), capture_output=True, text=True,
                              timeout=120, check=True)
    got = json.loads(done.stdout)
    assert "GPU" in got["full"] and len(got["full"].splitlines()) > 5
    assert got["lean"] == got["full"]


SETTINGS = ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPersistenceMode",
            "nvmlDeviceGetComputeMode", "nvmlDeviceGetEccMode", "nvmlDeviceGetMigMode")

# Reads of one dashboard backend at the given times; each read's calls, and its first card.
TIMED_READS = """
import json, os, sys
import pynvml
from gputop.sources.nvml import _UNSHOWN as UNSHOWN, NvmlBackend
trace = os.environ["FAKENVML_TRACE"]
backend = NvmlBackend(pynvml, dashboard=True)
out, seen = [], 0
for now in map(float, sys.argv[1:]):
    gpu = backend.read(now)["gpus"][0]
    lines = open(trace).read().splitlines()
    out.append([[line.split()[0] for line in lines[seen:]],
                {k: gpu[k] for k in ("power_limit", "persistence_mode", "compute_mode",
                                     "ecc_mode", "ecc_mode_pending", "mig_mode",
                                     "mig_mode_pending", "ecc_volatile_corrected",
                                     "nvlinks", "energy_mj", "fan", *UNSHOWN)}])
    seen = len(lines)
print(json.dumps(out))
"""


def test_the_dashboard_asks_settings_every_ten_seconds_and_field_values_once(
        tmp_path: Path) -> None:
    from gputop.sources.nvml import HEALTH_SECONDS, SETTINGS_SECONDS

    times = [0.0, 1.0, SETTINGS_SECONDS - 0.5, SETTINGS_SECONDS + 0.5, SETTINGS_SECONDS + 1]
    with fakenvml.processes(fakenvml.template("dgx8")) as scenario:
        env = dict(_env(tmp_path, scenario), FAKENVML_TRACE=str(tmp_path / "trace"))
        done = subprocess.run([sys.executable, "-c", TIMED_READS, *map(str, times)], env=env,
                              capture_output=True, text=True, timeout=120, check=True)
    reads = json.loads(done.stdout)
    gpus = len(scenario["devices"])
    asked = [collections.Counter(calls) for calls, _ in reads]
    # The settings at the first read and again once SETTINGS_SECONDS have passed, not between.
    assert [all(a[name] == gpus for name in SETTINGS) for a in asked] == [
        True, False, False, True, False]
    assert not any(a[name] for a in (asked[1], asked[2], asked[4]) for name in SETTINGS)
    # ECC counters and link states: one field-value call a card, with the clock-event
    # reasons at most every HEALTH_SECONDS (the last read is 0.5 s after the one before).
    assert HEALTH_SECONDS < 1.0  # a 1 s refresh reads them every time
    for name in ("nvmlDeviceGetFieldValues", "nvmlDeviceGetCurrentClocksEventReasons"):
        assert [a[name] for a in asked] == [gpus, gpus, gpus, gpus, 0], name
    # The values stand between the reads as read, and the one call fills every link.
    first = reads[0][1]
    assert first["power_limit"] is not None and first["ecc_mode"] is not None
    assert len(first["nvlinks"]) > 0 and all(link["active"] is not None
                                             for link in first["nvlinks"])
    assert first["ecc_volatile_corrected"] is not None
    for _, gpu in reads[1:]:
        assert {k: gpu[k] for k in SETTINGS_KEYS} == {k: first[k] for k in SETTINGS_KEYS}
    # The H100s have no fans (NotSupported): asked again only with the settings.
    assert all(gpu["fan"] is None for _, gpu in reads)
    assert [a["nvmlDeviceGetFanSpeed"] for a in asked] == [gpus, 0, 0, gpus, 0]
    # What the dashboard shows nowhere is not asked (a full read's are, test_nvml_calls).
    assert not any(a[name] for a in asked for name in UNSHOWN_CALLS)
    assert all(gpu[k] is None for _, gpu in reads for k in UNSHOWN)
    # Fewer calls than nvitop's 25 a card (its `-1`), fewer still between settings reads.
    assert max(sum(a.values()) for a in asked[1:]) < 25 * gpus
    assert sum(asked[1].values()) <= sum(asked[3].values()) - len(SETTINGS) * gpus


UNSHOWN_CALLS = ("nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization",
                 "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetBAR1MemoryInfo")


def test_nothing_the_dashboard_runs_reads_what_its_stream_leaves_out() -> None:
    from gputop.sources.nvml import _UNSHOWN

    assert set(UNSHOWN) == set(_UNSHOWN)
    readers = [p for part in ("ui", "analysis", "ledger", "actions")
               for p in (ROOT / "gputop" / part).rglob("*.py")]
    assert len(readers) > 20
    for path in readers:
        # A MIG device has a BAR1 of its own (MigDevice.bar1_used, read by sources/mig.py),
        # which the panel shows as ``dev.bar1_used``: the card's is the one left out.
        text = path.read_text().replace("dev.bar1_", "")
        assert not [k for k in _UNSHOWN if k in text], path


UNSHOWN = ("util_enc", "util_dec", "clock_gr", "pcie_tx_kbs", "pcie_rx_kbs", "bar1_used",
           "bar1_total", "temp_memory", "energy_mj", "pcie_replays", "nvlink_data_kib")
SETTINGS_KEYS = ("power_limit", "persistence_mode", "compute_mode", "ecc_mode",
                 "ecc_mode_pending", "mig_mode", "mig_mode_pending")


# The `gputop` command (cli.entry), and the collector's state as the interpreter exits.
GC_AT_EXIT = """
import atexit, gc, json, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(
    {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()})))
sys.argv = ["gputop", *sys.argv[2:]]
from gputop.cli import entry
entry()
"""


def _collector_at_exit(tmp_path: Path, *args: str, interrupt: bool = False) -> dict[str, Any]:
    state = tmp_path / "gc.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-c", GC_AT_EXIT, str(state), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        if interrupt:  # a command that runs until Ctrl+C: once it has printed a frame
            assert proc.stdout.readline()
            proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    found: dict[str, Any] = json.loads(state.read_text())
    return found


def test_a_one_shot_runs_without_the_cyclic_collector_and_freezes_before_exit(
        tmp_path: Path) -> None:
    # The modules loaded are not walked again and again, nor once more at exit.
    once = _collector_at_exit(tmp_path, "--demo", "lab", "--once")
    assert once["enabled"] is False and once["frozen"] > 10_000, once
    # A command that runs until stopped collects its garbage as any program does.
    watch = _collector_at_exit(tmp_path, "--demo", "lab", "--once", "--watch", "0.5",
                               interrupt=True)
    assert watch["enabled"] is True, watch
