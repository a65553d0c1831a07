"""A window of frozen dataclass records (Gpu, HostSnapshot) kept column by column.

The history keeps ten minutes of every card's readings.  Kept as records, a reading cost
about 800 bytes a card (a slotted Gpu of some 70 fields and its int and float objects):
6.6 MB per reading of 1,000 hosts x 8 GPUs, 260 MB over the window at a 15 s scrape.
Most fields never change (identity, limits, modes) and the rest are numbers, so here:

- a field equal (same value, same type) in every record kept costs nothing: it is read
  from the newest record, which the caller holds anyway;
- a field that has varied is a column: ints in ``array('q')``, floats in ``array('d')``
  (8 bytes a reading), anything else (tuples, strings, bools, NaN) in a list whose equal
  neighbours share one object;
- a property (``mem_percent``) read as a series is computed once per reading, on first
  read, and kept as a column of its own, so a view asking for the same window every
  refresh computes only the new readings.

Pure and standard-library only; not thread safe (History holds its lock around every
call).  Positions are physical indexes into the columns; ``head`` is the first one kept.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from gputop.records import Record, replace

# Stand-ins for None in the typed columns.  A real NaN float goes to a list column, so a
# NaN read back from a float column always means None.
NO_INT = -(1 << 63)
_INT_MAX = (1 << 63) - 1
_NAN = math.nan

# When dropped positions are shifted out: trimming is a bisect, and a shift copies what
# is left, so it waits until at least COMPACT_AT positions and a quarter of the column
# are dropped (the columns then hold at most 4/3 of the window; a position is copied
# at most three times).
COMPACT_AT = 64


def compact_due(head: int, length: int) -> bool:
    return head >= COMPACT_AT and 4 * head >= length

Column = Any  # array('q') | array('d') | list[Any]
Getter = Callable[[Any], tuple[Any, ...]]


class Layout:
    """What is known of one record type: the field names kept and its properties."""

    __slots__ = ("fields", "index", "properties", "row")

    def __init__(self, cls: type[Record], skip: tuple[str, ...] = ()) -> None:
        self.fields: tuple[str, ...] = tuple(
            name for name in cls._names if name not in skip)
        self.index = {name: i for i, name in enumerate(self.fields)}
        self.properties: dict[str, property] = {
            name: attr for klass in reversed(cls.__mro__)
            for name, attr in vars(klass).items() if isinstance(attr, property)}
        # A row of the columns answers attribute reads as the record would, properties
        # included (one property may read another).
        self.row = type(f"{cls.__name__}Row", (_Row,), {"__slots__": (), **self.properties})


_LAYOUTS: dict[tuple[type, tuple[str, ...]], Layout] = {}
# Getters shared by every window with the same set of names (they are many: a window a
# card).  Bounded: a source whose cards vary in ever new ways cannot grow it for ever.
_GETTERS: dict[tuple[str, ...], Getter] = {}
_GETTERS_CAP = 1024


def layout(cls: type[Record], skip: tuple[str, ...] = ()) -> Layout:
    """The layout of ``cls``, without the fields in ``skip`` (never kept, never read)."""
    found = _LAYOUTS.get((cls, skip))
    if found is None:
        found = _LAYOUTS[(cls, skip)] = Layout(cls, skip)
    return found


def _getter(names: tuple[str, ...]) -> Getter:
    found = _GETTERS.get(names)
    if found is None:
        if len(_GETTERS) >= _GETTERS_CAP:
            _GETTERS.clear()
        if not names:
            found = _no_values
        elif len(names) == 1:
            one = attrgetter(names[0])
            found = lambda record: (one(record),)  # noqa: E731 - attrgetter of one gives no tuple
        else:
            found = attrgetter(*names)
        _GETTERS[names] = found
    return found


def _no_values(record: Any) -> tuple[Any, ...]:
    return ()


# Tuples of the types of a window's unchanging fields, shared: a few per source.
_TYPES: dict[tuple[type, ...], tuple[type, ...]] = {}


def _shared_types(types: tuple[type, ...]) -> tuple[type, ...]:
    found = _TYPES.get(types)
    if found is None:
        if len(_TYPES) >= _GETTERS_CAP:
            _TYPES.clear()
        found = _TYPES[types] = types
    return found


class _Row:
    """One position of a window, read like the record it stands for (for properties)."""

    __slots__ = ("_at", "_window")

    def __init__(self, window: Window, at: int) -> None:
        self._window, self._at = window, at

    def __getattr__(self, name: str) -> Any:
        return self._window.value(name, self._at)


def _typed_for(old: Any, new: Any, count: int) -> Column:
    """A column of ``count`` copies of ``old``, of a type that can also hold ``new``."""
    if _fits_int(old) and _fits_int(new):
        return array("q", [NO_INT if old is None else old]) * count
    if _fits_float(old) and _fits_float(new):
        return array("d", [_NAN if old is None else old]) * count
    return [old] * count


def _fits_int(value: Any) -> bool:
    return value is None or (type(value) is int and NO_INT < value <= _INT_MAX)


def _fits_float(value: Any) -> bool:
    return value is None or (type(value) is float and value == value)


def _decode(column: Column, at: int) -> Any:
    value = column[at]
    if type(column) is list:
        return value
    if column.typecode == "q":
        return None if value == NO_INT else value
    return None if value != value else value


def _as_list(column: Column) -> list[Any]:
    if type(column) is list:
        return column
    if column.typecode == "q":
        return [None if v == NO_INT else v for v in column]
    return [None if v != v else v for v in column]


def _append(column: Column, value: Any) -> Column | None:
    """Append ``value``; a new column (to store in its place) when the old cannot hold it."""
    if type(column) is list:
        last = column[-1] if column else None
        # Equal neighbours share one object: a card's tuple of MIG devices or clock-event
        # reasons, equal reading after reading, is kept once.
        if last is not value and not (type(last) is type(value) and last == value):
            last = value
        column.append(last)
        return None
    if column.typecode == "q":
        if type(value) is int and NO_INT < value <= _INT_MAX:
            column.append(value)
            return None
        if value is None:
            column.append(NO_INT)
            return None
    elif type(value) is float and value == value:
        column.append(value)
        return None
    elif value is None:
        column.append(_NAN)
        return None
    widened = _as_list(column)
    widened.append(value)
    return widened


class _Derived:
    """A property's values over positions [low, low + len(values))."""

    __slots__ = ("low", "values")

    def __init__(self, low: int, values: Column) -> None:
        self.low, self.values = low, values


class Window:
    """The records of one card (or host) within the window, by column.

    ``seqs[i]`` is the host's sequence number of position ``i``: a card missing from some
    readings has gaps there.
    """

    __slots__ = ("_columns", "_constant", "_derived", "_get", "_kinds", "_then", "_types",
                 "_varying", "head", "layout", "newest", "seqs")

    def __init__(self, record_layout: Layout) -> None:
        self.layout = record_layout
        self.newest: Any = None  # the newest record: the fields that never varied
        self.seqs = array("q")
        self.head = 0
        # name -> column of the fields that varied; _columns and _kinds the same columns
        # in the order _get reads them, after the _constant unchanging fields
        self._varying: dict[str, Column] = {}
        self._columns: list[Column] = []
        self._kinds: list[str] = []  # "q", "d" or "" (a list)
        self._constant = len(record_layout.fields)
        self._get: Getter = _getter(record_layout.fields)
        # the unchanging fields' values (the newest record's) and their types
        self._then: tuple[Any, ...] | None = None
        self._types: tuple[type, ...] = ()
        self._derived: dict[str, _Derived] = {}

    def __len__(self) -> int:
        return len(self.seqs) - self.head

    # -- feeding ---------------------------------------------------------------------

    def add(self, record: Any, seq: int) -> None:
        values = self._get(record)
        k = self._constant
        now = values[:k]
        then = self._then
        if then is None:
            self._then, self._types = now, _shared_types(tuple(map(type, now)))
        elif now != then or tuple(map(type, now)) != self._types:
            self._vary(now, then)
            values = self._get(record)
            k = self._constant
            self._then = values[:k]
            self._types = _shared_types(tuple(map(type, self._then)))
        columns, kinds = self._columns, self._kinds
        for i, value in enumerate(values[k:]):
            kind = kinds[i]
            if kind == "q":
                if type(value) is int and NO_INT < value <= _INT_MAX:
                    columns[i].append(value)
                    continue
            elif kind == "d" and type(value) is float and value == value:
                columns[i].append(value)
                continue
            wider = _append(columns[i], value)
            if wider is not None:
                self._replace(i, wider)
        self.seqs.append(seq)
        self.newest = record

    def _replace(self, i: int, column: Column) -> None:
        self._columns[i] = column
        self._kinds[i] = "" if type(column) is list else column.typecode
        self._varying[list(self._varying)[i]] = column

    def _vary(self, now: tuple[Any, ...], then: tuple[Any, ...]) -> None:
        """Give a column to each field that was the same in every record until now."""
        count = len(self.seqs)
        fields = self.layout.fields
        constant = [n for n in fields if n not in self._varying]
        for name, new, old in zip(constant, now, then, strict=True):
            if new is not old and not (type(new) is type(old) and new == old):
                self._varying[name] = _typed_for(old, new, count)
        # in the layout's order, so that the getters' cache sees one key per set
        self._varying = {n: self._varying[n] for n in fields if n in self._varying}
        self._columns = list(self._varying.values())
        self._kinds = ["" if type(c) is list else c.typecode for c in self._columns]
        constant = [n for n in fields if n not in self._varying]
        self._constant = len(constant)
        self._get = _getter((*constant, *self._varying))

    def trim(self, first_seq: int) -> None:
        """Drop the positions whose sequence number is below ``first_seq``."""
        seqs, head = self.seqs, self.head
        if head < len(seqs) and seqs[head] < first_seq:
            head = self.head = bisect_left(seqs, first_seq, head, len(seqs))
        if compact_due(head, len(seqs)):
            del seqs[:head]
            for column in self._varying.values():
                del column[:head]
            for derived in self._derived.values():
                if derived.low < head:
                    del derived.values[:head - derived.low]
                    derived.low = head
                derived.low -= head
            self.head = 0

    # -- reading ---------------------------------------------------------------------

    def first_at(self, seq: int) -> int:
        """The first kept position whose sequence number is ``seq`` or later."""
        seqs, head = self.seqs, self.head
        if head < len(seqs) and seqs[head] < seq:
            return bisect_left(seqs, seq, head, len(seqs))
        return head

    def value(self, name: str, at: int) -> Any:
        column = self._varying.get(name)
        if column is not None:
            return _decode(column, at)
        if name in self.layout.index:
            return getattr(self.newest, name)
        prop = self.layout.properties.get(name)
        if prop is None or prop.fget is None:
            raise AttributeError(f"{type(self.newest).__name__} has no field {name!r}")
        return prop.fget(self.layout.row(self, at))

    def record(self, at: int) -> Any:
        """The record at a position, rebuilt (for predicates over whole records)."""
        if not self._varying:
            return self.newest
        return replace(
            self.newest, **{name: _decode(col, at) for name, col in self._varying.items()})

    def series(self, name: str, low: int, high: int,
               times: Sequence[float]) -> list[tuple[float, Any]]:
        """(time, value) of ``name`` at positions [low, high), None values left out;
        ``times`` holds the time of each of those positions."""
        column = self._varying.get(name)
        offset = 0
        if column is None:
            if name in self.layout.index:
                value = getattr(self.newest, name)
                return [] if value is None else [(t, value) for t in times]
            column, offset = self._computed(name, low, high)
        part = column[low - offset:high - offset]
        if type(part) is list:
            return [(t, v) for t, v in zip(times, part, strict=True) if v is not None]
        if part.typecode == "q":
            return [(t, v) for t, v in zip(times, part, strict=True) if v != NO_INT]
        return [(t, v) for t, v in zip(times, part, strict=True) if v == v]

    def _computed(self, name: str, low: int, high: int) -> tuple[Column, int]:
        """A property's values over at least [low, high), and the position of the first:
        what an earlier read computed is reused, only the positions new to it are run."""
        if name not in self.layout.properties:
            raise AttributeError(f"{type(self.newest).__name__} has no field {name!r}")
        derived = self._derived.get(name)
        if derived is None or low > derived.low + len(derived.values) or high < derived.low:
            derived = self._derived[name] = _Derived(low, self._run(name, low, high, None))
            return derived.values, derived.low
        end = derived.low + len(derived.values)
        if high > end:
            derived.values = self._run(name, end, high, derived.values)
        if low < derived.low:  # a read reaching further back than the last: rare
            before = self._run(name, low, derived.low, None)
            derived.values = self._run_join(before, derived.values)
            derived.low = low
        return derived.values, derived.low

    def _run(self, name: str, low: int, high: int, into: Column | None) -> Column:
        column: Column = array("d") if into is None else into
        for at in range(low, high):
            wider = _append(column, self.value(name, at))
            if wider is not None:
                column = wider
        return column

    @staticmethod
    def _run_join(before: Column, after: Column) -> Column:
        if type(before) is type(after) and (type(before) is list
                                            or before.typecode == after.typecode):
            return before + after
        return _as_list(before) + _as_list(after)

    def nbytes(self) -> int:
        """What the columns hold (buffers, not the record objects they refer to)."""
        total = self.seqs.buffer_info()[1] * self.seqs.itemsize
        for column in (*self._varying.values(), *(d.values for d in self._derived.values())):
            total += len(column) * 8
        return total
