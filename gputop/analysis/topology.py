"""The GPU x GPU topology matrix in `nvidia-smi topo -m` vocabulary.

Pure: built from ``HostSnapshot.topology`` (read once per connection by the collector)
and each GPU's CPU affinity and NUMA node.  ``render_text`` prints the layout admins know
from ``nvidia-smi topo -m``; ``to_dict`` is the ``--json`` form; ``parse_topo_m`` reads
nvidia-smi's own output into the same dict, which the tests use to compare the two and
the nvidia-smi fallback source may use on hosts without Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gputop.model import HostSnapshot

SELF = "X"
UNKNOWN = "N/A"

# nvidia-smi's legend, in its order (nearest last).
LEGEND: tuple[tuple[str, str], ...] = (
    ("X", "Self"),
    (
        "SYS",
        "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
        "(e.g., QPI/UPI)",
    ),
    (
        "NODE",
        "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
        "within a NUMA node",
    ),
    ("PHB", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"),
    (
        "PXB",
        "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    ),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
)

# Nearest first: used to rank pairs (best link for a multi-GPU job).
_RANK = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}


def kind_family(kind: str) -> str:
    """ "NV18" -> "NV"; everything else as is (for colours and ranking)."""
    return "NV" if kind.startswith("NV") else kind


def rank(kind: str) -> int:
    return _RANK.get(kind_family(kind), 9)


@dataclass(frozen=True, slots=True)
class Matrix:
    gpus: tuple[int, ...]
    cells: tuple[tuple[str, ...], ...]  # cells[i][j] for gpus[i], gpus[j]
    nvlinks: tuple[tuple[int, ...], ...]  # bonded NVLinks per pair, 0 when none
    cpu_affinity: tuple[str, ...]  # per GPU, "N/A" when unknown
    numa_affinity: tuple[str, ...]

    def cell(self, a: int, b: int) -> str:
        return self.cells[self.gpus.index(a)][self.gpus.index(b)]


def build(snapshot: HostSnapshot) -> Matrix:
    gpus = tuple(sorted(g.index for g in snapshot.gpus))
    pos = {g: n for n, g in enumerate(gpus)}
    cells = [[UNKNOWN] * len(gpus) for _ in gpus]
    links = [[0] * len(gpus) for _ in gpus]
    for n in range(len(gpus)):
        cells[n][n] = SELF
    for link in snapshot.topology:
        a, b = pos.get(link.gpu_a), pos.get(link.gpu_b)
        if a is None or b is None or a == b:
            continue
        kind = link.kind
        if kind.startswith("NV") and link.nvlinks and kind == "NV":
            kind = f"NV{link.nvlinks}"
        count = link.nvlinks or _nv_count(kind)
        # Links are symmetric; a source may list each pair once or twice.
        for i, j in ((a, b), (b, a)):
            cells[i][j] = kind
            links[i][j] = count
    cpu = []
    numa = []
    for index in gpus:
        gpu = snapshot.gpu(index)
        cpu.append(gpu.cpu_affinity if gpu is not None and gpu.cpu_affinity else UNKNOWN)
        numa.append(
            str(gpu.numa_node) if gpu is not None and gpu.numa_node is not None else UNKNOWN
        )
    return Matrix(
        gpus=gpus,
        cells=tuple(tuple(row) for row in cells),
        nvlinks=tuple(tuple(row) for row in links),
        cpu_affinity=tuple(cpu),
        numa_affinity=tuple(numa),
    )


def _nv_count(kind: str) -> int:
    return int(kind[2:]) if kind.startswith("NV") and kind[2:].isdigit() else 0


def to_dict(matrix: Matrix) -> dict[str, Any]:
    """The --json form; `parse_topo_m` returns the same shape."""
    return {
        "gpus": list(matrix.gpus),
        "matrix": [list(row) for row in matrix.cells],
        "nvlinks": [list(row) for row in matrix.nvlinks],
        "cpu_affinity": list(matrix.cpu_affinity),
        "numa_affinity": list(matrix.numa_affinity),
        "legend": {key: text for key, text in LEGEND},
    }


def snapshot_dict(snapshot: HostSnapshot) -> dict[str, Any]:
    data = to_dict(build(snapshot))
    data["host"] = snapshot.host
    return data


def render_text(snapshot: HostSnapshot | Matrix) -> str:
    """`nvidia-smi topo -m` layout: aligned columns, X on the diagonal, then the legend.

    nvidia-smi separates columns with tabs; we pad with spaces so the matrix stays
    aligned however wide a terminal's tab stops are.
    """
    matrix = snapshot if isinstance(snapshot, Matrix) else build(snapshot)
    header = ["", *(f"GPU{g}" for g in matrix.gpus), "CPU Affinity", "NUMA Affinity"]
    rows = [header]
    for n, gpu in enumerate(matrix.gpus):
        rows.append(
            [f"GPU{gpu}", *matrix.cells[n], matrix.cpu_affinity[n], matrix.numa_affinity[n]]
        )
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    lines = []
    for row in rows:
        cells = [text.ljust(widths[c]) for c, text in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    if not matrix.gpus:
        lines = ["no GPUs"]
    lines += ["", "Legend:", ""]
    lines += [f"  {key:<4} = {text}" for key, text in LEGEND]
    return "\n".join(lines) + "\n"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topo_m(text: str) -> dict[str, Any]:
    """Read `nvidia-smi topo -m` output (or ours) into the `to_dict` shape.

    nvidia-smi's header is tab separated and underlined (ESC[4m ... ESC[0m); rows are tab
    separated, and NIC rows/columns on machines with NICs are skipped.  Our own output
    is space padded; both are accepted.  ValueError for text that has no matrix.
    """
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    head_at = next((n for n, line in enumerate(lines) if "CPU Affinity" in line), None)
    if head_at is None:
        raise ValueError("no `CPU Affinity` header: not `nvidia-smi topo -m` output")
    header = _split(lines[head_at], header=True)
    columns = [c for c in header if c]
    gpu_cols = [c for c in columns if re.fullmatch(r"GPU\d+", c)]
    try:
        cpu_col = columns.index("CPU Affinity")
        numa_col = columns.index("NUMA Affinity")
    except ValueError:
        raise ValueError("header lacks CPU Affinity / NUMA Affinity columns") from None
    gpus: list[int] = []
    matrix: list[list[str]] = []
    cpu: list[str] = []
    numa: list[str] = []
    for line in lines[head_at + 1 :]:
        if not line.strip():
            break
        fields = _split(line, header=False)
        name, values = fields[0].strip(), [f.strip() for f in fields[1:]]
        if not re.fullmatch(r"GPU\d+", name):
            continue  # NIC rows
        by_col = dict(zip(columns, values, strict=False))
        gpus.append(int(name[3:]))
        matrix.append([by_col.get(c, "") for c in gpu_cols])
        cpu.append(values[cpu_col] if cpu_col < len(values) and values[cpu_col] else UNKNOWN)
        numa.append(values[numa_col] if numa_col < len(values) and values[numa_col] else UNKNOWN)
    if not gpus:
        raise ValueError("no GPU rows under the header")
    legend = {}
    for line in lines:
        match = re.match(r"^\s+(X|SYS|NODE|PHB|PXB|PIX|NV#)\s+=\s+(.*)$", line)
        if match:
            legend[match.group(1)] = match.group(2).strip()
    return {
        "gpus": gpus,
        "matrix": matrix,
        "nvlinks": [[_nv_count(cell) for cell in row] for row in matrix],
        "cpu_affinity": cpu,
        "numa_affinity": numa,
        "legend": legend,
    }


def _split(line: str, header: bool) -> list[str]:
    if "\t" in line:
        parts = line.split("\t")
        # nvidia-smi starts the header with a tab (the empty row-label column).
        return [p.strip() for p in parts] if header else parts
    # Our padded form: column names contain single spaces, separators are two or more.
    parts = re.split(r"\s{2,}", line.strip())
    return parts
