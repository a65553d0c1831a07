"""Issue 37: the nvidia-smi fallback on what real hosts print (the parsers; the same over a
real sshd in tests/test_ssh_smi.py).

Each case is a real capture (tests/fixtures/nvidia-smi/SOURCES.md) with the text a real
login shell or nvidia-smi puts around it, as they print it, with nvidia-smi's exit status.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import fakenvml
from sshd import capture_section

from gputop import model
from gputop.analysis import health
from gputop.model import HostSnapshot
from gputop.sources import nvmlcodes, smi
from gputop.sources.fallback import fallback_snapshot

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "nvidia-smi"
H100 = FIXTURES / "capture-h100-80gb-hbm3-590.txt"
PS = "    1     0     0 root             Ss   9000  0.0  1024 /sbin/init\n"

# What real hosts print before nvidia-smi's CSV: bash under a locale that is not installed,
# a .bashrc that greets, and nvidia-smi's own infoROM warning (exit status 14).
SETLOCALE = "bash: warning: setlocale: LC_ALL: cannot change locale (de_DE.UTF-8)\n"
GREETING = "Welcome to the cluster login node.\n"
INFOROM = "WARNING: infoROM is corrupted at gpu 0000:00:09.0\n"
UNKNOWN = "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n"


def gpu_csv() -> str:
    return capture_section(H100.read_text(), "load :: query-gpu")


def apps_csv() -> str:
    return capture_section(H100.read_text(), "load :: query-compute-apps")


def csv_poll(gpu_text: str, gpu_rc: int | None = 0, apps: str | None = None) -> dict:
    output = smi.join_outputs([(gpu_text, gpu_rc), (apps_csv() if apps is None else apps, 0),
                               (PS, 0)])
    return fallback_snapshot("gpu-x", output, 1000.0)


def codes(data: dict) -> set[tuple[str, str, int | None]]:
    return {(w.code, w.severity, w.gpu) for w in health.warnings(HostSnapshot.from_dict(data))}


# -- 1. lines before the header ---------------------------------------------------------


@pytest.mark.parametrize("noise", [SETLOCALE, GREETING, SETLOCALE + GREETING])
def test_login_shell_noise_before_the_header_is_a_note_not_an_empty_host(noise: str) -> None:
    data = csv_poll(noise + gpu_csv())
    assert data["state"] == model.HOST_FALLBACK, data["error"]
    (gpu,) = data["gpus"]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu.get("state", model.GPU_OK) == model.GPU_OK
    assert len(data["processes"]) == 3
    for line in noise.splitlines():
        assert line in data["error"]  # kept, in the host's line


def test_inforom_warning_is_a_warning_of_its_own_on_its_card() -> None:
    data = csv_poll(INFOROM + gpu_csv(), 14)
    assert data["state"] == model.HOST_FALLBACK
    (gpu,) = data["gpus"]
    assert gpu["inforom_corrupted"] is True and gpu.get("state", model.GPU_OK) == model.GPU_OK
    assert ("inforom-corrupted", model.WARNING, 0) in codes(data)
    assert "infoROM" not in data["error"]  # the warning says it, not the host's note


def test_inforom_warning_names_another_card_than_the_one_listed() -> None:
    data = csv_poll(INFOROM.replace("00:09.0", "00:0A.0") + gpu_csv(), 14)
    assert not data["gpus"][0].get("inforom_corrupted")
    assert "inforom-corrupted" not in {c for c, _, _ in codes(data)}


# -- 7. Unknown Error on a handle, rows cut short, no rows -------------------------------


def nvml_unknown_error_on_a_handle(tmp_path: Path) -> dict:
    """What the NVML path (our fake libnvidia-ml, through the real pynvml) makes of a card
    whose nvmlDeviceGetHandleByIndex answers 999, Unknown Error."""
    scenario = fakenvml.write_scenario(tmp_path / "scenario", {
        "devices": [{}, {"errors": {"handle": "UNKNOWN"}}]})
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "--json"],
                          env=fakenvml.environment(scenario), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    (host,) = json.loads(done.stdout)["hosts"]
    return host


def test_unknown_error_on_a_handle_is_what_the_nvml_path_makes_of_it(tmp_path: Path) -> None:
    nvml = nvml_unknown_error_on_a_handle(tmp_path)
    data = csv_poll(UNKNOWN + gpu_csv(), 255)
    assert data["state"] == model.HOST_FALLBACK
    ours = data["gpus"][1]
    theirs = nvml["gpus"][1]
    assert ours["state"] == theirs["state"] == model.GPU_ERROR
    assert theirs["error"] == nvmlcodes.handle_error(1, "Unknown Error")
    assert ours["error"] == f"{theirs['error']} (0000:0B:00.0)"
    assert ours["pci_bus_id"] == "0000:0B:00.0"
    nvml_codes = {(w["code"], w["severity"], w["gpu"]) for w in nvml["warnings"]}
    assert ("gpu-unreadable", model.WARNING, 1) in nvml_codes & codes(data)


def test_a_row_cut_short_is_a_broken_card_not_a_shorter_list() -> None:
    text = gpu_csv().rstrip("\n")
    header, row = text.splitlines()
    second = row.replace("00000000:00:09.0", "00000000:0B:00.0").replace(
        "GPU-00000000-0000-0000-0000-000000000000", "GPU-11111111-0000-0000-0000-000000000000")
    fields = second.split(", ")
    index_at = header.split(", ").index("index")
    fields[index_at] = "1"
    cut = ", ".join(fields[: len(fields) // 2])  # the output ended in the middle of a row
    data = csv_poll(f"{header}\n{row}\n{cut}\n")
    assert [(g["index"], g.get("state", model.GPU_OK)) for g in data["gpus"]] == [
        (0, model.GPU_OK), (1, model.GPU_ERROR)]
    assert "cut short" in data["gpus"][1]["error"]
    assert ("gpu-unreadable", model.WARNING, 1) in codes(data)


@pytest.mark.parametrize(("text", "said"), [
    ("", "no output"),
    ("\n\n", "no output"),
    ("index, uuid, name, pci.bus_id\n", "a header and no GPU rows"),
])
def test_no_rows_is_an_error_not_zero_gpus(text: str, said: str) -> None:
    data = csv_poll(text, 0)
    assert data["state"] == model.HOST_ERROR
    assert said in data["error"] and not data.get("gpus")


def test_a_header_alone_in_the_process_list_is_no_processes() -> None:
    header = apps_csv().splitlines()[0] + "\n"
    data = csv_poll(gpu_csv(), 0, apps=header)
    assert data["state"] == model.HOST_FALLBACK and data["processes"] == []


# -- 4. sections marked whatever the last byte of a command's output ---------------------


def test_xml_without_final_newline_is_read(tmp_path: Path) -> None:
    """The real T4 document ends with its closing tag and no newline; the fallback's own
    command line, run by a real sh with an nvidia-smi that prints it."""
    xml = FIXTURES / "xml-tesla-t4-515.xml"
    assert not xml.read_bytes().endswith(b"\n")
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\nexec cat '{xml}'\n")
    fake.chmod(0o755)
    (tmp_path / "ps").symlink_to("/bin/true")
    mode = smi.Mode(xml=True)
    done = subprocess.run(["/bin/sh", "-c", mode.command()], capture_output=True, text=True,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, timeout=30)
    data = fallback_snapshot("t4", done.stdout, 1000.0, mode=mode)
    assert data["state"] == model.HOST_FALLBACK, data["error"]
    assert [g["name"] for g in data["gpus"]] == ["Tesla T4"]


def test_noise_before_the_xml_document_is_a_note_and_its_inforom_warning_a_warning() -> None:
    xml = (FIXTURES / "xml-tesla-t4-515.xml").read_text()
    said = SETLOCALE + "WARNING: infoROM is corrupted at gpu 0000:00:1E.0\n"
    output = smi.join_outputs([(said + xml, 14), (PS, 0)])
    data = fallback_snapshot("t4", output, 1000.0, mode=smi.Mode(xml=True))
    assert data["state"] == model.HOST_FALLBACK, data["error"]
    assert SETLOCALE.strip() in data["error"]
    assert ("inforom-corrupted", model.WARNING, 0) in codes(data)


# -- 2. graphics processes and C+G on every host ------------------------------------------

WORKSTATION = FIXTURES / "capture-rtx-4080-super-595.txt"


def test_graphics_processes_and_c_plus_g_on_a_linux_workstation() -> None:
    """The Linux workstation capture under load: KDE's compositor is C+G, its shell and
    Xwayland G, ffmpeg C.  Read with the fallback's own command list."""
    text = WORKSTATION.read_text()
    mode = smi.Mode()
    assert "table" in mode.sections()
    output = smi.join_outputs([
        (capture_section(text, "load :: query-gpu"), 0),
        (capture_section(text, "load :: query-compute-apps"), 0),
        (capture_section(text, "load :: nvidia-smi (default table)"), 0),
        (PS, 0)])
    data = fallback_snapshot("ws", output, 1000.0, mode=mode)
    types = {p["pid"]: p["type"] for p in data["processes"]}
    assert types == {2165: "C+G", 2496: "G", 2620: "G", 2954: "G", 3527: "G",
                     5021: "C", 5022: "C"}
    memory = {p["pid"]: p["gpu_mem"] for p in data["processes"]}
    assert memory[2496] == 200 << 20 and memory[2620] == 4 << 20


# -- 3. temperature thresholds on CSV hosts -------------------------------------------------


def extras_of(path: Path) -> smi.Extras:
    text = path.read_text()
    titles = ("capabilities :: list (-L)", "capabilities :: topo -m",
              "capabilities :: nvlink -s", "load :: query (-q)")
    extras = smi.Extras.parse(smi.join_outputs([(capture_section(text, t), 0) for t in titles]))
    assert extras is not None
    return extras


@pytest.mark.parametrize(("path", "slowdown", "shutdown"), [
    (H100, 87, 93),  # a T.Limit driver (590): thresholds relative to the limit
    (WORKSTATION, 96, 101),  # absolute thresholds (595 on a GeForce card)
])
def test_thresholds_come_from_q_once_per_connection(path: Path, slowdown: int,
                                                    shutdown: int) -> None:
    assert "nvidia-smi -q -d TEMPERATURE" in smi.EXTRA_COMMANDS
    text = path.read_text()
    hot = capture_section(text, "load :: query-gpu")
    header, row = hot.rstrip("\n").splitlines()
    at = header.split(", ").index("temperature.gpu")
    cells = row.split(", ")
    cells[at] = str(shutdown - 1)  # one degree below shutdown
    output = smi.join_outputs([(f"{header}\n{', '.join(cells)}\n", 0),
                               (capture_section(text, "load :: query-compute-apps"), 0),
                               ("", 0), (PS, 0)])
    data = fallback_snapshot("hot", output, 1000.0, extras=extras_of(path))
    (gpu,) = data["gpus"]
    assert (gpu["temp_slowdown"], gpu["temp_shutdown"]) == (slowdown, shutdown)
    assert ("temp-shutdown", model.CRITICAL, 0) in codes(data)
    cold = fallback_snapshot("hot", output, 1000.0, extras=None)
    assert "temp-shutdown" not in {c for c, _, _ in codes(cold)}  # unknown: no verdict



# -- 5. Windows: every read runs there, and PowerShell gets its arguments whole -------------


def test_arguments_powershell_would_split_are_quoted() -> None:
    """PowerShell cuts an unquoted `-x=a.b` at its first dot (PowerShell issue 6291) and
    reads a bare comma as an array: every argument with `=` and a dot or comma is one
    double-quoted word (which cmd.exe's and sh's parsing hand to nvidia-smi unquoted)."""
    for mode in (smi.Mode(windows=True), smi.Mode(windows=True, throttle_name=True)):
        for command in (*mode.commands(), *smi.EXTRA_COMMANDS):
            for word in command.split(" ")[1:]:
                if "=" in word and ("." in word or "," in word):
                    assert word.startswith('"') and word.endswith('"'), (command, word)
                else:
                    assert '"' not in word
    # sh reads them as one word without the quotes, as nvidia-smi must see them
    done = subprocess.run(["/bin/sh", "-c", 'printf "%s\\n" ' + smi.Mode().commands()[0][11:]],
                          capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [
        smi.Mode().commands()[0].split(" ")[1].strip('"'), "--format=csv"]


# -- 9. our fake driver answers as real ones do ---------------------------------------------


def test_gpu_instance_profile_info_is_not_supported_as_on_real_drivers(tmp_path: Path) -> None:
    """Real drivers answer NOT_SUPPORTED on a card without MIG, where our fake used to have
    no such function ("Function Not Found"); both names pynvml calls.  (999 on a handle:
    ``errors: {"handle": "UNKNOWN"}``, used by the Unknown Error test above.)"""
    scenario = fakenvml.write_scenario(tmp_path / "scenario", {"devices": [{}]})
    code = (
        "import pynvml\n"
        "pynvml.nvmlInit()\n"
        "h = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
        "for version in (1, 2):\n"
        "    try:\n"
        "        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, 0, version)\n"
        "    except pynvml.NVMLError as err:\n"
        "        print(err.value)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=fakenvml.environment(scenario),
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["3", "3"], done.stderr  # NVML_ERROR_NOT_SUPPORTED
