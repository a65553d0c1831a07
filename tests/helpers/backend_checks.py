"""What every GPU backend's reading must satisfy (sources/backend.py, sources/backends.py).

``problems(reading, spec)`` lists each broken rule, one sentence each (empty: conforms).
tests/test_backend_conformance.py runs it over every registered backend, and the
throwaway-backend test over a backend added to a copy of the package; so it imports
nothing but gputop.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path
from typing import Any

from gputop import model
from gputop.sources import backend
from gputop.sources.backends import READS, VERSIONS, BackendSpec


def _names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@functools.lru_cache(maxsize=1)
def reading_keys() -> frozenset[str]:
    """The keys sources/backend.py's ``Reading`` declares (a TypedDict for mypy only, so
    read from its source)."""
    tree = ast.parse(Path(backend.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Reading":
            return frozenset(item.target.id for item in node.body
                             if isinstance(item, ast.AnnAssign)
                             and isinstance(item.target, ast.Name))
    raise AssertionError("sources/backend.py declares no Reading")


def problems(reading: Any, spec: BackendSpec) -> list[str]:
    """The rules ``reading`` (one ``GpuBackend.read``) breaks, for a backend ``spec``."""
    out: list[str] = []
    if not isinstance(reading, dict):
        return [f"a reading is a dict, not {type(reading).__name__}"]
    if set(spec.reads) - set(READS) or set(spec.versions) - set(VERSIONS):
        out.append(f"{spec.name}: reads/versions outside READS/VERSIONS")
    unknown = set(reading) - _names(model.HostSnapshot)
    if unknown:
        out.append(f"keys that are no HostSnapshot field: {sorted(unknown)}")
    if set(reading) - reading_keys():
        out.append(f"keys backend.Reading does not declare: "
                   f"{sorted(set(reading) - reading_keys())}")
    if "gpus" not in reading:
        # The host could not be read at all: say why, and nothing else.
        if not reading.get("state") or not reading.get("error"):
            out.append("a reading without gpus must give a state and an error")
        return out
    gpus, procs = reading["gpus"], reading.get("processes") or []
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        return [*out, "gpus is a list of dicts"]
    out += _gpus(gpus, spec)
    indexes = [g.get("index") for g in gpus]
    out += _processes(procs, spec, {g.get("index"): g for g in gpus}, indexes)
    out += _declared(reading, spec)
    try:
        model.HostSnapshot.from_dict({"host": "h", "time": 1.0, **reading})
    except Exception as err:  # any failure to build the model is the finding
        out.append(f"HostSnapshot.from_dict fails: {type(err).__name__}: {err}")
    return out


def _gpus(gpus: list[dict[str, Any]], spec: BackendSpec) -> list[str]:
    out: list[str] = []
    vocab = spec.vocabulary
    indexes = [g.get("index") for g in gpus]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indexes):
        out.append(f"card indexes are ints >= 0: {indexes}")
    elif len(set(indexes)) != len(indexes):
        out.append(f"card indexes repeat: {indexes}")
    states = {model.GPU_OK, model.GPU_LOST, model.GPU_ERROR}
    fields, mig_fields = _names(model.Gpu), _names(model.MigDevice)
    for gpu in gpus:
        where = f"GPU {gpu.get('index')}"
        if set(gpu) - fields:
            out.append(f"{where}: keys that are no Gpu field: {sorted(set(gpu) - fields)}")
        if gpu.get("state", model.GPU_OK) not in states:
            out.append(f"{where}: state {gpu.get('state')!r}")
        if gpu.get("state", model.GPU_OK) != model.GPU_OK and not gpu.get("error"):
            out.append(f"{where}: a card that is not ok says why (error)")
        uuid = gpu.get("uuid")
        if uuid is not None and not uuid.startswith(vocab.card_prefix):
            out.append(f"{where}: UUID {uuid!r} is not {vocab.vendor}'s {vocab.card_prefix}...")
        for mig in gpu.get("mig_devices") or ():
            if set(mig) - mig_fields:
                out.append(f"{where}: MIG keys that are no MigDevice field: "
                           f"{sorted(set(mig) - mig_fields)}")
            muuid = mig.get("uuid")
            if muuid is not None and (vocab.partition_prefix is None
                                      or not muuid.startswith(vocab.partition_prefix)):
                out.append(f"{where}: MIG UUID {muuid!r} is not {vocab.partition_prefix}...")
            if mig.get("gpu") not in (None, gpu.get("index")):
                out.append(f"{where}: a MIG device names card {mig.get('gpu')}")
    return out


def _processes(procs: Any, spec: BackendSpec, by_index: dict[Any, dict[str, Any]],
               indexes: list[Any]) -> list[str]:
    if not isinstance(procs, list) or not all(isinstance(p, dict) for p in procs):
        return ["processes is a list of dicts"]
    out: list[str] = []
    fields = _names(model.GpuProcess)
    for proc in procs:
        where = f"process {proc.get('pid')}"
        if not isinstance(proc.get("pid"), int) or proc["pid"] <= 0:
            out.append(f"{where}: pid is an int > 0")
        if set(proc) - fields:
            out.append(f"{where}: keys that are no GpuProcess field: "
                       f"{sorted(set(proc) - fields)}")
        gpu = by_index.get(proc.get("gpu"))
        if gpu is None:
            out.append(f"{where}: on card {proc.get('gpu')}, not one of {indexes}")
            continue
        slot = proc.get("mig_device")
        if slot is not None and slot not in {m.get("index") for m in gpu.get("mig_devices") or ()}:
            out.append(f"{where}: on MIG device {slot} that card {gpu['index']} does not list")
    return out


def _declared(reading: dict[str, Any], spec: BackendSpec) -> list[str]:
    """What a backend does not declare, its readings do not hold."""
    out: list[str] = []
    gpus, procs = reading["gpus"], reading.get("processes") or []
    held = {
        "processes": bool(procs),
        "process_sm_util": any(p.get("sm_util") is not None for p in procs),
        "mig": any(g.get("mig_devices") for g in gpus),
        "topology": bool(reading.get("topology")),
        "xid_events": bool(reading.get("xid_events")),
    }
    out += [f"holds {name}, which {spec.name} does not declare"
            for name, there in held.items() if there and name not in spec.reads]
    out += [f"reports {name}, which {spec.name} does not declare"
            for name in VERSIONS if reading.get(name) is not None and name not in spec.versions]
    return out


def held(reading: dict[str, Any]) -> set[str]:
    """Which of READS and VERSIONS this reading fills (to show a declaration is used)."""
    gpus, procs = reading.get("gpus") or [], reading.get("processes") or []
    found = {name for name in VERSIONS if reading.get(name) is not None}
    found |= {"processes"} if procs else set()
    found |= {"mig"} if any(g.get("mig_devices") for g in gpus) else set()
    return found


def lost_card(reading: dict[str, Any], index: int) -> list[str]:
    """A lost card stays listed, as lost and with the reason, beside the others."""
    cards = {g.get("index"): g for g in reading.get("gpus") or ()}
    card = cards.get(index)
    if card is None:
        return [f"lost card {index} is not listed (cards: {sorted(cards)})"]
    out = []
    if card.get("state") != model.GPU_LOST:
        out.append(f"card {index}: state {card.get('state')!r}, not {model.GPU_LOST!r}")
    if not card.get("error"):
        out.append(f"card {index}: lost without a reason")
    if not any(g.get("state", model.GPU_OK) == model.GPU_OK for g in cards.values()):
        out.append("no card beside the lost one is read")
    return out
