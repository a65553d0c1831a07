"""The model's records (model.record) behave as ``@dataclass(frozen=True, slots=True)``
did: each is compared with a real one built from the same fields (issue 27: cheaper to
define, nothing else changed)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest

from gputop import model
from gputop.analysis import orphans, xid

RECORDS = [c for module in (model, orphans, xid) for c in vars(module).values()
           if isinstance(c, type) and issubclass(c, model.Record) and c is not model.Record
           and c.__module__ == module.__name__]


def _twin(cls: type) -> type:
    """A real frozen slotted dataclass with ``cls``'s name, fields and defaults."""
    spec = [(f.name, f.type, dataclasses.field(default=f.default)
             if f.default is not dataclasses.MISSING else dataclasses.field())
            for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, spec, frozen=True, slots=True)


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
            "KernelXid"} <= names


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_a_record_behaves_as_its_dataclass(cls: type) -> None:
    twin = _twin(cls)
    fields = dataclasses.fields(cls)
    assert [(f.name, f.default) for f in fields] == [
        (f.name, f.default) for f in dataclasses.fields(twin)]
    assert cls.__match_args__ == twin.__match_args__  # type: ignore[attr-defined]
    a, b = _values(cls, 1), _values(cls, 2)
    ours, theirs = cls(**a), twin(**a)
    # repr, equality and hash as the generated ones (the name is the same).
    assert repr(ours) == repr(theirs)
    assert ours == cls(**a) and hash(ours) == hash(cls(**a)) == hash(theirs)
    assert type(ours).__doc__, "a record needs a docstring (dataclass would inspect one up)"
    assert ours != cls(**b) and (ours == theirs) is False  # another class is never equal
    assert ours.__eq__(theirs) is NotImplemented
    assert dataclasses.asdict(ours) == dataclasses.asdict(theirs)
    # Positional arguments in field order, defaults for the rest.
    required = [f.name for f in fields if f.default is dataclasses.MISSING]
    positional = [a[name] for name in required]
    assert cls(*positional) == cls(**{name: a[name] for name in required})
    assert repr(cls(*positional)) == repr(twin(*positional))
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
    # Frozen and slotted.
    name = fields[0].name
    # (A name that is no field: 3.11's frozen slotted dataclass fails with a TypeError
    # from its own super() call; a record says FrozenInstanceError.)
    for change in (lambda o: setattr(o, name, 1), lambda o: delattr(o, name)):
        with pytest.raises(dataclasses.FrozenInstanceError) as got:
            change(ours)
        with pytest.raises(dataclasses.FrozenInstanceError) as want:
            change(theirs)
        assert str(got.value) == str(want.value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ours.not_a_field = 1  # type: ignore[attr-defined]
    assert getattr(ours, name) == a[name]
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
