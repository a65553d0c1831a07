"""Every record of gputop (records.record: the model's types and the other data classes a
one-shot loads) behaves as the ``@dataclass(frozen=..., slots=True)`` it stands for: each
is compared with a real one built from the same fields (issue 27: cheaper to define,
nothing else changed)."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import os
import pickle
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import gputop
from gputop import model, records


def _all_records() -> list[type]:
    """Every Record subclass defined in a gputop module (the UI's too)."""
    for info in pkgutil.walk_packages(gputop.__path__, "gputop."):
        importlib.import_module(info.name)
    found: dict[str, type] = {}
    pending = [records.Record]
    while pending:
        for sub in pending.pop().__subclasses__():
            pending.append(sub)
            if sub is not records.MutableRecord:
                found[f"{sub.__module__}.{sub.__qualname__}"] = sub
    return [found[name] for name in sorted(found)]


RECORDS = _all_records()


def _frozen(cls: type) -> bool:
    return not issubclass(cls, records.MutableRecord)


def _twin(cls: type) -> type:
    """A real slotted dataclass with ``cls``'s name, fields, defaults and frozenness."""
    spec = []
    for f in dataclasses.fields(cls):
        kwargs: dict[str, Any] = {"compare": f.compare}
        if f.default is not dataclasses.MISSING:
            kwargs["default"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            kwargs["default_factory"] = f.default_factory
        spec.append((f.name, f.type, dataclasses.field(**kwargs)))
    return dataclasses.make_dataclass(cls.__name__, spec, frozen=_frozen(cls), slots=True)


def _values(cls: type, salt: int) -> dict[str, Any]:
    """A value for every field (of a hashable kind), differing with ``salt``."""
    out: dict[str, Any] = {}
    for n, f in enumerate(dataclasses.fields(cls)):
        out[f.name] = (f"{f.name}-{salt}" if n % 3 == 0 else
                       (n + salt if n % 3 == 1 else (n, salt)))
    return out


def test_every_record_of_the_model_is_checked() -> None:
    names = {c.__name__ for c in RECORDS}
    assert {"Gpu", "GpuProcess", "HostSnapshot", "NvLink", "MigDevice", "Workload",
            "Reservation", "QueueJob", "HealthWarning", "XidEvent", "Link",
            "DeviceHolder", "OrphanRules", "ProcessFlags", "Reclaimable", "XidInfo",
            "KernelXid",
            # what a one-shot loads besides the model
            "Config", "ReclaimConfig", "ReservationsConfig", "ServeConfig",
            "PrometheusConfig", "SourceOptions", "SourcePlan", "Round", "Capabilities",
            "ProcessDetails", "HostSpec", "Identity", "KeyAction", "Thresholds", "Settings",
            "Analysed", "Trend", "InitFailure", "ClearedWarning", "Holders", "GhostMemory",
            "HostSource"} <= names


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_a_record_behaves_as_its_dataclass(cls: type) -> None:
    twin = _twin(cls)
    frozen = _frozen(cls)
    fields = dataclasses.fields(cls)
    assert [(f.name, f.default, f.default_factory, f.compare) for f in fields] == [
        (f.name, f.default, f.default_factory, f.compare) for f in dataclasses.fields(twin)]
    assert cls.__match_args__ == twin.__match_args__  # type: ignore[attr-defined]
    a, b = _values(cls, 1), _values(cls, 2)
    ours, theirs = cls(**a), twin(**a)
    # repr, equality and hash as the generated ones (the name is the same).
    assert repr(ours) == repr(theirs)
    assert ours == cls(**a)
    if frozen:
        assert hash(ours) == hash(cls(**a)) == hash(theirs)
    else:  # dataclass(eq=True) leaves a class that can change unhashable
        for obj in (ours, theirs):
            with pytest.raises(TypeError, match="unhashable"):
                hash(obj)
    assert type(ours).__doc__, "dataclass would inspect a signature up for a missing one"
    assert ours != cls(**b) and (ours == theirs) is False  # another class is never equal
    assert ours.__eq__(theirs) is NotImplemented
    # A field left out of == (field(compare=False)) is left out of both.
    for f in fields:
        if not f.compare:
            assert (cls(**{**a, f.name: b[f.name]}) == ours) is True
            assert (twin(**{**a, f.name: b[f.name]}) == theirs) is True
    assert dataclasses.asdict(ours) == dataclasses.asdict(theirs) == records.Record.to_dict(ours)
    # Positional arguments in field order, defaults (and default factories) for the rest.
    required = [f.name for f in fields if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    positional = [a[name] for name in required]
    assert cls(*positional) == cls(**{name: a[name] for name in required})
    assert repr(cls(*positional)) == repr(twin(*positional))
    for f in fields:  # a factory's value is made anew for each instance, as dataclass does
        if f.default_factory is not dataclasses.MISSING:
            first, second = cls(*positional), cls(*positional)
            assert getattr(first, f.name) == getattr(twin(*positional), f.name)
            assert getattr(first, f.name) is not getattr(second, f.name)
    # The same errors: missing (all, the last), unexpected, twice, too many.  The
    # generated __init__ is named after dataclass's helper: compare what follows "()".
    calls = [lambda c: c(**a, bogus=1), lambda c: c(*a.values(), 1),
             lambda c: c(*a.values(), **{fields[0].name: 1})]
    if required:
        calls += [lambda c: c(), lambda c: c(*positional[:-1])]
    else:
        assert repr(cls()) == repr(twin())  # every field defaulted
    for call in calls:
        with pytest.raises(TypeError) as got:
            call(cls)
        with pytest.raises(TypeError) as want:
            call(twin)
        assert str(got.value).split("()", 1)[1] == str(want.value).split("()", 1)[1]
    # Frozen (or not) and slotted.
    name = fields[0].name
    if frozen:
        # (A name that is no field: 3.11's frozen slotted dataclass fails with a TypeError
        # from its own super() call; a record says FrozenInstanceError.)
        for change in (lambda o: setattr(o, name, 1), lambda o: delattr(o, name)):
            with pytest.raises(dataclasses.FrozenInstanceError) as got:
                change(ours)
            with pytest.raises(dataclasses.FrozenInstanceError) as want:
                change(theirs)
            assert str(got.value) == str(want.value)
        with pytest.raises(dataclasses.FrozenInstanceError):
            ours.not_a_field = 1
        assert getattr(ours, name) == a[name]
    else:
        for obj in (ours, theirs):
            setattr(obj, name, b[name])
            assert getattr(obj, name) == b[name]
            setattr(obj, name, a[name])
            with pytest.raises(AttributeError):
                obj.not_a_field = 1  # slotted: no other attribute
    assert not hasattr(ours, "__dict__")
    # replace, pickling and copying keep the class and the values.
    changed = dataclasses.replace(ours, **{name: b[name]})
    assert type(changed) is cls and getattr(changed, name) == b[name]
    assert changed == cls(**{**a, name: b[name]})
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(ours, protocol)) == ours
    assert copy.copy(ours) == ours and copy.deepcopy(ours) == ours


def test_a_snapshot_goes_through_json_as_before() -> None:
    gpu = model.Gpu(index=0, name="H100", nvlinks=(model.NvLink(0, True),),
                    mig_devices=(model.MigDevice(gpu=0, index=1, profile="1g.10gb"),))
    snap = model.HostSnapshot(host="h", time=1.0, gpus=(gpu,), processes=(
        model.GpuProcess(pid=7, gpu=0, workload=model.Workload(kind="slurm", id="42")),))
    data = snap.to_dict()
    assert data["schema"] == model.SCHEMA_VERSION
    back = model.HostSnapshot.from_dict(data)
    assert back == snap and hash(back) == hash(snap)
    assert back.gpus[0].nvlinks[0] == model.NvLink(link=0, active=True)


def test_records_load_no_dataclasses_until_their_fields_are_asked() -> None:
    """The model loads without the dataclasses module; dataclasses.fields, replace and
    is_dataclass then work on its records as on dataclasses, and Record itself is none."""
    script = """
import sys
from gputop import model, records
gpu = model.Gpu(index=0, name="H100", nvlinks=(model.NvLink(0, True),))
print("dataclasses" in sys.modules, repr(gpu.nvlinks[0]), gpu.to_dict()["nvlinks"])
import dataclasses
print([f.name for f in dataclasses.fields(model.Gpu)] == list(model.Gpu._names),
      dataclasses.replace(gpu, name="A100").name, dataclasses.is_dataclass(gpu),
      dataclasses.is_dataclass(records.Record), model.Gpu.__dataclass_params__.frozen)
"""
    # -S: no site hooks (an editable install's may load dataclasses first)
    root = str(Path(gputop.__file__).parent.parent)
    done = subprocess.run([sys.executable, "-S", "-c", script], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=root))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "False NvLink(link=0, active=True, remote_pci_bus_id=None) "
        "({'link': 0, 'active': True, 'remote_pci_bus_id': None},)",
        "True A100 True False True"]


BODY = """
class Point{base}:
    \"\"\"A point.\"\"\"

    x: int
    label: str = "a"
    tags: tuple[str, ...] = ()
    seen: list[int] = field(default_factory=list, compare=False)
"""


@pytest.mark.parametrize("frozen", [True, False])
def test_a_class_body_makes_the_record_its_dataclass_makes(frozen: bool) -> None:
    """The same class body under @record and under @dataclass: the same fields (name,
    annotation, default, factory, compare), slots, match args, repr and asdict."""
    ours_ns: dict[str, Any] = {"field": records.field, "Record": records.Record,
                               "MutableRecord": records.MutableRecord}
    exec(BODY.format(base="(Record)" if frozen else "(MutableRecord)"), ours_ns)
    theirs_ns: dict[str, Any] = {"field": dataclasses.field}
    exec(BODY.format(base=""), theirs_ns)
    ours = records.record(frozen=frozen, slots=True)(ours_ns["Point"])
    theirs = dataclasses.dataclass(frozen=frozen, slots=True)(theirs_ns["Point"])
    describe = [(f.name, f.type, f.default, f.default_factory, f.compare)
                for f in dataclasses.fields(theirs)]
    assert [(f.name, f.type, f.default, f.default_factory, f.compare)
            for f in dataclasses.fields(ours)] == describe
    assert ours.__slots__ == theirs.__slots__ == ("x", "label", "tags", "seen")
    assert ours.__match_args__ == theirs.__match_args__
    assert ours.__doc__ == theirs.__doc__ == "A point."
    assert repr(ours(1, tags=("t",))) == repr(theirs(1, tags=("t",)))
    assert ours(1, seen=[1]) == ours(1, seen=[2])  # compare=False
    assert ours(1).to_dict() == dataclasses.asdict(theirs(1))
    assert dataclasses.replace(ours(1), x=2) == records.replace(ours(1), x=2) == ours(2)


@pytest.mark.parametrize("body", [
    "x: list = []",  # a mutable default
    "x: int = 0\n    y: int",  # a field without a default after one with
    "x: int = field(default=0, default_factory=int)",
])
def test_a_record_refuses_what_dataclass_refuses(body: str) -> None:
    source = "class C{base}:\n    " + body + "\n"
    caught = []
    for decorate, base, names in (
            (records.record(frozen=True, slots=True), "(Record)",
             {"field": records.field, "Record": records.Record}),
            (dataclasses.dataclass(frozen=True, slots=True), "", {"field": dataclasses.field})):
        with pytest.raises((TypeError, ValueError)) as got:
            exec(source.format(base=base), names)
            decorate(names["C"])
        caught.append((type(got.value), str(got.value)))
    assert caught[0] == caught[1]
