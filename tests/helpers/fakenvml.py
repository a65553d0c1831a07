"""gputop's own fake ``libnvidia-ml.so.1`` (tests/fakenvml/) and what tests need around it:
the library, built by `make test` or here on demand into build/fakenvml/; scenario files
in its line format; the environment that makes the real pynvml load it; and real
processes for a scenario to list (gputop looks every pid up in /proc).

A scenario is a dict (tests/fakenvml/README.md lists the keys); ``write_scenario`` writes
it as the library reads it, so the dict is the only scenario language tests use.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "build" / "fakenvml" / "libnvidia-ml.so.1"
TEMPLATES = ROOT / "tests" / "fakenvml" / "scenarios"
_KEY = re.compile(r"[A-Za-z0-9_]+")

# Probe source for a subprocess: pynvml without nvmlDeviceGetFieldValues, the collector's
# one-call-per-field path, to compare with the batched one.
SINGLE_CALLS = """
class Single:
    def __getattr__(self, name):
        if name == "nvmlDeviceGetFieldValues":
            raise AttributeError(name)
        return getattr(pynvml, name)
"""


def driver_present() -> bool:
    """Whether the real pynvml finds a working NVIDIA driver on this machine."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    return True


@functools.lru_cache(maxsize=1)
def library_dir() -> Path:
    """The folder holding the library, up to date: `make fakenvml` (the Makefile keeps the
    one build rule), once per session; skipped without make or a C compiler (under CI that
    skip is a failure, see conftest.py)."""
    if shutil.which("make") is None or shutil.which(os.environ.get("CC", "cc")) is None:
        import pytest

        pytest.skip("the fake NVML driver needs make and a C compiler")
    done = subprocess.run(["make", "-s", "-C", str(ROOT), "fakenvml"], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building {LIBRARY} failed:\n{done.stdout}{done.stderr}")
    return LIBRARY.parent


def install_library(target: Path) -> Path:
    """A copy of the library in ``target`` (made readable by all), for tests that run
    gputop as other users, who may not reach a checkout under a private home."""
    target.mkdir(mode=0o755, parents=True, exist_ok=True)
    copy = target / LIBRARY.name
    shutil.copyfile(library_dir() / LIBRARY.name, copy)
    copy.chmod(0o755)
    return target


def scenario_lines(scenario: dict[str, Any]) -> list[str]:
    """The file's lines: dict keys joined by dots, list items by position; a list's own key
    holds its length and a dict's "{}" (so a None item, an empty MIG slot, stays empty);
    None values are left out; ``not_supported: [names]`` becomes errors of NOT_SUPPORTED."""
    lines: list[str] = []

    def walk(path: str, value: Any) -> None:
        if value is None:
            return
        if isinstance(value, dict):
            if path:
                lines.append(f"{path} {{}}")
            items = dict(value)
            missing = items.pop("not_supported", None)
            if missing:
                items["errors"] = {**dict.fromkeys(missing, "NOT_SUPPORTED"),
                                   **(items.get("errors") or {})}
            for key, item in items.items():
                if not _KEY.fullmatch(str(key)):
                    raise ValueError(f"scenario key {key!r} at {path or 'top'}: letters, "
                                     "digits and _ only")
                walk(f"{path}.{key}" if path else str(key), item)
        elif isinstance(value, (list, tuple)):
            lines.append(f"{path} {len(value)}")
            for position, item in enumerate(value):
                walk(f"{path}.{position}", item)
        elif isinstance(value, bool):
            lines.append(f"{path} {int(value)}")
        elif isinstance(value, (int, float, str)):
            text = str(value)
            if "\n" in text:
                raise ValueError(f"scenario value at {path}: no newlines")
            lines.append(f"{path} {text}")
        else:
            raise TypeError(f"scenario value at {path}: {type(value).__name__}")

    walk("", scenario)
    return lines


def write_scenario(path: Path, scenario: dict[str, Any]) -> Path:
    """Write (or rewrite, while gputop runs) the scenario file; every process needs a
    pid (``processes()`` gives them real ones)."""
    for holder in _holders(scenario):
        for proc in holder.get("processes") or ():
            if proc is not None and "pid" not in proc:
                raise ValueError(f"process without a pid: {proc} (use fakenvml.processes)")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("\n".join(scenario_lines(scenario)) + "\n")
    tmp.chmod(0o644)
    tmp.replace(path)  # the library re-reads a changed file: never let it see half of one
    return path


def environment(scenario: Path, library: Path | None = None) -> dict[str, str]:
    """os.environ plus what makes pynvml load the fake driver with ``scenario``."""
    return dict(os.environ, LD_LIBRARY_PATH=str(library or library_dir()),
                FAKENVML_SCENARIO=str(scenario))


def template(name: str) -> dict[str, Any]:
    """A scenario of tests/fakenvml/scenarios/ (faulty, mig, dgx8); its processes have no
    pids yet."""
    data: dict[str, Any] = json.loads((TEMPLATES / f"{name}.json").read_text())
    return data


@contextlib.contextmanager
def processes(scenario: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The scenario with a real process (``sleep``) for every process entry that has no
    pid, on GPUs and MIG devices; they are killed on leaving."""
    sleepers: list[subprocess.Popen[bytes]] = []
    try:
        for holder in _holders(scenario):
            for proc in holder.get("processes") or ():
                if proc is not None and "pid" not in proc:
                    sleepers.append(subprocess.Popen(["sleep", "3600"]))
                    proc["pid"] = sleepers[-1].pid
        yield scenario
    finally:
        for sleeper in sleepers:
            sleeper.kill()
        for sleeper in sleepers:
            sleeper.wait()


def _holders(scenario: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for device in scenario.get("devices") or ():
        yield device
        yield from (mig for mig in device.get("mig_devices") or () if mig)


def idle_cards(count: int, name: str = "NVIDIA GeForce RTX 3090") -> dict[str, Any]:
    """A scenario of ``count`` idle cards with 24 GiB each."""
    return {"devices": [{"name": name, "memory_total_mib": 24576} for _ in range(count)]}
