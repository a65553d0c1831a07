"""Records: gputop's data classes, each ``@dataclass(frozen=..., slots=True)`` as far as
anyone can tell, but cheap to define.

A one-shot (`gputop --once`) defines some 44 of them at every start, and dataclass
compiles the source of __init__, __repr__, __eq__, __hash__ and, when frozen,
__setattr__/__delattr__ for each (its exec calls): 0.4-1 ms a class, 16 ms of a
`--once`.  ``record`` lets dataclass write only the slots and the field metadata (so
dataclasses.fields, replace and asdict work as before) and shares the rest: equality,
hash, repr, frozenness and pickling are ``Record``'s, over an attrgetter of the fields,
and __init__ is one closure per class (``_init_for``).  tests/test_model_records.py
compares every record with a real dataclass.

Stdlib-only: shipped to remote hosts inside the SSH probe (docs/architecture.md).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

if "dataclasses" not in sys.modules and "inspect" not in sys.modules:
    # dataclasses imports inspect (with ast, dis and tokenize: 4 ms, 7 % of a `--once`)
    # only to write the docstring of a class that has none, which no record lacks.  It
    # gets a stand-in that imports the real one when first asked; nobody else sees it.
    class _InspectWhenAsked:
        def __getattr__(self, name: str) -> Any:
            import inspect

            dataclasses.inspect = inspect  # type: ignore[attr-defined]
            return getattr(inspect, name)

    sys.modules["inspect"] = _InspectWhenAsked()  # type: ignore[assignment]
    try:
        import dataclasses
    finally:
        del sys.modules["inspect"]

import dataclasses
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar


class Record:
    """What every record shares: dataclass equality, hash, repr and pickling, computed
    from the fields in order (``record`` sets ``_names``, ``_values`` and ``_compared``
    on each class).  Frozen; ``MutableRecord`` is the settable kind."""

    __slots__ = ()
    _names: ClassVar[tuple[str, ...]]
    _values: ClassVar[Callable[..., tuple[Any, ...]]]  # an attrgetter: obj -> its fields
    # The same over the fields that take part in ==, as field(compare=False) leaves out.
    _compared: ClassVar[Callable[..., tuple[Any, ...]]]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    # As dataclass(eq=True, frozen=True) writes them: equal when of the same class with
    # equal fields, the hash of the fields' tuple, "Name(field=value, ...)".
    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return bool(self._compared(self) == self._compared(other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._compared(self))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in
                          zip(self._names, self._values(self), strict=True))
        return f"{self.__class__.__qualname__}({shown})"

    # Frozen, as dataclass(frozen=True) makes it, and pickled the way it pickles a frozen
    # slotted class (its _dataclass_getstate / _dataclass_setstate).
    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __getstate__(self) -> list[Any]:
        return list(self._values(self))

    def __setstate__(self, state: list[Any]) -> None:
        for name, value in zip(self._names, state, strict=True):
            object.__setattr__(self, name, value)


class MutableRecord(Record):
    """A record whose fields can be set, as ``@dataclass`` (not frozen) makes a class: and
    so, like it, unhashable."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]
    # object's own, not Record's refusal (and not a method that calls it: one call less)
    __setattr__ = object.__setattr__  # type: ignore[assignment]
    __delattr__ = object.__delattr__


if TYPE_CHECKING:
    # For mypy a record is exactly a slotted dataclass, frozen or not: it checks
    # construction, frozenness and dataclasses.replace as before.  (Its dataclass plugin
    # knows the decorator by this import, typing_extensions is no stdlib for the probe.)
    from dataclasses import dataclass as record
else:
    def record(*, frozen: bool, slots: bool):
        """``@record(frozen=..., slots=True)`` on a subclass of Record (frozen) or
        MutableRecord: ``@dataclass(frozen=..., slots=True)``, made cheap to define (see
        the module's docstring).  __init__ sets the slots as the generated one does (a
        frozen dataclass's sets each field with object.__setattr__: no faster).  A class
        without a docstring gets its name as one: dataclass would build it from
        inspect.signature.
        """
        if not slots:
            raise TypeError("a record is slotted: record(frozen=..., slots=True)")
        return _make_frozen if frozen else _make_mutable

    def _make_frozen(cls):
        if issubclass(cls, MutableRecord) or not issubclass(cls, Record):
            raise TypeError(f"{cls.__qualname__}: a frozen record subclasses Record")
        return _make_record(cls)

    def _make_mutable(cls):
        if not issubclass(cls, MutableRecord):
            raise TypeError(f"{cls.__qualname__}: a mutable record subclasses MutableRecord")
        return _make_record(cls)

    def _make_record(cls):
        if cls.__doc__ is None:
            cls.__doc__ = cls.__name__
        cls = dataclass(slots=True, init=False, repr=False, eq=False)(cls)
        fields = dataclasses.fields(cls)
        cls._names = names = tuple(f.name for f in fields)
        compared = tuple(f.name for f in fields if f.compare)
        values = _getter(names)
        # staticmethod: a getter made by a def would otherwise be bound to the instance
        cls._values = staticmethod(values)
        cls._compared = staticmethod(values if compared == names else _getter(compared))
        cls.__init__ = _init_for(cls, fields)
        return cls


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """obj -> the tuple of its ``names`` (attrgetter gives a bare value for one name)."""
    if len(names) > 1:
        return attrgetter(*names)
    get: Callable[[Any], Any] = attrgetter(names[0]) if names else lambda obj: None

    def values(obj: Any) -> tuple[Any, ...]:
        return (get(obj),) if names else ()

    return values


def _init_for(cls: type, fields: tuple[dataclasses.Field, ...]) -> Callable[..., None]:
    """The __init__ dataclass would write for ``cls``: the fields in order, positional or
    by keyword, their defaults (a default_factory called for each instance), the same
    TypeErrors, then __post_init__ where the class has one."""
    missing = dataclasses.MISSING
    if any(not f.init for f in fields):
        raise TypeError(f"{cls.__qualname__}: every record field is an __init__ argument")
    names = tuple(f.name for f in fields)
    count = len(names)
    factories = {f.name: f.default_factory for f in fields if f.default_factory is not missing}
    defaults = {f.name: _FACTORY if f.name in factories else f.default for f in fields}
    required = tuple(f.name for f in fields if f.default is missing and f.name not in factories)
    post_init = getattr(cls, "__post_init__", None)
    # (slot setter, name): the slot's own descriptor, as the frozen class refuses setattr
    plan: tuple[tuple[Any, str], ...] = tuple((cls.__dict__[n].__set__, n) for n in names)
    where = f"{cls.__qualname__}.__init__()"
    takes = (f"{count + 1}" if len(required) == count else
             f"from {len(required) + 1} to {count + 1}")  # counting self, as Python does

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if args:
            if len(args) > count:
                raise TypeError(f"{where} takes {takes} positional arguments but "
                                f"{len(args) + 1} were given")
            for name, value in zip(names, args, strict=False):
                if name in kwargs:
                    raise TypeError(f"{where} got multiple values for argument '{name}'")
                kwargs[name] = value
        values = {**defaults, **kwargs}  # one C-level merge, then a slot each
        if len(values) != count:
            unknown = next(k for k in kwargs if k not in defaults)
            raise TypeError(f"{where} got an unexpected keyword argument '{unknown}'")
        for name in required:
            if values[name] is missing:
                raise TypeError(_missing(where, [n for n in required if values[n] is missing]))
        for name, factory in factories.items():
            if values[name] is _FACTORY:
                values[name] = factory()
        for put, name in plan:
            put(self, values[name])
        if post_init is not None:
            post_init(self)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


# The default of a field whose default_factory makes a new value for each instance.
_FACTORY: Any = object()


def _missing(where: str, names: list[str]) -> str:
    """Python's words for missing arguments: 'a', 'a' and 'b', 'a', 'b', and 'c'."""
    quoted = [f"'{n}'" for n in names]
    if len(quoted) == 1:
        listed = quoted[0]
    elif len(quoted) == 2:
        listed = " and ".join(quoted)
    else:
        listed = ", ".join(quoted[:-1]) + ", and " + quoted[-1]
    plural = "argument" if len(names) == 1 else "arguments"
    return f"{where} missing {len(names)} required positional {plural}: {listed}"
