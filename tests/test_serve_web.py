"""`gputop serve --web-config-file`: TLS, client certificates and bcrypt basic auth in
Prometheus's web config format, checked on real `gputop serve` processes, by real TLS
clients and a real Prometheus; clients that hang up mid-answer; format negotiation."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from helpers.prom import (
    ROOT,
    free_port,
    instant,
    need_prometheus,
    start_prometheus,
    start_serve,
    wait_http,
)
from helpers.tlscerts import Pki, make_pki

from gputop.commands import exposition as expo
from gputop.commands import webconfig
from gputop.commands.webconfig import BasicAuth, WebConfigError

PASSWORD = "s3cret pass"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def hashed(password: str = PASSWORD, cost: int = 4) -> str:
    # Cost 4, the least bcrypt takes: the tests check the format, not the cost.
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()


def write_web(folder: Path, pki: Pki, extra_tls: str = "", users: bool = True) -> Path:
    # Relative file names: they are relative to the web config's folder.
    (folder / "certs").mkdir(exist_ok=True)
    for src in (pki.server_cert, pki.server_key, pki.ca):
        (folder / "certs" / src.name).write_bytes(src.read_bytes())
    text = ("tls_server_config:\n"
            f"  cert_file: certs/{pki.server_cert.name}\n"
            f"  key_file: certs/{pki.server_key.name}\n{extra_tls}"
            "http_server_config:\n"
            "  headers: {Strict-Transport-Security: max-age=31536000}\n")
    if users:
        # $2y$ is what htpasswd -B writes; bcrypt's own $2b$ works as well.
        text += f"basic_auth_users:\n  ops: '$2y${hashed()[4:]}'\n  other: '{hashed('x')}'\n"
    path = folder / "web.yml"
    path.write_text(text)
    return path


def https(url: str, pki: Pki, user: str | None = None, password: str = PASSWORD,
          client_cert: bool = False) -> tuple[int, dict[str, str], bytes]:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if client_cert:
        context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    headers = {}
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def wait_https(url: str, pki: Pki, **kwargs: object) -> None:
    end = time.monotonic() + 30
    while True:
        try:
            https(url, pki, **kwargs)  # type: ignore[arg-type]
            return
        except (OSError, ssl.SSLError):
            assert time.monotonic() < end, f"{url} never answered"
            time.sleep(0.1)


@pytest.fixture
def served(tmp_path: Path, pki: Pki) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    port = free_port()
    proc = start_serve("lab", port, config, "--web-config-file", str(write_web(tmp_path, pki)))
    url = f"https://127.0.0.1:{port}"
    try:
        wait_https(f"{url}/metrics", pki)
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(20)


def test_tls_and_basic_auth(served: tuple[str, subprocess.Popen[bytes]], pki: Pki) -> None:
    url, proc = served
    code, headers, _ = https(f"{url}/metrics", pki)
    assert code == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert https(f"{url}/metrics", pki, "ops", "wrong")[0] == 401
    assert https(f"{url}/metrics", pki, "nobody", PASSWORD)[0] == 401
    assert https(f"{url}/api/v1/snapshot", pki)[0] == 401  # every path, not just /metrics
    code, headers, body = https(f"{url}/metrics", pki, "ops")
    assert code == 200 and b"DCGM_FI_DEV_GPU_UTIL{" in body
    assert headers["Strict-Transport-Security"] == "max-age=31536000"
    code, _, body = https(f"{url}/api/v1/snapshot", pki, "other", "x")
    assert code == 200 and json.loads(body)["hosts"][0]["host"] == "lab-gpu-03"
    # Plain HTTP to the TLS port gets nowhere, and costs the server one line at most.
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(url.replace("https", "http") + "/metrics", timeout=10)
    assert https(f"{url}/metrics", pki, "ops")[0] == 200  # still serving
    proc.terminate()
    proc.wait(20)
    err = proc.stderr.read().decode()  # type: ignore[union-attr]
    assert "Traceback" not in err
    assert f"listening on {url}, basic auth" in err


def test_client_certificates_required_and_names_checked(tmp_path: Path, pki: Pki) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    for allowed, ok in (("scraper.example", True), ("someone.else", False)):
        folder = tmp_path / allowed
        folder.mkdir()
        web = write_web(folder, pki, users=False, extra_tls=(
            "  client_auth_type: RequireAndVerifyClientCert\n"
            f"  client_ca_file: certs/{pki.ca.name}\n"
            f"  client_allowed_sans: [{allowed}]\n"))
        port = free_port()
        proc = start_serve("lab", port, config, "--web-config-file", str(web))
        url = f"https://127.0.0.1:{port}/metrics"
        try:
            end = time.monotonic() + 30
            while True:  # up once the port takes connections
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    break
                except OSError:
                    assert time.monotonic() < end
                    time.sleep(0.1)
            time.sleep(0.5)
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                https(url, pki)  # no certificate
            if ok:
                wait_https(url, pki, client_cert=True)
                code, _, body = https(url, pki, client_cert=True)
                assert code == 200 and b"gputop_up" in body
            else:
                with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                    https(url, pki, client_cert=True)
        finally:
            proc.terminate()
            proc.wait(20)
        err = proc.stderr.read().decode()  # type: ignore[union-attr]
        assert "Traceback" not in err


@pytest.mark.parametrize(("text", "line", "words"), [
    ("tls_server_config: {cert_file: c.pem}\n", 1, "needs both cert_file and key_file"),
    ("tls_server_config:\n  cert_file: nope.pem\n", 2, "no such file"),
    ("basic_auth_users:\n  ops: plaintext\n", 2, "expected a bcrypt hash"),
    ("basic_auth_users:\n  'a:b': $2y$10$0123456789012345678901234567890123456789012345678901\n",
     2, "without ':'"),
    ("http_server_config:\n  headers: {Set-Cookie: x}\n", 2, "not a header the config may set"),
    ("http_server_config:\n  http2: maybe\n", 2, "expected true or false"),
    ("tls_srv_config: {}\n", 1, "unknown key"),
    ("tls_server_config:\n  cert_file: c.pem\n  key_file: c.pem\n  min_version: TLS99\n",
     4, "expected one of TLS10"),
    ("tls_server_config:\n  cert_file: c.pem\n  key_file: c.pem\n  cipher_suites: [X]\n",
     4, "not supported"),
    ("tls_server_config:\n  cert_file: c.pem\n  key_file: c.pem\n"
     "  client_auth_type: RequireAndVerifyClientCert\n", 4, "needs client_ca_file"),
    ("tls_server_config:\n  cert_file: c.pem\n  key_file: c.pem\n", 2, "cannot load"),
    ("basic_auth_users: [a, b]\n", 1, "expected a mapping"),
    ("{a: [\n", 2, "not valid YAML"),
])
def test_hostile_web_config_names_its_line(tmp_path: Path, text: str, line: int,
                                           words: str) -> None:
    (tmp_path / "c.pem").write_text("not a certificate\n")
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(WebConfigError) as err:
        webconfig.load(str(path))
    assert str(err.value).startswith(f"{path}:{line}: ") and words in str(err.value)


def test_bad_web_config_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text("basic_auth_users:\n  ops: hunter2\n")
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "serve", "--demo", "lab",
                           "--listen", f"127.0.0.1:{free_port()}", "--web.config.file",
                           str(path)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"gputop serve: {path}:2: basic_auth_users.ops: expected a bcrypt hash "
        "($2y$10$..., e.g. from htpasswd -nBC 10 USER)"]


def test_basic_auth_remembers_answers_and_refuses_junk() -> None:
    calls = []

    def checkpw(password: bytes, hashed_pw: bytes) -> bool:
        calls.append(password)
        return bool(bcrypt.checkpw(password, hashed_pw))

    auth = BasicAuth({"ops": hashed().encode()}, checkpw)
    good = "Basic " + base64.b64encode(f"ops:{PASSWORD}".encode()).decode()
    assert all(auth.allows(good) for _ in range(20)) and len(calls) == 1
    assert not auth.allows("Basic " + base64.b64encode(b"ops:nope").decode())
    # An unknown user costs a bcrypt too (against a dummy hash): no timing oracle.
    assert not auth.allows("Basic " + base64.b64encode(f"eve:{PASSWORD}".encode()).decode())
    assert len(calls) == 3
    for junk in (None, "", "Bearer x", "Basic !!!", "Basic " + base64.b64encode(b"nocolon")
                 .decode()):
        assert not auth.allows(junk)


def _rst_after_request(port: int, read: int) -> None:
    """A scraper that asks, reads ``read`` bytes at most, and hangs up with a reset."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    if read:
        sock.recv(read)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_clients_hanging_up_mid_answer_cost_one_line_per_kind(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    port = free_port()
    # dgx-h100: a big answer (8 GPUs, processes), so a hang-up lands mid-write.
    proc = start_serve("dgx-h100", port, config)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/snapshot")
        for i in range(150):
            _rst_after_request(port, read=(i % 3) * 100)
        # A half-sent request and a bare connect: both dropped, quietly.
        for payload in (b"GET /metr", b""):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(payload)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        body = wait_http(f"http://127.0.0.1:{port}/metrics")
        assert b"gputop_up" in body  # still serving, all along
    finally:
        proc.terminate()
        assert proc.wait(20) == 0
    err = proc.stderr.read().decode()  # type: ignore[union-attr]
    assert "Traceback" not in err
    said = [line for line in err.splitlines() if "a client's request failed" in line]
    assert len(said) == len(set(said)) <= 3, err  # one line per kind at most
    assert all("(said once per kind)" in line for line in said)


@pytest.mark.parametrize(("accept", "openmetrics"), [
    (None, False),
    ("*/*", False),
    # Prometheus 2.42's own header: it takes the text format too, at a lower q.
    ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1", False),
    ("application/openmetrics-text; version=1.0.0", True),
    ("application/openmetrics-text;version=1.0.0,text/plain;q=0", True),
    ("text/plain;version=0.0.5, application/openmetrics-text", True),
    ("application/json", False),  # nothing we have: the default
    ("text/plain;q=nan-ish", False),
])
def test_format_negotiation(accept: str | None, openmetrics: bool) -> None:
    assert expo.wants_openmetrics(accept) is openmetrics


def test_prometheus_scrapes_tls_and_basic_auth(tmp_path: Path, pki: Pki) -> None:
    """A real Prometheus scrapes the TLS+auth serve; a job without the password is
    refused (up == 0), so the auth is not decoration."""
    need_prometheus()
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    port = free_port()
    serve = start_serve("lab", port, config, "--web-config-file", str(write_web(tmp_path, pki)))
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD)
    target = f"127.0.0.1:{port}"
    jobs = ""
    for job, auth in (("secure", f"    basic_auth: {{username: ops, password_file: "
                                 f"{password_file}}}\n"),
                      ("noauth", "")):
        jobs += (f"  - job_name: {job}\n    scheme: https\n"
                 f"    tls_config: {{ca_file: {pki.ca}}}\n{auth}"
                 f"    static_configs:\n      - targets: ['{target}']\n")
    prom = None
    try:
        wait_https(f"https://{target}/metrics", pki)
        prom, url = start_prometheus(tmp_path, {}, extra=jobs)
        end = time.monotonic() + 60
        while not instant(url, 'DCGM_FI_DEV_GPU_UTIL{job="secure"}'):
            assert time.monotonic() < end, "Prometheus never scraped the TLS target"
            time.sleep(0.3)
        while not instant(url, 'up{job="noauth"}'):
            assert time.monotonic() < end
            time.sleep(0.3)
        [up] = instant(url, 'up{job="secure"}')
        assert up["value"][1] == "1"
        [refused] = instant(url, 'up{job="noauth"}')
        assert refused["value"][1] == "0"
        found = instant(url, 'gputop_host_info{job="secure"}')
        assert found and found[0]["metric"]["Hostname"] == "lab-gpu-03"
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(20)
        serve.terminate()
        serve.wait(20)
    assert b"Traceback" not in serve.stderr.read()  # type: ignore[union-attr]


def test_scrapers_connecting_at_once_cost_one_bcrypt() -> None:
    import threading

    calls = []

    def slow_checkpw(password: bytes, hashed_pw: bytes) -> bool:
        calls.append(password)
        time.sleep(0.2)  # bcrypt's time, so that the others arrive meanwhile
        return bool(bcrypt.checkpw(password, hashed_pw))

    auth = BasicAuth({"ops": hashed().encode()}, slow_checkpw)
    good = "Basic " + base64.b64encode(f"ops:{PASSWORD}".encode()).decode()
    answers: list[bool] = []
    threads = [threading.Thread(target=lambda: answers.append(auth.allows(good)))
               for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [True] * 10 and len(calls) == 1
