"""gputop's fake NVIDIA driver (tests/fakenvml), through the real pynvml.

First gputop on it: the fake libnvidia-ml.so.1 is loaded through LD_LIBRARY_PATH by gputop
running in a subprocess, and its scenario file is rewritten while gputop runs, as a card
falls off the bus or a query starts failing.  Then the fake itself, feature by feature,
called the way pynvml calls a real driver, so a wrong struct layout or return code shows
here and not as a puzzling gputop test failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import fakenvml

ROOT = Path(__file__).resolve().parent.parent
HELPER = Path(__file__).parent / "helpers" / "fake_watch.py"


@dataclasses.dataclass
class Fake:
    """A scenario file being read by gputop, and the environment that loads the fake."""

    path: Path
    scenario: dict[str, Any]

    @property
    def env(self) -> dict[str, str]:
        env = fakenvml.environment(self.path)
        env.update(PYTHONPATH=str(ROOT), NO_COLOR="1")
        return env

    def update(self, change: Callable[[dict[str, Any]], None]) -> None:
        change(self.scenario)
        fakenvml.write_scenario(self.path, self.scenario)


@contextlib.contextmanager
def fake_host(scenario: dict[str, Any], tmp_path: Path) -> Iterator[Fake]:
    with fakenvml.processes(scenario):
        yield Fake(fakenvml.write_scenario(tmp_path / "scenario", scenario), scenario)


@pytest.fixture
def fake_faulty(tmp_path: Path) -> Iterator[Fake]:
    """The faulty template: every card healthy at start; GPU 3 falls off the bus later."""
    with fake_host(fakenvml.template("faulty"), tmp_path) as fake:
        yield fake


async def test_gpu_falling_off_the_bus_gets_its_xid_79(fake_faulty: Fake) -> None:
    watch = subprocess.Popen(
        [sys.executable, str(HELPER)], env=fake_faulty.env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert watch.stdin is not None and watch.stdout is not None

    def step() -> dict[str, Any]:
        assert watch.stdin is not None and watch.stdout is not None
        watch.stdin.write("\n")
        watch.stdin.flush()
        line = watch.stdout.readline()
        assert line, watch.stderr.read() if watch.stderr else ""
        result: dict[str, Any] = json.loads(line)
        return result

    try:
        first = step()
        assert [g["state"] for g in first["snapshot"]["gpus"]] == ["ok"] * 4
        assert first["snapshot"]["xid_watched"] is True

        def lose(s: dict[str, Any]) -> None:
            s["devices"][3]["lost_after_s"] = 0
            s["xid_events"] = [{"device": 3, "xid": 79, "at_s": 0}]

        fake_faulty.update(lose)
        second = step()
    finally:
        watch.stdin.close()
        watch.wait(timeout=30)
    snap = second["snapshot"]
    assert snap["gpus"][3]["state"] == "lost"
    # placed on the lost card (pynvml makes a new handle object per event, and the lost
    # card answers no nvmlDeviceGetIndex): never -1, never another card
    assert [(e["gpu"], e["xid"]) for e in snap["xid_events"]] == [(3, 79)]
    held = {(w["code"], w["gpu"]) for w in second["warnings"]}
    assert {("xid-79", 3), ("gpu-lost", 3)} <= held
    assert not any(w["gpu"] == -1 for w in second["warnings"])

    # The dashboard, fed these real-pynvml snapshots: the XID is on GPU 3 in its panel and
    # in the warnings log (`w`), where it stays after its one snapshot has passed.
    from gputop.model import HostSnapshot
    from gputop.ui.app import GputopApp
    from gputop.ui.screens.log import WarningLogScreen
    from gputop.ui.widgets.warnings import WarningsPanel

    snaps = [HostSnapshot.from_dict(reply["snapshot"]) for reply in (first, second)]
    later = dataclasses.replace(snaps[1], time=snaps[1].time + 5, xid_events=())
    now = [snaps[0].time]
    app = GputopApp(clock=lambda: now[0], me="tester")
    async with app.run_test(size=(140, 40)) as pilot:
        for snapshot in (*snaps, later):
            now[0] = snapshot.time
            app.ingest(snapshot)
        app.dashboard.refresh_view()
        await pilot.pause()
        panel = app.query_one(WarningsPanel)
        assert ("xid-79", 3) in {(w.code, w.gpu) for w in panel.warnings}
        await pilot.press("w")
        await pilot.pause()
        assert isinstance(app.screen, WarningLogScreen)
        active = app.screen.query_one("#active", WarningsPanel)
        xid = [w for w in active.warnings if w.code == "xid-79"]
        assert [w.gpu for w in xid] == [3] and "fallen off the bus" in xid[0].message


def test_card_whose_process_query_fails_is_never_picked(tmp_path: Path) -> None:
    scenario = fakenvml.template("faulty")
    devices = scenario["devices"][:3]
    for device in devices:
        device["processes"] = []
        device["memory_used_mib"] = 0
        device.update(ecc_errors={"volatile": {"corrected": 0, "uncorrected": 0},
                                  "aggregate": {"corrected": 0, "uncorrected": 0}},
                      remapped_rows={"correctable": 0, "uncorrectable": 0,
                                     "pending": False, "failure": False})
    # GPU 1 runs a 20 GiB job nobody can see: its process queries fail
    devices[1]["memory_used_mib"] = 20480
    devices[1]["errors"] = {"processes": "UNKNOWN"}
    # GPU 2 is shared through MPS: its client is listed by the MPS call only
    devices[2]["processes"] = [{"used_mib": 4096, "type": "M", "sm_util": 40}]
    devices[2]["memory_used_mib"] = 4096
    scenario["devices"] = devices
    scenario["topology"] = [row[:3] for row in scenario["topology"][:3]]
    with fake_host(scenario, tmp_path) as fake:
        env = fake.env

        def gputop(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "gputop.cli", *args], env=env,
                                  capture_output=True, text=True, timeout=60)

        picked = gputop("pick", "--count", "1", "--json")
        many = gputop("pick", "--count", "2")
        shown = gputop("--json")
    assert picked.returncode == 0, picked.stderr
    assert [row["index"] for row in json.loads(picked.stdout)] == [0]
    assert many.returncode == 4, many.stdout + many.stderr
    assert "GPU 1: processes unknown (" in many.stderr
    assert "GPU 2: 1 process(es) running" in many.stderr
    (host,) = json.loads(shown.stdout)["hosts"]
    gpus = host["gpus"]
    assert gpus[1]["processes_error"] and "Unknown" in gpus[1]["processes_error"]
    assert gpus[0]["processes_error"] is None and gpus[2]["processes_error"] is None
    assert [(p["gpu"], p["type"]) for p in host["processes"]] == [(2, "M")]


def _small_scenario(processes: list[dict[str, Any]], **device: Any) -> dict[str, Any]:
    # The fake lists every pid it is given, as a real driver still lists a zombie's.
    return {
        "driver_version": "550.54.15",
        "devices": [{"name": "NVIDIA A100-PCIE-40GB", "memory_total_mib": 40960,
                     "memory_used_mib": sum(p["used_mib"] for p in processes),
                     "util_gpu": 61, "processes": processes, **device}],
    }


def _reparented(reaper: Any, *argv: str) -> int:
    """A process whose parent (a shell) exits at once: re-parented, as under nohup."""
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" </dev/null >/dev/null 2>&1 & echo $!', "sh", *argv],
        capture_output=True, text=True, timeout=10, check=True,
    )
    pid = int(done.stdout)
    reaper.pids.append(pid)
    return pid


def test_json_flags_and_reasons_of_real_processes(reaper: Any, tmp_path: Path) -> None:
    from helpers.procs import start_fake_kernel, start_zombie, wait_for

    kernel = start_fake_kernel(reaper, tmp_path)
    kernel.orphan()  # the notebook server dies
    zombie = start_zombie(reaper)
    job = _reparented(reaper, sys.executable, "-c", "import time; time.sleep(600)", "train.py")
    wait_for(lambda: Path(f"/proc/{job}/cmdline").read_bytes().endswith(b"train.py\0"),
             what="the nohup job to start")
    scenario = _small_scenario([
        {"pid": kernel.pid, "used_mib": 2048, "sm_util": 0},
        {"pid": zombie.pid, "used_mib": 1024, "sm_util": 0},
        {"pid": job, "used_mib": 30000, "sm_util": 61},
    ])
    with fake_host(scenario, tmp_path) as fake:
        env = fake.env
        shown = subprocess.run([sys.executable, "-m", "gputop.cli", "--json"], env=env,
                               capture_output=True, text=True, timeout=60)
        checked = subprocess.run([sys.executable, "-m", "gputop.cli", "check", "--json"],
                                 env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    (host,) = json.loads(shown.stdout)["hosts"]
    rows = {p["pid"]: p for p in host["processes"]}
    assert rows[kernel.pid]["flags"] == ["orphan", "kernel"]
    assert "notebook server is gone" in rows[kernel.pid]["flag_reasons"]["orphan"]
    assert "zombie" in rows[zombie.pid]["flags"]
    assert "must reap it" in rows[zombie.pid]["flag_reasons"]["zombie"]
    assert rows[job]["flags"] == ["orphan"]
    assert "still computing" in rows[job]["flag_reasons"]["orphan"]
    # NVML's used memory is the sum of the listed processes: nothing unaccounted
    assert host["gpus"][0]["unaccounted"] == 0
    # the abandoned kernel gets the advice to stop it; the running job gets none
    advice = {w["pid"]: w for w in json.loads(checked.stdout)["warnings"] if w["pid"]}
    assert advice[kernel.pid]["code"] == "orphan-memory" and "stop it" in advice[kernel.pid]["hint"]
    assert job not in advice and zombie.pid not in advice


def test_zero_gpus_and_driver_not_loaded_exit_3(tmp_path: Path) -> None:
    for scenario, words in (
        ({"devices": []}, "no GPUs"),
        ({"init_error": "DRIVER_NOT_LOADED", "devices": []}, "driver is not loaded"),
    ):
        with fake_host(scenario, tmp_path) as fake:
            done = subprocess.run([sys.executable, "-m", "gputop.cli", "--once"],
                                  env=fake.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 3, done.stdout + done.stderr
        assert words in done.stderr and done.stderr.count("\n") == 1
        assert done.stdout == ""


def test_power_is_rounded_once(tmp_path: Path) -> None:
    scenario = _small_scenario([], power_draw_mw=23460, power_limit_mw=250000)
    with fake_host(scenario, tmp_path) as fake:
        env = fake.env
        text = subprocess.run([sys.executable, "-m", "gputop.cli", "--once"], env=env,
                              capture_output=True, text=True, timeout=60)
        doc = subprocess.run([sys.executable, "-m", "gputop.cli", "--json"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert "23/250W" in text.stdout, text.stdout
    assert json.loads(doc.stdout)["hosts"][0]["gpus"][0]["power_draw"] == 23.5


# -- the fake itself, through the real pynvml ------------------------------------------------

RUNNER = """
import ctypes, json, sys, time
from pathlib import Path
import pynvml as N
from helpers import fakenvml

path, scenario = Path(sys.argv[1]), json.loads(sys.argv[2])
out = {}

def code(call, *args):
    # The NVML return code of a call: 0 when it succeeds.
    try:
        call(*args)
    except N.NVMLError as err:
        return err.value
    return 0

def ptr(handle):
    return ctypes.cast(handle, ctypes.c_void_p).value

def text(value):
    return value.decode() if isinstance(value, bytes) else value

def rewrite():
    fakenvml.write_scenario(path, scenario)
"""


def on_fake(tmp_path: Path, scenario: dict[str, Any], body: str, init: bool = True,
            **env: str) -> dict[str, Any]:
    """Run ``body`` in a fresh Python with pynvml on the fake (``N``; nvmlInit done unless
    ``init`` is False); it fills ``out``, which comes back as JSON."""
    path = fakenvml.write_scenario(tmp_path / "scenario", scenario)
    environ = fakenvml.environment(path)
    environ.update(PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]), **env)
    script = (RUNNER + ("N.nvmlInit()\n" if init else "") + textwrap.dedent(body)
              + "\nprint(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", script, str(path), json.dumps(scenario)],
                          env=environ, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


MIB = 1 << 20


def test_system_and_identity(tmp_path: Path) -> None:
    scenario = {"driver_version": "535.161.08", "cuda_version": 12020, "devices": [
        {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-0a1b2c3d", "serial": "1321",
         "pci_bus_id": "00000000:3b:00.0", "pci_device_id": "0x20B210DE"},
        {},
    ]}
    got = on_fake(tmp_path, scenario, """
        out["versions"] = [N.nvmlSystemGetDriverVersion(), N.nvmlSystemGetNVMLVersion(),
                           N.nvmlSystemGetCudaDriverVersion(),
                           N.nvmlSystemGetCudaDriverVersion_v2()]
        out["count"] = N.nvmlDeviceGetCount()
        cards = [N.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
        out["cards"] = [[N.nvmlDeviceGetName(h), N.nvmlDeviceGetUUID(h), N.nvmlDeviceGetIndex(h),
                         text(N.nvmlDeviceGetPciInfo(h).busId),
                         N.nvmlDeviceGetPciInfo(h).pciDeviceId] for h in cards]
        out["serial"] = [N.nvmlDeviceGetSerial(cards[0]), code(N.nvmlDeviceGetSerial, cards[1])]
        out["by_uuid"] = ptr(N.nvmlDeviceGetHandleByUUID("GPU-0a1b2c3d")) == ptr(cards[0])
        out["unknown_uuid"] = code(N.nvmlDeviceGetHandleByUUID, "GPU-nobody")
        out["past_the_end"] = code(N.nvmlDeviceGetHandleByIndex, 2)
        out["message"] = str(N.NVMLError(15))
    """)
    assert got["versions"] == ["535.161.08", "12.535.161.08", 12020, 12020]
    assert got["count"] == 2
    assert got["cards"] == [
        ["NVIDIA A100-SXM4-80GB", "GPU-0a1b2c3d", 0, "00000000:3B:00.0", 0x20B210DE],
        ["NVIDIA Fake GPU", "GPU-fa6e0000-0000-4000-8000-000000000001", 1,
         "00000000:11:00.0", 0x233010DE],
    ]
    assert got["serial"] == ["1321", 3]  # no serial: NOT_SUPPORTED
    assert got["by_uuid"] is True and got["unknown_uuid"] == 6
    assert got["past_the_end"] == 2 and got["message"] == "GPU is lost"


def test_readings_of_a_card(tmp_path: Path) -> None:
    busy = {"memory_total_mib": 1024, "memory_used_mib": 300, "memory_reserved_mib": 24,
            "bar1_total_mib": 256, "bar1_used_mib": 6, "util_gpu": 70, "util_mem": 30,
            "util_enc": 5, "util_dec": 7, "temperature": 66, "temp_slowdown": 88,
            "power_draw_mw": 123456, "power_limit_mw": 250000, "power_min_limit_mw": 100000,
            "fan_speed": 45, "num_fans": 2, "clocks": {"sm": 1500}, "max_clocks": {"mem": 3000},
            "pstate": 2, "throttle_reasons": "0x44", "persistence_mode": True,
            "compute_mode": 3, "pcie": {"gen": 3, "width": 8, "max_gen": 4, "tx_kbps": 100,
                                        "rx_kbps": 200},
            "numa_node": 1, "cpu_affinity": "0-3,8,70"}
    idle = {"processes": [{"pid": 11, "used_mib": 100}, {"pid": 12}]}
    scenario = {"devices": [busy, idle, {"numa_node": 1}], "topology": [[0, 20], [20, 0]]}
    got = on_fake(tmp_path, scenario, """
        h = [N.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
        v1, v2 = N.nvmlDeviceGetMemoryInfo(h[0]), N.nvmlDeviceGetMemoryInfo(h[0], N.nvmlMemory_v2)
        out["v1"] = [v1.total, v1.free, v1.used]
        out["v2"] = [v2.total, v2.reserved, v2.free, v2.used]
        idle = N.nvmlDeviceGetMemoryInfo(h[1], N.nvmlMemory_v2)
        out["idle_memory"] = [idle.total, idle.used]
        bar1 = N.nvmlDeviceGetBAR1MemoryInfo(h[0])
        out["bar1"] = [bar1.bar1Total, bar1.bar1Free, bar1.bar1Used]
        util = N.nvmlDeviceGetUtilizationRates(h[0])
        out["util"] = [util.gpu, util.memory, N.nvmlDeviceGetEncoderUtilization(h[0]),
                       N.nvmlDeviceGetDecoderUtilization(h[0])]
        out["temp"] = [N.nvmlDeviceGetTemperature(h[0], 0),
                       N.nvmlDeviceGetTemperatureThreshold(h[0], 1),
                       N.nvmlDeviceGetTemperatureThreshold(h[0], 0),
                       code(N.nvmlDeviceGetTemperatureThreshold, h[0], 7)]
        out["power"] = [N.nvmlDeviceGetPowerUsage(h[0]), N.nvmlDeviceGetEnforcedPowerLimit(h[0]),
                        N.nvmlDeviceGetPowerManagementDefaultLimit(h[0]),
                        N.nvmlDeviceGetPowerManagementLimitConstraints(h[0])]
        out["fans"] = [N.nvmlDeviceGetNumFans(h[0]), N.nvmlDeviceGetFanSpeed_v2(h[0], 1),
                       code(N.nvmlDeviceGetFanSpeed_v2, h[0], 2),
                       code(N.nvmlDeviceGetNumFans, h[1])]
        out["clocks"] = [N.nvmlDeviceGetClockInfo(h[0], N.NVML_CLOCK_SM),
                         N.nvmlDeviceGetClockInfo(h[0], N.NVML_CLOCK_MEM),
                         N.nvmlDeviceGetMaxClockInfo(h[0], N.NVML_CLOCK_MEM)]
        out["states"] = [[N.nvmlDeviceGetPerformanceState(x),
                          N.nvmlDeviceGetCurrentClocksEventReasons(x)] for x in h[:2]]
        out["modes"] = [N.nvmlDeviceGetPersistenceMode(h[0]), N.nvmlDeviceGetComputeMode(h[0])]
        out["pcie"] = [N.nvmlDeviceGetCurrPcieLinkGeneration(h[0]),
                       N.nvmlDeviceGetCurrPcieLinkWidth(h[0]),
                       N.nvmlDeviceGetMaxPcieLinkGeneration(h[0]),
                       N.nvmlDeviceGetMaxPcieLinkWidth(h[0]),
                       N.nvmlDeviceGetPcieThroughput(h[0], N.NVML_PCIE_UTIL_TX_BYTES),
                       N.nvmlDeviceGetPcieThroughput(h[0], N.NVML_PCIE_UTIL_RX_BYTES)]
        out["cpus"] = list(N.nvmlDeviceGetCpuAffinity(h[0], 2))
        out["numa"] = [list(N.nvmlDeviceGetMemoryAffinity(h[0], 1, 0)),
                       code(N.nvmlDeviceGetMemoryAffinity, h[1], 1, 0)]
        out["topology"] = [N.nvmlDeviceGetTopologyCommonAncestor(h[0], h[1]),
                           N.nvmlDeviceGetTopologyCommonAncestor(h[0], h[2]),
                           N.nvmlDeviceGetTopologyCommonAncestor(h[1], h[2])]
    """)
    assert got["v1"] == [1024 * MIB, 700 * MIB, 324 * MIB]  # v1's used counts reserved
    assert got["v2"] == [1024 * MIB, 24 * MIB, 700 * MIB, 300 * MIB]
    assert got["idle_memory"] == [16384 * MIB, 100 * MIB]  # the processes' memory, N/A is 0
    assert got["bar1"] == [256 * MIB, 250 * MIB, 6 * MIB]
    assert got["util"] == [70, 30, [5, 167000], [7, 167000]]
    assert got["temp"] == [66, 88, 92, 3]
    assert got["power"] == [123456, 250000, 250000, [100000, 250000]]
    assert got["fans"] == [2, 45, 2, 3]
    assert got["clocks"] == [1500, 1215, 3000]
    assert got["states"] == [[2, 0x44], [8, 0x1]]  # idle: P8 and the idle reason
    assert got["modes"] == [1, 3]
    assert got["pcie"] == [3, 8, 4, 8, 100, 200]
    assert got["cpus"] == [0b1_0000_1111, 1 << 6]
    assert got["numa"] == [[0b10], 3]
    assert got["topology"] == [20, 40, 50]  # the matrix; one NUMA node; two


def test_ecc_retired_pages_remapping_nvlink_and_their_field_values(tmp_path: Path) -> None:
    full = {"ecc_mode": True,
            "ecc_errors": {"volatile": {"corrected": 3, "uncorrected": 1},
                           "aggregate": {"corrected": 30, "uncorrected": 2}},
            "retired_pages": {"sbe": 2, "dbe": 1, "pending": True},
            "remapped_rows": {"correctable": 4, "uncorrectable": 1, "pending": True,
                              "failure": False},
            "nvlink": {"links": 4, "inactive": [2], "remote_type": "gpu",
                       "remote_pci_bus_ids": ["00000000:C5:00.0", "00000000:C6:00.0"]}}
    forbidden = {**full, "errors": {"ecc_errors": "NO_PERMISSION"}}
    scenario = {"devices": [full, {"ecc_mode": False}, forbidden]}
    fields = [3, 4, 5, 6, 29, 30, 31, 91, 142, 143, 144, 145, [165, 0], [165, 2], [165, 9], 999]
    got = on_fake(tmp_path, scenario, f"""
        h = [N.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
        out["mode"] = [N.nvmlDeviceGetEccMode(h[0]), N.nvmlDeviceGetEccMode(h[1])]
        out["ecc"] = [N.nvmlDeviceGetTotalEccErrors(h[0], kind, counter)
                      for counter in (0, 1) for kind in (0, 1)]
        out["ecc_off"] = code(N.nvmlDeviceGetTotalEccErrors, h[1], 0, 0)
        out["ecc_forbidden"] = code(N.nvmlDeviceGetTotalEccErrors, h[2], 0, 0)
        out["pages"] = [N.nvmlDeviceGetRetiredPages(h[0], 0), N.nvmlDeviceGetRetiredPages(h[0], 1),
                        N.nvmlDeviceGetRetiredPagesPendingStatus(h[0]),
                        code(N.nvmlDeviceGetRetiredPages, h[1], 0)]
        out["rows"] = [list(N.nvmlDeviceGetRemappedRows(h[0])),
                       code(N.nvmlDeviceGetRemappedRows, h[1])]
        out["links"] = [N.nvmlDeviceGetNvLinkState(h[0], n) for n in range(4)]
        out["link_errors"] = [code(N.nvmlDeviceGetNvLinkState, h[0], 4),
                              code(N.nvmlDeviceGetNvLinkState, h[1], 0)]
        out["remotes"] = [text(N.nvmlDeviceGetNvLinkRemotePciInfo(h[0], n).busId) for n in range(3)]
        out["remote_type"] = N.nvmlDeviceGetNvLinkRemoteDeviceType(h[0], 0)
        ids = [tuple(f) if isinstance(f, list) else f for f in {fields!r}]
        def values(handle):
            got = N.nvmlDeviceGetFieldValues(handle, ids)
            return [[v.nvmlReturn, v.valueType, v.value.ullVal if v.valueType == 3
                     else v.value.uiVal] for v in got]
        out["fields"] = [values(x) for x in h]
    """)
    assert got["mode"] == [[1, 1], [0, 0]]
    assert got["ecc"] == [3, 1, 30, 2]  # volatile corrected, uncorrected; aggregate
    assert (got["ecc_off"], got["ecc_forbidden"]) == (3, 4)
    sbe, dbe, pending, absent = got["pages"]
    assert (len(sbe), len(dbe), pending, absent) == (2, 1, 1, 3)
    assert len(set(sbe + dbe)) == 3
    assert got["rows"] == [[4, 1, 1, 0], 3]
    assert got["links"] == [1, 1, 0, 1] and got["link_errors"] == [2, 3]
    assert got["remotes"] == ["00000000:C5:00.0", "00000000:C6:00.0", "00000000:C5:00.0"]
    assert got["remote_type"] == 0  # NVML_NVLINK_DEVICE_TYPE_GPU
    full_fields, off_fields, forbidden_fields = got["fields"]
    # the batched values equal the single calls above; an unknown field fails on its own
    assert [v[2] for v in full_fields[:15]] == [3, 1, 30, 2, 2, 1, 1, 4, 4, 1, 1, 0, 1, 0, 0]
    assert [v[0] for v in full_fields] == [0] * 14 + [2, 3]
    assert [v[1] for v in full_fields[:8]] == [3] * 7 + [1]  # counters ull, states uint
    assert [v[0] for v in off_fields] == [3] * 16
    assert [v[0] for v in forbidden_fields[:5]] == [4, 4, 4, 4, 0]


def test_processes_by_kind_and_their_samples(tmp_path: Path) -> None:
    procs = [{"pid": 101, "used_mib": 1000, "sm_util": 50, "mem_util": 20},
             {"pid": 102, "used_mib": 200, "type": "G"},
             {"pid": 103, "used_mib": 300, "type": "C+G", "sm_util": 10},
             {"pid": 104, "used_mib": 400, "type": "M", "sm_util": 5},
             {"pid": 105}]
    scenario = {"devices": [
        {"processes": procs}, {},
        {"processes": procs, "errors": {"processes": "UNKNOWN"}},
        {"processes": procs,
         "errors": {"nvmlDeviceGetGraphicsRunningProcesses_v3": "NO_PERMISSION"}},
    ]}
    got = on_fake(tmp_path, scenario, """
        h = [N.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
        def rows(entries):
            return [[p.pid, p.usedGpuMemory, p.gpuInstanceId] for p in entries]
        out["compute"] = rows(N.nvmlDeviceGetComputeRunningProcesses(h[0]))
        out["compute_v2"] = rows(N.nvmlDeviceGetComputeRunningProcesses_v2(h[0]))
        out["graphics"] = rows(N.nvmlDeviceGetGraphicsRunningProcesses(h[0]))
        out["mps"] = rows(N.nvmlDeviceGetMPSComputeRunningProcesses(h[0]))
        out["none"] = rows(N.nvmlDeviceGetComputeRunningProcesses(h[1]))
        samples = N.nvmlDeviceGetProcessUtilization(h[0], 0)
        out["samples"] = [[s.pid, s.smUtil, s.memUtil] for s in samples]
        newest = max(s.timeStamp for s in samples)
        out["nothing_newer"] = code(N.nvmlDeviceGetProcessUtilization, h[0], newest + 10**9)
        out["idle"] = code(N.nvmlDeviceGetProcessUtilization, h[1], 0)
        out["failing"] = [code(N.nvmlDeviceGetComputeRunningProcesses, h[2]),
                          code(N.nvmlDeviceGetMPSComputeRunningProcesses, h[2]),
                          code(N.nvmlDeviceGetGraphicsRunningProcesses, h[3]),
                          code(N.nvmlDeviceGetComputeRunningProcesses, h[3])]
    """)
    no_mig = 0xFFFFFFFF
    assert got["compute"] == [[101, 1000 * MIB, no_mig], [103, 300 * MIB, no_mig],
                              [105, None, no_mig]]  # no used_mib: NVML_VALUE_NOT_AVAILABLE
    assert got["compute_v2"] == got["compute"]
    assert got["graphics"] == [[102, 200 * MIB, no_mig], [103, 300 * MIB, no_mig]]
    assert got["mps"] == [[104, 400 * MIB, no_mig]] and got["none"] == []
    assert got["samples"] == [[101, 50, 20], [103, 10, 0], [104, 5, 0]]
    assert (got["nothing_newer"], got["idle"]) == (6, 6)  # NOT_FOUND: no samples
    assert got["failing"] == [999, 999, 4, 0]


def test_configured_errors_lost_cards_and_rewrites(tmp_path: Path) -> None:
    scenario = {
        "errors": {"nvmlDeviceGetName": "UNKNOWN"},
        "devices": [
            {"errors": {"nvmlDeviceGetTemperature": "NVML_ERROR_TIMEOUT", "power_draw": 4},
             "not_supported": ["clocks"]},
            {"lost": True},
            {"lost_after_s": 0.3},
            {},
        ],
    }
    got = on_fake(tmp_path, scenario, """
        h0 = N.nvmlDeviceGetHandleByIndex(0)
        out["errors"] = [code(N.nvmlDeviceGetTemperature, h0, 0),
                         code(N.nvmlDeviceGetPowerUsage, h0), code(N.nvmlDeviceGetClockInfo, h0, 0),
                         code(N.nvmlDeviceGetName, h0), code(N.nvmlDeviceGetUUID, h0)]
        out["lost"] = code(N.nvmlDeviceGetHandleByIndex, 1)
        h2, h3 = N.nvmlDeviceGetHandleByIndex(2), N.nvmlDeviceGetHandleByIndex(3)
        out["before"] = code(N.nvmlDeviceGetUUID, h2)
        time.sleep(0.4)
        out["after"] = [code(N.nvmlDeviceGetUUID, h2), code(N.nvmlDeviceGetHandleByIndex, 2)]
        scenario["devices"] = scenario["devices"][:3]
        scenario["errors"] = {}
        rewrite()
        out["rewritten"] = [N.nvmlDeviceGetCount(), code(N.nvmlDeviceGetUUID, h3),
                            code(N.nvmlDeviceGetName, h0)]
    """)
    assert got["errors"] == [10, 4, 3, 999, 0]
    assert got["lost"] == 15
    assert (got["before"], got["after"]) == (0, [15, 15])
    # a card dropped from the scenario fell off the bus; the top-level error is gone
    assert got["rewritten"] == [3, 15, 0]


def test_xid_events_are_delivered_once_each(tmp_path: Path) -> None:
    scenario = {"devices": [{}, {}], "xid_events": [
        {"device": 0, "xid": 48, "at_s": 0}, {"device": 1, "xid": 79},
        {"device": 0, "xid": 63, "at_s": 3600}]}
    got = on_fake(tmp_path, scenario, """
        h = [N.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
        events = N.nvmlEventSetCreate()
        out["supported"] = N.nvmlDeviceGetSupportedEventTypes(h[0])
        out["other_type"] = code(N.nvmlDeviceRegisterEvents, h[0], 0x1, events)
        N.nvmlDeviceRegisterEvents(h[0], N.nvmlEventTypeXidCriticalError, events)
        def wait(ms=0):
            try:
                data = N.nvmlEventSetWait(events, ms)
            except N.NVMLError as err:
                return err.value
            return [[i for i, x in enumerate(h) if ptr(x) == ptr(data.device)], data.eventType,
                    data.eventData]
        out["first"] = [wait(), wait()]
        N.nvmlDeviceRegisterEvents(h[1], N.nvmlEventTypeXidCriticalError, events)
        out["second"] = [wait(), wait()]
        scenario["xid_events"].append({"device": 0, "xid": 31})
        rewrite()
        started = time.monotonic()
        out["third"] = [wait(), wait(200)]
        out["waited"] = time.monotonic() - started
        N.nvmlEventSetFree(events)
    """)
    assert got["supported"] == 0x8 and got["other_type"] == 3
    assert got["first"] == [[[0], 8, 48], 10]  # GPU 1 not registered, XID 63 not due
    assert got["second"] == [[[1], 8, 79], 10]
    assert got["third"] == [[[0], 8, 31], 10]  # the new one only; a timeout after 200 ms
    assert got["waited"] >= 0.2


def test_mig_devices(tmp_path: Path) -> None:
    card = {"name": "NVIDIA H100 80GB HBM3", "mig_mode": True, "mig_pending": False,
            "max_mig_devices": 4, "processes": [{"pid": 200, "used_mib": 10}],
            "mig_devices": [
                {"profile": "3g.40gb", "uuid": "MIG-0d1e2f30",
                 "processes": [{"pid": 201, "used_mib": 1000}]},
                None,
                {"gi": 9, "ci": 1, "memory_used_mib": 50, "bar1_total_mib": 32,
                 "errors": {"bar1": "NO_PERMISSION"}},
            ]}
    scenario = {"devices": [card, {"mig_mode": False, "mig_pending": True}, {}]}
    got = on_fake(tmp_path, scenario, """
        h = [N.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
        out["modes"] = [N.nvmlDeviceGetMigMode(h[0]), N.nvmlDeviceGetMigMode(h[1]),
                        code(N.nvmlDeviceGetMigMode, h[2]), N.nvmlDeviceGetMaxMigDeviceCount(h[0])]
        out["slots"] = [code(N.nvmlDeviceGetMigDeviceHandleByIndex, h[0], i) for i in range(5)]
        out["mig_off"] = code(N.nvmlDeviceGetMigDeviceHandleByIndex, h[1], 0)
        m0, m2 = (N.nvmlDeviceGetMigDeviceHandleByIndex(h[0], i) for i in (0, 2))
        out["same_handle"] = ptr(N.nvmlDeviceGetMigDeviceHandleByIndex(h[0], 0)) == ptr(m0)
        # pynvml hands this one back as a c_uint
        out["is_mig"] = [getattr(v, "value", v)
                         for v in map(N.nvmlDeviceIsMigDeviceHandle, (h[0], m0))]
        out["parent"] = ptr(N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m0)) == ptr(h[0])
        out["by_uuid"] = ptr(N.nvmlDeviceGetHandleByUUID("MIG-0d1e2f30")) == ptr(m0)
        out["names"] = [N.nvmlDeviceGetName(m0), N.nvmlDeviceGetName(m2), N.nvmlDeviceGetUUID(m2)]
        out["ids"] = [[N.nvmlDeviceGetGpuInstanceId(m), N.nvmlDeviceGetComputeInstanceId(m)]
                      for m in (m0, m2)]
        out["ids_of_cards"] = [code(N.nvmlDeviceGetGpuInstanceId, h[0]),
                               code(N.nvmlDeviceGetComputeInstanceId, h[2])]
        out["memory"] = [[x.total, x.used] for x in
                         (N.nvmlDeviceGetMemoryInfo(m) for m in (m0, m2, h[0]))]
        out["bar1"] = [N.nvmlDeviceGetBAR1MemoryInfo(m0).bar1Total,
                       code(N.nvmlDeviceGetBAR1MemoryInfo, m2)]
        out["processes"] = [[[p.pid, p.gpuInstanceId, p.computeInstanceId] for p in
                             N.nvmlDeviceGetComputeRunningProcesses(x)] for x in (m0, h[0])]
        out["card_only"] = [code(N.nvmlDeviceGetUtilizationRates, h[0]),
                            code(N.nvmlDeviceGetProcessUtilization, h[0], 0),
                            code(N.nvmlDeviceGetUtilizationRates, m0),
                            code(N.nvmlDeviceGetTemperature, m0, 0), code(N.nvmlDeviceGetIndex, m0)]
        scenario["devices"][0]["mig_mode"] = False
        rewrite()
        out["gone"] = [code(N.nvmlDeviceGetName, m0), code(N.nvmlDeviceIsMigDeviceHandle, m0)]
    """)
    assert got["modes"] == [[1, 0], [0, 1], 3, 4]
    assert got["slots"] == [0, 6, 0, 6, 2]  # an empty slot: NOT_FOUND; past the last: INVALID
    assert got["mig_off"] == 2
    assert got["same_handle"] and got["parent"] and got["by_uuid"]
    assert got["is_mig"] == [0, 1]
    assert got["names"] == ["NVIDIA H100 80GB HBM3 MIG 3g.40gb",
                            "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                            "MIG-fa6e0000-0002-5000-8000-000000000000"]
    assert got["ids"] == [[1, 0], [9, 1]] and got["ids_of_cards"] == [2, 3]
    # a MIG device's size comes from its profile; the card counts its instances' memory
    assert got["memory"] == [[40960 * MIB, 1000 * MIB], [10240 * MIB, 50 * MIB],
                             [16384 * MIB, 1060 * MIB]]
    assert got["bar1"] == [256 * MIB, 4]
    assert got["processes"] == [[[201, 1, 0]], [[200, 0xFFFFFFFF, 0xFFFFFFFF], [201, 1, 0]]]
    assert got["card_only"] == [3, 3, 3, 3, 3]
    assert got["gone"] == [2, 2]


def test_gpm_sm_activity_per_gpu_instance(tmp_path: Path) -> None:
    scenario = {"devices": [
        {"gpm": True, "mig_mode": True, "mig_devices": [{"gi": 5, "sm_active": 42}, {"gi": 6}]},
        {"mig_mode": True, "mig_devices": [{"gi": 1}]},
    ]}
    got = on_fake(tmp_path, scenario, """
        h = [N.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
        out["supported"] = [N.nvmlGpmQueryDeviceSupport(x).isSupportedDevice for x in h]
        def activity(gi):
            first, second = N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()
            N.nvmlGpmMigSampleGet(h[0], gi, first)
            N.nvmlGpmMigSampleGet(h[0], gi, second)
            request = N.c_nvmlGpmMetricsGet_t()
            request.version = N.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = 2
            request.sample1, request.sample2 = first, second
            request.metrics[0].metricId = N.NVML_GPM_METRIC_SM_UTIL
            request.metrics[1].metricId = N.NVML_GPM_METRIC_GRAPHICS_UTIL
            got = N.nvmlGpmMetricsGet(request)
            N.nvmlGpmSampleFree(first)
            N.nvmlGpmSampleFree(second)
            return [[m.nvmlReturn, m.value] for m in got.metrics[:2]]
        out["activity"] = [activity(5), activity(6)]
        sample = N.nvmlGpmSampleAlloc()
        out["errors"] = [code(N.nvmlGpmMigSampleGet, h[0], 77, sample),
                         code(N.nvmlGpmMigSampleGet, h[1], 1, sample)]
    """)
    assert got["supported"] == [1, 0]
    assert got["activity"] == [[[0, 42.0], [3, 0.0]], [[0, 0.0], [3, 0.0]]]
    assert got["errors"] == [2, 3]  # no such GPU instance; no GPM on that card


@pytest.mark.parametrize(("init_error", "expected"), [
    ("DRIVER_NOT_LOADED", 9), ("NO_PERMISSION", 4), ("NVML_ERROR_LIB_RM_VERSION_MISMATCH", 18),
    (17, 17),
])
def test_init_failures(tmp_path: Path, init_error: Any, expected: int) -> None:
    got = on_fake(tmp_path, {"init_error": init_error, "devices": [{}]}, """
        out["init"] = code(N.nvmlInit)
        out["after"] = code(N.nvmlDeviceGetCount)  # the library is loaded, NVML is not up
    """, init=False)
    assert got == {"init": expected, "after": 1}


def test_no_scenario_is_no_driver_and_init_counts(tmp_path: Path) -> None:
    body = """
        out["init"] = code(N.nvmlInit)
        if out["init"] == 0:
            N.nvmlInit()
            out["shutdowns"] = [code(N.nvmlShutdown) for _ in range(3)]
    """
    assert on_fake(tmp_path, {"devices": []}, body, init=False,
                   FAKENVML_SCENARIO=str(tmp_path / "missing")) == {"init": 9}
    trace = tmp_path / "trace"
    got = on_fake(tmp_path, {"devices": []}, body, init=False, FAKENVML_TRACE=str(trace))
    assert got == {"init": 0, "shutdowns": [0, 0, 1]}  # the third one: UNINITIALIZED
    assert trace.read_text().split() == ["nvmlInitWithFlags"] * 2 + ["nvmlShutdown"] * 3


def test_scenario_lines() -> None:
    lines = fakenvml.scenario_lines({"devices": [{"name": "A B", "lost": True,
                                                  "not_supported": ["fan"],
                                                  "mig_devices": [None, {}]}]})
    assert lines == ["devices 1", "devices.0 {}", "devices.0.name A B", "devices.0.lost 1",
                     "devices.0.mig_devices 2", "devices.0.mig_devices.1 {}",
                     "devices.0.errors {}", "devices.0.errors.fan NOT_SUPPORTED"]
    with pytest.raises(ValueError, match="letters, digits"):
        fakenvml.scenario_lines({"a.b": 1})
