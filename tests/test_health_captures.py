"""Health rules against real `nvidia-smi -q -x` captures (tests/fixtures/nvidia-smi).

A small reader turns each capture's <gpu> into a model.Gpu the way the NVML collector
would (Not Supported / N/A -> None), so the rules meet real field combinations: consumer
cards with most fields unsupported, a MIG A100, an idle card whose PCIe link trained
down, a T4 in an x8 slot.
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gputop.analysis import health
from gputop.analysis.health import Thresholds
from gputop.model import CRITICAL, INFO, WARNING, Gpu, GpuProcess, HostSnapshot

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"
MIB = 1024**2


def _text(gpu: ET.Element, path: str) -> str | None:
    node = gpu.find(path)
    if node is None or node.text is None:
        return None
    text = node.text.strip()
    if not text or text in ("N/A", "[N/A]") or "Not Supported" in text:
        return None
    return text


def _int(gpu: ET.Element, path: str) -> int | None:
    text = _text(gpu, path)
    if text is None:
        return None
    match = re.match(r"^(\d+)", text)
    return int(match.group(1)) if match else None


def _bool(gpu: ET.Element, path: str) -> bool | None:
    text = _text(gpu, path)
    if text is None:
        return None
    return text in ("Enabled", "Yes", "Active")


def _uncorrected(gpu: ET.Element) -> int | None:
    node = gpu.find("ecc_errors/volatile")
    if node is None:
        return None
    counts = []
    for child in node.iter():
        if "uncorrectable" in child.tag:
            text = (child.text or "").strip()
            if text.isdigit():
                counts.append(int(text))
    return sum(counts) if counts else None


def _reasons(gpu: ET.Element) -> tuple[str, ...] | None:
    for tag, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        node = gpu.find(tag)
        if node is not None:
            return tuple(
                child.tag.removeprefix(prefix)
                for child in node
                if (child.text or "").strip() == "Active"
            )
    return None


def gpus_from_xml(name: str) -> tuple[Gpu, ...]:
    root = ET.parse(FIXTURES / name).getroot()
    out = []
    for index, gpu in enumerate(root.findall("gpu")):
        link = "pci/pci_gpu_link_info"
        used = _int(gpu, "fb_memory_usage/used")
        total = _int(gpu, "fb_memory_usage/total")
        fan = _int(gpu, "fan_speed")
        out.append(
            Gpu(
                index=index,
                name=_text(gpu, "product_name"),
                pci_bus_id=gpu.get("id"),
                util_gpu=_int(gpu, "utilization/gpu_util"),
                mem_used=None if used is None else used * MIB,
                mem_total=None if total is None else total * MIB,
                temp=_int(gpu, "temperature/gpu_temp"),
                temp_slowdown=_int(gpu, "temperature/gpu_temp_slow_threshold"),
                temp_shutdown=_int(gpu, "temperature/gpu_temp_max_threshold"),
                fan=fan,
                fans=() if fan is None else (fan,),
                persistence_mode=_bool(gpu, "persistence_mode"),
                ecc_mode=_bool(gpu, "ecc_mode/current_ecc"),
                ecc_volatile_uncorrected=_uncorrected(gpu),
                retired_pages_pending=_bool(gpu, "retired_pages/pending_retirement"),
                remap_pending=_bool(gpu, "remapped_rows/remapped_row_pending"),
                remap_failure=_bool(gpu, "remapped_rows/remapped_row_failure"),
                clock_event_reasons=_reasons(gpu),
                pcie_gen=_int(gpu, f"{link}/pcie_gen/current_link_gen"),
                pcie_gen_max=_int(gpu, f"{link}/pcie_gen/max_link_gen"),
                pcie_width=_int(gpu, f"{link}/link_widths/current_link_width"),
                pcie_width_max=_int(gpu, f"{link}/link_widths/max_link_width"),
                mig_mode=_bool(gpu, "mig_mode/current_mig"),
            )
        )
    return tuple(out)


def processes_from_xml(name: str) -> tuple[GpuProcess, ...]:
    """Each card's listed processes (pid, type, memory): a card's memory is theirs, not
    someone unseen's (the unseen-use rule)."""
    root = ET.parse(FIXTURES / name).getroot()
    return tuple(
        GpuProcess(pid=int(_text(proc, "pid") or 0), gpu=index, type=_text(proc, "type"),
                   gpu_mem=None if used is None else used * MIB,
                   command=_text(proc, "process_name"))
        for index, gpu in enumerate(root.findall("gpu"))
        for proc in gpu.findall("processes/process_info")
        for used in [_int(proc, "used_memory")]
    )


def check(name: str) -> list:
    snap = HostSnapshot(host="capture", time=1.0, gpus=gpus_from_xml(name),
                        processes=processes_from_xml(name))
    return health.warnings(snap, None, Thresholds(), 1.0)


def test_reader_sees_the_capture_fields() -> None:
    # The reader must really read the files, or "no warnings" below would prove nothing.
    (t4,) = gpus_from_xml("xml-tesla-t4-515.xml")
    assert t4.name == "Tesla T4"
    assert (t4.pcie_width, t4.pcie_width_max, t4.pcie_gen, t4.pcie_gen_max) == (8, 16, 3, 3)
    assert t4.ecc_mode is True and t4.ecc_volatile_uncorrected == 0
    assert t4.retired_pages_pending is False and t4.persistence_mode is False
    assert t4.clock_event_reasons == ()
    (gtx,) = gpus_from_xml("xml-gtx-1660-ti.xml")
    assert gtx.ecc_mode is None and gtx.ecc_volatile_uncorrected is None
    assert gtx.fan == 0 and gtx.temp == 40
    assert (gtx.pcie_gen, gtx.pcie_gen_max) == (1, 3)
    assert gtx.clock_event_reasons == ("gpu_idle",)
    (ada,) = gpus_from_xml("xml-rtx-4000-sff-ada-595.xml")
    assert ada.clock_event_reasons == ("gpu_idle",)
    assert ada.remap_pending is False and ada.remap_failure is False
    assert ada.temp_slowdown is None
    (a100,) = gpus_from_xml("xml-a100-sxm4-mig-535.xml")
    assert a100.mig_mode is True and a100.util_gpu is None
    assert a100.remap_pending is None
    desktop = processes_from_xml("xml-rtx-4000-sff-ada-595.xml")
    assert [(p.pid, p.type, p.gpu_mem) for p in desktop][:2] == [
        (1842, "G", 410 * MIB), (3190, "G", 451 * MIB)]


def test_consumer_card_with_many_unsupported_fields_is_quiet() -> None:
    # GTX 1660 Ti: ECC/remap/retired N/A, fan stopped at 40 C, PCIe gen 1 of 3 while idle:
    # none of it is a fault.
    assert check("xml-gtx-1660-ti.xml") == []


def test_idle_ada_card_trained_down_is_quiet() -> None:
    # gen 1 of 4 while idle (clocks_event_reason_gpu_idle Active): power saving, no alarm.
    assert check("xml-rtx-4000-sff-ada-595.xml") == []


def test_rtx_3080_with_processes_is_quiet() -> None:
    assert check("xml-rtx-3080-536.xml") == []


def test_mig_a100_only_notes_persistence() -> None:
    # util N/A under MIG, remapped rows N/A: no false alarm; persistence off is an info.
    found = check("xml-a100-sxm4-mig-535.xml")
    assert [(w.code, w.severity) for w in found] == [("persistence-off", INFO)]


def test_t4_in_an_x8_link_is_flagged() -> None:
    # The T4 capture shows a x8 link on a x16 card: that capture carries the case.
    found = check("xml-tesla-t4-515.xml")
    assert [(w.code, w.severity) for w in found] == [
        ("pcie-width", WARNING),
        ("persistence-off", INFO),
    ]
    assert "x8" in found[0].message and "x16" in found[0].message


@pytest.mark.parametrize(
    "name",
    [
        "xml-gtx-1660-ti.xml",
        "xml-rtx-4000-sff-ada-595.xml",
        "xml-rtx-3080-536.xml",
        "xml-a100-sxm4-mig-535.xml",
        "xml-tesla-t4-515.xml",
    ],
)
def test_no_capture_is_critical(name: str) -> None:
    assert all(w.severity != CRITICAL for w in check(name))


def test_same_card_thermally_throttled_is_flagged() -> None:
    # The captures show only the idle reason; the same card with the thermal flags set
    # (the way NVML reports them) must warn.
    (ada,) = gpus_from_xml("xml-rtx-4000-sff-ada-595.xml")
    hot = dataclasses.replace(
        ada, clock_event_reasons=("hw_slowdown", "hw_thermal_slowdown"), util_gpu=100
    )
    desktop = processes_from_xml("xml-rtx-4000-sff-ada-595.xml")
    found = health.warnings(HostSnapshot(host="c", time=1.0, gpus=(hot,), processes=desktop))
    assert [(w.code, w.severity) for w in found] == [
        ("pcie-gen", WARNING),  # busy at gen 1 of 4 is now a fault
        ("thermal-slowdown", WARNING),
    ]


@pytest.mark.parametrize(
    "name",
    [
        "xml-gtx-1660-ti.xml",
        "xml-rtx-4000-sff-ada-595.xml",
        "xml-rtx-3080-536.xml",
        "xml-a100-sxm4-mig-535.xml",
        "xml-tesla-t4-515.xml",
    ],
)
def test_fallback_parser_gives_the_same_verdict(name: str) -> None:
    # Hosts without Python are read through gputop/sources/smi.py's XML parser: the
    # rules must reach the same verdict on what it produces, processes included.
    from gputop.model import HOST_FALLBACK
    from gputop.sources import smi

    gpus, _host, procs = smi.parse_xml((FIXTURES / name).read_text())
    snap = HostSnapshot.from_dict(
        {"host": "capture", "time": 1.0, "state": HOST_FALLBACK, "gpus": gpus,
         "processes": procs}
    )
    assert snap.ok and snap.gpus
    ours = [(w.code, w.severity) for w in check(name)]
    theirs = [(w.code, w.severity) for w in health.warnings(snap, None, Thresholds(), 1.0)]
    assert theirs == ours


# -- `gputop check`'s verdict on every CSV capture, read by the real fallback parser --------

CSV_CAPTURES = {
    # (capture, phase): the exact warning codes; none is a warning, so check exits 0
    ("capture-h100-80gb-hbm3-590.txt", "idle"): set(),
    ("capture-h100-80gb-hbm3-590.txt", "load"): set(),
    ("capture-h100-mig-590.txt", "idle"): set(),
    ("capture-h100-mig-590.txt", "load"): set(),
    ("capture-rtx-4080-super-595.txt", "idle"): set(),
    ("capture-rtx-4080-super-595.txt", "load"): set(),
    ("capture-l40s-595.txt", "idle"): {"persistence-off"},
    ("capture-l40s-595.txt", "load"): {"persistence-off"},
}


def csv_snapshot(name: str, phase: str) -> HostSnapshot:
    from sshd import capture_section

    from gputop.sources import smi

    text = (FIXTURES / name).read_text()
    gpus, _ = smi.gpus_from_csv(capture_section(text, f"{phase} :: query-gpu"))
    uuids = {g["uuid"]: g["index"] for g in gpus}
    apps = smi.apps_from_csv(capture_section(text, f"{phase} :: query-compute-apps"), uuids)
    return HostSnapshot.from_dict({"host": "capture", "time": 1.0, "gpus": gpus,
                                   "processes": apps})


@pytest.mark.parametrize(("name", "phase"), sorted(CSV_CAPTURES))
def test_csv_capture_verdict(name: str, phase: str) -> None:
    from gputop.commands.check import exit_code

    snap = csv_snapshot(name, phase)
    assert snap.gpus and snap.gpus[0].mem_total  # the parser really read the capture
    found = health.warnings(snap, None, Thresholds(), 1.0)
    assert {w.code for w in found} == CSV_CAPTURES[(name, phase)]
    assert exit_code(found) == 0


def test_idle_card_holding_a_loaded_model_is_not_a_problem() -> None:
    # The H100 under load, turned into an inference server between requests: 0 % util,
    # 90 % of the memory held by one process (vLLM --gpu-memory-utilization 0.9).
    snap = csv_snapshot("capture-h100-80gb-hbm3-590.txt", "load")
    gpu = snap.gpus[0]
    assert gpu.mem_total is not None
    server = dataclasses.replace(snap.processes[0], gpu_mem=int(gpu.mem_total * 0.9))
    held = dataclasses.replace(snap, gpus=(dataclasses.replace(
        gpu, util_gpu=0, mem_used=int(gpu.mem_total * 0.9)),), processes=(server,))
    assert health.warnings(held, None, Thresholds(), 1.0) == []
