"""The probe and its bundle, run locally through the real bootstrap command (no SSH).

The "remote" python is /usr/bin/python3 with an environment that has neither gputop nor
pynvml installed, so everything it runs arrived in the bundle.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gputop import model
from gputop.model import HostSnapshot
from gputop.sources import bundle

SYSTEM_PYTHON = "/usr/bin/python3"
PY39 = "/root/.pyenv/versions/3.9.18/bin/python3"
PY310 = "/root/.pyenv/versions/3.10.13/bin/python3"


def _pythonpath(tmp: Path) -> str:
    import yaml

    lib = tmp / "pylib"
    lib.mkdir(exist_ok=True)
    if not (lib / "yaml").exists():
        (lib / "yaml").symlink_to(Path(yaml.__file__).parent)
    return str(lib)


def _start(tmp: Path, python: str, env: dict[str, str], config: dict[str, Any]) -> Any:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "python3"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(python)
    full_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp), **env}
    proc = subprocess.Popen(
        ["/bin/sh", "-c", bundle.BOOTSTRAP],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full_env,
        cwd=tmp,  # `python3 -c` puts the cwd on sys.path: not the repository
    )
    assert proc.stdin is not None
    proc.stdin.write(bundle.stdin_preamble(config))
    proc.stdin.flush()
    return proc


def _lines(proc: Any, count: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(count):
        line = proc.stdout.readline()
        if not line:
            break
        out.append(json.loads(line))
    return out


@pytest.fixture
def system_python() -> str:
    if not os.path.exists(SYSTEM_PYTHON):
        pytest.skip("no /usr/bin/python3")
    check = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import gputop"], capture_output=True, cwd="/"
    )
    assert check.returncode != 0, "the system python must not have gputop installed"
    return SYSTEM_PYTHON


def test_shipped_modules_import_only_stdlib_and_each_other() -> None:
    shipped = set(bundle.MODULES) | set(bundle.PACKAGES)
    for name in bundle.MODULES:
        for imported in bundle.non_stdlib_imports(bundle.module_source(name)):
            assert imported in shipped, f"{name} imports {imported} at module level"


def test_a_shipped_package_ships_every_module_in_it() -> None:
    import importlib.util

    for name in bundle.MODULES:
        if not bundle.is_package(name):
            continue
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations is not None
        folder = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(folder.glob("*.py")):
            if path.name != "__init__.py":
                assert f"{name}.{path.stem}" in bundle.MODULES, path


def test_bootstrap_is_fixed_text() -> None:
    assert "{" not in bundle.BOOTSTRAP.replace("{}", "")
    assert bundle.BOOTSTRAP.startswith("exec python3 -u -c ")


def test_probe_streams_answers_and_exits_on_eof(tmp_path: Path, system_python: str) -> None:
    proc = _start(
        tmp_path,
        system_python,
        {"GPUTOP_PROBE_SIM": "dgx-h100", "PYTHONPATH": _pythonpath(tmp_path),
         "GPUTOP_RESERVATIONS_DIR": str(tmp_path / "res")},
        {"interval": 0.2, "host": "gpu;rm -rf x"},
    )
    try:
        first, second = _lines(proc, 2)
        snap = HostSnapshot.from_dict(first)
        assert snap.state == model.HOST_OK
        assert snap.host == "gpu;rm -rf x"  # data, carried as it is
        assert snap.demo is True and len(snap.gpus) > 0
        assert second["time"] > first["time"]
        proc.stdin.write(b'{"id": 41, "request": {"op": "reservations"}}\n')
        proc.stdin.write(b"not json\n")
        proc.stdin.write(b'{"id": 42, "request": {"op": "explode"}}\n')
        proc.stdin.flush()
        replies = {}
        for _ in range(20):
            (message,) = _lines(proc, 1)
            if "reply" in message:
                replies[message["id"]] = message["reply"]
            if len(replies) == 2:
                break
        assert replies[41]["ok"] is True and replies[41]["reservations"] == []
        assert replies[42]["ok"] is False and "explode" in replies[42]["message"]
    finally:
        proc.stdin.close()
        # EOF on stdin is the signal to go; a probe that ignored it would hang here.
        assert proc.wait(timeout=10) == 0
    assert b"Traceback" not in proc.stderr.read()


def test_probe_without_driver_uses_shipped_pynvml(tmp_path: Path, system_python: str) -> None:
    check = subprocess.run([system_python, "-c", "import pynvml"], capture_output=True, cwd="/")
    if check.returncode == 0:
        pytest.skip("the system python has its own pynvml")
    proc = _start(tmp_path, system_python, {}, {"interval": 0.2, "host": "nogpu"})
    try:
        (first,) = _lines(proc, 1)
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
    assert first["state"] == model.HOST_NO_GPU
    # "none shipped" would mean the bundle's copy of nvidia-ml-py was not found.
    assert "none shipped" not in first["error"]
    assert "driver" in first["error"].lower() or "nvml" in first["error"].lower()


def test_old_python_gets_a_clear_fatal_line(tmp_path: Path) -> None:
    if not os.path.exists(PY39):
        pytest.skip("no python 3.9 here")
    proc = _start(tmp_path, PY39, {}, {"interval": 0.2})
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == bundle.OLD_PYTHON_STATUS
    line = json.loads(out.splitlines()[0])
    assert line["code"] == "old-python" and "3.9" in line["fatal"]
    assert b"SyntaxError" not in err


def test_python_310_runs_the_probe(tmp_path: Path) -> None:
    if not os.path.exists(PY310):
        pytest.skip("no python 3.10 here")
    proc = _start(
        tmp_path, PY310,
        {"GPUTOP_PROBE_SIM": "dgx-h100", "PYTHONPATH": _pythonpath(tmp_path),
         "GPUTOP_RESERVATIONS_DIR": str(tmp_path / "res")},
        {"interval": 0.2, "host": "old"},
    )
    try:
        (first,) = _lines(proc, 1)
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
    assert first["state"] == model.HOST_OK, first.get("error")


def test_probe_main_in_process_readonly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """main() with pipes: a kill request is refused in read-only mode, nothing signalled."""
    import threading

    from gputop.sources import probe

    monkeypatch.setenv("GPUTOP_PROBE_SIM", "lab")
    monkeypatch.setenv("GPUTOP_RESERVATIONS_DIR", str(tmp_path / "res"))
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    stdin, stdout = os.fdopen(in_r, "rb"), os.fdopen(out_w, "wb")
    result: list[int] = []
    runner = threading.Thread(
        target=lambda: result.append(
            probe.main({"interval": 0.05, "readonly": True}, {}, stdin=stdin, stdout=stdout)
        )
    )
    runner.start()
    reader = os.fdopen(out_r, "rb")
    first = json.loads(reader.readline())
    # One of the scenario user's (alice's) own live processes: without read-only mode this
    # kill would succeed, so the refusal below is read-only's doing.
    victim = next(p for p in first["processes"]
                  if p.get("user") == "alice" and p.get("state") not in ("Z", None))
    with os.fdopen(in_w, "wb") as requests:
        kill = {"op": "kill", "pid": victim["pid"], "start_ticks": victim["start_ticks"],
                "signal": "KILL", "grace": 0}
        requests.write(json.dumps({"id": 1, "request": kill}).encode() + b"\n")
        requests.flush()
        while True:
            message = json.loads(reader.readline())
            if "reply" in message:
                break
        # The next snapshot still lists the victim: nothing was signalled, not even in
        # the simulation.
        while True:
            later = json.loads(reader.readline())
            if "processes" in later:
                break
        assert victim["pid"] in {p["pid"] for p in later["processes"]}
    runner.join(10)
    stdout.close()
    assert result == [0]
    assert message["id"] == 1
    assert message["reply"]["ok"] is False and message["reply"]["outcome"] == "readonly"


def test_payload_is_compact() -> None:
    # The payload goes to every host on every (re)connect; keep an eye on its size.
    # The loader is small; the blob after it (sources and bytecode) is most of it.
    # 512 KiB held until the GPM module and the store's per-card reads (about 515 KiB);
    # the cap is there to catch a module shipped by mistake, not to stop growth.
    loader = len(bundle.build_payload())
    size = len(bundle.stdin_preamble({"interval": 1}))
    assert 0 < loader < 16 * 1024, loader
    assert loader < size < 640 * 1024, size


# Runs the real bootstrap's code with compile() and imports recorded, and prints what
# it saw when the probe exits (EOF on stdin).
_WATCHED_BOOTSTRAP = r"""
import atexit, builtins, json, sys, zlib
compiled = []
real_compile = builtins.compile
def counting_compile(source, filename, *args, **kwargs):
    compiled.append(str(filename))
    return real_compile(source, filename, *args, **kwargs)
builtins.compile = counting_compile
def report():
    loaded = sorted(n for n in sys.modules if n.startswith(("gputop", "pynvml")))
    sys.stderr.write("WATCH " + json.dumps({"compiled": compiled, "loaded": loaded}) + "\n")
atexit.register(report)
b = sys.stdin.buffer
n = int(b.readline())
exec(real_compile(zlib.decompress(b.read(n)), "gputop-probe", "exec"))
"""


def _watched_run(tmp: Path, python: str) -> tuple[dict[str, Any], dict[str, Any]]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp), "GPUTOP_PROBE_SIM": "dgx-h100",
           "PYTHONPATH": _pythonpath(tmp), "GPUTOP_RESERVATIONS_DIR": str(tmp / "res")}
    proc = subprocess.Popen(
        [python, "-u", "-c", _WATCHED_BOOTSTRAP], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp,
    )
    assert proc.stdin is not None
    proc.stdin.write(bundle.stdin_preamble({"interval": 0.2, "host": "watched"}))
    proc.stdin.flush()
    try:
        (first,) = _lines(proc, 1)
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
    err = proc.stderr.read().decode()
    (watch,) = [line[6:] for line in err.splitlines() if line.startswith("WATCH ")]
    return first, json.loads(watch)


def _magic(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import importlib.util; print(importlib.util.MAGIC_NUMBER.hex())"],
        capture_output=True, text=True, check=True, cwd="/",
    ).stdout.strip()


def test_same_bytecode_host_compiles_nothing_and_skips_pynvml(
    tmp_path: Path, system_python: str
) -> None:
    import importlib.util

    if _magic(system_python) != importlib.util.MAGIC_NUMBER.hex():
        pytest.skip("the system python reads other bytecode than this one")
    first, watch = _watched_run(tmp_path, system_python)
    assert first["state"] == model.HOST_OK, first.get("error")
    assert "gputop.sources.sim" in watch["loaded"]
    assert "gputop.sources.sim.library" in watch["loaded"]
    assert not [f for f in watch["compiled"] if f.startswith("/gputop-bundle/")]
    # A sim host never needs the shipped nvidia-ml-py: it stays compressed, unimported.
    assert "pynvml" not in watch["loaded"]
    # The snapshot model's dataclasses are for the client; a healthy probe never loads them.
    assert "gputop.model" not in watch["loaded"]


def test_other_bytecode_host_compiles_the_shipped_source(tmp_path: Path) -> None:
    import importlib.util

    if not os.path.exists(PY310):
        pytest.skip("no python 3.10 here")
    assert _magic(PY310) != importlib.util.MAGIC_NUMBER.hex()
    first, watch = _watched_run(tmp_path, PY310)
    assert first["state"] == model.HOST_OK, first.get("error")
    compiled = set(watch["compiled"])
    # The sim is a package: its __init__ and every module in it came from the bundle.
    assert "/gputop-bundle/gputop/sources/sim/__init__.py" in compiled
    sim_modules = [m for m in bundle.MODULES if m.startswith("gputop.sources.sim.")]
    assert sim_modules
    for name in sim_modules:
        assert "/gputop-bundle/" + name.replace(".", "/") + ".py" in compiled
    assert "/gputop-bundle/gputop/sources/probe.py" in compiled
    assert not any("pynvml" in f for f in compiled)
