"""Real parts for the Prometheus tests: Debian's prometheus and promtool, `gputop serve`
processes, and a tiny HTTP server that answers fixed text (recorded exporter output, or
a misbehaving Prometheus)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def need_prometheus() -> None:
    """Skip without Debian's prometheus (scripts/ensure-prometheus.sh installs it); under
    CI=true a missing real part is a failure, not a skip."""
    missing = [b for b in ("prometheus", "promtool") if shutil.which(b) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed (bash scripts/ensure-prometheus.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain; version=0.0.4"
    delay: float = 0.0
    encoding: str = ""  # Content-Encoding, e.g. gzip
    location: str = ""  # a redirect's target


class FixedServer:
    """Answers every request with ``reply(path)`` (or ``by_body(path, body)`` when
    given: a fake Prometheus answering each query); records the requests it saw."""

    def __init__(self, reply: Callable[[str], Reply],
                 by_body: Callable[[str, bytes], Reply] | None = None) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.requests.append((self.path, dict(self.headers), body))
                answer = by_body(self.path, body) if by_body else reply(self.path)
                if answer.delay:
                    time.sleep(answer.delay)
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.content_type)
                if answer.location:
                    self.send_header("Location", answer.location)
                if answer.encoding:
                    self.send_header("Content-Encoding", answer.encoding)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_serve(scenario: str, port: int, config: Path,
                *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "gputop.cli", "serve", "--demo", scenario, "--listen",
         f"127.0.0.1:{port}", "--interval", "1", "--config", str(config), *extra],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_http(url: str, deadline_s: float = 30.0) -> bytes:
    end = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bytes(response.read())
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


def instant(url: str, expr: str) -> list[dict[str, Any]]:
    data = urllib.parse.urlencode({"query": expr}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=10) as response:
        doc = json.load(response)
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def start_prometheus(tmp: Path, jobs: dict[str, list[str]], extra: str = "",
                     rule_files: tuple[Path, ...] = ()) -> tuple[subprocess.Popen[bytes], str]:
    """``extra``: more scrape configs, YAML list items indented as the others (TLS,
    basic auth); ``rule_files``: rules Prometheus evaluates (every second here)."""
    lines = ["global:", "  scrape_interval: 1s", "  scrape_timeout: 1s",
             "  evaluation_interval: 1s"]
    if rule_files:
        lines += ["rule_files:", *[f"  - {path}" for path in rule_files]]
    lines.append("scrape_configs:")
    for job, targets in jobs.items():
        lines += [f"  - job_name: {job}", "    static_configs:",
                  f"      - targets: [{', '.join(targets)}]"]
    if extra:
        lines.append(extra.rstrip("\n"))
    config = tmp / "prometheus.yml"
    config.write_text("\n".join(lines) + "\n")
    port = free_port()
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/-/ready", 60)
    return proc, url
