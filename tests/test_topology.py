"""The `topo -m` matrix: built from snapshots, rendered, and compared with nvidia-smi's own
output (the real capture) and with the simulator's NVLink node and PCIe lab box."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.analysis import topology
from gputop.model import Gpu, HostSnapshot, Link

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"
VOCABULARY = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS)$")


def nvlink_node() -> HostSnapshot:
    gpus = tuple(
        Gpu(index=i, cpu_affinity="0-55,112-167" if i < 4 else "56-111,168-223",
            numa_node=i // 4)
        for i in range(8)
    )
    links = tuple(Link(a, b, "NV18", 18) for a in range(8) for b in range(a + 1, 8))
    return HostSnapshot(host="dgx", time=0.0, gpus=gpus, topology=links)


def pcie_box() -> HostSnapshot:
    gpus = tuple(
        Gpu(index=i, cpu_affinity="0-15" if i < 2 else "16-31", numa_node=0 if i < 2 else 1)
        for i in range(4)
    )
    links = (
        Link(0, 1, "PIX"),
        Link(2, 3, "PXB"),
        Link(0, 2, "SYS"),
        Link(0, 3, "SYS"),
        Link(1, 2, "SYS"),
        Link(1, 3, "SYS"),
    )
    return HostSnapshot(host="lab", time=0.0, gpus=gpus, topology=links)


def capture_topo_m() -> str:
    text = (FIXTURES / "capture-h100-80gb-hbm3-590.txt").read_text()
    start = text.index("# $ nvidia-smi topo -m")
    end = text.index("# capabilities :: nvlink -s")
    return text[start:end]


def test_build_nvlink_node() -> None:
    m = topology.build(nvlink_node())
    assert m.gpus == tuple(range(8))
    for a in range(8):
        for b in range(8):
            assert m.cell(a, b) == ("X" if a == b else "NV18")
            assert m.nvlinks[a][b] == (0 if a == b else 18)
    assert m.numa_affinity == ("0",) * 4 + ("1",) * 4
    assert m.cpu_affinity[7] == "56-111,168-223"


def test_build_pcie_box_is_symmetric() -> None:
    m = topology.build(pcie_box())
    assert m.cell(1, 0) == m.cell(0, 1) == "PIX"
    assert m.cell(3, 2) == "PXB"
    assert m.cell(3, 1) == m.cell(1, 3) == "SYS"
    assert all(sum(row) == 0 for row in m.nvlinks)


def test_missing_pairs_and_fields_are_not_invented() -> None:
    snap = HostSnapshot(host="h", time=0.0, gpus=(Gpu(index=0), Gpu(index=1)))
    m = topology.build(snap)
    assert m.cell(0, 1) == "N/A"
    assert m.cpu_affinity == ("N/A", "N/A") and m.numa_affinity == ("N/A", "N/A")


def test_render_has_topo_m_layout() -> None:
    text = topology.render_text(pcie_box())
    lines = text.splitlines()
    assert lines[0].split() == ["GPU0", "GPU1", "GPU2", "GPU3", "CPU", "Affinity", "NUMA",
                                "Affinity"]
    assert lines[1].split() == ["GPU0", "X", "PIX", "SYS", "SYS", "0-15", "0"]
    assert lines[4].split() == ["GPU3", "SYS", "SYS", "PXB", "X", "16-31", "1"]
    assert "Legend:" in lines
    assert "  NV#  = Connection traversing a bonded set of # NVLinks" in lines
    # columns line up: every row's matrix cells start at the header's column offsets
    header_at = [lines[0].index(f"GPU{i}") for i in range(4)]
    for row in lines[1:5]:
        for offset in header_at:
            assert row[offset] != " "


@pytest.mark.parametrize("make", [nvlink_node, pcie_box])
def test_render_parses_back_to_the_json_form(make) -> None:  # type: ignore[no-untyped-def]
    snap = make()
    parsed = topology.parse_topo_m(topology.render_text(snap))
    expected = topology.to_dict(topology.build(snap))
    assert parsed == expected


def test_real_capture_parses_into_the_same_shape() -> None:
    real = topology.parse_topo_m(capture_topo_m())
    # the capture: one H100, tab separated header inside ESC[4m ... ESC[0m
    assert real["gpus"] == [0]
    assert real["matrix"] == [["X"]]
    assert real["cpu_affinity"] == ["0-19"]
    assert real["numa_affinity"] == ["0"]
    ours = topology.snapshot_dict(nvlink_node())
    assert set(real) <= set(ours)
    for key in real:
        assert type(real[key]) is type(ours[key])
    # same legend, word for word, in the same order
    assert list(real["legend"].items()) == list(ours["legend"].items())


def test_real_capture_header_vocabulary_matches_ours() -> None:
    raw = capture_topo_m()
    assert "\x1b[4m" in raw  # the underline the parser must strip
    header = next(line for line in raw.splitlines() if "CPU Affinity" in line)
    real_columns = [c for c in re.sub(r"\x1b\[[0-9;]*m", "", header).split("\t") if c]
    ours = topology.render_text(nvlink_node()).splitlines()[0]
    our_columns = re.split(r"\s{2,}", ours.strip())
    shared = [c for c in real_columns if c in our_columns]
    assert shared == ["GPU0", "CPU Affinity", "NUMA Affinity"]


def test_parse_multi_gpu_nvidia_smi_rows_with_nic_columns() -> None:
    # The tab layout nvidia-smi prints on a multi-GPU box with a NIC (same format as the
    # capture, more columns): NIC rows and columns are skipped.
    text = (
        "\t\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
        "GPU0\t X \tNV12\tSYS\t0-23\t0\t\tN/A\n"
        "GPU1\tNV12\t X \tPHB\t24-47\t1\t\tN/A\n"
        "NIC0\tSYS\tPHB\t X \t\t\t\t\n"
        "\nLegend:\n\n  X    = Self\n"
    )
    parsed = topology.parse_topo_m(text)
    assert parsed["gpus"] == [0, 1]
    assert parsed["matrix"] == [["X", "NV12"], ["NV12", "X"]]
    assert parsed["nvlinks"] == [[0, 12], [12, 0]]
    assert parsed["cpu_affinity"] == ["0-23", "24-47"]
    assert parsed["numa_affinity"] == ["0", "1"]


def test_parse_rejects_other_text() -> None:
    with pytest.raises(ValueError, match="CPU Affinity"):
        topology.parse_topo_m("GPU 0: NVIDIA H100 (UUID: GPU-0)")


# ---------------------------------------------------------------- simulator scenarios


def demo_snapshot(name: str) -> HostSnapshot:
    from gputop.config import Config
    from gputop.options import SourceOptions
    from gputop.sources.opener import collect_once

    (snap,) = collect_once(SourceOptions(demo=name), Config()).snapshots
    return snap


def test_dgx_h100_scenario_is_all_nvlink() -> None:
    snap = demo_snapshot("dgx-h100")
    m = topology.build(snap)
    assert len(m.gpus) == 8
    for a in m.gpus:
        for b in m.gpus:
            cell = m.cell(a, b)
            assert VOCABULARY.match(cell), cell
            if a == b:
                assert cell == "X"
            else:
                assert cell.startswith("NV") and m.nvlinks[a][b] > 0
                assert cell == f"NV{m.nvlinks[a][b]}"
    assert all(c != "N/A" for c in m.cpu_affinity)
    assert all(n != "N/A" for n in m.numa_affinity)


def test_lab_scenario_is_pcie_over_two_numa_nodes() -> None:
    snap = demo_snapshot("lab")
    m = topology.build(snap)
    assert len(m.gpus) >= 2
    assert len(set(m.numa_affinity)) == 2
    for a in m.gpus:
        for b in m.gpus:
            cell = m.cell(a, b)
            assert VOCABULARY.match(cell), cell
            assert not cell.startswith("NV")
            if a != b and m.numa_affinity[m.gpus.index(a)] != m.numa_affinity[m.gpus.index(b)]:
                # crossing NUMA nodes goes over the SMP interconnect
                assert cell == "SYS"
    # render and parse back: the text view and the JSON view agree
    assert topology.parse_topo_m(topology.render_text(snap)) == topology.to_dict(m)


def gputop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputop.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_gputop_topo_command_text_and_json() -> None:
    text = gputop("topo", "--demo", "lab")
    assert text.returncode == 0, text.stderr
    assert "CPU Affinity" in text.stdout and "Legend:" in text.stdout
    assert "Traceback" not in text.stderr
    data = gputop("topo", "--demo", "lab", "--json")
    assert data.returncode == 0, data.stderr
    doc = json.loads(data.stdout)
    (host,) = doc["hosts"]
    parsed = topology.parse_topo_m(text.stdout)
    assert host["matrix"] == parsed["matrix"]
    assert host["numa_affinity"] == parsed["numa_affinity"]


def test_gputop_topo_unknown_host_is_one_line() -> None:
    result = gputop("topo", "--demo", "lab", "--host", "nope")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "nope" in result.stderr
