"""nvidia-smi fallback parsers, against real captures from real GPUs."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from sshd import capture_section

from gputop import model
from gputop.model import HostSnapshot
from gputop.sources import smi
from gputop.sources.fallback import fallback_snapshot

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "nvidia-smi"
MIB = 1024 * 1024


def _capture(name: str, title: str) -> str:
    return capture_section((FIXTURES / name).read_text(), title)


def test_h100_query_gpu_under_load() -> None:
    gpus, host = smi.gpus_from_csv(
        _capture("capture-h100-80gb-hbm3-590.txt", "load :: query-gpu")
    )
    assert host["driver_version"] == "590.48.01"
    (gpu,) = gpus
    assert gpu["index"] == 0
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    assert gpu["pci_bus_id"] == "00000000:00:09.0"
    assert gpu["mem_total"] == 81559 * MIB
    assert gpu["mem_used"] is not None and 0 < gpu["mem_used"] < gpu["mem_total"]
    assert gpu["util_gpu"] is not None and 0 <= gpu["util_gpu"] <= 100
    assert gpu["pstate"] == 0
    assert gpu["pcie_gen_max"] == 5 and gpu["pcie_width_max"] == 16
    assert gpu["persistence_mode"] is True
    assert gpu["ecc_mode"] is True
    assert gpu["power_limit"] == pytest.approx(700.0)
    assert gpu["fan"] is None and gpu["fans"] == []  # "[N/A]" on a passive card
    assert gpu["clock_event_mask"] is not None


def test_mig_utilization_is_none_not_zero() -> None:
    gpus, _ = smi.gpus_from_csv(_capture("capture-h100-mig-590.txt", "load :: query-gpu"))
    assert gpus[0]["util_gpu"] is None
    assert gpus[0]["mig_mode"] is True
    assert gpus[0]["mem_total"] is not None


def test_consumer_card_fields() -> None:
    gpus, _ = smi.gpus_from_csv(_capture("capture-rtx-4080-super-595.txt", "load :: query-gpu"))
    (gpu,) = gpus
    assert gpu["name"] == "NVIDIA GeForce RTX 4080 SUPER"
    assert gpu["ecc_mode"] is None  # ECC N/A on GeForce
    assert gpu["fan"] == 0  # a real 0 %, not missing
    apps = smi.apps_from_csv(
        _capture("capture-rtx-4080-super-595.txt", "load :: query-compute-apps"),
        {gpu["uuid"]: 0},
    )
    assert [(p["pid"], p["command"], p["gpu_mem"]) for p in apps] == [
        (2165, "/usr/bin/kwin_wayland", 25 * MIB),
        (5022, "ffmpeg", 503 * MIB),
        (5021, "ffmpeg", 360 * MIB),
    ]
    # A process on a card the query-gpu list did not name has no GPU index: left out.
    other = smi.apps_from_csv(
        _capture("capture-rtx-4080-super-595.txt", "load :: query-compute-apps"),
        {"GPU-not-this-card": 0},
    )
    assert other == []


def test_values() -> None:
    for missing in ("[N/A]", "N/A", "[Not Supported]", "", "  ", "[Unknown Error]",
                    "[Requested functionality has been deprecated]"):
        assert smi.value(missing) is None
        assert smi.number(missing) is None
    assert smi.number("26.78 W") == pytest.approx(26.78)
    assert smi.integer("16x") == 16
    assert smi.integer("0x0000000000000004") == 4
    assert smi.mib("2566 MiB") == 2566 * MIB
    assert smi.flag("Enabled") is True and smi.flag("Disabled") is False
    assert smi.flag("[N/A]") is None
    assert smi.pstate("P8") == 8 and smi.pstate("N/A") is None
    # nvidia-smi's other spellings: "Yes"/"No" (pending), "Active"/"Not Active" (clock
    # event reasons), "On"/"Off" (persistence in the default table)
    for word in ("Yes", "Active", "On", "true"):
        assert smi.flag(word) is True, word
    for word in ("No", "Not Active", "Off", "FALSE"):
        assert smi.flag(word) is False, word
    assert smi.flag("Maybe") is None
    assert smi.pstate("X8") is None and smi.pstate("P") is None


def test_header_with_and_without_units_reads_the_same() -> None:
    with_units = "index, memory.used [MiB], utilization.gpu [%]\n0, 100 MiB, 5 %\n"
    nounits = "index, memory.used [MiB], utilization.gpu [%]\n0, 100, 5\n"
    a, _ = smi.gpus_from_csv(with_units)
    b, _ = smi.gpus_from_csv(nounits)
    assert a == b
    assert a[0]["mem_used"] == 100 * MIB and a[0]["util_gpu"] == 5


def test_no_driver_message() -> None:
    text = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    with pytest.raises(smi.SmiError):
        smi.gpus_from_csv(text)
    out = fallback_snapshot("h", text + f"{smi.MARK} 9\n{smi.MARK} 9\n{smi.MARK} 0\n", 1.0)
    assert out["state"] == model.HOST_NO_GPU
    assert "couldn't communicate" in out["error"]


def test_nvidia_smi_missing() -> None:
    out = fallback_snapshot(
        "h", f"sh: 1: nvidia-smi: not found\n{smi.MARK} 127\n{smi.MARK} 127\n{smi.MARK} 0\n", 1.0
    )
    assert out["state"] == model.HOST_NO_GPU


def test_whole_fallback_output_joins_ps() -> None:
    capture = FIXTURES / "capture-h100-80gb-hbm3-590.txt"
    gpu_csv = capture_section(capture.read_text(), "load :: query-gpu")
    apps_csv = capture_section(capture.read_text(), "load :: query-compute-apps")
    ps = (
        "    1     0     0 root             Ss   9000  0.0  1024 /sbin/init\n"
        "11300     1  1000 alice            S    4000  0.1  2048 bash -l\n"
        "11327 11300  1000 alice            Rl    120 99.5 409600 /root/tools/memhog --size 2G\n"
        "11328 11300  1000 alice            Z      60  0.0     0 [memhog] <defunct>\n"
    )
    table = capture_section(capture.read_text(), "load :: nvidia-smi (default table)")
    output = (
        f"{gpu_csv}{smi.MARK} 0\n{apps_csv}{smi.MARK} 0\n{table}{smi.MARK} 0\n"
        f"{ps}{smi.MARK} 0\n"
    )
    data = fallback_snapshot("gpu-x", output, 10_000.0)
    snap = HostSnapshot.from_dict(data)
    assert snap.state == model.HOST_FALLBACK and snap.ok
    assert snap.source == "smi"
    assert "processes.start_ticks" in snap.missing
    by_pid = {p.pid: p for p in snap.processes}
    assert set(by_pid) == {11327, 11328, 11345}
    hog = by_pid[11327]
    assert hog.user == "alice" and hog.uid == 1000
    assert hog.command == "/root/tools/memhog --size 2G"
    assert hog.start_time == pytest.approx(10_000.0 - 120)
    assert hog.rss == 409600 * 1024
    assert hog.parent_command == "bash -l"
    assert hog.gpu_mem == 2566 * MIB
    assert hog.start_ticks is None  # ps cannot give the identity kills need
    assert by_pid[11328].state == "Z"
    assert by_pid[11345].visible is False  # listed by nvidia-smi, absent from ps
    assert by_pid[11345].command == "./gpu_burn"


def test_fallback_command_is_fixed_text() -> None:
    # Nothing from data can reach it: it is a module constant with no format fields left.
    assert "{" not in smi.FALLBACK_COMMAND
    assert smi.FALLBACK_COMMAND.count(smi.MARK) == len(smi.Mode().sections()) == 4


@pytest.mark.parametrize(
    ("name", "count", "procs"),
    [
        ("xml-tesla-t4-515.xml", 1, 2),
        ("xml-rtx-3080-536.xml", 1, 5),
        ("xml-rtx-4000-sff-ada-595.xml", 1, None),
        ("xml-a100-sxm4-mig-535.xml", 1, None),
        ("xml-gtx-1660-ti.xml", 1, None),
    ],
)
def test_xml_captures(name: str, count: int, procs: int | None) -> None:
    gpus, host, processes = smi.parse_xml((FIXTURES / name).read_text())
    assert len(gpus) == count
    assert host["driver_version"]
    for gpu in gpus:
        assert gpu["name"] and gpu["uuid"]
        assert gpu["mem_total"] is not None and gpu["mem_total"] > 0
        HostSnapshot.from_dict({"host": "x", "time": 0.0, "gpus": [gpu]})
    if procs is not None:
        assert len(processes) == procs
    for proc in processes:
        assert proc["pid"] > 0 and proc["type"] in ("C", "G", "C+G")


def test_xml_t4_details() -> None:
    gpus, host, procs = smi.parse_xml((FIXTURES / "xml-tesla-t4-515.xml").read_text())
    gpu = gpus[0]
    assert host == {"driver_version": "515.105.01", "cuda_version": "11.7"}
    assert gpu["temp"] == 40 and gpu["power_draw"] == pytest.approx(26.78)
    assert gpu["power_limit"] == pytest.approx(70.0)
    assert gpu["clock_sm"] == 585 and gpu["clock_sm_max"] == 1590
    assert gpu["fan"] is None
    assert gpu["clock_event_reasons"] == ()  # old clocks_throttle_reasons tags, none active
    assert {p["type"] for p in procs} == {"G", "C"}


def test_xml_ada_types_and_new_power_tags() -> None:
    gpus, _, procs = smi.parse_xml((FIXTURES / "xml-rtx-4000-sff-ada-595.xml").read_text())
    assert gpus[0]["power_limit"] == pytest.approx(70.0)
    assert gpus[0]["fan"] == 30
    assert "gpu_idle" in gpus[0]["clock_event_reasons"]
    assert {"G", "C", "C+G"} <= {p["type"] for p in procs}


def test_old_driver_switches_to_xml() -> None:
    error = 'Field "clocks.max.sm" is not a valid field to query.\n'
    csv_out = f"{error}{smi.MARK} 2\n{smi.MARK} 0\n{smi.MARK} 0\n"
    data = fallback_snapshot("old", csv_out, 5.0)
    assert data["state"] == model.HOST_NO_GPU and smi.Mode().after(data) == smi.Mode(xml=True)
    xml = (FIXTURES / "xml-tesla-t4-515.xml").read_text()
    out = fallback_snapshot("old", f"{xml}\n{smi.MARK} 0\n{smi.MARK} 0\n", 5.0, xml=True)
    snap = HostSnapshot.from_dict(out)
    assert snap.state == model.HOST_FALLBACK
    assert snap.driver_version == "515.105.01" and snap.cuda_version == "11.7"
    assert snap.gpus[0].name == "Tesla T4"
    # no ps lines: not in our namespace
    assert snap.processes and all(not p.visible for p in snap.processes)
    broken = fallback_snapshot("old", f"garbage\n{smi.MARK} 9\n{smi.MARK} 0\n", 5.0, xml=True)
    # not XML at all: output of the wrong shape is an error quoting its first line
    assert broken["state"] == model.HOST_ERROR and "'garbage'" in broken["error"]


# -- indexes, memory health and thresholds in the fallbacks ---------------------------


def _joined(minors: tuple[int, int]) -> str:
    """Two real single-GPU captures in one document, with these minor numbers: the shape
    of a real dual-A5000 `nvidia-smi -q -x` that lists minor 1 before minor 0."""
    first = ET.parse(FIXTURES / "xml-tesla-t4-515.xml").getroot()
    second = ET.parse(FIXTURES / "xml-rtx-4000-sff-ada-595.xml").getroot().find("gpu")
    assert second is not None
    first.append(second)
    for gpu, minor in zip(first.findall("gpu"), minors, strict=True):
        node = gpu.find("minor_number")
        assert node is not None
        node.text = str(minor)
    return ET.tostring(first, encoding="unicode")


def test_xml_index_is_the_document_order_not_the_minor_number() -> None:
    gpus, _, procs = smi.parse_xml(_joined((1, 0)))
    assert [(g["index"], g["name"]) for g in gpus] == [(0, "Tesla T4"),
                                                      (1, "NVIDIA RTX 4000 SFF Ada Generation")]
    t4_procs, ada_procs = ({p["pid"] for p in procs if p["gpu"] == i} for i in (0, 1))
    assert len(t4_procs) == 2 and ada_procs and not t4_procs & ada_procs


def test_xml_memory_health_of_real_captures() -> None:
    (t4,), _, _ = smi.parse_xml((FIXTURES / "xml-tesla-t4-515.xml").read_text())
    assert (t4["ecc_volatile_corrected"], t4["ecc_volatile_uncorrected"]) == (0, 0)
    assert (t4["ecc_aggregate_corrected"], t4["ecc_aggregate_uncorrected"]) == (0, 0)
    assert (t4["retired_pages_sbe"], t4["retired_pages_dbe"]) == (0, 0)
    assert t4["retired_pages_pending"] is False
    assert t4["remap_pending"] is None  # "N/A" on a T4: unknown, not "no"
    (ada,), _, _ = smi.parse_xml((FIXTURES / "xml-rtx-4000-sff-ada-595.xml").read_text())
    assert (ada["remapped_correctable"], ada["remapped_uncorrectable"]) == (0, 0)
    assert ada["remap_pending"] is False and ada["remap_failure"] is False
    (gtx,), _, _ = smi.parse_xml((FIXTURES / "xml-gtx-1660-ti.xml").read_text())
    assert gtx["ecc_volatile_uncorrected"] is None  # no ECC on a consumer card


def test_newer_drivers_temperature_thresholds_relative_to_the_tlimit() -> None:
    # RTX 4000 Ada, R595: 38 C now, 49 C below its T.Limit (87 C); slowdown at -2 (89 C),
    # shutdown at -7 (94 C), max operating at 0 (87 C).
    (ada,), _, _ = smi.parse_xml((FIXTURES / "xml-rtx-4000-sff-ada-595.xml").read_text())
    assert ada["temp"] == 38
    assert (ada["temp_slowdown"], ada["temp_shutdown"], ada["temp_max_operating"]) == (89, 94, 87)
    # the older absolute fields still win where present (A100, R535: 89/92/85)
    (a100,), _, _ = smi.parse_xml((FIXTURES / "xml-a100-sxm4-mig-535.xml").read_text())
    assert (a100["temp_slowdown"], a100["temp_shutdown"], a100["temp_max_operating"]) == (
        89, 92, 85)


def test_pending_row_remap_on_a_fallback_host_is_critical() -> None:
    from gputop.analysis import health

    root = ET.fromstring((FIXTURES / "xml-rtx-4000-sff-ada-595.xml").read_text())
    pending = root.find("gpu/remapped_rows/remapped_row_pending")
    assert pending is not None
    pending.text = "Yes"
    xml = ET.tostring(root, encoding="unicode")
    out = fallback_snapshot("old", f"{xml}\n{smi.MARK} 0\n{smi.MARK} 0\n", 5.0, xml=True)
    found = health.warnings(HostSnapshot.from_dict(out))
    assert ("remap-pending", model.CRITICAL, 0) in {(w.code, w.severity, w.gpu) for w in found}
    # the CSV fallback asks for the same facts, and reads them
    for field in ("remapped_rows.pending", "remapped_rows.failure", "retired_pages.pending",
                  "retired_pages.single_bit_ecc.count", "retired_pages.double_bit.count"):
        assert field in smi.GPU_FIELDS.split(",")
    csv_text = (
        "index, name, memory.total [MiB], memory.used [MiB], "
        "ecc.errors.uncorrected.volatile.total, retired_pages.pending, "
        "retired_pages.double_bit.count, remapped_rows.pending, remapped_rows.failure\n"
        "0, NVIDIA A100-SXM4-80GB, 81920 MiB, 100 MiB, 0, No, 2, Yes, No\n"
    )
    (gpu,), _ = smi.gpus_from_csv(csv_text)
    assert gpu["remap_pending"] is True and gpu["remap_failure"] is False
    assert gpu["retired_pages_pending"] is False and gpu["retired_pages_dbe"] == 2
    snap = HostSnapshot(host="old", time=5.0, state=model.HOST_FALLBACK,
                        gpus=(model.Gpu.from_dict(gpu),))
    assert [(w.code, w.severity) for w in health.warnings(snap)] == [
        ("remap-pending", model.CRITICAL)]


def test_xml_mig_devices_of_an_a100() -> None:
    """Issue 19: the MIG section of a real A100 capture (four instances, no processes)."""
    gpus, _, _ = smi.parse_xml((FIXTURES / "xml-a100-sxm4-mig-535.xml").read_text())
    gpu = HostSnapshot.from_dict({"host": "x", "time": 0.0, "gpus": gpus}).gpus[0]
    assert (gpu.mig_mode, gpu.mig_mode_pending) == (True, True)
    assert [(d.index, d.gi, d.ci) for d in gpu.mig_devices] == [
        (0, 3, 0), (1, 4, 0), (2, 5, 0), (3, 6, 0)]
    first = gpu.mig_devices[0]
    assert (first.mem_total, first.mem_used, first.bar1_total) == (
        19968 << 20, 12 << 20, 32767 << 20)
    assert first.uuid is None and first.label == f"{gpu.index}:0"  # minor number 1 here


def test_xml_process_on_a_mig_device() -> None:
    text = (FIXTURES / "xml-a100-sxm4-mig-535.xml").read_text().replace(
        "<processes />",
        "<processes><process_info><gpu_instance_id>3</gpu_instance_id>"
        "<compute_instance_id>0</compute_instance_id><pid>4242</pid><type>C</type>"
        "<process_name>python</process_name><used_memory>10 MiB</used_memory>"
        "</process_info></processes>", 1)
    _, _, (proc,) = smi.parse_xml(text)
    assert (proc["mig_device"], proc["gpu_instance_id"], proc["compute_instance_id"]) == (0, 3, 0)
