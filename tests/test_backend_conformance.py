"""One suite for every GPU backend of sources/backends.py (issue 36.4).

Each registered backend has cases here, read from a real part: NVML is the real pynvml
over our fake libnvidia-ml (tests/fakenvml, in a subprocess: the library is found through
LD_LIBRARY_PATH at start-up), opened through the registry as `gputop` opens this machine;
the simulator is the NVML backend over its library; the nvidia-smi fallback reads real
captures (tests/fixtures/nvidia-smi).  Every case passes the same checks
(tests/helpers/backend_checks.py): the reading's shape, card indexes, the vendor's UUID
vocabulary, processes on listed cards and MIG devices, only what the backend declares;
and a lost card stays listed as lost.  A backend added to the registry without a case
here fails ``test_every_registered_backend_has_cases``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import backend_checks, fakenvml
from sshd import capture_section

from gputop.sources import backends, sim, smi
from gputop.sources.nvml import NvmlBackend

ROOT = Path(__file__).resolve().parent.parent
HELPERS = Path(__file__).parent / "helpers"
FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi"
NOW = 1_764_680_000.0
PS = "    1     0     0 root             Ss   9000  0.0  1024 /sbin/init\n"

# The registry's own opener of this machine, over the fake driver; prints the reading.
NVML_READ = """
import json, sys, time
from gputop.sources import backends
source = backends.spec("nvml").open_local(backends.Opening())
backend = source.collector.backend
print(json.dumps({"source": backend.source, "reading": backend.read(time.time())}))
"""


def _nvml(template: str, lost: int | None = None) -> Callable[[Path], tuple[str, Any]]:
    def read(tmp_path: Path) -> tuple[str, Any]:
        scenario = fakenvml.template(template)
        if lost is not None:
            scenario["devices"][lost]["lost"] = True
        with fakenvml.processes(scenario):
            path = fakenvml.write_scenario(tmp_path / "scenario", scenario)
            env = dict(fakenvml.environment(path), PYTHONPATH=str(ROOT))
            done = subprocess.run([sys.executable, "-c", NVML_READ], env=env,
                                  capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        return out["source"], out["reading"]

    return read


def _sim(scenario: str, after_s: float = 0.0) -> Callable[[Path], tuple[str, Any]]:
    def read(tmp_path: Path) -> tuple[str, Any]:
        now = [NOW]
        backend = NvmlBackend(sim.SimNvml(sim.load_scenario(scenario), clock=lambda: now[0]),
                              simulated=True)
        backend.read(now[0])
        now[0] += after_s
        return backend.source, backend.read(now[0])

    return read


def _smi(output: str, mode: smi.Mode) -> Callable[[Path], tuple[str, Any]]:
    def read(tmp_path: Path) -> tuple[str, Any]:
        backend, _listing = smi.read_fallback(output, NOW, mode=mode)
        return backend.source, backend.read(NOW)

    return read


def _h100_csv(extra: str = "", rc: int = 0) -> str:
    capture = (FIXTURES / "capture-h100-80gb-hbm3-590.txt").read_text()
    gpus = capture_section(capture, "load :: query-gpu") + extra
    apps = capture_section(capture, "load :: query-compute-apps")
    return smi.join_outputs([(gpus, rc), (apps, 0), (PS, 0)])


def _xml(name: str) -> str:
    return smi.join_outputs([((FIXTURES / name).read_text(), 0), (PS, 0)])


LOST_LINE = "Unable to determine the device handle for GPU 0000:84:00.0: GPU is lost\n"

# backend -> (case, read, the index of a lost card or None)
CASES: dict[str, list[tuple[str, Callable[[Path], tuple[str, Any]], int | None]]] = {
    "nvml": [("fake faulty, GPU 3 lost", _nvml("faulty", lost=3), 3),
             ("fake mig", _nvml("mig"), None)],
    "sim": [("faulty, GPU 6 lost after 20 s", _sim("faulty", after_s=30.0), 6),
            ("mig", _sim("mig"), None), ("lab", _sim("lab"), None)],
    "smi": [("H100 CSV, a second card lost", _smi(_h100_csv(LOST_LINE, 15), smi.Mode()), 1),
            ("A100 MIG XML", _smi(_xml("xml-a100-sxm4-mig-535.xml"), smi.Mode(xml=True)),
             None),
            ("RTX 3080 XML", _smi(_xml("xml-rtx-3080-536.xml"), smi.Mode(xml=True)), None)],
}
PARAMS = [pytest.param(name, read, lost, id=f"{name}: {case}")
          for name, cases in CASES.items() for case, read, lost in cases]


def test_every_registered_backend_has_cases() -> None:
    assert sorted(CASES) == sorted(spec.name for spec in backends.BACKENDS)


@pytest.mark.parametrize(("name", "read", "lost"), PARAMS)
def test_a_reading_conforms(name: str, read: Callable[[Path], tuple[str, Any]],
                            lost: int | None, tmp_path: Path) -> None:
    spec = backends.spec(name)
    source, reading = read(tmp_path)
    assert source == spec.name
    assert reading.get("gpus"), reading  # every case reads cards: the checks have work
    assert backend_checks.problems(reading, spec) == []
    if lost is not None:
        assert backend_checks.lost_card(reading, lost) == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_what_a_backend_declares_its_cases_show(name: str, tmp_path: Path) -> None:
    """Each declared read and version is filled by some case: no declaration is idle.
    (Not topology: no real capture has a multi-card `topo -m`; test_smi_truth reads one
    rendered from a simulated node.)"""
    spec = backends.spec(name)
    found: set[str] = set()
    for _case, read, _lost in CASES[name]:
        found |= backend_checks.held(read(tmp_path)[1])
    shown = (set(spec.reads) | set(spec.versions)) & {"processes", "mig", *backends.VERSIONS}
    assert shown <= found, f"{name} declares {sorted(shown - found)}, no case holds them"


def test_the_checks_catch_what_they_check() -> None:
    """Each rule fails on a reading that breaks it (a check that cannot fail is none)."""
    spec = backends.spec("smi")
    good = {"state": "ok", "driver_version": "1", "gpus": [
        {"index": 0, "uuid": "GPU-1", "mig_devices": [{"index": 1, "uuid": "MIG-1"}]},
        {"index": 1, "state": "lost", "error": "GPU is lost"}],
        "processes": [{"pid": 5, "gpu": 0, "mig_device": 1}]}
    assert backend_checks.problems(good, spec) == []
    assert backend_checks.lost_card(good, 1) == []

    def broken(change: Callable[[dict[str, Any]], None]) -> list[str]:
        data = json.loads(json.dumps(good))
        change(data)
        return backend_checks.problems(data, spec)

    assert broken(lambda d: d.update(nonsense=1))
    assert broken(lambda d: d.update(host="h"))  # a HostSnapshot field, not a reading's
    assert "gpus" in backend_checks.reading_keys()
    assert broken(lambda d: d["gpus"][1].update(index=0))
    assert broken(lambda d: d["gpus"][0].update(uuid="AMD-1"))
    assert broken(lambda d: d["gpus"][0]["mig_devices"][0].update(uuid="GPU-2"))
    assert broken(lambda d: d["processes"][0].update(gpu=7))
    assert broken(lambda d: d["processes"][0].update(mig_device=3))
    assert broken(lambda d: d["gpus"][1].pop("error"))
    assert broken(lambda d: d.update(xid_events=[{"gpu": 0, "xid": 79}]))  # smi: undeclared
    assert broken(lambda d: d.update(nvml_version="12"))  # smi reports no NVML version
    assert backend_checks.lost_card(good, 0) and backend_checks.lost_card(good, 5)


# -- a throwaway backend in a copy of the package --------------------------------------

THROWAWAY = '''
"""A throwaway backend: two cards of its own, the second lost."""

from gputop.sources.hostsource import assemble


class ThrowawayBackend:
    source = "throwaway"

    def read(self, now, cpu_count=None):
        return {
            "state": "ok", "driver_version": "9.9",
            "gpus": [{"index": 0, "uuid": "GPU-7e57-0000", "name": "Throwaway T1",
                      "state": "ok", "mem_total": 1 << 30, "mem_used": 1 << 20},
                     {"index": 1, "state": "lost", "error": "throwaway card fell off"}],
            "processes": [],
        }


def open_throwaway(opening):
    return assemble(ThrowawayBackend(), opening)
'''

REGISTRY_LINE = ('    BackendSpec("throwaway", NVIDIA, frozenset(), ("driver_version",), '
                 'opener="gputop.sources.throwaway:open_throwaway"),\n')

SEEN = """
import json, time
from gputop.sources import backends, probe
from helpers import backend_checks
spec = backends.spec("throwaway")
reading = backends.open_local(backends.Opening()).collector.backend.read(time.time())
remote = probe.open_source({"host": "far"}, {}).collect()  # what the SSH probe serves
print(json.dumps({"names": [b.name for b in backends.BACKENDS],
                  "probe": [remote["source"], [g.get("name") for g in remote["gpus"]]],
                  "problems": backend_checks.problems(reading, spec),
                  "lost": backend_checks.lost_card(reading, 1)}))
"""


def test_a_throwaway_backend_is_seen_by_the_opener_and_the_checks(tmp_path: Path) -> None:
    """One module and one registry line: `gputop --once`, --json and the remote probe
    read its cards, and the conformance checks (and the case list above) see it."""
    copy = tmp_path / "pkg"
    shutil.copytree(ROOT / "gputop", copy / "gputop",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "gputop" / "sources" / "throwaway.py").write_text(textwrap.dedent(THROWAWAY))
    registry = copy / "gputop" / "sources" / "backends.py"
    text = registry.read_text()
    anchor = "BACKENDS: tuple[BackendSpec, ...] = (\n"
    assert anchor in text
    registry.write_text(text.replace(anchor, anchor + REGISTRY_LINE))
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("GPUTOP_", "LD_LIBRARY_PATH", "FAKENVML"))}
    env.update(PYTHONPATH=f"{copy}{os.pathsep}{HELPERS.parent}", HOME=str(tmp_path),
               XDG_CONFIG_HOME=str(tmp_path), GPUTOP_RESERVATIONS_DIR=str(tmp_path / "res"),
               NO_COLOR="1", COLUMNS="120")
    once = subprocess.run([sys.executable, "-m", "gputop.cli", "--once"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert once.returncode == 0, once.stdout + once.stderr
    assert "Throwaway T1" in once.stdout
    as_json = subprocess.run([sys.executable, "-m", "gputop.cli", "--json"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=60)
    (host,) = json.loads(as_json.stdout)["hosts"]
    assert host["source"] == "throwaway"
    assert [(g["index"], g["state"]) for g in host["gpus"]] == [(0, "ok"), (1, "lost")]
    seen = subprocess.run([sys.executable, "-c", SEEN], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert seen.returncode == 0, seen.stderr
    found = json.loads(seen.stdout)
    assert found["names"][0] == "throwaway" and "nvml" in found["names"]
    assert found["problems"] == [] and found["lost"] == []
    assert found["probe"] == ["throwaway", ["Throwaway T1", None]]
    # The case list here is checked against the registry: the copy's registry would fail
    # test_every_registered_backend_has_cases until the backend has cases.
    assert sorted(CASES) != sorted(found["names"])
