"""Issue 41, point 8: hosts-file entries with ``url:`` (gputop serve's snapshot API) read
from hostile HTTP servers: a redirect to another origin is refused (that host's numbers
are not this one's), and one deadline bounds the whole exchange, whatever pace the server
drips its TLS handshake, headers or body at.  Real `gputop --json` processes against real
servers in this test (and a real `gputop serve` where a good snapshot is needed).

Bounds are generous (a loaded 2-core machine): what matters is that a drip is a timeout,
not a read without end."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.prom import ROOT, FixedServer, Reply, free_port, start_serve, wait_http

from gputop import model

TIMEOUT = 3  # --timeout of the one-shot


def read_json(tmp: Path, entries: dict[str, str]) -> dict[str, dict[str, Any]]:
    """`gputop --json` over hosts ``{name: url}``: each host's document, by name."""
    hosts = tmp / "hosts.yaml"
    hosts.write_text("hosts:\n" + "".join(f"  - {{name: {name}, url: '{url}'}}\n"
                                          for name, url in entries.items()))
    config = tmp / "config.yaml"
    config.write_text("{}\n")
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "--json", "--hosts", str(hosts),
                           "--config", str(config), "--timeout", str(TIMEOUT)],
                          cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert "Traceback" not in done.stderr, done.stderr
    return {h["host"]: h for h in json.loads(done.stdout)["hosts"]}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real gputop serve: the host a redirect would send its reader to."""
    tmp = tmp_path_factory.mktemp("served")
    config = tmp / "config.yaml"
    config.write_text("{}\n")
    port = free_port()
    proc = start_serve("dgx-h100", port, config)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/snapshot")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(20)


def test_a_redirect_to_another_host_is_refused(tmp_path: Path, served: str) -> None:
    elsewhere = FixedServer(lambda path: Reply(302, location=f"{served}/api/v1/snapshot"))
    loop = FixedServer(lambda path: Reply(302, location=path))
    real = json.loads(wait_http(f"{served}/api/v1/snapshot"))
    # Same origin: a proxy's answer moved the API; followed.
    moved = FixedServer(lambda path: Reply(302, location="/v2/snapshot")
                        if path == "/api/v1/snapshot"
                        else Reply(200, json.dumps(real).encode(), "application/json"))
    try:
        found = read_json(tmp_path, {"vm": elsewhere.url, "loop": loop.url,
                                     "moved": moved.url})
    finally:
        for server in (elsewhere, loop, moved):
            server.close()
    vm = found["vm"]
    assert vm["state"] == "error" and vm["gpus"] == [], vm
    assert f"redirect to {served}/api/v1/snapshot not followed" in vm["error"]
    assert "more than 3 redirects" in found["loop"]["error"]
    assert found["moved"]["state"] == "ok" and len(found["moved"]["gpus"]) == 8
    assert [p for p, _h, _b in moved.requests] == ["/api/v1/snapshot", "/v2/snapshot"]


class DripServer:
    """A TCP server that answers every connection with ``head`` and then one byte of
    ``drip`` every ``pace`` seconds, for as long as the client stays."""

    def __init__(self, head: bytes, drip: bytes, pace: float = 0.25,
                 wait_request: bool = True) -> None:
        self.head, self.drip, self.pace, self.wait_request = head, drip, pace, wait_request
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                if self.wait_request:
                    conn.recv(65536)  # the request (or the TLS ClientHello)
                conn.sendall(self.head)
                for i in range(100_000):
                    if self.closed.wait(self.pace):
                        return
                    conn.sendall(self.drip[i % len(self.drip):][:1])
            except OSError:
                return  # the client gave up: what it should

    def close(self) -> None:
        self.closed.set()
        self.sock.close()


# A TLS record header announcing 16 KiB of handshake: the client waits for all of it.
TLS_RECORD = b"\x16\x03\x03\x40\x00"


@pytest.mark.parametrize("where", ["headers", "body", "tls handshake"])
def test_a_dripping_server_is_a_timeout_of_the_whole_exchange(tmp_path: Path,
                                                              where: str) -> None:
    if where == "headers":  # a header line a byte at a time, never the blank line
        server = DripServer(b"HTTP/1.1 200 OK\r\n", b"X-Pad: aaaaaaaa\r\n")
    elif where == "body":
        server = DripServer(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 1000000\r\n\r\n{\"schema\": 1, ", b" ")
    else:
        server = DripServer(TLS_RECORD, b"\x00")
    url = server.url.replace("http://", "https://") if where == "tls handshake" else server.url
    started = time.monotonic()
    try:
        found = read_json(tmp_path, {"drip": url})
    finally:
        server.close()
    seconds = time.monotonic() - started
    host = found["drip"]
    assert host["state"] == model.HOST_TIMEOUT, host
    assert f"no answer within {TIMEOUT} s" in host["error"]
    assert seconds < TIMEOUT + 45, seconds  # a drip of 100,000 bytes would be 7 hours


def test_a_url_hosts_snapshot_is_checked_as_a_probes(tmp_path: Path, served: str) -> None:
    """The API's document is checked field by field (sources/untrusted.py), as the SSH
    probe's is: a clock at 1e300 is an error of one line, a cut list says so, escapes are
    kept as sent for the views to show escaped."""
    real = json.loads(wait_http(f"{served}/api/v1/snapshot"))
    base = real["hosts"][0]
    crowd = [{"pid": 1000 + i, "gpu": 0} for i in range(5000)]
    docs = {"/clock/api/v1/snapshot": {**base, "time": 1e300},
            "/crowd/api/v1/snapshot": {**base, "processes": crowd,
                                       "driver_version": "550\x1b]2;pwned\x07"}}
    server = FixedServer(lambda path: Reply(200, json.dumps(
        {"schema": 1, "hosts": [docs[path]]}).encode(), "application/json"))
    try:
        found = read_json(tmp_path, {"clock": f"{server.url}/clock",
                                     "crowd": f"{server.url}/crowd"})
    finally:
        server.close()
    clock = found["clock"]
    assert clock["state"] == model.HOST_ERROR and clock["time"] < 4e9
    assert "its clock says 1e+300, not a time between 2000 and 2100" in clock["error"]
    crowd_host = found["crowd"]
    assert crowd_host["state"] == model.HOST_OK and len(crowd_host["processes"]) == 4096
    assert "4,096 of 5,000 processes shown" in crowd_host["error"]
    assert crowd_host["driver_version"] == "550\x1b]2;pwned\x07"  # --json escapes it
