"""The real pynvml path, on the shared fake driver (../shared/fakenvml).

The fake libnvidia-ml.so.1 is loaded through LD_LIBRARY_PATH by gputop running in a
subprocess; its scenario file is rewritten while gputop runs, as a card falls off the bus
or a query starts failing.  Without the fake (no ../shared, no C compiler) these tests
skip, except under CI=true where that is a failure.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAKE_DIR = Path(os.environ.get("GPUTOP_FAKENVML", ROOT.parent / "shared" / "fakenvml"))
HELPER = Path(__file__).parent / "helpers" / "fake_watch.py"


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"fakenvml needed under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if not (FAKE_DIR / "harness.py").is_file():
        _missing(f"no fakenvml at {FAKE_DIR}")
    if shutil.which("make") is None or shutil.which("cc") is None:
        _missing("fakenvml needs make and a C compiler")
    sys.path.insert(0, str(FAKE_DIR))
    try:
        import harness as module  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(FAKE_DIR))
    libdir = str(tmp_path_factory.mktemp("fakenvml-lib"))
    module.ensure_library(libdir)
    module.LIBDIR_FOR_TESTS = libdir
    return module


def _template(name: str) -> dict[str, Any]:
    with open(FAKE_DIR / "scenarios" / name) as f:
        data: dict[str, Any] = json.load(f)
    return data


@pytest.fixture
def fake_faulty(harness: Any) -> Iterator[Any]:
    """faulty.json with every card healthy at start: GPU 3 falls off the bus later."""
    scenario = _template("faulty.json")
    scenario["xid_events"] = []
    for device in scenario["devices"]:
        device.pop("lost_after_s", None)
    with harness.FakeGPUs(scenario, libdir=harness.LIBDIR_FOR_TESTS) as fake:
        yield fake


def _env(fake: Any) -> dict[str, str]:
    return {**fake.env, "PYTHONPATH": str(ROOT), "FAKE_NVML_QUIET": "1", "NO_COLOR": "1"}


async def test_gpu_falling_off_the_bus_gets_its_xid_79(fake_faulty: Any) -> None:
    watch = subprocess.Popen(
        [sys.executable, str(HELPER)], env=_env(fake_faulty), text=True,
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


def test_card_whose_process_query_fails_is_never_picked(harness: Any) -> None:
    scenario = copy.deepcopy(_template("faulty.json"))
    scenario["xid_events"] = []
    devices = scenario["devices"][:3]
    for device in devices:
        device.pop("lost_after_s", None)
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
    devices[2]["processes"] = [{"cmd": ["python", "mps_client.py"], "used_mib": 4096,
                                "type": "M", "sm_util": 40}]
    devices[2]["memory_used_mib"] = 4096
    scenario["devices"] = devices
    scenario["topology"] = [row[:3] for row in scenario["topology"][:3]]
    with harness.FakeGPUs(scenario, libdir=harness.LIBDIR_FOR_TESTS) as fake:
        env = _env(fake)

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
    return {
        "driver_version": "550.54.15",
        "keep_dead_pids": True,  # a zombie has exited: a real driver still lists it
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


def test_json_flags_and_reasons_of_real_processes(
    harness: Any, reaper: Any, tmp_path: Path
) -> None:
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
    with harness.FakeGPUs(scenario, libdir=harness.LIBDIR_FOR_TESTS) as fake:
        env = _env(fake)
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


def test_zero_gpus_and_driver_not_loaded_exit_3(harness: Any) -> None:
    for scenario, words in (
        ({"devices": []}, "no GPUs"),
        ({"init_error": "DRIVER_NOT_LOADED", "devices": []}, "driver is not loaded"),
    ):
        with harness.FakeGPUs(scenario, libdir=harness.LIBDIR_FOR_TESTS) as fake:
            done = subprocess.run([sys.executable, "-m", "gputop.cli", "--once"],
                                  env=_env(fake), capture_output=True, text=True, timeout=60)
        assert done.returncode == 3, done.stdout + done.stderr
        assert words in done.stderr and done.stderr.count("\n") == 1
        assert done.stdout == ""


def test_power_is_rounded_once(harness: Any) -> None:
    scenario = _small_scenario([], power_draw_mw=23460, power_limit_mw=250000)
    with harness.FakeGPUs(scenario, libdir=harness.LIBDIR_FOR_TESTS) as fake:
        env = _env(fake)
        text = subprocess.run([sys.executable, "-m", "gputop.cli", "--once"], env=env,
                              capture_output=True, text=True, timeout=60)
        doc = subprocess.run([sys.executable, "-m", "gputop.cli", "--json"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert "23/250W" in text.stdout, text.stdout
    assert json.loads(doc.stdout)["hosts"][0]["gpus"][0]["power_draw"] == 23.5
