"""`gputop serve`: this machine as a Prometheus exporter (and a snapshot API for gputop).

Collection runs in its own thread on its own schedule (the same collector, analysis,
orphan flags and reservations as the dashboard) and renders the answers once per
snapshot; a scrape only copies the last rendering and appends the snapshot's age, so a
scrape never calls NVML and ten scrapers cost what one does.

    GET /metrics           Prometheus text 0.0.4, or OpenMetrics 1.0 for a client that
                           takes only that (exposition.wants_openmetrics)
    GET /api/v1/snapshot   the --json document (schema 1) of this host

TLS and basic auth come from a Prometheus web config file (commands/webconfig.py).
"""

from __future__ import annotations

import argparse
import errno
import json
import signal
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from gputop.commands import common
from gputop.commands import exposition as expo
from gputop.commands.webconfig import BasicAuth, WebConfig, WebConfigError, allowed_san
from gputop.exitcodes import EXIT_OK
from gputop.model import HostSnapshot
from gputop.options import SourceOptions

if TYPE_CHECKING:
    from gputop.analysis.pipeline import Settings
    from gputop.sources.feed import LocalFeed

DEFAULT_LISTEN = "127.0.0.1:9400"
DEFAULT_INTERVAL_S = 15.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Serve this machine's GPUs as Prometheus metrics (DCGM names) and JSON."
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help="address to listen on (default %(default)s; 0.0.0.0:9400 opens it)")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, metavar="S",
                   help="seconds between collections (default %(default)g)")
    p.add_argument("--web-config-file", "--web.config.file", dest="web_config_file",
                   metavar="FILE",
                   help="TLS and basic auth, in Prometheus's web config format "
                        "(docs/prometheus.md; default: plain HTTP, no auth)")


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise common.usage_error(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    return host.strip("[]") or "0.0.0.0", int(port)


@dataclass(frozen=True)
class Rendered:
    """One snapshot's answers, rendered once by the collector thread."""

    snapshot: HostSnapshot
    text: bytes  # families without the age, text format
    openmetrics: bytes
    json: bytes


class Exporter:
    """Holds the latest rendering; ``collect_once`` makes the next one."""

    def __init__(self, feed: LocalFeed, settings: Settings, export: expo.ExportSettings,
                 me: str | None) -> None:
        from gputop.analysis.pipeline import Analyser

        self.feed = feed
        self.export = export
        self.analyser = Analyser(settings, settings.history(), lambda _host: me)
        self.last_xid: dict[int, int] = {}
        self.latest: Rendered | None = None

    def collect_once(self) -> Rendered:
        from gputop.commands.once import json_document

        started = time.monotonic()
        snap = self.feed.poll()
        analysed = self.analyser(snap)
        for event in snap.xid_events:  # DCGM's XID_ERRORS is the last one seen
            if event.gpu is not None:  # an event of no known GPU has no series
                self.last_xid[event.gpu] = event.xid
        seconds = time.monotonic() - started
        fams = expo.families(snap, analysed.warnings, analysed.flags, self.last_xid,
                             seconds, self.export)
        doc = json_document([snap], snap.time, {snap.host: analysed.warnings})
        rendered = Rendered(snap, expo.render(fams).encode(),
                            expo.render(fams, openmetrics=True).encode(),
                            json.dumps(doc).encode())
        self.latest = rendered  # one reference swap: scrapers never see half a rendering
        return rendered

    def metrics(self, openmetrics: bool, now: float) -> bytes:
        latest = self.latest
        if latest is None:
            return b"# EOF\n" if openmetrics else b""
        age = expo.render([expo.age_family(latest.snapshot, now)], openmetrics).encode()
        if openmetrics:
            return b"".join((latest.openmetrics, age, b"# EOF\n"))
        return latest.text + age


# A client that sends nothing (or reads nothing) for this long is dropped: a stuck
# scraper must not hold a thread forever.
CLIENT_TIMEOUT_S = 30.0
MAX_ERROR_KINDS = 32  # distinct client-error lines said, then silence
PLAIN = WebConfig()  # no --web-config-file: plain HTTP, no auth


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 drops the SYNs of a burst of scrapers, which
    # then wait a full second for the retransmit.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 web: WebConfig = PLAIN) -> None:
        self.web = web
        self._said: set[str] = set()
        self._said_lock = threading.Lock()
        super().__init__(address, handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        context = self.web.ssl_context
        if context is not None:
            # The handshake waits for the handler's thread (its setup): a slow client
            # in the accept loop would stall every other scraper.
            sock = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line per kind of client error, never a traceback: scrapers that hang up
        mid-answer are routine (socketserver would print each one's traceback)."""
        err = sys.exc_info()[1]
        kind = type(err).__name__ if err is not None else "error"
        if isinstance(err, ssl.SSLError):
            kind = f"TLS handshake: {getattr(err, 'reason', None) or err}"[:120]
        with self._said_lock:
            if kind in self._said or len(self._said) >= MAX_ERROR_KINDS:
                return
            self._said.add(kind)
        common.say("serve", f"a client's request failed: {kind} (said once per kind)")


def _handler(exporter: Exporter, web: WebConfig = PLAIN) -> type[BaseHTTPRequestHandler]:
    auth = BasicAuth(web.users) if web.users else None

    class Handler(BaseHTTPRequestHandler):
        server_version = "gputop"
        protocol_version = "HTTP/1.1"
        timeout = CLIENT_TIMEOUT_S

        def setup(self) -> None:
            super().setup()  # sets the socket's timeout first: the handshake obeys it
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.do_handshake()
                if not allowed_san(self.connection.getpeercert(), web.allowed_sans):
                    raise ssl.SSLError(ssl.SSL_ERROR_SSL, "client certificate not allowed")

        def do_GET(self) -> None:
            if auth is not None and not auth.allows(self.headers.get("Authorization")):
                self._send(401, "text/plain", b"unauthorized\n",
                           (("WWW-Authenticate", 'Basic realm="gputop"'),))
                return
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                openmetrics = expo.wants_openmetrics(self.headers.get("Accept"))
                body = exporter.metrics(openmetrics, time.time())
                kind = expo.CONTENT_TYPE_OPENMETRICS if openmetrics else expo.CONTENT_TYPE_TEXT
                self._send(200, kind, body, (("Vary", "Accept"),))
            elif path == "/api/v1/snapshot":
                latest = exporter.latest
                if latest is None:
                    self._send(503, "text/plain", b"no snapshot yet\n")
                else:
                    self._send(200, "application/json", latest.json)
            else:
                self._send(404, "text/plain", b"try /metrics or /api/v1/snapshot\n")

        def _send(self, code: int, kind: str, body: bytes,
                  extra: tuple[tuple[str, str], ...] = ()) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (*web.headers, *extra):
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a scrape every 15 s per scraper is not news

    return Handler


def run(options: SourceOptions, args: argparse.Namespace) -> int:
    return common.run("serve", lambda: _serve(options, args))


def _serve(options: SourceOptions, args: argparse.Namespace) -> int:
    from gputop.sources.opener import SourcePlan, open_feeds

    if not 0.5 <= args.interval <= 3600:
        raise common.usage_error("--interval: expected 0.5 to 3600 seconds")
    address = parse_listen(args.listen)
    web = PLAIN
    if args.web_config_file:
        from gputop.commands import webconfig

        try:
            web = webconfig.load(args.web_config_file)
        except WebConfigError as err:
            raise common.usage_error(str(err)) from None
    config = common.config(options)
    settings = common.settings(config)
    # This machine only (or the simulator): an exporter ignores hosts files.
    plan = SourcePlan(demo=options.demo, local=not options.demo, ssh_hosts=())
    with common.source_errors():
        [feed] = open_feeds(options, config, plan=plan, need_driver=False)
    from gputop.sources.feed import LocalFeed

    assert isinstance(feed, LocalFeed)  # this machine or the simulator, by the plan
    host = feed.hosts[0]
    me = feed.identity(host).reservation_owner
    export = expo.ExportSettings(config.serve.lowercase_hostname,
                                 config.serve.max_process_series)
    exporter = Exporter(feed, settings, export, me)
    try:
        server = Server(address, _handler(exporter, web), web)
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise common.usage_error(
                f"{args.listen}: address in use (another gputop serve?)") from None
        raise common.usage_error(f"{args.listen}: {err.strerror or err}") from None
    stop = threading.Event()

    def collect_loop() -> None:
        while not stop.is_set():
            started = time.monotonic()
            exporter.collect_once()
            stop.wait(max(args.interval - (time.monotonic() - started), 0.0))

    def on_term(_signum: int, _frame: Any) -> None:
        # shutdown() waits for serve_forever, which runs in this very thread: ask from
        # another one.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    collector = threading.Thread(target=collect_loop, name="collect", daemon=True)
    collector.start()
    scheme = "https" if web.tls else "http"
    auth = ", basic auth" if web.users else ""
    common.say("serve", f"{host}: listening on {scheme}://{args.listen}{auth} "
               "(GET /metrics, /api/v1/snapshot)")
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        stop.set()
        server.server_close()
    return EXIT_OK
