"""How often the dashboard's NVML stream reads a card's PCIe link (sources/nvml.py,
READ_EVERY and _pcie_link_urgent), on gputop's fake driver through the real pynvml:
fewer calls, and every PCIe warning a read of every field gives is still given.

Counts and simulated times, never clocks (issue 27).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers import fakenvml

ROOT = Path(__file__).resolve().parent.parent

# Per step: rewrite the scenario (the fake re-reads a changed file), then one read of a
# dashboard backend and one of a full backend at the step's time; the dashboard's PCIe
# calls and both reads' PCIe warnings (the real rules, default thresholds).
STEPS = """
import json, os, sys
import pynvml
from gputop.analysis import health
from gputop.model import HostSnapshot
from gputop.sources.nvml import NvmlBackend
sys.path.insert(0, sys.argv[1])
from helpers import fakenvml
scenario_path, steps = sys.argv[2], json.loads(sys.argv[3])
trace = os.environ["FAKENVML_TRACE"]
PCIE = ("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth")
dashboard, full = NvmlBackend(pynvml, dashboard=True), NvmlBackend(pynvml)

def pcie_warnings(reading, now):
    snap = HostSnapshot.from_dict({"host": "h", "time": now, **reading})
    return sorted([w.code, w.gpu] for w in health.warnings(snap, now=now)
                  if w.code.startswith("pcie"))

out = []
for now, scenario in steps:
    fakenvml.write_scenario(fakenvml.Path(scenario_path), scenario)
    seen = len(open(trace).read().splitlines())
    ours = dashboard.read(now)
    calls = [line.split()[0] for line in open(trace).read().splitlines()[seen:]]
    out.append({"now": now, "calls": sum(c in PCIE for c in calls),
                "dashboard": pcie_warnings(ours, now),
                "full": pcie_warnings(full.read(now), now),
                "gen": [g["pcie_gen"] for g in ours["gpus"]]})
print(json.dumps(out))
"""


def _card(util: int, gen: int = 5, width: int = 16) -> dict[str, Any]:
    return {"name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "util_gpu": util,
            "pcie": {"gen": gen, "width": width, "max_gen": 5, "max_width": 16}}


def _run(tmp_path: Path, steps: list[tuple[float, list[dict[str, Any]]]]) -> list[dict]:
    scenario = tmp_path / "scenario"
    fakenvml.write_scenario(scenario, {"devices": steps[0][1]})
    env = dict(fakenvml.environment(scenario), PYTHONPATH=str(ROOT),
               FAKENVML_TRACE=str(tmp_path / "trace"))
    plan = [(now, {"devices": cards}) for now, cards in steps]
    done = subprocess.run([sys.executable, "-c", STEPS, str(ROOT / "tests"), str(scenario),
                           json.dumps(plan)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    result: list[dict] = json.loads(done.stdout)
    return result


def test_a_busy_card_at_full_link_reads_it_every_ten_seconds(tmp_path: Path) -> None:
    from gputop.sources.nvml import READ_EVERY

    every = READ_EVERY["pcie_link"]
    times = [0.0, 1.0, 2.0, every - 0.5, every + 0.5, every + 1.5]
    # Two busy cards at their maximum, and an idle one whose link trained down to gen 1.
    cards = [_card(92), _card(92), _card(0, gen=1)]
    got = _run(tmp_path, [(now, cards) for now in times])
    assert [step["calls"] for step in got] == [6, 0, 0, 0, 6, 0]
    assert all(step["dashboard"] == step["full"] == [] for step in got)
    assert all(step["gen"] == [5, 5, 1] for step in got)


def test_no_pcie_warning_is_lost_and_none_outlasts_its_link(tmp_path: Path) -> None:
    from gputop.sources.nvml import READ_EVERY

    every = READ_EVERY["pcie_link"]
    # Second by second: card 1 drops to gen 3 under load (a fault: the full read warns at
    # once); card 0 goes idle (trained down to gen 1), then busy again at gen 5; card 1
    # recovers; card 0 loses width, then gets it back; card 2 turns busy at gen 1.
    plan: list[tuple[float, list[dict[str, Any]]]] = []
    for second in range(40):
        c0 = _card(0, gen=1) if 5 <= second < 12 else _card(92)
        if 14 <= second < 30:
            c0["pcie"]["width"] = 8
        c1 = _card(92, gen=3) if 4 <= second < 26 else _card(92)
        c2 = _card(0, gen=1) if second < 33 else _card(80, gen=1)
        plan.append((float(second), [c0, c1, c2]))
    got = _run(tmp_path, plan)
    full = [{tuple(w) for w in step["full"]} for step in got]
    ours = [{tuple(w) for w in step["dashboard"]} for step in got]
    assert {("pcie-gen", 1), ("pcie-width", 0), ("pcie-gen", 2)} <= set().union(*full)
    for i, step in enumerate(got):
        # Never a warning the full read does not give at the same moment: a kept value
        # does not outlast the link it describes.
        assert ours[i] <= full[i], step
        # Every warning the full read gives for READ_EVERY seconds on end is given by the
        # dashboard within them.
        for warning in full[i]:
            stretch = [j for j in range(i, len(got)) if got[j]["now"] <= step["now"] + every]
            if all(warning in full[j] for j in stretch) and got[stretch[-1]]["now"] >= (
                    step["now"] + every - 1):
                assert any(warning in ours[j] for j in stretch), (warning, step)
    # A warning that is live is read every refresh: it clears when the link recovers.
    recovered = next(i for i, step in enumerate(got) if step["now"] == 26.0)
    assert ("pcie-gen", 1) in ours[recovered - 1] and ("pcie-gen", 1) not in ours[recovered]
    # Turning busy at a low generation is seen that very refresh.
    busy = next(i for i, step in enumerate(got) if step["now"] == 33.0)
    assert ("pcie-gen", 2) in ours[busy]
    # Fewer calls than reading both fields of three cards every refresh.
    assert sum(step["calls"] for step in got) < 6 * len(got) / 2


def test_when_the_dashboard_reads_the_link_at_once() -> None:
    from gputop.sources.nvml import _pcie_link_urgent

    full = {"pcie_gen_max": 5, "pcie_width_max": 16}
    # At its maximum, or an idle card trained down: kept.
    assert not _pcie_link_urgent({"pcie_gen": 5, "pcie_width": 16}, {"util_gpu": 90}, full)
    assert not _pcie_link_urgent({"pcie_gen": 1, "pcie_width": 16}, {"util_gpu": 0}, full)
    # Some load on a low generation, a narrow link at any load, or util unknown: now.
    assert _pcie_link_urgent({"pcie_gen": 1, "pcie_width": 16}, {"util_gpu": 3}, full)
    assert _pcie_link_urgent({"pcie_gen": 1, "pcie_width": 8}, {"util_gpu": 0}, full)
    assert _pcie_link_urgent({"pcie_gen": 5, "pcie_width": 16}, {"util_gpu": None}, full)
    # A field the card does not give does not hide the other.
    assert _pcie_link_urgent({"pcie_gen": None, "pcie_width": 8}, {"util_gpu": 0}, full)
    assert _pcie_link_urgent({"pcie_gen": 2, "pcie_width": None}, {"util_gpu": 50}, full)
    assert not _pcie_link_urgent({"pcie_gen": None, "pcie_width": None}, {"util_gpu": 50},
                                 full)
    assert not _pcie_link_urgent({"pcie_gen": 1, "pcie_width": 8}, {"util_gpu": 50},
                                 {"pcie_gen_max": None, "pcie_width_max": None})
