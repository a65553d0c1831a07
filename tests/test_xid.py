"""The XID catalog and the kernel-log parser, against a real dmesg capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop.analysis import xid
from gputop.model import CRITICAL, WARNING, Gpu

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_application_xids_are_marked_and_not_critical(code: int) -> None:
    info = xid.lookup(code)
    assert info.app_fault
    assert info.severity == WARNING
    assert "application" in xid.describe(code)


@pytest.mark.parametrize("code", [48, 63, 64, 74, 79, 92, 94, 95, 119])
def test_hardware_xids_are_known_and_not_application(code: int) -> None:
    info = xid.lookup(code)
    assert info.name != "unknown XID"
    assert not info.app_fault
    assert info.hint
    assert "application" not in xid.describe(code)


@pytest.mark.parametrize("code", [48, 63, 64, 74, 79, 94, 95, 119, 120, 140])
def test_card_breaking_xids_are_critical(code: int) -> None:
    assert xid.lookup(code).severity == CRITICAL


def test_xid_92_is_a_warning_only() -> None:
    # A high single-bit error rate is corrected: plan a replacement, do not page anyone.
    assert xid.lookup(92).severity == WARNING


def test_unknown_code_keeps_its_number() -> None:
    info = xid.lookup(9999)
    assert info.code == 9999
    assert info.severity == WARNING
    assert "9999" in xid.describe(9999)


def test_catalog_entries_are_complete() -> None:
    for code, info in xid.CATALOG.items():
        assert info.code == code
        assert info.severity in (CRITICAL, WARNING)
        assert info.name and info.hint
    assert set(range(144, 151)) <= set(xid.CATALOG)


def test_parse_real_dmesg_capture() -> None:
    text = (FIXTURES / "dmesg-xid-119.log").read_text()
    found = xid.parse_kernel_log(text)
    # The capture holds 5 Xid lines among ~40 lines of GSP RPC dumps and a stack trace.
    assert len(found) == 5
    assert {x.xid for x in found} == {119}
    assert {x.pci_bus_id for x in found} == {"0000:9b:00"}
    first = found[0]
    assert first.pid == 2024380
    assert first.process == "nvidia-smi"
    assert first.detail.startswith("Timeout after 6s of waiting for RPC response from GPU4 GSP!")
    assert first.stamp == "Sun Feb 23 16:24:18 2025"
    assert first.time == 1740327858.0  # 2025-02-23 16:24:18 UTC
    assert [x.process for x in found] == [
        "nvidia-smi",
        "nvidia-smi",
        "nvidia-smi",
        "cache_mgr_main",
        "gpud",
    ]
    assert found[-1].pid == 1240590


def test_parse_lines_of_other_shapes() -> None:
    old = xid.parse_kernel_line(
        "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    )
    assert old is not None
    assert (old.xid, old.pid, old.process) == (79, None, None)
    assert old.detail == "GPU has fallen off the bus."
    assert old.stamp == "1234.567890" and old.time is None  # seconds since boot
    unknown_pid = xid.parse_kernel_line(
        "NVRM: Xid (PCI:0000:01:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception"
    )
    assert unknown_pid is not None and unknown_pid.xid == 13
    assert unknown_pid.pid is None
    assert unknown_pid.detail == "Graphics Exception"
    assert xid.parse_kernel_line("NVRM: GPU at PCI:0000:9b:00: GPU-509665ad") is None
    assert xid.parse_kernel_line("") is None


def test_kernel_lines_become_events_on_the_right_gpu() -> None:
    found = xid.parse_kernel_log((FIXTURES / "dmesg-xid-119.log").read_text())
    gpus = [
        Gpu(index=0, pci_bus_id="00000000:1B:00.0"),
        Gpu(index=4, pci_bus_id="00000000:9B:00.0"),  # NVML's spelling of 0000:9b:00
    ]
    events = xid.to_events(found, gpus, default_time=0.0)
    assert len(events) == 5
    assert {e.gpu for e in events} == {4}
    assert events[0].time == 1740327858.0
    assert "nvidia-smi" in (events[0].detail or "")
    # a line for a device this host does not list is placed on no GPU, not pinned on GPU 0
    unplaced = xid.to_events(found, gpus[:1], default_time=0.0)
    assert len(unplaced) == 5 and {e.gpu for e in unplaced} == {None}
    assert all((e.detail or "").startswith("PCI ") for e in unplaced)


def test_pci_matching() -> None:
    assert xid.same_pci_device("0000:9b:00", "00000000:9B:00.0")
    assert xid.same_pci_device("9b:00", "00000000:9B:00.0")
    assert not xid.same_pci_device("0000:9b:00", "00000000:9C:00.0")
    assert not xid.same_pci_device("0000:9b:00", None)
    assert not xid.same_pci_device("zz:zz", "00000000:9B:00.0")
