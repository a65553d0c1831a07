"""Busy cards with no listed process are not free (issue 41, point 3).

A container with its own pid namespace or a vGPU guest uses a card the driver lists no
process for: 100 % busy, 58.6 GiB used, "no processes".  Memory beyond the driver's own
reserve that no listed process holds is "in use by something unseen": `pick`, `reserve
--count` and `run` leave the card out, `--once` and `check` warn (the unseen-use rule).
The end-to-end tests read the fake driver's `container` scenario through the real pynvml,
and `run` is a real user's.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import fakenvml
from helpers.users import SYSTEM_PYTHON, ensure_users, portable_gputop_dir

from gputop.analysis import health, orphans
from gputop.analysis.pick import Want, choose, rank
from gputop.exitcodes import EXIT_WAIT_EXPIRED
from gputop.model import NO_PROCESS_LIST, Gpu, GpuProcess, HostSnapshot

GIB = 1024**3
MIB = 1024**2
NOW = 1_764_680_000.0
USER = "gt41unseen"
LIMIT_S = 120
UNSEEN_LINE = "in use by something unseen: 58.6 GiB used that no listed process holds"


def _card(index: int, used: float, util: int = 100, total: float = 80) -> Gpu:
    return Gpu(index=index, uuid=f"GPU-{index:04d}", mem_used=int(used * GIB),
               mem_total=int(total * GIB), util_gpu=util)


def _snap(*gpus: Gpu, processes: tuple[GpuProcess, ...] = (), **changes: Any) -> HostSnapshot:
    return HostSnapshot(host="node", time=NOW, gpus=gpus, processes=processes, **changes)


def _codes(snap: HostSnapshot) -> list[tuple[str, int | None]]:
    return [(w.code, w.gpu) for w in health.warnings(snap, None, None, NOW)]


# -- the rule, on hand-built snapshots ------------------------------------------------


def test_memory_no_listed_process_holds_is_unseen_use() -> None:
    snap = _snap(_card(0, 58.6), _card(1, 0.5, util=0))
    assert orphans.unseen_use(snap) == {0: UNSEEN_LINE}
    found = health.warnings(snap, None, None, NOW)
    assert [(w.code, w.gpu, w.severity) for w in found] == [("unseen-use", 0, "warning")]
    assert found[0].message == UNSEEN_LINE and "pid namespace" in (found[0].hint or "")


def test_listed_memory_and_the_drivers_reserve_are_not_unseen() -> None:
    job = GpuProcess(pid=7, gpu=0, user="ann", gpu_mem=58 * GIB)
    assert _codes(_snap(_card(0, 58.6), processes=(job,))) == []  # 0.6 GiB: the reserve
    # 80 GiB card: reserve 1 % (819 MiB) plus the margin 2 % (1.6 GiB) is the line.
    assert _codes(_snap(_card(0, 2.3))) == []
    assert _codes(_snap(_card(0, 2.5))) == [("unseen-use", 0)]
    # A small card: 512 MiB reserve plus 1 GiB.
    assert _codes(_snap(_card(0, 1.4, total=16))) == []
    assert _codes(_snap(_card(0, 1.6, total=16))) == [("unseen-use", 0)]


def test_a_desktop_cards_display_memory_is_not_unseen_but_a_container_beside_it_is() -> None:
    # The RTX 4000 Ada capture: 3534 MiB used, its four listed processes hold 1204 MiB.
    desktop = tuple(GpuProcess(pid=pid, gpu=0, type=kind, gpu_mem=mib * MIB)
                    for pid, kind, mib in ((1842, "G", 410), (3190, "G", 451),
                                           (4937, "C", 160), (5120, "C+G", 183)))
    ada = Gpu(index=0, mem_used=3534 * MIB, mem_total=20475 * MIB, util_gpu=3)
    assert _codes(_snap(ada, processes=desktop)) == []
    hidden = dataclasses.replace(ada, mem_used=ada.mem_used + 12 * GIB)  # type: ignore[operator]
    assert _codes(_snap(hidden, processes=desktop)) == [("unseen-use", 0)]
    # The same 2.3 GiB on a card that draws no desktop is someone's.
    compute = tuple(p for p in desktop if p.type == "C")
    assert _codes(_snap(ada, processes=compute)) == [("unseen-use", 0)]


def test_unknown_sizes_and_sources_without_a_process_list_say_nothing() -> None:
    sizeless = GpuProcess(pid=7, gpu=0, user="ann", gpu_mem=None)
    assert _codes(_snap(_card(0, 58.6), processes=(sizeless,))) == []
    exporter = _snap(_card(0, 58.6), missing=(NO_PROCESS_LIST,))
    assert orphans.unseen_use(exporter) == {}
    lost = dataclasses.replace(_card(0, 58.6), state="lost")
    assert orphans.unseen_use(_snap(lost)) == {}


def test_pick_leaves_an_unseen_card_out_unless_share() -> None:
    snap = _snap(_card(0, 58.6), _card(1, 58.6), _card(2, 0, util=0), _card(3, 0, util=0))
    ranking = rank(snap, Want(me="ann"), NOW)
    assert ranking.indexes == [2, 3]
    assert ranking.rejected == {0: UNSEEN_LINE, 1: UNSEEN_LINE}
    # Limits do not make it free: 21 GiB free is not 21 GiB nobody uses.
    assert rank(snap, Want(me="ann", min_free_mem=10 * GIB), NOW).indexes == [2, 3]
    answer = choose(snap, Want(count=3, me="ann"), NOW)
    assert not answer.units
    assert f"GPU 0: {UNSEEN_LINE}" in answer.why and "--share" in answer.why
    shared = rank(snap, Want(me="ann", share=True, min_free_mem=10 * GIB), NOW)
    assert shared.indexes == [2, 3, 0, 1]


# -- the fake driver's container host, end to end -----------------------------------


@pytest.fixture(scope="module")
def host() -> Iterator[tuple[Path, dict[str, str]]]:
    root = Path(tempfile.mkdtemp(prefix="gputop-unseen-"))
    try:
        os.chmod(root, 0o755)
        store = root / "store"
        store.mkdir()
        os.chmod(store, 0o1777)
        scenario = fakenvml.write_scenario(root / "scenario", fakenvml.template("container"))
        env = fakenvml.environment(scenario, fakenvml.install_library(root / "nvml"))
        (root / "config.yaml").write_text(f"reservations: {{dir: {store}}}\n")
        (root / "config.yaml").chmod(0o644)
        (root / "policy.yaml").write_text("starvation_limit: 30m\n")
        (root / "policy.yaml").chmod(0o644)
        env.update(HOME=str(root), GPUTOP_POLICY=str(root / "policy.yaml"))
        for name in ("GPUTOP_HOSTS", "GPUTOP_RESERVATIONS_DIR"):
            env.pop(name, None)
        yield root, env
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _gputop(host: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    root, env = host
    return subprocess.run([sys.executable, "-m", "gputop.cli", *args, "--config",
                           str(root / "config.yaml")], env=env, text=True,
                          capture_output=True, timeout=LIMIT_S, check=False)


def test_the_container_scenario_lists_no_process_on_its_busy_cards() -> None:
    devices = fakenvml.template("container")["devices"]
    assert [(d.get("util_gpu"), d.get("memory_used_mib"), d["processes"]) for d in devices] == [
        (100, 60006, []), (100, 60006, []), (0, None, []), (0, None, [])]


def test_pick_hands_out_only_the_idle_cards(host: tuple[Path, dict[str, str]]) -> None:
    two = _gputop(host, "pick", "--count", "2")
    assert two.returncode == 0, two.stderr
    assert two.stdout == "CUDA_VISIBLE_DEVICES=2,3\n"
    three = _gputop(host, "pick", "--count", "3")
    assert three.returncode != 0 and three.stdout == ""
    assert f"GPU 0: {UNSEEN_LINE}; GPU 1: {UNSEEN_LINE}" in three.stderr


def test_once_and_check_warn_of_the_unseen_use(host: tuple[Path, dict[str, str]]) -> None:
    once = _gputop(host, "--once")
    assert once.returncode == 0, once.stderr
    warned = [line for line in once.stdout.splitlines() if UNSEEN_LINE in line]
    assert [line.split()[:3] for line in warned] == [["WARNING", "GPU", "0"],
                                                     ["WARNING", "GPU", "1"]]
    check = _gputop(host, "check")
    assert check.returncode == 1, check.stdout + check.stderr
    assert check.stdout.count(UNSEEN_LINE) == 2


@pytest.fixture(scope="module")
def user() -> Iterator[Any]:
    with ensure_users([USER]) as (entry,):
        yield entry


def test_a_run_is_given_an_idle_card_never_an_unseen_one(
    host: tuple[Path, dict[str, str]], user: Any
) -> None:
    root, env = host
    with portable_gputop_dir("gputop-unseen-code-") as lib:
        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [SYSTEM_PYTHON, "-m", "gputop.cli", "run", "--config", str(root / "config.yaml"),
                 "--no-wait", *args, "--", "sh", "-c", 'echo "CVD=$CUDA_VISIBLE_DEVICES"'],
                env={**env, "PYTHONPATH": str(lib)}, text=True, capture_output=True,
                user=user.pw_uid, group=user.pw_gid, extra_groups=[], cwd="/",
                timeout=LIMIT_S, check=False)

        two = run("--gpus", "2")
        assert two.returncode == 0, two.stderr
        assert two.stdout == "CVD=2,3\n"
        three = run("--gpus", "3")
        assert three.returncode == EXIT_WAIT_EXPIRED, (three.stdout, three.stderr)
        assert "CVD=" not in three.stdout and UNSEEN_LINE in three.stderr
