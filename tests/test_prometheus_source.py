"""The Prometheus source against real HTTP servers that misbehave: down, 401, a query
that times out, warnings, malformed JSON, a slow answer.  Each is one clear host state
naming the server, never a traceback; the feed keeps retrying with backoff."""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator

import pytest
from helpers.prom import ROOT, FixedServer, Reply, free_port

from gputop import model
from gputop.config import PrometheusConfig
from gputop.sources import promql
from gputop.sources.prometheus import PromClient, PrometheusFeed, pivot


def vector(*series: tuple[dict[str, str], float], warnings: list[str] | None = None) -> bytes:
    doc: dict[str, object] = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [1700000000.0, str(value)]} for labels, value in series]}}
    if warnings:
        doc["warnings"] = warnings
    return json.dumps(doc).encode()


class FakeProm:
    """A real HTTP server whose answers the test sets: ``reply`` for every query, or,
    where ``fields`` names the query (promql.queries' names), that field's series."""

    def __init__(self) -> None:
        self.reply = Reply()
        self.fields: dict[str, list[tuple[dict[str, str], float]]] | None = None
        self.selector = ""
        self.server = FixedServer(lambda path: self.reply, self._answer)

    def _answer(self, path: str, body: bytes) -> Reply:
        if self.fields is None:
            return self.reply
        expr = urllib.parse.parse_qs(body.decode()).get("query", [""])[0]
        for view in promql.VIEWS:
            for name, text in promql.queries(view, self.selector).items():
                if text == expr:
                    return Reply(body=vector(*self.fields.get(name, [])),
                                 content_type="application/json")
        return Reply(body=vector(), content_type="application/json")

    def feed(self, config: PrometheusConfig | None = None, timeout: float = 5.0,
             environ: dict[str, str] | None = None) -> PrometheusFeed:
        return PrometheusFeed(self.server.url, config or PrometheusConfig(), timeout,
                              environ=environ or {})


@pytest.fixture
def prom() -> Iterator[FakeProm]:
    fake = FakeProm()
    yield fake
    fake.server.close()


GPU = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "UUID": "GPU-1", "Hostname": "n1",
       "instance": "10.0.0.1:9400", "job": "dcgm"}


def test_queries_form_encoded_gzip_and_bearer_token(prom: FakeProm) -> None:
    prom.selector = 'cluster="a"'
    prom.fields = {"util_gpu": [(GPU, 42)]}
    config = PrometheusConfig(token_env="PROM_TOKEN", selector='cluster="a"')
    feed = prom.feed(config, environ={"PROM_TOKEN": "s3cret"})
    [snap] = feed.poll()
    assert snap.host == "n1" and snap.gpus[0].util_gpu == 42
    asked = promql.queries(promql.FULL, 'cluster="a"')
    assert len(prom.server.requests) == len(asked)  # one per field, nothing more
    for path, headers, body in prom.server.requests:
        assert path == "/api/v1/query"
        assert headers["Authorization"] == "Bearer s3cret"
        assert headers["Accept-Encoding"] == "gzip"
        assert headers["Content-Type"] == "application/x-www-form-urlencoded"
        assert b'cluster%3D%22a%22' in body and body.startswith(b"query=")


def test_gzip_answer_is_inflated(prom: FakeProm) -> None:
    prom.reply = Reply(body=gzip.compress(vector((GPU, 7))), encoding="gzip")
    snap = next(s for s in prom.feed().poll() if s.host == "n1")
    assert snap.state == model.HOST_OK and snap.gpus[0].util_gpu == 7
    prom.reply = Reply(body=b"\x1f\x8b not gzip at all", encoding="gzip")
    [snap] = prom.feed().poll()
    assert snap.state == model.HOST_ERROR and "gzip" in (snap.error or "")


@pytest.mark.parametrize(("reply", "state", "words"), [
    (Reply(status=401, body=b"Unauthorized"), model.HOST_AUTH_FAILED, "401"),
    (Reply(status=503, body=json.dumps({"status": "error", "errorType": "timeout",
                                        "error": "query timed out in expression evaluation"}
                                       ).encode()), model.HOST_TIMEOUT, "timed out"),
    (Reply(body=b"{not json", content_type="application/json"), model.HOST_ERROR,
     "malformed JSON"),
    (Reply(body=b'{"status": "success", "data": {"resultType": "matrix", "result": []}}'),
     model.HOST_ERROR, "no result vector"),
    (Reply(body=b"[1, 2]"), model.HOST_ERROR, "not a JSON object"),
    (Reply(body=vector((GPU, 1)), delay=2.0), model.HOST_TIMEOUT, "no answer within"),
])
def test_bad_answers_are_one_clear_state(prom: FakeProm, reply: Reply, state: str,
                                         words: str) -> None:
    prom.reply = reply
    feed = prom.feed(timeout=0.5)
    [snap] = feed.poll()
    assert snap.host.startswith("prometheus 127.0.0.1:")
    assert snap.state == state and words in (snap.error or "")
    assert feed.failures == 1 and feed.backoff(2.0) > 2.0  # retries, later


def test_warnings_keep_the_data_and_are_shown(prom: FakeProm) -> None:
    prom.reply = Reply(body=vector((GPU, 5), warnings=["PromQL info: partial data"]))
    snaps = {s.host: s for s in prom.feed().poll()}
    assert snaps["n1"].gpus[0].util_gpu == 5
    source = next(s for h, s in snaps.items() if h.startswith("prometheus "))
    assert "partial data" in (source.error or "")


def test_prometheus_down_then_back_backs_off_then_recovers() -> None:
    port = free_port()
    feed = PrometheusFeed(f"http://127.0.0.1:{port}", PrometheusConfig(), 2.0, environ={})
    for expected in (1, 2, 3):
        [snap] = feed.poll()
        assert snap.state == model.HOST_UNREACHABLE and feed.failures == expected
    assert 2.0 * 2**3 * 0.8 <= feed.backoff(2.0) <= 2.0 * 2**3
    assert feed.backoff(30.0) <= 60.0  # capped
    server = FixedServer(lambda path: Reply(body=vector((GPU, 3))))
    try:
        feed.client = PromClient(server.url, PrometheusConfig(), 2.0, {})  # back, moved
        [snap] = feed.poll()
        assert snap.state == model.HOST_OK and feed.failures == 0
        assert feed.backoff(2.0) == 2.0
    finally:
        server.close()


def test_credentials_come_only_from_the_config(prom: FakeProm, tmp_path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    prom.reply = Reply(body=vector((GPU, 1)))
    config = PrometheusConfig(username="ops", password_file=str(secret))
    prom.feed(config).poll()
    assert {h["Authorization"] for _p, h, _b in prom.server.requests} == {
        "Basic b3BzOmh1bnRlcjI="}  # ops:hunter2
    missing = PrometheusConfig(token_env="NOT_SET_ANYWHERE")
    [snap] = prom.feed(missing).poll()
    assert snap.state == model.HOST_AUTH_FAILED and "$NOT_SET_ANYWHERE" in (snap.error or "")


def test_hostile_series_are_dropped_not_trusted() -> None:
    now = 1700000000.0
    util = [
        {"metric": {**GPU}, "value": [now, "NaN"]},  # not a number: absent
        {"metric": {**GPU, "gpu": "999999999"}, "value": [now, "1"]},  # no such card
        {"metric": {**GPU, "gpu": "1", "Hostname": 7}, "value": [now, "1"]},  # not text
        {"metric": {**GPU, "gpu": ["2"]}, "value": [now, "1"]},  # not even hashable
        *({"metric": {**GPU, "Hostname": "flood", "gpu": str(n)}, "value": [now, "1"]}
          for n in range(5000)),  # a host with 5,000 made-up cards
        {"metric": "nope", "value": [now, "1"]},
        [1, 2],
    ]
    answers = {
        "util_gpu": util,
        "_identity": [{"metric": {**GPU, "UUID": "GPU-1"}, "value": [now, "1"]}],
        "_proc_mem": [{"metric": {**GPU, "pid": "12x"}, "value": [now, "1"]}],
        "temp": [{"metric": {**GPU, "Hostname": "n" * 5000}, "value": [now, "50"]}],
        "_warning": [{"metric": {"Hostname": "n1", "severity": "apocalyptic", "code": "x"},
                      "value": [now, "1"]}],
    }
    snaps = pivot(answers, now, 60.0)
    names = {s.host for s in snaps}
    assert "n1" in names and all(len(n) <= 1024 for n in names)
    n1 = next(s for s in snaps if s.host == "n1")
    [gpu] = n1.gpus  # neither the absurd index nor the label that is not text
    assert gpu.uuid == "GPU-1" and gpu.util_gpu is None  # NaN: absent, not 0
    assert n1.processes == ()  # a pid that is not a number
    assert n1.reported_warnings == ()  # a severity gputop does not have
    flood = next(s for s in snaps if s.host == "flood")
    assert len(flood.gpus) == 64  # capped, not 5,000


def test_stale_host_and_dead_exporter() -> None:
    now = 1700000100.0
    answers = {
        "util_gpu": [{"metric": GPU, "value": [now, "10"]}],
        "_up": [
            {"metric": {"_scraped": "1", "instance": "10.0.0.1:9400", "job": "dcgm"},
             "value": [now, str(now - 95)]},
            {"metric": {"__name__": "up", "instance": "10.0.0.9:9400", "job": "dcgm"},
             "value": [now, "0"]},
            {"metric": {"__name__": "up", "instance": "10.0.0.8:9100", "job": "node"},
             "value": [now, "0"]},
        ],
    }
    snaps = {s.host: s for s in pivot(answers, now, 30.0, {},
                                      {"10.0.0.9:9400": "n9"})}
    assert snaps["n1"].state == model.HOST_STALE and "95 s" in (snaps["n1"].error or "")
    assert snaps["n9"].state == model.HOST_UNREACHABLE  # the name it had while alive
    assert "10.0.0.8:9100" not in snaps  # never a GPU exporter: not a GPU host


def test_queries_name_every_exporter_and_keep_few_labels() -> None:
    summary = promql.queries(promql.SUMMARY, 'cluster="a"')
    full = promql.queries(promql.FULL, 'cluster="a"')
    assert len(summary) < len(full)  # the summary asks for less...
    assert set(summary) - set(full) == {"_mem_spare"}  # (free + reserved in one)
    assert "DCGM_FI_DEV_GPU_UTIL{cluster=\"a\"}" in summary["util_gpu"]
    assert "nvidia_smi_utilization_gpu_ratio" in summary["util_gpu"]
    assert summary["util_gpu"].startswith("((max by (")  # labels cut on the server
    assert "> 0" in summary["_xid"] and "> 0" not in full["_xid"]
    assert 'timestamp(up{cluster="a"})' in summary["_up"]
    one = promql.queries(promql.FULL, "", host='we"ird')
    assert 'Hostname="we\\"ird"' in one["temp"] and 'instance="we\\"ird"' in one["temp"]


def test_cli_prometheus_down_is_a_state_not_a_traceback() -> None:
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "--prometheus",
                           f"http://127.0.0.1:{free_port()}", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    # Every host unreachable: nothing to show (exit 3), the states still printed.
    assert done.returncode == 3 and "Traceback" not in done.stderr
    [host] = json.loads(done.stdout)["hosts"]
    assert host["state"] == "unreachable" and host["host"].startswith("prometheus ")
    bad = subprocess.run([sys.executable, "-m", "gputop.cli", "--prometheus", "ftp://x",
                          "--once"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "expected http" in bad.stderr
    assert "Traceback" not in bad.stderr


async def test_dashboard_learns_prometheus_hosts_and_refuses_actions(prom: FakeProm) -> None:
    from helpers.ui import wait_for

    from gputop.sources.prometheus import WHY_READ_ONLY
    from gputop.ui.app import GputopApp

    two = [(GPU, 30), ({**GPU, "Hostname": "n2", "instance": "10.0.0.2:9400"}, 60)]
    prom.reply = Reply(body=vector(*two))
    app = GputopApp([prom.feed()], interval=0.2, me="alice")
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(pilot, lambda: {"n1", "n2"} <= set(app.state.feeds))
        assert type(app.screen).__name__ == "ClusterScreen"  # a cluster starts there
        # The overview lists the hosts as they were learnt (it redraws at its own rate).
        await wait_for(pilot, lambda: {"n1", "n2"} <= set(getattr(app.screen, "order", ())))
        caps = app.capabilities("n2")
        assert not caps.kill and not caps.reserve and caps.why_not == WHY_READ_ONLY
        answer = await app.request("n1", {"op": "kill", "pid": 1, "start_ticks": 1})
        assert answer["ok"] is False and answer["message"] == WHY_READ_ONLY


def test_prometheus_combines_with_hosts_and_alone_reads_no_default_hosts(tmp_path,
                                                                        monkeypatch) -> None:
    from gputop.options import SourceOptions
    from gputop.sources.opener import plan_sources

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts: [gpu01]\n")
    monkeypatch.setenv("GPUTOP_HOSTS", str(hosts))
    url = "http://prom:9090"
    alone = plan_sources(SourceOptions(prometheus=url))
    assert alone.prometheus == url and alone.ssh_hosts == () and not alone.local
    both = plan_sources(SourceOptions(prometheus=url, hosts_file=str(hosts), local=True))
    assert both.prometheus == url and [s.name for s in both.ssh_hosts] == ["gpu01"]
    assert both.local


class DripServer:
    """Sends its headers at once, then one byte of the body every ``every`` seconds;
    with ``headers``, sends its status line, then its headers a byte at a time."""

    def __init__(self, every: float = 0.2, headers: bool = False) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.every = every
        self.headers = headers
        self.connections = 0
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            try:
                if self.headers:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 100000\r\n\r\n")
                while not self.done.is_set():
                    conn.sendall(b"a" if self.headers else b" ")
                    time.sleep(self.every)
            except OSError:
                return

    def close(self) -> None:
        self.done.set()
        self.sock.close()


def test_timeout_bounds_a_slow_body() -> None:
    drip = DripServer()
    try:
        feed = PrometheusFeed(drip.url, PrometheusConfig(), 1.0, environ={})
        started = time.monotonic()
        [snap] = feed.poll()
        took = time.monotonic() - started
    finally:
        drip.close()
    assert snap.state == model.HOST_TIMEOUT and "within 1 s" in (snap.error or "")
    # The body would take 100,000 x 0.2 s; the generous bound is for a loaded machine.
    assert took < 15


def test_no_query_starts_after_one_timed_out() -> None:
    # Issue 40: a body dripped a byte every 0.5 s took twice --timeout: a worker whose
    # query had timed out took the next one before the refresh saw the failure.
    from gputop.sources.prometheus import PARALLEL_QUERIES

    drip = DripServer()
    try:
        feed = PrometheusFeed(drip.url, PrometheusConfig(), 1.0, environ={})
        [snap] = feed.poll()
    finally:
        drip.close()
    assert snap.state == model.HOST_TIMEOUT
    assert len(promql.queries(feed.view, "")) > PARALLEL_QUERIES
    assert drip.connections == PARALLEL_QUERIES  # the first round only


def test_timeout_bounds_headers_sent_a_byte_at_a_time() -> None:
    # Issue 40: headers dripped a byte every 0.5 s never returned (--timeout 2 was
    # still waiting at 300 s).  One deadline covers the exchange, connect to last byte.
    drip = DripServer(every=0.2, headers=True)
    done: list[list[model.HostSnapshot]] = []
    try:
        feed = PrometheusFeed(drip.url, PrometheusConfig(), 1.0, environ={})
        worker = threading.Thread(target=lambda: done.append(feed.poll()), daemon=True)
        worker.start()
        worker.join(60)  # a generous bound for a loaded machine; the old code never ended
    finally:
        drip.close()
    assert done, "poll() still waiting on headers sent a byte at a time"
    [[snap]] = done
    assert snap.state == model.HOST_TIMEOUT and "within 1 s" in (snap.error or "")


def test_the_cap_is_on_the_answers_held_at_once_not_each(prom: FakeProm) -> None:
    # Issue 40: 64 MiB per query with 8 in flight was 623 MB at refusal.  The answers a
    # refresh holds share one budget: a second 40 MiB answer while the first is held is
    # refused; once the first is given back, it fits.
    from gputop.sources.prometheus import Budget, PromError

    big = vector(*[({**GPU, "gpu": str(n), "pad": "x" * 400}, 1) for n in range(95_000)])
    assert 36 * 1024**2 < len(big) < 60 * 1024**2
    prom.reply = Reply(body=big, content_type="application/json")
    client = PromClient(prom.server.url, PrometheusConfig(), 60.0, environ={})
    budget = Budget()
    first = budget.share()
    result, _warnings = client.query("q", first)
    assert len(result) == 95_000 and first.held == len(big) == budget.used
    second = budget.share()
    with pytest.raises(PromError, match="in all at once"):
        client.query("q", second)
    assert second.held == 0 and budget.used == len(big)  # the refused one gave it back
    first.release()
    client.query("q", second)
    assert budget.used == len(big)


def test_a_body_past_the_cap_is_refused_while_it_streams(prom: FakeProm) -> None:
    from gputop.sources.prometheus import MAX_BODY_BYTES

    bomb = gzip.compress(b" " * (MAX_BODY_BYTES + 1024 * 1024), 9)
    prom.reply = Reply(body=bomb, encoding="gzip", content_type="application/json")
    [snap] = prom.feed().poll()
    assert snap.state == model.HOST_ERROR and "larger than 64 MiB" in (snap.error or "")


def test_redirects_are_not_followed(prom: FakeProm) -> None:
    elsewhere = FixedServer(lambda path: Reply(body=vector((GPU, 1))))
    try:
        prom.reply = Reply(status=307, location=f"{elsewhere.url}/api/v1/query")
        config = PrometheusConfig(token_env="PROM_TOKEN")
        [snap] = prom.feed(config, environ={"PROM_TOKEN": "s3cret"}).poll()
        assert snap.state == model.HOST_ERROR and "not followed" in (snap.error or "")
        assert elsewhere.requests == []  # neither the query nor the token went there
    finally:
        elsewhere.close()


def test_the_stream_sends_a_host_again_only_when_it_was_scraped_again(prom: FakeProm) -> None:
    feed = PrometheusFeed(prom.server.url, PrometheusConfig(), 5.0, environ={},
                          clock=lambda: 1700000005.0)
    scraped = ({"_scraped": "1", "instance": GPU["instance"]}, 1700000000.0)
    prom.fields = {"util_gpu": [(GPU, 42)], "_up": [scraped]}
    first = feed.poll()
    assert [s.host for s in feed.news(first)] == ["n1"]
    assert feed.news(feed.poll()) == []  # the same scrape, read again: nothing new
    feed.focus("n1")  # opened: read in full, so sent again
    assert [s.host for s in feed.news(feed.poll())] == ["n1"]
    prom.fields = {"util_gpu": [(GPU, 43)], "_up": [
        ({"_scraped": "1", "instance": GPU["instance"]}, 1700000004.0)]}
    [again] = feed.news(feed.poll())  # scraped since: a new reading
    assert again.time == 1700000004.0 and again.gpus[0].util_gpu == 43


def test_config_headers_and_client_certificate(tmp_path) -> None:
    # Issue 40: no headers: (X-Scope-OrgID for Mimir/Thanos tenants) and no client
    # certificate.  Bad entries are one line naming the file and line.
    from gputop.config import ConfigError, parse_config

    config = parse_config("prometheus:\n  headers: {X-Scope-OrgID: team-a, X-Shard: 7}\n"
                          "  cert_file: ~/c.pem\n  key_file: /k.pem\n", "c.yaml")
    assert config.prometheus.headers == {"X-Scope-OrgID": "team-a", "X-Shard": "7"}
    assert not config.prometheus.cert_file.startswith("~")
    assert config.prometheus.key_file == "/k.pem"
    for text, problem in (
            ("  headers: {Authorization: Bearer x}\n", "token_env"),
            ("  headers: {'Bad Name': x}\n", "header name"),
            ('  headers: {X-A: "a\\r\\nX-Evil: 1"}\n', "control characters"),
            ("  headers: {X-A: true}\n", "non-empty string"),
            ("  headers: [x]\n", "c.yaml:2"),
            ("  key_file: /k.pem\n", "key_file needs cert_file")):
        with pytest.raises(ConfigError, match=problem) as err:
            parse_config("prometheus:\n" + text, "c.yaml")
        assert "c.yaml:" in str(err.value) and "\n" not in str(err.value)


def test_https_with_a_client_certificate_and_tenant_header(tmp_path) -> None:
    import ssl

    from helpers.tlscerts import make_pki

    pki = make_pki(tmp_path)
    server = FixedServer(lambda path: Reply(body=vector((GPU, 42)),
                                            content_type="application/json"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    context.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    context.verify_mode = ssl.CERT_REQUIRED  # no client certificate: no answer
    server.server.socket = context.wrap_socket(server.server.socket, server_side=True)
    url = f"https://127.0.0.1:{server.port}"
    try:
        base = PrometheusConfig(ca_file=str(pki.ca), headers={"X-Scope-OrgID": "team-a"})
        [refused] = PrometheusFeed(url, base, 10.0, environ={}).poll()
        assert refused.state in (model.HOST_UNREACHABLE, model.HOST_ERROR)
        assert server.requests == []
        config = PrometheusConfig(ca_file=str(pki.ca), cert_file=str(pki.client_cert),
                                  key_file=str(pki.client_key),
                                  headers={"X-Scope-OrgID": "team-a"})
        [snap] = PrometheusFeed(url, config, 10.0, environ={}).poll()
        assert snap.host == "n1" and snap.gpus[0].util_gpu == 42
        assert {h.get("X-Scope-OrgID") for _p, h, _b in server.requests} == {"team-a"}
        with pytest.raises(ValueError, match=r"cert_file .*cannot load"):
            PrometheusFeed(url, PrometheusConfig(cert_file=str(tmp_path / "none.pem")),
                           10.0, environ={})
    finally:
        server.close()
