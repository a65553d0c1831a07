"""The shipped Prometheus alerting rules (gputop/examples/alert-rules*.yaml): valid for
promtool, unit-tested with `promtool test rules` (tests/prometheus/*.test.yaml), every
alert exercised on gputop serve's series and on dcgm-exporter's, printed by
`gputop config`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from helpers.prom import (
    ROOT,
    free_port,
    need_prometheus,
    start_prometheus,
    start_serve,
    wait_http,
)

RULES = ROOT / "gputop" / "examples"
TESTS = ROOT / "tests" / "prometheus"
PAIRS = (("alert-rules.yaml", "alert-rules.test.yaml"),
         ("alert-rules-opt-in.yaml", "alert-rules-opt-in.test.yaml"))
GPUTOP_ONLY = {"GputopCollectorStuck"}  # reads gputop's own collection series


@pytest.mark.parametrize(("rules", "tests"), PAIRS)
def test_promtool_checks_and_unit_tests_pass(rules: str, tests: str) -> None:
    need_prometheus()
    done = subprocess.run(["promtool", "check", "rules", str(RULES / rules)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(["promtool", "test", "rules", tests], cwd=TESTS,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(("rules", "tests"), PAIRS)
def test_every_alert_fires_on_both_exporters_series(rules: str, tests: str) -> None:
    alerts = {rule["alert"] for group in yaml.safe_load((RULES / rules).read_text())["groups"]
              for rule in group["rules"]}
    fired: dict[str, set[str]] = {name: set() for name in alerts}
    quiet: set[str] = set()
    spelt: dict[str, set[str]] = {}
    for case in yaml.safe_load((TESTS / tests).read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            name = check["alertname"]
            assert name in alerts, f"{tests}: {name} is not a shipped alert"
            if not check.get("exp_alerts"):
                quiet.add(name)
            for alert in check.get("exp_alerts") or []:
                fired[name].add(alert["exp_labels"].get("job", ""))
                assert alert["exp_labels"].get("severity") in ("critical", "warning", "info")
                assert set(alert["exp_annotations"]) == {"summary", "description"}
    for name, jobs in fired.items():
        assert "gputop" in jobs, f"{name}: never tested on gputop serve's series"
        if name not in GPUTOP_ONLY:
            assert "dcgm" in jobs, f"{name}: never tested on dcgm-exporter's series"
    # dcgm-exporter spells its host label Hostname or (since its commit d5e5f51)
    # hostname: every alert that names a host is tested under both.
    for case in yaml.safe_load((TESTS / tests).read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            for alert in check.get("exp_alerts") or []:
                labels = alert["exp_labels"]
                for spelling in ("Hostname", "hostname"):
                    if spelling in labels:
                        spelt.setdefault(check["alertname"], set()).add(spelling)
                        # the summary names the host, whichever label carries it
                        assert labels[spelling] in alert["exp_annotations"]["summary"]
    for name in alerts - {"GpuExporterDown"}:  # that one names its target, not a host
        assert spelt.get(name) == {"Hostname", "hostname"}, (name, spelt.get(name))
    # Each test file also checks that its alerts stay quiet somewhere (pending, healthy).
    assert quiet, f"{tests}: no check that an alert stays quiet"


@pytest.mark.parametrize(("flag", "name"), [("--alert-rules", "alert-rules.yaml"),
                                            ("--alert-rules-opt-in", "alert-rules-opt-in.yaml")])
def test_gputop_config_prints_the_shipped_rules(flag: str, name: str) -> None:
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "config", flag], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == (RULES / name).read_text()


def test_rules_fire_in_a_real_prometheus_scraping_gputop_serve(tmp_path: Path) -> None:
    """The shipped file loaded by a real Prometheus scraping `gputop serve --demo faulty`
    and `--demo lab`: the faulty host's uncorrectable ECC and pending remap raise
    GpuMemoryErrors on its GPU 2, from the series serve really exports; the lab host
    raises none of it."""
    need_prometheus()
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    procs = []
    try:
        targets = []
        for scenario in ("faulty", "lab"):
            port = free_port()
            procs.append(start_serve(scenario, port, config))
            targets.append(f"127.0.0.1:{port}")
        for target in targets:
            wait_http(f"http://{target}/api/v1/snapshot")
        prom, url = start_prometheus(tmp_path, {"gputop": targets},
                                     rule_files=(RULES / "alert-rules.yaml",))
        procs.append(prom)
        end = time.monotonic() + 90
        while True:
            with urllib.request.urlopen(f"{url}/api/v1/alerts", timeout=10) as response:
                alerts = json.load(response)["data"]["alerts"]
            memory = [a for a in alerts if a["labels"]["alertname"] == "GpuMemoryErrors"
                      and a["state"] == "firing"]
            if len(memory) >= 2:
                break
            assert time.monotonic() < end, f"GpuMemoryErrors never fired: {alerts}"
            time.sleep(0.5)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(20)
    assert {(a["labels"]["Hostname"], a["labels"]["gpu"], a["labels"]["code"])
            for a in memory} == {("a100-node-12", "2", "ecc-uncorrected"),
                                 ("a100-node-12", "2", "remap-pending")}
    assert all(a["labels"]["severity"] == "critical" for a in memory)
    assert not [a for a in alerts if a["labels"].get("Hostname") == "lab-gpu-03"
                and a["labels"]["alertname"] in ("GpuMemoryErrors", "GpuFallenOffBus")]


def _severities(rule: dict[str, object]) -> set[str]:
    """The severities an alert can carry: its label, or what its template can give."""
    labels = rule["labels"]
    assert isinstance(labels, dict)
    severity = str(labels["severity"])
    if "{{" not in severity:
        return {severity}
    return set(re.findall(r"}}(critical|warning|info){{", severity))


def _templated_critical_xids(rule: dict[str, object]) -> set[int]:
    labels = rule["labels"]
    assert isinstance(labels, dict)
    found = re.search(r'match "\^\(([0-9|]+)\)\$"', str(labels["severity"]))
    assert found, labels
    return {int(code) for code in found.group(1).split("|")}


def test_xid_alert_is_critical_exactly_where_gputop_check_is() -> None:
    # Issue 40: XID 48 and 95 paged as warnings while `gputop check` calls them critical.
    # The alert's template lists the catalog's critical codes (79: GpuFallenOffBus's).
    from gputop.analysis import xid

    rule = _shipped_alerts()["GpuXidError"]
    critical = {code for code, info in xid.CATALOG.items() if info.severity == "critical"}
    assert _templated_critical_xids(rule) == critical - {79}
    assert _severities(rule) == {"critical", "warning"}
    assert "!= 79" in str(rule["expr"]) and "DCGM_FI_DEV_XID_ERRORS == 79" in str(
        _shipped_alerts()["GpuFallenOffBus"]["expr"])


def test_exporter_down_has_the_severity_of_the_host_gputop_cannot_see() -> None:
    # Issue 40: GpuExporterDown paged (critical) while `gputop check --prometheus` shows
    # the same host as host-state, a warning.  They agree: a warning.
    from gputop.analysis import health
    from gputop.analysis.health.common import HOST_STATE

    (host_state,) = [r for r in health.rules() if r.code == HOST_STATE]
    assert _severities(_shipped_alerts()["GpuExporterDown"]) == set(host_state.severities)


def _shipped_alerts() -> dict[str, dict[str, object]]:
    return {rule["alert"]: rule for rules, _tests in PAIRS
            for group in yaml.safe_load((RULES / rules).read_text())["groups"]
            for rule in group["rules"]}


def _codes_read(expr: str) -> set[str]:
    """The codes an alert's expression selects of gputop_warning."""
    found = set()
    for match in re.finditer(r'gputop_warning\{code=~?"([^"]*)"\}', expr):
        found |= set(match.group(1).split("|"))
    return found


def test_the_shipped_alerts_and_the_health_registry_agree() -> None:
    # Issue 36: each alert that has a gputop rule is declared on the rule (Rule.alert);
    # the others are named, with why, in registry.ALERTS_OF_NO_RULE.  Severities and the
    # gputop_warning codes an alert selects must be the rules'.
    from gputop.analysis import health
    from gputop.analysis.health.registry import ALERTS_OF_NO_RULE

    shipped = _shipped_alerts()
    claimed: dict[str, list[health.Rule]] = {}
    for rule in health.rules():
        if rule.alert is not None:
            assert rule.alert in shipped, f"{rule.code}: no shipped alert {rule.alert}"
            claimed.setdefault(rule.alert, []).append(rule)
    assert set(claimed) | set(ALERTS_OF_NO_RULE) == set(shipped)
    assert not set(claimed) & set(ALERTS_OF_NO_RULE)
    for name, rules in claimed.items():
        for rule in rules:
            assert _severities(shipped[name]) <= set(rule.severities), (name, rule.code)
        expr = shipped[name]["expr"]
        assert isinstance(expr, str)
        # Every code the alert selects is a rule that names the alert.
        assert _codes_read(expr) <= {r.code for r in rules}, name
    # And a rule whose verdict is all an alert can read (gputop_warning) is selected.
    for name, rules in claimed.items():
        expr = str(shipped[name]["expr"])
        if "gputop_warning" in expr:
            assert {r.code for r in rules} == _codes_read(expr), name
