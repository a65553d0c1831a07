"""A snapshot from a remote probe, checked before anything trusts it (issue 25, point 9).

The probe runs on the remote host as whatever ``python3`` is there: a host can send any
JSON.  ``clean_snapshot`` keeps what has the shape ``gputop/model.py`` declares and drops
the rest, field by field, with the rules the dataclasses' annotations imply:

- numbers are finite and not negative (NaN, infinities, -5 bytes are not data) and fit in
  64 bits; ``bool`` is not a number; an ``int`` field takes only integers;
- text is text, at most ``MAX_TEXT`` characters (a 100 KB "command line" is cut); control
  and bidi characters are kept as sent, since every view escapes them (``text.visible``);
- a moment (``EPOCH_FIELDS``) is within ``EPOCH_RANGE``: a clock at 1e300 is no time any
  view can print; the snapshot's own ``time`` out of it makes the host an error;
- lists of records have at most a fixed number of entries (``MAX_ITEMS``; a 100,000-process
  snapshot keeps the first ``MAX_ITEMS["processes"]``, and says "4,096 of 100,000
  processes shown"), and a record whose required field is missing or of the wrong type
  is dropped;
- what was dropped or cut is counted, and said once in the snapshot's ``error``.

``json_constant`` is for ``json.loads(parse_constant=...)``: NaN and Infinity become None.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from gputop import model

MAX_TEXT = 4096
# Entries kept per list; a real 8-card node has a few hundred processes at most.
MAX_ITEMS = {
    "gpus": 64,
    "processes": 4096,
    "topology": 4096,
    "reservations": 1024,
    "queue": 1024,
    "xid_events": 256,
    "device_holders": 1024,
    "nvlinks": 64,
    "mig_devices": 8,
    "cmdline": 256,
    "fans": 16,
    "field_errors": 64,
}
_DEFAULT_ITEMS = 256
# The fields that are moments (epoch seconds), and the moments a host may send: 2000 to
# 2100.  A host whose clock is decades off sends no data a view can place in time.
EPOCH_FIELDS = {
    (model.HostSnapshot, "time"), (model.GpuProcess, "start_time"), (model.XidEvent, "time"),
    (model.Reservation, "until"), (model.Reservation, "since"),
    (model.QueueJob, "submitted"), (model.Workload, "end_time"),
    (model.HealthWarning, "since"),
}
EPOCH_RANGE = (946_684_800.0, 4_102_444_800.0)
_INT_MAX = (1 << 63) - 1

_RECORDS: dict[str, type] = {
    cls.__name__: cls
    for cls in (model.Gpu, model.GpuProcess, model.NvLink, model.MigDevice, model.Link,
                model.Reservation, model.QueueJob, model.XidEvent, model.DeviceHolder,
                model.Workload)
}


def json_constant(name: str) -> None:
    """NaN, Infinity and -Infinity in a JSON line: no value."""
    return None


class _Tally:
    def __init__(self) -> None:
        self.bad_fields = 0
        self.bad_records = 0
        self.cut: dict[str, int] = {}

    def notes(self) -> list[str]:
        out = [f"{MAX_ITEMS.get(name, _DEFAULT_ITEMS):,} of {count:,} {name} shown"
               for name, count in self.cut.items()]
        if self.bad_records:
            out.append(f"{self.bad_records} malformed entries dropped")
        if self.bad_fields:
            out.append(f"{self.bad_fields} values of the wrong type or out of range ignored")
        return out


_STATES = {model.HOST_OK, model.HOST_NO_GPU, model.HOST_ERROR}  # what a probe reports
_GPU_STATES = {model.GPU_OK, model.GPU_LOST, model.GPU_ERROR}


def clean_snapshot(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The probe's snapshot dict with every field checked; and what was wrong with it."""
    tally = _Tally()
    out = _spec(model.HostSnapshot).clean(data, tally, top=True)
    assert out is not None  # the top level keeps going without its required fields
    clock = []
    if data.get("time") is not None and "time" not in out:
        # Its numbers are of no known moment: not shown as if they were now.  (None, as
        # NaN reads, is no time given: the reader's clock stands in, as for none at all.)
        out["state"] = model.HOST_ERROR
        tally.bad_fields -= 1  # said here, not among the counted
        clock = [f"its clock says {_shown(data['time'])}, not a time between 2000 and 2100"]
    return out, clock + tally.notes()


def say_notes(data: dict[str, Any], notes: list[str], what: str) -> dict[str, Any]:
    """``data`` (a cleaned snapshot) with ``notes`` added to its ``error``, once: what
    every view shows beside the host ("probe data not as expected: 4,096 of 100,000
    processes shown")."""
    if notes:
        said = data.get("error")
        data["error"] = "; ".join(([said] if said else []) +
                                  [f"{what} not as expected: " + ", ".join(notes)])
    return data


def _shown(raw: Any) -> str:
    return repr(raw)[:40] if type(raw) is not float else f"{raw:g}"


# A state outside its vocabulary (of any type) is the error state, never the default "ok".
_ENUMS: dict[tuple[type, str], tuple[set[str], str]] = {
    (model.HostSnapshot, "state"): (_STATES, model.HOST_ERROR),
    (model.Gpu, "state"): (_GPU_STATES, model.GPU_ERROR),
}


Checker = Any  # (raw, tally) -> (ok, value)


class _Spec:
    """One record class's fields, each with the checker its annotation calls for (built
    once per class: a snapshot of 8 cards and 100 processes is ~3,000 values a second
    per host)."""

    def __init__(self, cls: type) -> None:
        # (name, simple kind or "", optional, checker): the simple kinds are checked
        # inline, which halves the cost of a snapshot.
        self.fields: list[tuple[str, str, bool, Checker]] = []
        self.required: list[str] = []
        self.enums = {name: rule for (owner, name), rule in _ENUMS.items() if owner is cls}
        for field in dataclasses.fields(cls):
            kind = str(field.type)
            optional = kind.endswith(" | None")
            base = kind[: -len(" | None")] if optional else kind
            simple = base if base in ("int", "float", "str", "bool") else ""
            check = _checker(kind, field.name)
            if (cls, field.name) in EPOCH_FIELDS:
                simple, check = "", _epoch(optional)
            self.fields.append((field.name, simple, optional, check))
            if (field.default is dataclasses.MISSING
                    and field.default_factory is dataclasses.MISSING):
                self.required.append(field.name)

    def clean(self, data: Any, tally: _Tally, top: bool = False) -> dict[str, Any] | None:
        if type(data) is not dict:
            tally.bad_records += 1
            return None
        out: dict[str, Any] = {}
        for name, simple, optional, check in self.fields:
            if name not in data:
                continue
            raw = data[name]
            if raw is None:
                if optional:
                    out[name] = None
                continue
            kind = type(raw)
            if simple == "int":
                ok = kind is int and 0 <= raw <= _INT_MAX
            elif simple == "str":
                ok = kind is str
                if ok and len(raw) > MAX_TEXT:
                    raw = raw[: MAX_TEXT - 1] + "…"
            elif simple == "bool":
                ok = kind is bool
            elif simple == "float":
                ok = (kind is float or kind is int) and 0 <= raw <= 1e300  # NaN fails too
                raw = float(raw) if ok else raw
            else:
                ok, raw = check(raw, tally)
            if ok:
                out[name] = raw
            else:
                tally.bad_fields += 1
        for name, (allowed, error) in self.enums.items():
            if name in data and out.get(name) not in allowed:
                tally.bad_fields += name in out  # a wrong type was counted already
                out[name] = error
        if not top:
            for name in self.required:
                if name not in out:
                    tally.bad_records += 1
                    return None
        return out


_SPECS: dict[type, _Spec] = {}


def _epoch(optional: bool) -> Checker:
    low, high = EPOCH_RANGE

    def check(raw: Any, _t: _Tally) -> tuple[bool, Any]:
        if raw is None:
            return optional, None
        ok = type(raw) in (int, float) and low <= raw <= high  # NaN fails too
        return ok, float(raw) if ok else None
    return check


def _spec(cls: type) -> _Spec:
    spec = _SPECS.get(cls)
    if spec is None:
        spec = _SPECS[cls] = _Spec(cls)
    return spec


def _checker(kind: str, name: str) -> Checker:
    optional = kind.endswith(" | None")
    base = kind[: -len(" | None")] if optional else kind
    inner = _base_checker(base, name)

    def check(raw: Any, tally: _Tally) -> tuple[bool, Any]:
        if raw is None:
            return optional, None
        return inner(raw, tally)

    return check


def _base_checker(base: str, name: str) -> Checker:
    if base == "int":
        return lambda raw, _t: ((True, raw) if type(raw) is int and 0 <= raw <= _INT_MAX
                                else (False, None))
    if base == "float":
        def number(raw: Any, _t: _Tally) -> tuple[bool, Any]:
            if type(raw) in (int, float) and math.isfinite(raw) and 0 <= raw <= 1e300:
                return True, float(raw)
            return False, None
        return number
    if base == "bool":
        return lambda raw, _t: (True, raw) if type(raw) is bool else (False, None)
    if base == "str":
        def text(raw: Any, _t: _Tally) -> tuple[bool, Any]:
            if type(raw) is not str:
                return False, None
            return True, raw if len(raw) <= MAX_TEXT else raw[: MAX_TEXT - 1] + "…"
        return text
    if base in _RECORDS:
        cls = _RECORDS[base]

        def record(raw: Any, tally: _Tally) -> tuple[bool, Any]:
            cleaned = _spec(cls).clean(raw, tally)
            return cleaned is not None, cleaned
        return record
    if base.startswith("tuple[") and base.endswith(", ...]"):
        item_kind = base[len("tuple["): -len(", ...]")]
        item = _checker(item_kind, name)
        is_record = item_kind in _RECORDS
        limit = MAX_ITEMS.get(name, _DEFAULT_ITEMS)

        def items(raw: Any, tally: _Tally) -> tuple[bool, Any]:
            if type(raw) is not list:
                return False, None
            if len(raw) > limit:
                tally.cut[name] = len(raw)
            kept = []
            for entry in raw[:limit]:
                ok, cleaned = item(entry, tally)
                if ok:
                    kept.append(cleaned)
                elif not is_record:  # a dropped record is counted where it is checked
                    tally.bad_fields += 1
            return True, kept
        return items
    if base == "tuple[float, float, float]":
        number = _base_checker("float", name)

        def triple(raw: Any, tally: _Tally) -> tuple[bool, Any]:
            if type(raw) is not list or len(raw) != 3:
                return False, None
            values = [number(x, tally) for x in raw]
            ok = all(good for good, _ in values)
            return ok, [v for _, v in values] if ok else None
        return triple
    return lambda raw, _t: (False, None)  # a shape this checker does not know: not trusted
