"""Records: gputop's data classes, each ``@dataclass(frozen=..., slots=True)`` as far as
anyone can tell, but cheap to define.

A one-shot (`gputop --once`) defines some 40 of them at every start.  dataclass compiles
the source of __init__, __repr__, __eq__, __hash__ and, when frozen,
__setattr__/__delattr__ for each (its exec calls: 16 ms of a `--once`), and even its
slots and field metadata alone cost 3-4 ms (the class built twice, every string
annotation matched against ClassVar and InitVar), with 2 ms to import the module.  So
``record`` builds the slotted class itself from the annotations; equality, hash, repr,
frozenness and pickling are ``Record``'s, over an attrgetter of the fields; __init__ is
one closure per class (``_init_for``).  The dataclasses module is loaded only where
someone asks for a record's dataclass fields (``dataclasses.fields``, ``replace``,
``asdict``): they are made then, from a dataclass of the same fields (``_Fields``).
tests/test_model_records.py compares every record with a real dataclass.

Stdlib-only: shipped to remote hosts inside the SSH probe (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar

# The default of a field that has none (dataclasses.MISSING where the dataclass fields
# are made), and the default of one whose default_factory makes a value per instance.
_MISSING: Any = object()
_FACTORY: Any = object()


class _Fields:
    """A record's ``__dataclass_fields__`` (and ``__dataclass_params__``), made when first
    asked: those of a real dataclass of the same fields, then kept on the class."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type) -> Any:
        specs = owner.__dict__.get("_specs")
        if specs is None:  # Record itself, MutableRecord: no dataclass
            raise AttributeError(self.name)
        import dataclasses

        twin: Any = dataclasses.make_dataclass(
            owner.__name__, [(name, spec.type, spec.as_field()) for name, spec in specs.items()],
            frozen=not issubclass(owner, MutableRecord))
        type.__setattr__(owner, "__dataclass_fields__", twin.__dataclass_fields__)
        type.__setattr__(owner, "__dataclass_params__", twin.__dataclass_params__)
        return getattr(owner, self.name)


class Record:
    """What every record shares: dataclass equality, hash, repr and pickling, computed
    from the fields in order (``record`` sets ``_names``, ``_values`` and ``_compared``
    on each class).  Frozen; ``MutableRecord`` is the settable kind."""

    __slots__ = ()
    _names: ClassVar[tuple[str, ...]]
    _values: ClassVar[Callable[..., tuple[Any, ...]]]  # an attrgetter: obj -> its fields
    # The same over the fields that take part in ==, as field(compare=False) leaves out.
    _compared: ClassVar[Callable[..., tuple[Any, ...]]]
    if not TYPE_CHECKING:  # mypy takes a record for the dataclass it stands for
        __dataclass_fields__ = _Fields("__dataclass_fields__")
        __dataclass_params__ = _Fields("__dataclass_params__")

    def to_dict(self) -> dict[str, Any]:
        """What dataclasses.asdict gives, without loading dataclasses (``--json``)."""
        return _plain(self)

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
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")

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


class _Spec:
    """One field as ``field(...)`` (or a plain default) gives it."""

    __slots__ = ("compare", "default", "default_factory", "type")

    def __init__(self, default: Any = _MISSING, default_factory: Any = _MISSING,
                 compare: bool = True) -> None:
        if default is not _MISSING and default_factory is not _MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.default = default
        self.default_factory = default_factory
        self.compare = compare
        self.type: Any = None  # the annotation, set by _specs

    def as_field(self) -> Any:
        import dataclasses

        given = {"default": self.default, "default_factory": self.default_factory}
        return dataclasses.field(compare=self.compare,
                                 **{k: v for k, v in given.items() if v is not _MISSING})


if TYPE_CHECKING:
    # For mypy a record is exactly a slotted dataclass, frozen or not, and field is
    # dataclasses.field: it checks construction, frozenness and dataclasses.replace as
    # before.  (Its dataclass plugin knows the decorator by this import, typing_extensions
    # is no stdlib for the probe.)
    from dataclasses import dataclass as record
    from dataclasses import field as field
    from dataclasses import replace as replace
else:
    def replace(obj, /, **changes):
        """dataclasses.replace for a record: a new one, of ``changes`` and obj's fields."""
        return obj.__class__(**{**dict(zip(obj._names, obj._values(obj), strict=True)), **changes})

    def field(*, default=_MISSING, default_factory=_MISSING, compare=True):
        """dataclasses.field for a record: a default or a default_factory, and compare."""
        return _Spec(default, default_factory, compare)

    def record(*, frozen: bool, slots: bool):
        """``@record(frozen=..., slots=True)`` on a subclass of Record (frozen) or
        MutableRecord: ``@dataclass(frozen=..., slots=True)``, made cheap to define (see
        the module's docstring).  __init__ sets the slots as the generated one does (a
        frozen dataclass's sets each field with object.__setattr__: no faster).  A class
        without a docstring gets its name as one.
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
        specs = _specs(cls)
        names = tuple(specs)
        # The class again with its fields as slots, as dataclass(slots=True) builds it:
        # the class body's defaults (now in specs) and its __dict__ left out.
        body = {key: value for key, value in cls.__dict__.items()
                if key not in specs and key not in ("__dict__", "__weakref__")}
        body["__slots__"] = names
        if body.get("__doc__") is None:
            body["__doc__"] = cls.__name__
        qualname = cls.__qualname__
        cls = type(cls)(cls.__name__, cls.__bases__, body)
        cls.__qualname__ = qualname
        cls._specs = specs
        cls.__match_args__ = cls._names = names
        compared = tuple(name for name, spec in specs.items() if spec.compare)
        values = _getter(names)
        # staticmethod: a getter made by a def would otherwise be bound to the instance
        cls._values = staticmethod(values)
        cls._compared = staticmethod(values if compared == names else _getter(compared))
        cls.__init__ = _init_for(cls, specs)
        return cls


def _specs(cls: type) -> dict[str, _Spec]:
    """The fields of a record class in order, from its own annotations, with dataclass's
    refusals: no mutable default, no field without a default after one with."""
    specs: dict[str, _Spec] = {}
    defaulted = None
    # (since 3.10 a class's own: none of a base's, without inspect.get_annotations)
    for name, annotation in getattr(cls, "__annotations__", {}).items():
        if any(word in str(annotation) for word in ("ClassVar", "InitVar", "KW_ONLY")):
            raise TypeError(f"{cls.__qualname__}.{name}: a record has plain fields only")
        value = cls.__dict__.get(name, _MISSING)
        spec = value if isinstance(value, _Spec) else _Spec(default=value)
        spec.type = annotation
        if spec.default is not _MISSING and spec.default.__class__.__hash__ is None:
            raise ValueError(f"mutable default {type(spec.default)} for field {name} is not "
                             "allowed: use default_factory")
        if spec.default is _MISSING and spec.default_factory is _MISSING:
            if defaulted is not None:
                raise TypeError(f"non-default argument {name!r} follows default argument")
        else:
            defaulted = name
        specs[name] = spec
    return specs


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """obj -> the tuple of its ``names`` (attrgetter gives a bare value for one name)."""
    if len(names) > 1:
        return attrgetter(*names)
    get: Callable[[Any], Any] = attrgetter(names[0]) if names else lambda obj: None

    def values(obj: Any) -> tuple[Any, ...]:
        return (get(obj),) if names else ()

    return values


def _init_for(cls: type, specs: dict[str, _Spec]) -> Callable[..., None]:
    """The __init__ dataclass would write for ``cls``: the fields in order, positional or
    by keyword, their defaults (a default_factory called for each instance), the same
    TypeErrors, then __post_init__ where the class has one."""
    names = tuple(specs)
    count = len(names)
    factories = {name: spec.default_factory for name, spec in specs.items()
                 if spec.default_factory is not _MISSING}
    defaults = {name: _FACTORY if name in factories else spec.default
                for name, spec in specs.items()}
    required = tuple(name for name, default in defaults.items() if default is _MISSING)
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
            if values[name] is _MISSING:
                raise TypeError(_missing(where, [n for n in required if values[n] is _MISSING]))
        for name, factory in factories.items():
            if values[name] is _FACTORY:
                values[name] = factory()
        for put, name in plan:
            put(self, values[name])
        if post_init is not None:
            post_init(self)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


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


# Values dataclasses.asdict returns as they are (it deep-copies them: the same value).
_ATOMS = frozenset({str, int, float, bool, type(None), bytes, complex})


def _plain(value: Any) -> Any:
    """dataclasses.asdict's conversion: records (and other dataclasses) to dicts of their
    fields, lists, tuples (named ones field by field) and dicts converted inside, anything
    else deep-copied."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if isinstance(value, Record):
        return {name: _plain(field_value) for name, field_value
                in zip(value._names, value._values(value), strict=True)}
    if kind is tuple or kind is list:
        return kind(_plain(item) for item in value)
    if kind is dict:
        return {_plain(key): _plain(item) for key, item in value.items()}
    import dataclasses  # the rare rest: asdict's own rules

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return kind(*[_plain(item) for item in value])
    if isinstance(value, (list, tuple)):
        return kind(_plain(item) for item in value)
    if isinstance(value, dict):
        return kind((_plain(key), _plain(item)) for key, item in value.items())
    import copy

    return copy.deepcopy(value)
