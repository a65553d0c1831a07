"""Issue 43.6: `--once` for many hosts starts with one line per host, problems first
(state, the cards free / busy / broken, the worst warning; for a host down, why), then the
detail; it exits 3 when any host could not be read, and `check` non-zero for them.

Real loopback sshd hosts beside dead ones: a refused port and a black-holed one (a
listening socket that never answers).  README's exit-code table is made from
gputop.exitcodes.TABLE.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from sshd import Blackhole, HostConf, SshdCluster

from gputop import exitcodes, model
from gputop.analysis import hoststatus
from gputop.commands import once
from gputop.model import Gpu, GpuProcess, HealthWarning, HostSnapshot

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_800_000_000.0
GIB = 1024**3
TIMEOUT = "15"  # the black-holed host costs this much; the live ones answer well within


def _gpu(index: int, util: int, state: str = model.GPU_OK) -> Gpu:
    return Gpu(index=index, state=state, util_gpu=util, mem_used=(40 if util else 0) * GIB,
               mem_total=80 * GIB)


def _host(name: str, utils: list[int], lost: int | None = None) -> HostSnapshot:
    gpus = tuple(_gpu(i, u, model.GPU_LOST if i == lost else model.GPU_OK)
                 for i, u in enumerate(utils))
    procs = tuple(GpuProcess(pid=100 + i, gpu=i, gpu_mem=40 * GIB, user="alice",
                             command="python train.py") for i, u in enumerate(utils) if u)
    return HostSnapshot(host=name, time=T0, gpus=gpus, processes=procs)


def _lab() -> tuple[list[HostSnapshot], dict[str, list[HealthWarning]]]:
    snaps = [
        _host("n01", [0, 0, 90, 90]),
        _host("n02", [90, 90, 90, 0], lost=3),
        model.error_snapshot("n03", T0, model.HOST_UNREACHABLE, "connection refused by n03:22"),
        _host("n04", [90, 90, 0, 0]),
        model.error_snapshot("n05", T0, model.HOST_TIMEOUT, "no SSH handshake in 15 s"),
    ]
    warnings = {
        "n02": [HealthWarning(model.WARNING, "pcie-width", "PCIe link x4", host="n02", gpu=1),
                HealthWarning(model.CRITICAL, "gpu-lost", "GPU 3 fell off the bus",
                              host="n02", gpu=3)],
        "n04": [HealthWarning(model.WARNING, "near-slowdown", "90 C", host="n04", gpu=0)],
    }
    return snaps, warnings


def _detail_order(details: list[str], names: list[str]) -> list[str]:
    """The hosts whose blocks follow the first one, top to bottom (a block's header
    starts with its name)."""
    heads = [line.split()[0] for d in details for line in d.splitlines()[:1] if line]
    return [h for h in heads if h in names]


def test_first_block_one_line_per_host_problems_first() -> None:
    snaps, warnings = _lab()
    text = once.render_text(snaps, warnings, width=None, now=T0)
    first, *details = text.split("\n\n")
    lines = first.splitlines()
    assert lines[0] == ("5 hosts: 2 down (1 unreachable, 1 timed out), 1 critical, 1 warning, "
                        "1 ok   12 GPUs: 4 free, 7 busy, 1 broken"), lines[0]
    assert lines[1].split() == ["HOST", "STATE", "FREE", "BUSY", "BROKEN", "WORST"]
    rows = [line.split(None, 5) for line in lines[2:]]
    # Down first (the hosts file's order), then CRITICAL, then WARNING, then the rest.
    assert [r[0] for r in rows] == ["n03", "n05", "n02", "n04", "n01"]
    assert rows[0][1:] == ["unreachable", "-", "-", "-", "connection refused by n03:22"]
    assert rows[2][1:] == ["ok", "0", "3", "1", "CRITICAL GPU 3: GPU 3 fell off the bus"]
    assert rows[3][1:] == ["ok", "2", "2", "0", "WARNING GPU 0: 90 C"]
    assert rows[4][1:] == ["ok", "2", "2", "0", "-"]
    # Then the detail, every host in the hosts file's order.
    names = ["n01", "n02", "n03", "n04", "n05"]
    assert _detail_order(details, names) == names


def test_first_block_fits_80_columns_and_says_reserved_cards() -> None:
    snaps, warnings = _lab()
    res = model.Reservation(gpu=0, user="carol", until=T0 + 3600, since=T0 - 60)
    snaps[0] = HostSnapshot(host="a-very-long-host-name-" * 3, time=T0, gpus=snaps[0].gpus,
                            reservations=(res,))
    text = once.render_text(snaps, warnings, width=80, now=T0)
    first = text.split("\n\n")[0].splitlines()
    assert all(once._display_width(line) <= 80 for line in first), first
    # Too long for one line: the hosts, then the cards.
    assert first[0].startswith("5 hosts: 2 down") and first[1].startswith("12 GPUs: ")
    assert "1 reserved" in first[1] and "RESERVED" in first[2]


def test_one_host_has_no_first_block() -> None:
    snaps, warnings = _lab()
    assert once.render_text(snaps[:1], warnings, now=T0).startswith("n01  ")


def test_the_cards_classes_are_the_cluster_overviews() -> None:
    """One home: the overview's cells and --once's counts classify each card alike."""
    from gputop.ui import cluster_cells

    snaps, warnings = _lab()
    warned = {(w.host, w.gpu) for ws in warnings.values() for w in ws if w.gpu is not None}
    totals = cluster_cells.totals(snaps, {}, T0, warned)
    counts: dict[str, int] = {}
    for snap in snaps:
        for kind, n in hoststatus.status(snap, warnings.get(snap.host, []), T0).gpus.items():
            counts[kind] = counts.get(kind, 0) + n
    assert counts == totals.gpus


def test_readme_exit_code_table_is_made_from_the_code() -> None:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- exit-codes[^>]*-->\n(.*?)<!-- /exit-codes -->", readme, re.S)
    assert found, "README.md has no exit-codes markers"
    assert found.group(1) == exitcodes.markdown_table(), (
        "README's exit-code table is stale: paste gputop.exitcodes.markdown_table()")
    declared = {v for k, v in vars(exitcodes).items() if k.startswith("EXIT_")
                and isinstance(v, int)} | set(exitcodes.EXIT_SIGNALS)
    tabled = [c for codes, _meaning in exitcodes.TABLE for c in codes]
    assert sorted(tabled) == sorted(declared), "one row per code, every code in a row"


# -- real hosts ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    # Scenarios without warnings of their own: `check`'s exit code is the dead hosts'.
    confs = [HostConf("oc-a", scenario="dgx-h100"), HostConf("oc-b", scenario="dgx-h100")]
    with SshdCluster(tmp_path_factory.mktemp("oncecluster"), confs) as cluster:
        yield cluster


def _hosts_file(lab: SshdCluster, path: Path, dead: list[tuple[str, str, int]]) -> Path:
    lab.hosts_yaml(path)
    with path.open("a") as out:
        for name, address, port in dead:
            out.write(f"  - name: {name}\n    hostname: {address}\n    port: {port}\n")
    return path


def _gputop(lab: SshdCluster, *args: str) -> subprocess.Popen[str]:
    env = lab.env()
    env["COLUMNS"] = "160"
    return subprocess.Popen([sys.executable, "-m", "gputop.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_real_hosts_beside_refused_and_black_holed_ones(lab: SshdCluster,
                                                        tmp_path: Path) -> None:
    live = _hosts_file(lab, tmp_path / "live.yaml", [])
    with Blackhole("127.0.0.251") as hole:
        # 127.0.0.9:1: nothing listens, the connection is refused at once.
        dead = [("oc-refused", "127.0.0.9", 1), ("oc-hole", hole.address, hole.port)]
        hosts = _hosts_file(lab, tmp_path / "hosts.yaml", dead)
        # Side by side: the black-holed host costs each run the whole --timeout.
        runs = {
            "once": _gputop(lab, "--hosts", str(hosts), "--once", "--timeout", TIMEOUT),
            "check": _gputop(lab, "--hosts", str(hosts), "check", "--timeout", TIMEOUT),
            "live": _gputop(lab, "--hosts", str(live), "check", "--timeout", TIMEOUT),
        }
        done = {name: (*run.communicate(timeout=120), run.returncode)
                for name, run in runs.items()}
    out, err, code = done["once"]
    assert code == exitcodes.EXIT_NO_DRIVER == 3, (out, err)
    assert "Traceback" not in err
    first, *details = out.split("\n\n")
    lines = first.splitlines()
    assert lines[0].startswith("4 hosts: 2 down (1 unreachable, 1 timed out), 2 ok   "
                               "16 GPUs: "), lines[0]
    rows = [line.split(None, 5) for line in lines[2:]]
    assert [r[0] for r in rows] == ["oc-refused", "oc-hole", "oc-a", "oc-b"], first
    assert rows[0][1] == "unreachable" and rows[0][5].startswith("connection refused by ")
    assert rows[1][1:3] == ["timed", "out"], rows[1]
    for row in rows[2:]:
        assert row[1] == "ok" and int(row[2]) + int(row[3]) == 8, row  # 8 cards, none broken
    # The detail follows, in the hosts file's order.
    names = ["oc-a", "oc-b", "oc-refused", "oc-hole"]
    assert _detail_order(details, names) == names
    assert re.search(r"^oc-refused .*UNREACHABLE", out, re.M), out
    assert re.search(r"^oc-hole .*TIMED OUT", out, re.M), out

    # check: the same live hosts alone are healthy (0); beside the dead ones a warning
    # for each (1), named in the report.
    live_out, live_err, live_code = done["live"]
    assert live_code == exitcodes.EXIT_OK, (live_out, live_err)
    out, err, code = done["check"]
    assert code == exitcodes.EXIT_WARNING, (out, err)
    assert out.startswith("4 host(s), 16 GPU(s)")
    assert re.search(r"WARNING +oc-refused +host +host unreachable", out), out
    assert re.search(r"WARNING +oc-hole +host +host timed out", out), out
