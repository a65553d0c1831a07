"""The health rules' registry (gputop/analysis/health/registry.py) is the one home of each
rule: docs/health.md's table, the Prometheus field lists, the relay of a host's verdicts
and (tests/test_alert_rules.py) the shipped alerts are made from it or checked against it.
The last test adds a throwaway rule in one place of a copy of the package and sees it
everywhere."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.analysis import health
from gputop.analysis.health import registry
from gputop.model import SEVERITY_ORDER, HostSnapshot
from gputop.sources import promql, sim
from gputop.sources.hostsource import nvml_collector

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "health.md"
_TABLE = re.compile(r"<!-- generated from the registry[^\n]*-->\n(.*?)<!-- end of the generated",
                    re.S)


def test_the_docs_table_is_the_registrys() -> None:
    [table] = _TABLE.findall(DOC.read_text())
    assert table == health.rules_table(), (
        "docs/health.md's table is stale: paste health.rules_table() between its markers")


def test_every_rule_is_declared_once_with_what_it_says() -> None:
    codes = [r.code for r in health.rules()]
    assert len(codes) == len(set(codes))
    # Every code the health package names, and every family, has its rule.
    assert {"gpu-lost", "ecc-uncorrected", "remap-failure", "host-state", "oom-risk",
            "idle-memory", "reserved-by-other", "outside-job", "mig-pending",
            "xid-N"} <= set(codes)
    assert {r.family for r in health.rules()} == {
        "gpu", "host", "memory", "processes", "reservations", "workloads", "mig"}
    for r in health.rules():
        assert r.summary and r.when and set(r.severities) <= set(SEVERITY_ORDER), r.code
        assert set(r.unexported) <= set(r.reads), r.code
        assert all(hasattr(health.Thresholds(), t) for t in r.thresholds), r.code


def test_every_field_a_rule_reads_is_asked_by_the_views_that_judge() -> None:
    assert promql.unasked(health.rules()) == []
    # The check can fail: a rule reading what no view asks for is named, per view.
    lone = registry.Rule("x-test", ("info",), "gpu", "s", "h", "w", lambda ctx: (),
                         reads=("temp", "util_mem", "no_such_field"))
    assert promql.unasked([lone]) == [
        "x-test: util_mem (overview)", "x-test: no_such_field (overview)",
        "x-test: no_such_field (full)"]


@pytest.mark.parametrize("scenario", sorted(p.stem for p in (ROOT / "gputop" / "scenarios")
                                            .glob("*.yaml")))
def test_every_warning_of_every_scenario_is_a_registered_rules(scenario: str) -> None:
    now = [1_764_680_000.0]
    nvml = sim.SimNvml(sim.load_scenario(scenario), clock=lambda: now[0])
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host=scenario, demo=True,
                               clock=lambda: now[0])
    found = []
    for _ in range(2):  # at the start, then after the faulty node's timed XIDs
        found += health.warnings(HostSnapshot.from_dict(collector.collect()), me="root")
        now[0] += 30
    assert scenario == "dgx-h100" or found
    if scenario == "faulty":
        assert {"xid-79", "gpu-lost", "ecc-uncorrected"} <= {w.code for w in found}
    for w in found:
        rule = registry.by_code(w.code)
        assert rule is not None, w.code
        assert w.severity in rule.severities, w


def test_a_relayed_warning_has_its_rules_sentence_and_hint() -> None:
    for rule in health.rules():
        if rule.code == "xid-N":
            continue
        got = health.relayed(rule.code, rule.severities[0], "h1", 3)
        assert (got.code, got.message, got.hint, got.gpu, got.host) == (
            rule.code, rule.summary, registry.hint_of(rule, 3), 3, "h1")
    unreadable = health.relayed("gpu-unreadable", "warning", "h1", 3)
    assert unreadable.hint == "check `nvidia-smi -i 3` and dmesg on the host"
    xid = health.relayed("xid-79", "critical", "h1", 0)
    assert "fallen off the bus" in xid.message.lower() and xid.hint
    newer = health.relayed("from-a-newer-gputop", "warning", "h1", None)
    assert newer.message == "gputop on the host reports from-a-newer-gputop"


THROWAWAY = '''

@rule("throwaway-test", WARNING, reads=("util_gpu", "throwaway_sensor"),
      summary="the throwaway rule's own sentence", hint="the throwaway rule's own hint",
      when="a rule tests/test_health_registry.py adds to a copy of the package")
def _throwaway(ctx: Context) -> Iterator[Finding]:
    yield Finding(f"throwaway on GPU {ctx.card.index}", gpu=ctx.card.index)
'''

PROBE = """
import json
from gputop.analysis import health
from gputop.sources import promql
print(json.dumps({
    "file": health.__file__,
    "table": health.rules_table(),
    "unasked": promql.unasked(health.rules()),
    "relayed": health.relayed("throwaway-test", "warning", "h", 1).message,
}))
"""


def test_a_rule_added_in_one_place_appears_everywhere(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "gputop", tmp_path / "gputop",
                    ignore=shutil.ignore_patterns("__pycache__"))
    family = tmp_path / "gputop" / "analysis" / "health" / "gpu.py"
    family.write_text(family.read_text() + THROWAWAY)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "NO_COLOR": "1"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    probe = json.loads(run("-c", PROBE).stdout)
    assert probe["file"].startswith(str(tmp_path))
    assert "| warning | `throwaway-test` | a rule tests/test_health_registry.py adds" \
        in probe["table"]
    # It reads a field no Prometheus view asks for, and does not say so: the check names it.
    assert probe["unasked"] == ["throwaway-test: throwaway_sensor (overview)",
                                "throwaway-test: throwaway_sensor (full)"]
    assert probe["relayed"] == "the throwaway rule's own sentence"
    done = run("-m", "gputop.cli", "--demo", "faulty", "check", "--json")
    found = [w for w in json.loads(done.stdout)["warnings"] if w["code"] == "throwaway-test"]
    # One per readable card (a lost card is judged by gpu-lost alone).
    assert len(found) >= 7 and found[0]["hint"] == "the throwaway rule's own hint"
    assert {w["gpu"] for w in found} <= set(range(8))
    assert found[0]["message"].startswith("throwaway on GPU ")


def test_a_wrong_declaration_stops_the_import() -> None:
    def nothing(ctx: registry.Context) -> list[registry.Finding]:
        return []

    for kwargs, problem in (
        ({"code": "gpu-lost"}, "declared twice"),
        ({"severities": "fatal"}, "unknown severity"),
        ({"thresholds": ("no_such",)}, "unknown threshold"),
        ({"unexported": ("temp",)}, "does not read"),
    ):
        args = {"code": "x-new", "severities": "info", **kwargs}
        with pytest.raises(ValueError, match=problem):
            registry.rule(args["code"], args["severities"], summary="s", hint="h", when="w",
                          thresholds=kwargs.get("thresholds", ()),
                          unexported=kwargs.get("unexported", ()))(nothing)
    assert registry.by_code("x-new") is None
