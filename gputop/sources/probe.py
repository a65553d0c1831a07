"""The probe: the collector loop that runs on a remote host, at the far end of SSH.

Standard library only (its source is sent over the channel, see sources/bundle.py).

Protocol, one JSON object per line, ASCII:

- out: a HostSnapshot dict every interval (``{"host": ..., "time": ..., ...}``);
  an answer ``{"id": N, "reply": {...}}`` for each request;
  ``{"fatal": "...", "code": "..."}`` once, before exiting, when the probe cannot run.
- in:  first the config line (``{"interval": 1.0, "readonly": false, "warmup": 0}``), then
  requests ``{"id": N, "request": {"op": "kill", ...}}`` handled by
  ``gputop.actions.dispatch.handle``, each in its own thread (a kill waits out its grace).

The probe exits when stdin reaches EOF or stdout is gone: a probe that outlived its
channel would keep one of sshd's sessions (and its NVML handle) forever.

GPUs come from the first backend of sources/backends.py that opens here: NVML, over the
host's pynvml (else the copy shipped with the bundle).  When the
environment has ``GPUTOP_PROBE_SIM=<scenario name or file>`` the probe serves that sim
scenario instead (the test sshd gives each loopback "host" its own).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

if TYPE_CHECKING:
    from gputop.actions.dispatch import ActionEnv
    from gputop.sources.assembler import HostAssembler

SIM_ENV = "GPUTOP_PROBE_SIM"


class _Out:
    """Line writer shared by the collector loop and request threads."""

    def __init__(self, stream: BinaryIO, stop: threading.Event) -> None:
        self.stream = stream
        self.stop = stop
        self.lock = threading.Lock()

    def write(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, separators=(",", ":"), default=str).encode("ascii") + b"\n"
        with self.lock:
            try:
                self.stream.write(line)
                self.stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.stop.set()  # nobody is reading: time to go


class _Source:
    """What the loop collects from and where actions go."""

    def __init__(
        self, collector: HostAssembler, env: ActionEnv, lock: threading.Lock | None
    ) -> None:
        self.collector = collector
        self.env = env
        self.lock = lock  # the simulator is not thread-safe: polls and actions take turns

    def collect(self) -> dict[str, Any]:
        if self.lock is None:
            return self.collector.collect()
        with self.lock:
            return self.collector.collect()

    def handle(self, request: Any) -> dict[str, Any]:
        from gputop.actions.dispatch import handle

        if self.lock is None:
            return handle(request, self.env)
        with self.lock:
            return handle(request, self.env)


class Texts(Protocol):
    """Scenario texts by name: a dict, or the bundle's lazily unpacked ones."""

    def __contains__(self, name: object) -> bool: ...

    def __getitem__(self, name: str) -> str: ...

    def __len__(self) -> int: ...


def _reservations_dir(sim_name: str | None) -> str:
    # The same rule as local commands (store.store_directory): the variable, else the
    # default; the probe has no config file.
    from gputop.actions.store import store_directory

    if sim_name:
        import tempfile  # only simulated hosts need it: not paid on every host's start-up

        # A simulated host must never write the host's real reservation store.
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in sim_name)
        return store_directory(None, os.path.join(
            tempfile.gettempdir(), f"gputop-probe-sim-{os.getuid()}", safe, "reservations"))[0]
    return store_directory()[0]


def _load_scenario(name: str, scenarios: Texts) -> Any:
    import tempfile

    from gputop.sources import sim

    if os.path.isfile(name) or name not in scenarios:
        return sim.load_scenario(name)
    # A scenario shipped as text: the loader reads files, so give it one briefly.
    with tempfile.TemporaryDirectory(prefix="gputop-probe-") as tmp:
        path = os.path.join(tmp, f"{name}.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(scenarios[name])
        return sim.load_scenario(path)


def open_source(config: dict[str, Any], scenarios: Texts) -> _Source:
    """The collector for this host; raises NoDriverError when there is no GPU to read."""
    from gputop.sources import backends, hostsource

    readonly = bool(config.get("readonly", False))
    host = str(config.get("host") or "")
    sim_name = os.environ.get(SIM_ENV) or None
    if sim_name:
        rdir = _reservations_dir(sim_name)
        source = hostsource.open_simulation(_load_scenario(sim_name, scenarios),
                                            host=host or sim_name, reservations_dir=rdir)
        return _Source(source.collector, source.action_env(rdir, readonly), threading.Lock())
    rdir = _reservations_dir(None)
    # remote: a host whose driver sees no GPU still reports (zero GPUs), and the message
    # for a missing pynvml is the probe's own.
    source = backends.open_local(backends.Opening(host=host or "localhost",
                                                  reservations_dir=rdir, remote=True))
    return _Source(source.collector, source.action_env(rdir, readonly), None)


def _error(host: str, message: str, no_gpu: bool = False) -> dict[str, Any]:
    """A snapshot for a host that could not be read."""
    # gputop.model is imported only here: its dataclasses cost each host's start-up ~8 ms,
    # and the probe needs nothing from it but these two names.
    from gputop import model

    state = model.HOST_NO_GPU if no_gpu else model.HOST_ERROR
    return {"host": host, "time": time.time(), "state": state, "error": message,
            "source": "probe"}


def _serve_requests(
    stdin: BinaryIO, out: _Out, source: _Source | None, stop: threading.Event, hard_exit: bool
) -> None:
    """Read request lines until EOF; each request runs in its own thread."""
    try:
        for raw in stdin:
            try:
                message = json.loads(raw)
            except ValueError:
                continue  # not ours; a bad line must not end the probe
            if not isinstance(message, dict) or "id" not in message:
                continue
            threading.Thread(
                target=_answer, args=(message, out, source), daemon=True
            ).start()
    except (OSError, ValueError):
        pass
    stop.set()
    if hard_exit:
        # The loop notices `stop` within one poll; a poll stuck in the driver would keep
        # the process (and its sshd session) alive, so give it a few seconds at most.
        timer = threading.Timer(5.0, os._exit, args=(0,))
        timer.daemon = True
        timer.start()


def _answer(message: dict[str, Any], out: _Out, source: _Source | None) -> None:
    if source is None:
        reply: dict[str, Any] = {"ok": False, "message": "no GPU source on this host"}
    else:
        reply = source.handle(message.get("request"))
    out.write({"id": message["id"], "reply": reply})


def main(
    config: dict[str, Any] | None = None,
    scenarios: Texts | None = None,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
) -> int:
    config = dict(config or {})
    scenarios = scenarios or {}
    hard_exit = stdin is None
    stdin = stdin if stdin is not None else sys.stdin.buffer
    stdout = stdout if stdout is not None else sys.stdout.buffer
    interval = max(0.05, float(config.get("interval", 1.0)))
    host = str(config.get("host") or "")
    stop = threading.Event()
    out = _Out(stdout, stop)

    source: _Source | None = None
    failure: dict[str, Any] | None = None
    try:
        source = open_source(config, scenarios)
    except Exception as exc:  # NoDriverError above all; anything else is shown the same way
        no_gpu = type(exc).__name__ == "NoDriverError"
        failure = _error(host, str(exc) or type(exc).__name__, no_gpu)

    reader = threading.Thread(
        target=_serve_requests, args=(stdin, out, source, stop, hard_exit), daemon=True
    )
    reader.start()

    warmup = float(config.get("warmup", 0) or 0)
    if source is not None and warmup > 0:
        # Rates (CPU %, per-process SM %) need two reads; a one-shot client wants them.
        _safe_collect(source, host)
        stop.wait(min(warmup, 5.0))

    while not stop.is_set():
        started = time.monotonic()
        snapshot = failure if source is None else _safe_collect(source, host)
        snapshot = dict(snapshot or {})
        snapshot["time"] = snapshot.get("time") or time.time()
        if source is not None:
            # Before the snapshot goes out, like the UUIDs below: a reservation of a MIG
            # device sent at once must find it.
            source.env.mig_devices = {
                m.get("uuid"): (m.get("gpu"), m.get("index"))
                for g in snapshot.get("gpus") or () for m in g.get("mig_devices") or ()
                if m.get("uuid")
            }
        if source is not None and source.env.gpu_uuids is None:
            # Before the snapshot goes out: a client that saw it may send a reservation
            # at once, and a card named by index alone would get an index-N file.
            source.env.gpu_uuids = {
                g.get("index"): g.get("uuid") for g in snapshot.get("gpus") or ()
            }
        out.write(snapshot)
        stop.wait(max(0.0, interval - (time.monotonic() - started)))
    return 0


def _safe_collect(source: _Source, host: str) -> dict[str, Any]:
    try:
        return source.collect()
    except Exception as exc:  # one bad poll is this host's state, not the probe's end
        return _error(host, f"collection failed: {type(exc).__name__}: {exc}")


if __name__ == "__main__":  # local run: python -m gputop.sources.probe '{"interval": 1}'
    sys.exit(main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}))
