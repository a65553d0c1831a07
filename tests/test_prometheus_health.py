"""Every alarm an exporter gives reaches `gputop check --prometheus`, as on the host.

A real Prometheus (Debian's) on loopback scrapes: a `gputop serve --demo faulty`, a file
in dcgm-exporter's format with a card at XID 48 (double-bit ECC) with ECC errors and a
pending remap (a card at XID 79 is lost: tests/test_prometheus_dcgm_limits.py), a MIG card
of four GPU instances, pod and hpc_job labels and a thermal-violation counter that grows
between scrapes; a `gputop serve`-shaped file whose collector is stuck
(gputop_snapshot_age_seconds 500); a `gputop serve` that is killed once scraped; and a
`node` target nobody answers.  gputop then reads everything back through Prometheus.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from helpers.prom import (
    ROOT,
    FixedServer,
    Reply,
    free_port,
    instant,
    need_prometheus,
    start_prometheus,
    start_serve,
    wait_http,
)

FIXTURES = ROOT / "tests" / "fixtures" / "prometheus"
MIB = 1024**2
HOST = "dcgm-faulty-1"

STUCK_SERVE = """\
# TYPE gputop_up gauge
gputop_up{Hostname="stuck-serve-1"} 1
# TYPE gputop_snapshot_age_seconds gauge
gputop_snapshot_age_seconds{Hostname="stuck-serve-1"} 500
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-5",Hostname="stuck-serve-1"} 12
"""


@dataclass
class Cluster:
    url: str
    node: str  # the dead target of a job that is not a GPU exporter
    killed: str  # the instance of the gputop serve killed after its first scrapes


def _faults_text() -> bytes:
    # The thermal-violation counter grows a second of slowdown per wall second.
    text = (FIXTURES / "dcgm-exporter-faults.txt").read_text()
    return text.replace("{THERMAL_US}", str(int(time.time() * 1e6))).encode()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    need_prometheus()
    tmp = tmp_path_factory.mktemp("promhealth")
    config = tmp / "config.yaml"
    config.write_text("serve: {lowercase_hostname: true}\n")
    dcgm = FixedServer(lambda path: Reply(body=_faults_text()))
    stuck = FixedServer(lambda path: Reply(body=STUCK_SERVE.encode()))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        faulty_port, doomed_port = free_port(), free_port()
        procs.append(start_serve("faulty", faulty_port, config))
        doomed = start_serve("lab", doomed_port, config)
        procs.append(doomed)
        for port in (faulty_port, doomed_port):
            wait_http(f"http://127.0.0.1:{port}/api/v1/snapshot")
        node = f"127.0.0.1:{free_port()}"
        killed = f"127.0.0.1:{doomed_port}"
        prom, url = start_prometheus(tmp, {
            "gputop": [f"127.0.0.1:{faulty_port}", killed],
            "dcgm": [dcgm.url.removeprefix("http://"), stuck.url.removeprefix("http://")],
            "node": [node],
        })
        procs.append(prom)
        end = time.monotonic() + 60
        while (len(instant(url, "up == 1")) < 4 or not instant(url, "gputop_warning")
               or not instant(url, "rate(DCGM_FI_DEV_THERMAL_VIOLATION[2m]) > 0")):
            assert time.monotonic() < end, "Prometheus never scraped every target"
            time.sleep(0.3)
        doomed.terminate()
        doomed.wait(10)
        while not instant(url, f'up{{instance="{killed}"}} == 0'):
            assert time.monotonic() < end, "the killed serve never went down"
            time.sleep(0.3)
        yield Cluster(url, node, killed)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
        dcgm.close()
        stuck.close()


def gputop(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "gputop.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def check_json(*args: str) -> tuple[int, dict[str, Any]]:
    done = gputop(*args, "check", "--json")
    return done.returncode, dict(json.loads(done.stdout))


def timed() -> set[tuple[str, int | None]]:
    """The faulty scenario's timed events (its XIDs, its lost GPU): a one-shot `check`
    sees them at once, `gputop serve` (a simulation running in time) 5-20 s in."""
    from gputop.sources import sim

    faults = sim.load_scenario("faulty").faults
    return ({(f"xid-{x['xid']}", x["gpu"]) for x in faults["xid"]}
            | {("gpu-lost", lost["gpu"]) for lost in faults["lost"]})


def codes(doc: dict[str, Any], host: str) -> set[tuple[str, int | None]]:
    return {(w["code"], w["gpu"]) for w in doc["warnings"] if w["host"] == host}


def test_dcgm_exporter_faults_raise_the_hosts_own_rules(cluster: Cluster) -> None:
    status, doc = check_json("--prometheus", cluster.url)
    assert status == 2 and doc["status"] == "critical"
    found = codes(doc, HOST)
    assert {("xid-48", 0), ("ecc-uncorrected", 0), ("remap-pending", 0),
            ("thermal-slowdown", 0)} <= found
    # Card 2: a remap failure, and clocks slowed by heat only its violation counter tells.
    assert {("remap-failure", 2), ("thermal-slowdown", 2)} <= found
    # The overview asks for temperatures only where the fan stands: card 0's (88 C, fan
    # 0) raises fan-stopped, card 2's (84 C, fan 40 %) nothing.
    assert ("fan-stopped", 0) in found and ("fan-stopped", 2) not in found
    severities = {w["code"]: w["severity"] for w in doc["warnings"] if w["host"] == HOST}
    assert severities["xid-48"] == severities["ecc-uncorrected"] == "critical"


def test_gputop_serve_warnings_come_through_with_the_same_codes(cluster: Cluster) -> None:
    local_status, local = check_json("--demo", "faulty")
    [host] = {w["host"] for w in local["warnings"]}
    status, through = check_json("--prometheus", cluster.url)
    assert codes(local, host) and codes(local, host) - timed() <= codes(through, host)
    assert local_status == 2 and status == 2


def test_mig_instances_are_mig_devices_and_the_card_has_their_memory(cluster: Cluster) -> None:
    done = gputop("--prometheus", cluster.url, "--json")
    hosts = {h["host"]: h for h in json.loads(done.stdout)["hosts"]}
    card = next(g for g in hosts[HOST]["gpus"] if g["index"] == 1)
    assert card["mig_mode"] is True and len(card["mig_devices"]) == 4
    assert [d["gi"] for d in card["mig_devices"]] == [3, 4, 5, 6]
    assert {d["profile"] for d in card["mig_devices"]} == {"1g.6gb"}
    assert card["mig_devices"][3]["mem_used"] == 614 * MIB
    assert card["mig_devices"][0]["mem_total"] == (461 + 5483) * MIB
    assert card["mem_used"] == (461 * 3 + 614) * MIB
    assert card["mem_total"] == 4 * (461 + 5483) * MIB
    assert [d["sm_active"] for d in card["mig_devices"]] == [50, 0, 25, 88]
    # the job is on the instance its series name (GI 3), not on the card
    assert [[w["kind"] + ":" + w["id"] for w in d["workloads"]]
            for d in card["mig_devices"]] == [["slurm:4242"], [], [], []]
    assert card["workloads"] == []
    first = hosts[HOST]["gpus"][0]
    assert first["workloads"][0]["pod"] == "train-7f9c"
    assert first["workloads"][0]["namespace"] == "ml"


def test_once_says_what_the_source_does_not_export(cluster: Cluster) -> None:
    done = gputop("--prometheus", cluster.url, "--once")
    blocks = done.stdout.split("\n\n")
    at = next(n for n, b in enumerate(blocks) if b.startswith(HOST))
    block = "\n\n".join(blocks[at:at + 2])  # the cards, then the processes
    assert "processes: not exported by this source" in block
    assert "no processes" not in block
    assert "jobs: k8s:ml/train-7f9c" in block and "jobs: slurm:4242" in block
    assert "312W" in block and "n/aW" not in done.stdout


def test_targets_dead_names_and_stale_serves(cluster: Cluster) -> None:
    done = gputop("--prometheus", cluster.url, "--json")
    hosts = {h["host"]: h for h in json.loads(done.stdout)["hosts"]}
    # A dead target that never had GPU series is not a GPU host.
    assert cluster.node not in hosts
    # The killed serve keeps the name it had while alive.
    assert cluster.killed not in hosts
    assert hosts["lab-gpu-03"]["state"] == "unreachable"
    assert "up == 0" in hosts["lab-gpu-03"]["error"]
    # A serve whose collector is stuck is scraped fine, but its snapshot is old.
    stuck = hosts["stuck-serve-1"]
    assert stuck["state"] == "stale" and "500 s old" in stuck["error"]
    _status, doc = check_json("--prometheus", cluster.url)
    assert not any(cluster.node in (w["message"] or "") for w in doc["warnings"])
    assert ("host-state", None) in codes(doc, "stuck-serve-1")


def test_the_summary_asks_for_unhealthy_series_only(cluster: Cluster) -> None:
    from gputop.sources import promql

    exprs = promql.queries(promql.SUMMARY, "")
    # Healthy cards stay on the server: only the faulty ones come back.
    xids = instant(cluster.url, exprs["_xid"])
    assert (HOST, "0", "48") in {(s["metric"].get("Hostname"), s["metric"].get("gpu"),
                                  s["value"][1]) for s in xids}
    assert all(float(s["value"][1]) > 0 for s in xids)
    assert all(set(s["metric"]) <= {"Hostname", "hostname", "instance", "gpu", "uuid",
                                    "GPU_I_ID"} for s in xids)
    [mib] = [s for s in instant(cluster.url, exprs["mem_used"])
             if s["metric"].get("Hostname") == HOST and s["metric"].get("gpu") == "0"]
    assert float(mib["value"][1]) == 70000 * MIB  # the unit is converted by Prometheus



def test_the_overview_asks_temperature_only_where_the_fan_stands(cluster: Cluster) -> None:
    from gputop.config import PrometheusConfig
    from gputop.sources import promql
    from gputop.sources.prometheus import PrometheusFeed

    exprs = promql.queries(promql.OVERVIEW, "")
    # power only on cards the software cap holds down (power-capped): none here
    assert "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF" in exprs["power_draw"]
    feed = PrometheusFeed(cluster.url, PrometheusConfig(), 30.0, view=promql.OVERVIEW)
    [snap] = [s for s in feed.poll() if s.host == HOST]
    cards = {g.index: g for g in snap.gpus}
    assert (cards[0].fan, cards[0].temp) == (0, 88)
    assert (cards[2].fan, cards[2].temp) == (None, None)  # healthy: left on the server
    assert cards[0].util_gpu is not None and cards[0].mem_total is not None
    assert all(g.power_draw is None for g in snap.gpus)
    assert not {"power_draw", "temp", "fan"} & set(snap.missing)  # not asked: not missing


def test_an_opened_host_is_read_in_full_the_rest_in_brief(cluster: Cluster) -> None:
    from gputop.config import PrometheusConfig
    from gputop.sources import promql
    from gputop.sources.prometheus import PrometheusFeed

    _status, local = check_json("--demo", "faulty")
    [host] = {w["host"] for w in local["warnings"]}
    feed = PrometheusFeed(cluster.url, PrometheusConfig(), 30.0, view=promql.SUMMARY)

    def clocks() -> dict[str, bool]:
        return {s.host: any(g.clock_sm is not None for g in s.gpus) for s in feed.poll()
                if s.gpus}

    assert clocks()[host] is False  # the overview does not show clocks: not asked
    feed.focus(host)
    opened = clocks()
    assert opened[host] is True and opened[HOST] is False
    feed.focus(None)
    assert clocks()[host] is False


def _answers(url: str, view: str, at: float) -> dict[str, list[Any]]:
    """Every query of ``view`` evaluated by the real Prometheus at one instant ``at``:
    two views read at the same instant see the same samples."""
    import urllib.parse
    import urllib.request

    from gputop.sources import promql

    out = {}
    for name, expr in promql.queries(view, "").items():
        data = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"}).encode()
        with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=30) as resp:
            doc = json.load(resp)
        assert doc["status"] == "success", (name, doc)
        out[name] = doc["data"]["result"]
    return out


def _snapshots(answers: dict[str, list[Any]], names: list[str], view: str,
               at: float) -> list[Any]:
    from gputop.sources import promql
    from gputop.sources.prompivot import Pivot

    pivot = Pivot({}, {}, promql.complete(view))
    for name in names:
        pivot.add(name, answers[name])
    return pivot.snapshots(at, 120.0, {})


def test_a_card_is_the_same_whichever_answer_places_it_first(cluster: Cluster) -> None:
    # The memory's series carry a card's identity labels, the other fields only its key
    # labels; the pivot places the card once for both.  Whichever comes first, every
    # card of dcgm-exporter's hosts and of gputop serve's gets the same snapshot.
    from gputop.sources import promql

    at = time.time()
    answers = _answers(cluster.url, promql.SUMMARY, at)
    fields = [n for n in answers if n in promql.FIELD_NAMES]
    others = [n for n in answers if n not in promql.FIELD_NAMES]
    assert "mem_used" in fields and fields.index("mem_used") > 0
    memory_first = ["mem_used", *[n for n in fields if n != "mem_used"]]
    memory_last = [*[n for n in fields if n != "mem_used"], "mem_used"]
    first = _snapshots(answers, [*others, *memory_first], promql.SUMMARY, at)
    last = _snapshots(answers, [*others, *memory_last], promql.SUMMARY, at)
    reversed_ = _snapshots(answers, [*others, *reversed(fields)], promql.SUMMARY, at)
    assert first == last == reversed_
    hosts = {s.host: s for s in first}
    dcgm = {g.index: g for g in hosts[HOST].gpus}
    assert dcgm[0].uuid and dcgm[0].name and dcgm[0].util_gpu is not None
    assert dcgm[0].workloads and dcgm[1].mig_devices
    serve = next(s for s in first if "gputop serve" in s.source and s.gpus)
    assert all(g.uuid and g.name and g.mem_total for g in serve.gpus)


# What `--once` prints of a card (commands/once.py) and what its health rules read.
_SHOWN = ("index", "uuid", "name", "state", "util_gpu", "mem_used", "mem_total", "temp",
          "power_draw", "power_limit", "fan", "mig_mode", "workloads")


def test_the_one_shots_view_shows_what_the_full_view_shows(cluster: Cluster) -> None:
    # `--once` asks for its table's columns and the unhealthy series only; at one instant,
    # on dcgm-exporter's and gputop serve's series, it prints what the full view has.
    from gputop.sources import promql

    at = time.time()
    views = {}
    for view in (promql.SUMMARY, promql.FULL):
        answers = _answers(cluster.url, view, at)
        views[view] = {s.host: s for s in _snapshots(answers, list(answers), view, at)}
    brief, full = views[promql.SUMMARY], views[promql.FULL]
    assert brief.keys() == full.keys() and HOST in brief
    for host, snap in full.items():
        other = brief[host]
        assert (other.state, other.error, other.source) == (snap.state, snap.error,
                                                            snap.source), host
        assert [[getattr(g, f) for f in _SHOWN] for g in other.gpus] == \
            [[getattr(g, f) for f in _SHOWN] for g in snap.gpus], host
        assert [[(d.gi, d.profile, d.mem_used, d.mem_total, d.sm_active)
                 for d in g.mig_devices] for g in other.gpus] == \
            [[(d.gi, d.profile, d.mem_used, d.mem_total, d.sm_active)
              for d in g.mig_devices] for g in snap.gpus], host
        assert (other.processes, other.reservations, other.reported_warnings,
                other.xid_events) == (snap.processes, snap.reservations,
                                      snap.reported_warnings, snap.xid_events), host
    assert any(g.mig_devices for g in brief[HOST].gpus)
    assert any(s.processes for s in brief.values())


def test_the_faulty_hosts_problems_arrive_with_their_own_sentence_and_hint(
        cluster: Cluster) -> None:
    # Issue 36: what gputop serve raised and no exported field lets this side judge used to
    # arrive as "gputop on the host reports CODE" with a generic hint.  Now each comes
    # with its rule's sentence (the exact one where the fields let this side re-judge it)
    # and the rule's hint, and once.
    from gputop.analysis import health

    _status, local = check_json("--demo", "faulty")
    [host] = {w["host"] for w in local["warnings"]}
    _status, through = check_json("--prometheus", cluster.url)
    arrived = [w for w in through["warnings"] if w["host"] == host]
    assert len({(w["code"], w["gpu"]) for w in arrived}) == len(arrived)  # no copy
    by_key = {(w["code"], w["gpu"]): w for w in arrived}
    assert len(local["warnings"]) >= 5
    relayed = 0
    for mine in local["warnings"]:
        if (mine["code"], mine["gpu"]) in timed() - by_key.keys():
            continue  # not come yet on the serving side
        there = by_key[(mine["code"], mine["gpu"])]
        rule = health.registry.by_code(mine["code"])
        assert rule is not None
        assert there["message"] in (mine["message"], rule.summary), there
        relayed += there["message"] == rule.summary != mine["message"]
        assert there["hint"] == mine["hint"], there
        assert there["severity"] == mine["severity"]
    assert relayed  # some are the host's verdict, not this side's re-judging
    assert not any("reports" in w["message"] for w in arrived)
