"""Frozen, slotted value records built without compiling code: ``@record`` instead of
``@dataclass(frozen=True, slots=True)`` for the records the first ``opcore.run`` creates.

``dataclasses`` writes each class's ``__init__``, ``__eq__``, ``__hash__``, ``__repr__``,
``__setattr__`` and ``__delattr__`` as source text and compiles it (six ``exec`` calls, then a second
class for the slots): ~0.5-1 ms a class on this project's machine, ~10 ms for the dozen records
that importing opcore and its plugins creates. ``record`` builds the same methods from closures
(a few µs) and keeps the public value semantics: keyword and positional construction with
defaults, equality and hashing over the fields that compare, ``repr``, immutability
(``dataclasses.FrozenInstanceError``), ``__match_args__``, pickling, and ``__dataclass_fields__``
holding real ``dataclasses.Field`` objects, so ``dataclasses.fields``, ``dataclasses.replace``,
``dataclasses.asdict`` and ``dataclasses.is_dataclass`` work on them as on a dataclass.

>>> @record
... class Point:
...     x: int
...     y: int = 0
>>> Point(1), Point(1) == Point(x=1, y=0), dataclasses.replace(Point(1), y=2)
(Point(x=1, y=0), True, Point(x=1, y=2))

Supported: plain defaults and ``dataclasses.field(default=..., repr=..., compare=..., hash=...)``;
not ``default_factory``, ``init=False``, ``ClassVar`` fields, ``__post_init__`` or inheritance
between records (a TypeError says so: use ``@dataclass`` there).
"""

from __future__ import annotations

import dataclasses
import inspect
import reprlib
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # type checkers treat @record as @dataclass(frozen=True) (PEP 681)
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        return lambda decorated: decorated


__all__ = ["record"]

_T = TypeVar("_T", bound=type)
_MISSING: Any = dataclasses.MISSING
# dataclasses.fields() and replace() keep the Fields whose _field_type is _FIELD (stable since 3.7).
_FIELD_TYPE: Any = dataclasses._FIELD  # type: ignore[attr-defined]
_set = object.__setattr__


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: _T) -> _T:
    """The class as a frozen slotted record (see the module docstring)."""
    fields = _fields(cls)
    names = tuple(fields)
    namespace = {
        key: value for key, value in cls.__dict__.items() if key not in names and key not in ("__dict__", "__weakref__")
    }
    namespace["__slots__"] = names
    namespace["__match_args__"] = names
    namespace["__dataclass_fields__"] = fields
    compared = tuple(name for name, f in fields.items() if f.compare)
    hashed = tuple(name for name, f in fields.items() if (f.compare if f.hash is None else f.hash))
    shown = tuple(name for name, f in fields.items() if f.repr)
    namespace.update(
        __eq__=_eq(_key(compared)),
        __hash__=_hash(_key(hashed)),
        __repr__=_repr(shown),
        __getstate__=_getstate(_key(names)),
        __setstate__=_setstate(names),
    )
    made = type(cls)(cls.__name__, cls.__bases__, namespace)
    made.__qualname__ = cls.__qualname__
    made.__init__ = _init(made, names, fields)  # type: ignore[misc]
    made.__setattr__ = _frozen_setattr(made, names)  # type: ignore[method-assign,assignment]
    made.__delattr__ = _frozen_delattr(made, names)  # type: ignore[method-assign,assignment]
    return made  # type: ignore[return-value]


def _fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    if any(hasattr(base, "__dataclass_fields__") for base in cls.__mro__[1:]):
        raise TypeError(f"@record {cls.__qualname__}: records do not inherit fields; use @dataclass")
    if "__post_init__" in cls.__dict__:
        raise TypeError(f"@record {cls.__qualname__}: no __post_init__; use @dataclass")
    fields: dict[str, dataclasses.Field[Any]] = {}
    seen_default = ""
    for name, annotation in inspect.get_annotations(cls).items():
        if "ClassVar" in str(annotation):
            raise TypeError(f"@record {cls.__qualname__}.{name}: no ClassVar fields; use @dataclass")
        value = cls.__dict__.get(name, _MISSING)
        spec: dataclasses.Field[Any]
        spec = value if isinstance(value, dataclasses.Field) else dataclasses.field(default=value)
        if spec.default_factory is not _MISSING or not spec.init:
            raise TypeError(f"@record {cls.__qualname__}.{name}: no default_factory or init=False; use @dataclass")
        if spec.default is _MISSING and seen_default:
            raise TypeError(f"@record {cls.__qualname__}: non-default field {name!r} follows default {seen_default!r}")
        seen_default = seen_default or ("" if spec.default is _MISSING else name)
        spec.name = name
        spec.type = annotation
        _set(spec, "_field_type", _FIELD_TYPE)
        fields[name] = spec
    return fields


def _key(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function returning the tuple of these attributes (attrgetter returns a bare value for one)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        get = attrgetter(names[0])
        return lambda self: (get(self),)
    return lambda self: ()


def _init(cls: type, names: tuple[str, ...], fields: dict[str, dataclasses.Field[Any]]) -> Callable[..., None]:
    qualname = cls.__qualname__
    count = len(names)
    # each slot's own descriptor setter: object.__setattr__ would look the name up on every call
    setters = tuple(cls.__dict__[name].__set__ for name in names)
    rows = tuple((name, fields[name].default, setters[index]) for index, name in enumerate(names))
    # the rows after each number of positional arguments: no slicing per call
    rests = tuple(rows[given:] for given in range(count + 1))

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        given = len(args)
        if given > count:
            raise TypeError(f"{qualname}.__init__() takes {count + 1} positional arguments but {given + 1} were given")
        for put, value in zip(setters, args):
            put(self, value)
        pop = kwargs.pop
        for name, default, put in rests[given]:
            value = pop(name, default)
            if value is _MISSING:
                missing = [row[0] for row in rests[given] if row[1] is _MISSING and row[0] not in kwargs]
                listed = ", ".join(repr(name) for name in missing)
                raise TypeError(f"{qualname}.__init__() missing {len(missing)} required argument(s): {listed}")
            put(self, value)
        if kwargs:
            name = next(iter(kwargs))
            if name in names:
                raise TypeError(f"{qualname}.__init__() got multiple values for argument {name!r}")
            raise TypeError(f"{qualname}.__init__() got an unexpected keyword argument {name!r}")

    return __init__


def _eq(key: Callable[[Any], Any]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    return __eq__


def _hash(key: Callable[[Any], Any]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(key(self))

    return __hash__


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    getters = tuple((name, attrgetter(name)) for name in names)

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={get(self)!r}" for name, get in getters)
        return f"{self.__class__.__qualname__}({shown})"

    return __repr__


def _getstate(key: Callable[[Any], Any]) -> Callable[[Any], list[Any]]:
    return lambda self: list(key(self))


def _setstate(names: tuple[str, ...]) -> Callable[[Any, list[Any]], None]:
    def __setstate__(self: Any, state: list[Any]) -> None:
        for name, value in zip(names, state):
            _set(self, name, value)

    return __setstate__


def _frozen_setattr(cls: type, names: tuple[str, ...]) -> Callable[[Any, str, Any], None]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        _set(self, name, value)

    return __setattr__


def _frozen_delattr(cls: type, names: tuple[str, ...]) -> Callable[[Any, str], None]:
    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        object.__delattr__(self, name)

    return __delattr__
