"""Issue 29: the nvidia-smi fallback tells the truth about a broken host.

Every test reads real captures (tests/fixtures/nvidia-smi/SOURCES.md) or nvidia-smi's
error output as nvidia-smi prints it, with its exit status, through the same
``fallback_snapshot`` the SSH source calls for each poll.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import fakenvml
from sshd import capture_section

from gputop import model
from gputop.analysis import health, pick, topology
from gputop.model import HostSnapshot
from gputop.sources import nvmlcodes, smi
from gputop.sources.fallback import fallback_snapshot
from gputop.sources.hostsource import open_simulation

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "nvidia-smi"
H100 = FIXTURES / "capture-h100-80gb-hbm3-590.txt"
MIG = FIXTURES / "capture-h100-mig-590.txt"
WINDOWS = FIXTURES / "capture-windows-rtx-2080-super-591.txt"
MIB = 1 << 20
PS = "    1     0     0 root             Ss   9000  0.0  1024 /sbin/init\n"


def section(path: Path, title: str) -> str:
    return capture_section(path.read_text(), title)


def poll(*parts: tuple[str, int | None], mode: smi.Mode | None = None,
         extras: smi.Extras | None = None) -> dict:
    """One poll's output, each command's text followed by its marker and exit status."""
    output = smi.join_outputs(list(parts))
    return fallback_snapshot("gpu-x", output, 1000.0, mode=mode, extras=extras)


def csv_poll(gpu_text: str, gpu_rc: int | None = 0, apps: str = "", apps_rc: int = 0,
             **kwargs: object) -> dict:
    return poll((gpu_text, gpu_rc), (apps, apps_rc), (PS, 0), **kwargs)  # type: ignore[arg-type]


def codes(data: dict) -> set[tuple[str, str, int | None]]:
    return {(w.code, w.severity, w.gpu) for w in health.warnings(HostSnapshot.from_dict(data))}


# -- 1. NVML initialisation errors are host states with a meaning and a remedy ---------

# As nvidia-smi prints them (stdout), with its exit status (the NVML return code).
INIT_ERRORS = [
    ("Failed to initialize NVML: Driver/library version mismatch\n", 18,
     "different versions", "reboot"),
    # R535 and newer add the library's version on a second line
    ("Failed to initialize NVML: Driver/library version mismatch\n"
     "NVML library version: 535.183\n", 18, "different versions", "reboot"),
    ("Failed to initialize NVML: Insufficient Permissions\n", 4,
     "may not open the NVIDIA device files", "group and mode"),
    ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure "
     "that the NVIDIA Display Driver is properly installed and present in your system.\n"
     "Please also try adding directory that contains libnvidia-ml.so to your system PATH.\n",
     12, "not installed or not on the library path", "LD_LIBRARY_PATH"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
     "sure that the latest NVIDIA driver is installed and running.\n", 9,
     "kernel module is not loaded", "modprobe nvidia"),
    ("Failed to initialize NVML: GPU is lost\n", 15, "fell off the bus", "XID 79"),
    ("No devices were found\n", 6, "sees no GPU", "lspci"),
    ("Failed to initialize NVML: Unknown Error\n", 255, "unknown reason", "restart"),
]


@pytest.mark.parametrize(("text", "rc", "meaning", "todo"), INIT_ERRORS)
def test_init_error_is_a_host_state_with_meaning_and_remedy(
    text: str, rc: int, meaning: str, todo: str
) -> None:
    # nvidia-smi says the same for the compute-apps query
    data = csv_poll(text, rc, text, rc)
    assert data["state"] == model.HOST_NO_GPU, data
    assert "gpus" not in data or not data["gpus"]
    first = text.splitlines()[0]
    assert first.split(".")[0] in data["error"]
    assert meaning in data["error"] and todo in data["error"]
    assert f"exit {rc}" in data["error"]


def test_nvml_path_names_a_mismatch_as_the_fallback_does(tmp_path: Path) -> None:
    """One table (sources/nvmlcodes.py): this machine's NVML and a remote nvidia-smi say
    the same about a driver/library mismatch."""
    scenario = fakenvml.write_scenario(tmp_path / "scenario", {
        "init_error": "NVML_ERROR_LIB_RM_VERSION_MISMATCH", "devices": [{}]})
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "--once"],
                          env=fakenvml.environment(scenario), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 3, done.stderr
    known = nvmlcodes.init_failure(18)
    assert known is not None and known.describe() in done.stderr
    fallback = csv_poll(INIT_ERRORS[0][0], 18)
    assert known.describe() in fallback["error"]


# -- 2. output of the wrong shape is an error, never GPUs ------------------------------


@pytest.mark.parametrize(("path", "title"), [
    (H100, "load :: query (-q)"),
    (MIG, "load :: query (-q)"),
    (FIXTURES / "q-8x-rtx-4090-535.txt", None),
])
def test_query_text_in_the_csv_reader_is_an_error_quoting_its_first_line(
    path: Path, title: str | None
) -> None:
    text = section(path, title) if title else path.read_text()
    data = csv_poll(text, 0)
    assert data["state"] == model.HOST_ERROR
    assert not data.get("gpus")
    assert repr(smi.first_line(text)) in data["error"]
    assert "not the CSV asked for" in data["error"]
    # the same reply to the process query: an error too, not "no processes"
    good = section(H100, "load :: query-gpu")
    data = csv_poll(good, 0, text, 0)
    assert data["state"] == model.HOST_ERROR and "--query-compute-apps" in data["error"]


def test_truncated_xml_says_truncated() -> None:
    text = (FIXTURES / "xml-tesla-t4-515.xml").read_text()
    cut = text[: len(text) // 2]
    data = poll((cut, 0), (PS, 0), mode=smi.Mode(xml=True))
    assert data["state"] == model.HOST_ERROR
    assert "truncated" in data["error"] and "<?xml" not in data["error"]


# -- 3. a lost GPU stays listed, with the NVML path's critical warning ------------------

LOST_LINE = "Unable to determine the device handle for GPU 0000:84:00.0: GPU is lost\n"


def _nvml_lost_warning() -> model.HealthWarning:
    """The warning the NVML path gives for a lost card (the faulty scenario loses GPU 6
    after 20 s; the simulator runs the real NVML backend)."""
    now = [1_764_680_000.0]
    source = open_simulation("faulty", clock=lambda: now[0])
    source.collector.collect()
    now[0] += 30
    snap = HostSnapshot.from_dict(source.collector.collect())
    (lost,) = [w for w in health.warnings(snap) if w.code == "gpu-lost"]
    return lost


def test_a_lost_gpu_stays_listed_beside_a_good_one() -> None:
    good = section(H100, "load :: query-gpu")
    data = csv_poll(good + LOST_LINE, 15)
    snap = HostSnapshot.from_dict(data)
    assert snap.state == model.HOST_FALLBACK
    assert [(g.index, g.state) for g in snap.gpus] == [(0, model.GPU_OK), (1, model.GPU_LOST)]
    assert snap.gpus[1].pci_bus_id == "0000:84:00.0"
    assert "GPU is lost" in (snap.gpus[1].error or "")
    (warning,) = [w for w in health.warnings(snap) if w.code == "gpu-lost"]
    nvml = _nvml_lost_warning()
    assert (warning.severity, warning.hint) == (nvml.severity, nvml.hint) == (
        model.CRITICAL, nvml.hint)
    assert warning.gpu == 1


def test_the_only_gpu_lost_is_a_lost_gpu_not_the_csv_header() -> None:
    header = section(H100, "load :: query-gpu").splitlines()[0]
    data = csv_poll(f"{header}\n{LOST_LINE}", 15)
    assert data["state"] == model.HOST_FALLBACK
    assert header not in (data["error"] or "")
    assert ("gpu-lost", model.CRITICAL, 0) in codes(data)
    # an older driver's spelling, no space after "GPU" and another reason: unreadable
    odd = "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n"
    data = csv_poll(f"{header}\n{odd}", 255)
    (gpu,) = data["gpus"]
    assert gpu["state"] == model.GPU_ERROR and gpu["pci_bus_id"] == "0000:3B:00.0"
    assert ("gpu-unreadable", model.WARNING, 0) in codes(data)


# -- 4. clock event reasons: asked for, decoded as NVML does, same rules ----------------


def _eight_cards(mask: str, util: str | None = None, draw: str | None = None,
                 limit: str | None = None) -> str:
    """The real H100 row under load, as the eight cards of one node, with this mask."""
    text = section(H100, "load :: query-gpu")
    header, row = text.splitlines()[:2]
    names = [h.strip() for h in header.split(",")]
    rows = []
    for index in range(8):
        cells = [c.strip() for c in row.split(",")]
        cells[names.index("index")] = str(index)
        cells[names.index("clocks_event_reasons.active")] = mask
        if util is not None:
            cells[names.index("utilization.gpu [%]")] = util
        if draw is not None:
            cells[names.index("power.draw [W]")] = draw
        if limit is not None:
            for name in ("power.limit [W]", "enforced.power.limit [W]"):
                cells[names.index(name)] = limit
        rows.append(", ".join(cells))
    return "\n".join([header, *rows]) + "\n"


def test_the_fallback_asks_for_the_clock_event_mask_by_both_names() -> None:
    assert smi.EVENT_FIELD in smi.Mode().command()
    refused = f'Field "{smi.EVENT_FIELD}" is not a valid field to query.\n'
    first = csv_poll(refused, 2)
    older = smi.Mode().after(first)
    assert older == smi.Mode(throttle_name=True)
    assert smi.THROTTLE_FIELD in older.command() and smi.EVENT_FIELD not in older.command()
    # a driver that refuses another field gets `-q -x`
    other = csv_poll('Field "mig.mode.current" is not a valid field to query.\n', 2)
    assert older.after(other) == smi.Mode(throttle_name=True, xml=True)
    # the old name's column reads the same
    text = _eight_cards("0x0000000000000088").replace(smi.EVENT_FIELD, smi.THROTTLE_FIELD)
    gpus, _ = smi.gpus_from_csv(text)
    assert gpus[0]["clock_event_reasons"] == ("hw_slowdown", "hw_power_brake_slowdown")


def test_eight_cards_in_hw_slowdown_with_the_power_brake_are_not_healthy() -> None:
    data = csv_poll(_eight_cards("0x0000000000000088"))
    found = codes(data)
    assert {("power-brake", model.WARNING, i) for i in range(8)} <= found
    for gpu in data["gpus"]:
        # the NVML path's decoder, flag for flag
        assert gpu["clock_event_reasons"] == nvmlcodes.decode_clock_events(0x88)


def test_xml_reasons_decode_to_the_same_flags() -> None:
    root = ET.fromstring((FIXTURES / "xml-rtx-4000-sff-ada-595.xml").read_text())
    reasons = root.find("gpu/clocks_event_reasons")
    assert reasons is not None
    for child in reasons:
        if child.tag.endswith(("hw_slowdown", "hw_thermal_slowdown")):
            child.text = "Active"
    (gpu,), _, _ = smi.parse_xml(ET.tostring(root, encoding="unicode"))
    assert gpu["clock_event_reasons"] == nvmlcodes.decode_clock_events(gpu["clock_event_mask"])
    assert {"hw_slowdown", "hw_thermal_slowdown", "gpu_idle"} <= set(gpu["clock_event_reasons"])


def test_sw_power_cap_at_low_power_while_busy_is_an_info() -> None:
    capped = csv_poll(_eight_cards("0x0000000000000004", util="100 %", draw="299.10 W",
                                   limit="300.00 W"))
    assert ("power-capped", model.INFO, 0) in codes(capped)
    # at its own 700 W limit a busy H100 is capped by design
    assert not {c for c in codes(csv_poll(_eight_cards("0x0000000000000004")))
                if c[0] == "power-capped"}
    # the real RTX 2080 SUPER at idle: SW power cap at 39 W, 0 % busy: nothing to say
    text = (FIXTURES / "capture-windows-rtx-2080-super-591.txt").read_text()
    idle = capture_section(text.replace("0x0000000000000001", "0x0000000000000004", 1),
                           "idle :: query-gpu")
    data = csv_poll(idle)
    assert data["gpus"][0]["clock_event_reasons"] == ("sw_power_cap",)
    assert not {c for c in codes(data) if c[0] == "power-capped"}


# -- 5. MIG devices from -L and the default table ---------------------------------------


def _mig_extras(path: Path = MIG) -> smi.Extras:
    parts = [(section(path, title), 0) for title in (
        "capabilities :: list (-L)", "capabilities :: topo -m", "capabilities :: nvlink -s")]
    extras = smi.Extras.parse(smi.join_outputs(parts))
    assert extras is not None
    return extras


def test_mig_devices_and_their_processes_on_a_fallback_host() -> None:
    extras = _mig_extras()
    mode = smi.Mode()
    data = poll((section(MIG, "load :: query-gpu"), 0),
                (section(MIG, "load :: query-compute-apps"), 0),
                (section(MIG, "load :: nvidia-smi (default table)"), 0), (PS, 0),
                mode=mode, extras=extras)
    assert mode.sections() == ("gpus", "apps", "table", "ps")
    snap = HostSnapshot.from_dict(data)
    (gpu,) = snap.gpus
    assert gpu.mig_mode is True
    assert [(d.index, d.gi, d.ci, d.profile, d.uuid) for d in gpu.mig_devices] == [
        (0, 2, 0, "3g.40gb", "MIG-00000000-0000-0000-0000-000000000000"),
        (1, 3, 0, "2g.20gb", "MIG-00000001-0000-0000-0000-000000000001"),
        (2, 9, 0, "1g.10gb", "MIG-00000002-0000-0000-0000-000000000002"),
        (3, 10, 0, "1g.10gb", "MIG-00000003-0000-0000-0000-000000000003"),
    ]
    assert (gpu.mig_devices[0].mem_used, gpu.mig_devices[0].mem_total) == (
        11091 * MIB, 40448 * MIB)
    assert gpu.mig_devices[0].bar1_total == 24739 * MIB
    assert {(p.pid, p.gpu_label, p.gpu_instance_id, p.mig_uuid) for p in snap.processes} == {
        (pid, "0:0", 2, "MIG-00000000-0000-0000-0000-000000000000")
        for pid in (21180, 21181, 21198)}
    # pick works on the fallback host: the idle MIG devices, by UUID
    ranking = pick.rank_devices(snap, pick.Want(), snap.time)
    assert {c.device for c in ranking.chosen} == {
        "MIG-00000001-0000-0000-0000-000000000001", "MIG-00000002-0000-0000-0000-000000000002",
        "MIG-00000003-0000-0000-0000-000000000003"}
    # nvlink -s in MIG mode answers "not supported": no links, no false alarm
    assert gpu.nvlinks == ()


# -- 6. Windows: the shell is recognised, types are kept ----------------------------------

# What the bootstrap's `exec python3 ...` gets from each Windows shell (exit status 1).
CMD_EXE = ("'exec' is not recognized as an internal or external command,\r\n"
           "operable program or batch file.\r\n")
POWERSHELL_5 = (
    "exec : The term 'exec' is not recognized as the name of a cmdlet, function, script "
    "file, or operable\r\nprogram. Check the spelling of the name, or if a path was "
    "included, verify that the path is correct and try again.\r\nAt line:1 char:1\r\n"
    "+ exec python3 -u -c 'import sys,zlib;b=sys.stdin.buffer;n=int(b.readline() ...\r\n"
    "+ ~~~~\r\n    + CategoryInfo          : ObjectNotFound: (exec:String) [], "
    "CommandNotFoundException\r\n    + FullyQualifiedErrorId : CommandNotFoundException\r\n")
POWERSHELL_7 = (
    "exec: The term 'exec' is not recognized as a name of a cmdlet, function, script "
    "file, or executable program.\r\nCheck the spelling of the name, or if a path was "
    "included, verify that the path is correct and try again.\r\n")


def test_windows_shells_are_recognised_from_what_they_print() -> None:
    assert smi.windows_shell(1, CMD_EXE) == "cmd.exe"
    assert smi.windows_shell(1, POWERSHELL_5) == "PowerShell"
    assert smi.windows_shell(1, POWERSHELL_7) == "PowerShell"
    # sh without python3, or any other failure: not Windows
    assert smi.windows_shell(127, "sh: 1: exec: python3: not found\n") is None
    assert smi.windows_shell(1, "Traceback (most recent call last):\n") is None
    # and nvidia-smi missing there is "not found", not a GPU
    missing = CMD_EXE.replace("'exec'", "'nvidia-smi'")
    data = poll((missing, 1), (missing, 1), (missing, 1), mode=smi.Mode(windows=True))
    assert data["state"] == model.HOST_NO_GPU and "nvidia-smi not found" in data["error"]


def test_windows_host_keeps_process_types() -> None:
    mode = smi.Mode(windows=True)
    assert "ps -eo" not in " ".join(mode.commands()) and "sh -c" not in mode.commands()[0]
    data = poll((section(WINDOWS, "load :: query-gpu"), 0),
                (section(WINDOWS, "load :: query-compute-apps"), 0),
                (section(WINDOWS, "load :: nvidia-smi (default table)"), 0), mode=mode)
    snap = HostSnapshot.from_dict(data)
    assert snap.state == model.HOST_FALLBACK
    assert snap.gpus[0].name == "NVIDIA GeForce RTX 2080 SUPER"
    by_pid = {p.pid: p for p in snap.processes}
    assert len(by_pid) == 12
    assert by_pid[2056].type == "C+G" and by_pid[25704].type == "C"
    assert by_pid[2056].command == r"C:\Windows\System32\dwm.exe"
    assert all(p.visible for p in snap.processes)  # no ps there is not "another namespace"
    assert "processes.user" in snap.missing


# -- 7. topo -m and nvlink -s feed the topology and NVLink-down rules ----------------------


def test_topo_m_capture_gives_cpu_affinity_and_numa_node() -> None:
    extras = _mig_extras(H100)
    data = csv_poll(section(H100, "load :: query-gpu"), extras=extras)
    (gpu,) = data["gpus"]
    assert (gpu["cpu_affinity"], gpu["numa_node"]) == ("0-19", 0)
    assert "topology" not in data["missing"]


def test_topo_m_of_a_multi_gpu_node_gives_its_links() -> None:
    """nvidia-smi's layout of a DGX H100 (ours: tests/test_topology.py checks it against
    nvidia-smi's own) read back as the snapshot's topology."""
    snap = HostSnapshot.from_dict(open_simulation("dgx-h100").collector.collect())
    links, places = smi.topology_from_topo_m(topology.render_text(snap))
    assert {(x["gpu_a"], x["gpu_b"], x["kind"]) for x in links} == {
        (x.gpu_a, x.gpu_b, x.kind) for x in snap.topology}
    assert places[0]["cpu_affinity"] == snap.gpus[0].cpu_affinity


def test_nvlink_down_on_a_fallback_host() -> None:
    text = (FIXTURES / "nvlink-status-8x-a100.txt").read_text()
    links = smi.parse_nvlink_status(text)
    assert sorted(links) == list(range(8)) and all(len(v) == 12 for v in links.values())
    assert all(link["active"] for v in links.values() for link in v)
    # GPU 3's link 7 goes down, as `nvlink -s` prints it
    lines = text.splitlines()
    start = lines.index(next(ln for ln in lines if ln.startswith("GPU 3:")))
    lines[start + 8] = "         Link 7: <inactive>"
    gpu_csv = _eight_cards("0x0000000000000000")
    parts = [("GPU 0: x (UUID: GPU-0)\n", 0), ("", 1), ("\n".join(lines) + "\n", 0)]
    extras = smi.Extras.parse(smi.join_outputs(parts))
    data = csv_poll(gpu_csv, extras=extras)
    assert ("nvlink-down", model.WARNING, 3) in codes(data)
    assert {c for c in codes(data) if c[0] == "nvlink-down"} == {("nvlink-down", model.WARNING, 3)}
    assert "nvlinks" not in data["missing"] and "topology" in data["missing"]  # topo failed


# -- issue 37.8: every NVLink down on an NVSwitch system -----------------------------------


def _all_links(state: str, fabric: str) -> dict:
    text = (FIXTURES / "nvlink-status-8x-a100.txt").read_text()
    import re
    down = re.sub(r"Link (\d+): .*", r"Link \1: <inactive>", text)
    if state == "one up":
        down = down.replace("Link 0: <inactive>", "Link 0: 25 GB/s", 1)
    rows = _eight_cards("0x0000000000000000").splitlines()
    rows[0] += ", fabric.state"
    rows[1:] = [f"{row}, {fabric}" for row in rows[1:]]
    parts = [("GPU 0: x (UUID: GPU-0)\n", 0), ("", 1), (down, 0)]
    extras = smi.Extras.parse(smi.join_outputs(parts))
    return csv_poll("\n".join(rows) + "\n", extras=extras)


def test_every_nvlink_down_with_the_fabric_not_started_is_a_warning() -> None:
    data = _all_links("all down", "Not Started")
    assert {g["fabric_state"] for g in data["gpus"]} == {"not started"}
    assert ("nvlinks-all-down", model.WARNING, None) in codes(data)
    (warning,) = [w for w in health.warnings(HostSnapshot.from_dict(data))
                  if w.code == "nvlinks-all-down"]
    assert "all 96 NVLinks of 8 GPU(s) are down; fabric not started" in warning.message
    assert "fabricmanager" in (warning.hint or "")
    # one link up: the per-card rule speaks, not this one
    some = codes(_all_links("one up", "Completed"))
    assert "nvlinks-all-down" not in {c for c, _, _ in some}
    assert ("nvlink-down", model.WARNING, 1) in some
    # no fabric (NVLink bridges, or [N/A]): not an NVSwitch system, no verdict
    assert "nvlinks-all-down" not in {c for c, _, _ in codes(_all_links("all down", "[N/A]"))}


def test_the_nvml_path_reads_the_fabric_state_and_warns_the_same(tmp_path: Path) -> None:
    import json
    card = {"nvlink": {"links": 4, "inactive": [0, 1, 2, 3], "remote_type": "switch"},
            "fabric_state": 1}
    scenario = fakenvml.write_scenario(tmp_path / "scenario", {"devices": [card, card]})
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "--json"],
                          env=fakenvml.environment(scenario), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode in (0, 1), done.stderr
    (host,) = json.loads(done.stdout)["hosts"]
    assert [g["fabric_state"] for g in host["gpus"]] == ["not started"] * 2
    found = [w for w in host["warnings"] if w["code"] == "nvlinks-all-down"]
    assert found and "all 8 NVLinks of 2 GPU(s) are down; fabric not started" in found[0]["message"]


def _gputop(scenario: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args],
                          env=fakenvml.environment(scenario), capture_output=True, text=True,
                          timeout=60)


def test_a_one_shot_table_warns_when_every_nvlink_is_down_too(tmp_path: Path) -> None:
    # --once reads lean; it asks the fabric state only of cards whose links are all down
    down = {"nvlink": {"links": 4, "inactive": [0, 1, 2, 3], "remote_type": "switch"},
            "fabric_state": 1}
    scenario = fakenvml.write_scenario(tmp_path / "down", {"devices": [down, down]})
    done = _gputop(scenario, "--once")
    assert "all 8 NVLinks of 2 GPU(s) are down; fabric not started" in done.stdout, done.stdout
    up = dict(down, nvlink={"links": 4, "remote_type": "switch"})
    scenario = fakenvml.write_scenario(tmp_path / "up", {"devices": [up, up]})
    trace = tmp_path / "trace"
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "--once"],
                          env=dict(fakenvml.environment(scenario), FAKENVML_TRACE=str(trace)),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "NVLinks" not in done.stdout, done.stdout
    assert "nvmlDeviceGetGpuFabricInfo" not in trace.read_text()  # links up: not asked


def test_the_nvml_path_validates_the_inforom(tmp_path: Path) -> None:
    import json
    scenario = fakenvml.write_scenario(
        tmp_path / "scenario", {"devices": [{"inforom_corrupted": True}, {}]})
    done = _gputop(scenario, "--json")
    (host,) = json.loads(done.stdout)["hosts"]
    assert [g["inforom_corrupted"] for g in host["gpus"]] == [True, False]
    assert [w["gpu"] for w in host["warnings"] if w["code"] == "inforom-corrupted"] == [0]
    done = _gputop(scenario, "check")
    assert done.returncode == 1 and "GPU 0   the card's infoROM is corrupted" in done.stdout, \
        done.stdout
