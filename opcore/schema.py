"""Schema strings: the single definition of an op's arguments.

A schema reads like PyTorch's::

    linear(Tensor x, Tensor w, Tensor? b=None) -> Tensor
    gelu(Tensor x, *, str approximate="none") -> Tensor

Types: ``Tensor``, ``Tensor?``, ``Tensor[]``, ``Tensor?[]``, ``Tensor|Scalar`` (a tensor
or a Python number, as ``torch.add(x, 2)`` allows), ``int``, ``int[]``, ``int[N]``
(a single int, or a one-element list, is repeated N times, as torch's pooling and convolution
sizes), ``int?[N]`` (None elements allowed), ``float``, ``bool``, ``str``, ``Scalar``,
``ScalarType`` (a dtype given as torch writes it, ``torch.float32``, or as a numpy dtype, an
opcore ``DType`` or a name; bound as its name, ``"float32"``) and ``Device`` (``"cuda:0"``,
``torch.device``, opcore's ``Device``; bound as its text); any type may end in ``?`` (None allowed).
A union ``A|B`` takes a value of either type, tried in order
(``int[2]|str padding=0``, as conv2d's ``padding=1``, ``(1, 2)`` or ``"same"``). Arguments after
``*`` are keyword-only.

>>> schema = parse_schema("linear(Tensor x, Tensor w, Tensor? b=None) -> Tensor")
>>> [a.name for a in schema.arguments], schema.returns
(['x', 'w', 'b'], ('Tensor',))
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import field, replace
from enum import Enum
from typing import Any

import numpy

from opcore.errors import ArgumentError
from opcore.fast_records import record
from opcore.types import Device, DType, TensorMeta, is_tensor

__all__ = ["Argument", "ArgType", "BaseType", "NO_DEFAULT", "Schema", "parse_schema"]


class _NoDefault:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()  # marks a required argument


class BaseType(str, Enum):
    TENSOR = "Tensor"
    TENSOR_OR_SCALAR = "Tensor|Scalar"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STR = "str"
    SCALAR = "Scalar"
    # a dtype in any form a user passes (torch.float32, numpy.float32, "fp32", DType): bound as its name
    DTYPE = "ScalarType"
    # a device in any form (torch.device("cpu"), "cuda:0", opcore's Device): bound as its text
    DEVICE = "Device"


@record
class ArgType:
    """A parsed argument type.

    list_len None: not a list, or a list of any length when ``is_list``. alternatives: the other
    types of a union (``int[2]|str``: this type is ``int[2]``, alternatives ``(str,)``), tried in
    order after this one; () for a plain type.
    """

    base: BaseType
    is_list: bool = False
    list_len: int | None = None
    optional: bool = False
    element_optional: bool = False
    alternatives: tuple[ArgType, ...] = ()

    def __str__(self) -> str:
        text = self.base.value + ("?" if self.element_optional else "")
        if self.is_list:
            text += f"[{self.list_len}]" if self.list_len is not None else "[]"
        text += "".join(f"|{alternative}" for alternative in self.alternatives)
        return text + ("?" if self.optional else "")

    @property
    def holds_tensors(self) -> bool:
        return self.base in (BaseType.TENSOR, BaseType.TENSOR_OR_SCALAR)


@record
class Argument:
    """One argument of a schema. default NO_DEFAULT: the argument is required."""

    name: str
    type: ArgType
    default: Any = NO_DEFAULT
    kwarg_only: bool = False

    @property
    def required(self) -> bool:
        return self.default is NO_DEFAULT

    def __str__(self) -> str:
        text = f"{self.type} {self.name}"
        if not self.required:
            text += "=" + _default_text(self.default)
        return text


def _default_text(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return repr(value)


@record
class Schema:
    """A parsed schema with a precompiled binder.

    >>> parse_schema("relu(Tensor x) -> Tensor").bind((numpy.ones(2),), {})[0].shape
    (2,)
    """

    name: str
    arguments: tuple[Argument, ...]
    returns: tuple[str, ...]
    _index: dict[str, int] = field(repr=False, compare=False, hash=False)
    _checks: tuple[Callable[[str, str, Any], Any], ...] = field(repr=False, compare=False, hash=False)
    _meta_checks: tuple[Callable[[str, str, Any], Any], ...] = field(repr=False, compare=False, hash=False)
    n_positional: int = field(repr=False, compare=False, hash=False, default=0)

    def __str__(self) -> str:
        parts = []
        star = False
        for argument in self.arguments:
            if argument.kwarg_only and not star:
                parts.append("*")
                star = True
            parts.append(str(argument))
        returns = self.returns[0] if len(self.returns) == 1 else "(" + ", ".join(self.returns) + ")"
        return f"{self.name}({', '.join(parts)}) -> {returns}"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.arguments)

    @property
    def tensor_positions(self) -> tuple[int, ...]:
        """Positions of arguments that may hold tensors."""
        return tuple(i for i, a in enumerate(self.arguments) if a.type.holds_tensors)

    def bind(self, args: Sequence[Any], kwargs: dict[str, Any], *, metas: bool = False) -> tuple[Any, ...]:
        """All arguments in schema order: defaults filled in, values checked and normalised
        (lists become tuples, ``int[N]`` from an int is repeated, numpy scalars become Python ones).

        metas True: tensor arguments are TensorMeta instead of arrays (shape inference without data).
        """
        arguments = self.arguments
        if len(args) > self.n_positional:
            raise ArgumentError(
                f"takes {self.n_positional} positional argument{'s' * (self.n_positional != 1)} "
                f"but {len(args)} were given",
                op=self.name,
                fix=f"check the call against the schema {self}",
            )
        values = list(args) + [NO_DEFAULT] * (len(arguments) - len(args))
        if kwargs:
            index = self._index
            for key, value in kwargs.items():
                position = index.get(key)
                if position is None:
                    raise ArgumentError(
                        f"got an unexpected keyword argument '{key}'",
                        op=self.name,
                        fix=f"the arguments are {', '.join(self.names)}: {self}",
                    )
                if position < len(args):
                    raise ArgumentError(f"got multiple values for argument '{key}'", op=self.name)
                values[position] = value
        checks = self._meta_checks if metas else self._checks
        name = self.name
        for position, argument in enumerate(arguments):
            value = values[position]
            if value is NO_DEFAULT:
                if argument.default is NO_DEFAULT:
                    raise ArgumentError(
                        f"missing required argument '{argument.name}'",
                        op=name,
                        fix=f"pass it as in {self}",
                    )
                values[position] = argument.default
            else:
                values[position] = checks[position](name, argument.name, value)
        return tuple(values)


_NAME = re.compile(r"^\s*([A-Za-z_][\w.:]*)\s*\((.*)\)\s*->\s*(.+?)\s*$", re.S)
_ARG = re.compile(r"^\s*([A-Za-z|]+)(\??)(?:\[(\d*)\])?(\??)\s+([A-Za-z_]\w*)\s*(?:=\s*(.+?))?\s*$", re.S)


def parse_schema(text: str) -> Schema:
    """Parse a schema string; a malformed one raises ArgumentError saying where."""
    match = _NAME.match(text)
    if not match:
        raise ArgumentError(arg="schema", expected="'name(Type arg, ...) -> Tensor'", found=repr(text))
    name, body, returns_text = match.groups()
    arguments: list[Argument] = []
    kwarg_only = False
    seen: set[str] = set()
    for piece in _split_top_level(body):
        if piece == "*":
            kwarg_only = True
            continue
        arguments.append(_parse_argument(text, piece, kwarg_only))
        if arguments[-1].name in seen:
            raise ArgumentError(f"schema {text!r} repeats the argument '{arguments[-1].name}'", arg="schema")
        seen.add(arguments[-1].name)
    for before, after in itertools.pairwise(arguments):
        if not before.kwarg_only and not after.kwarg_only and not before.required and after.required:
            raise ArgumentError(
                f"schema {text!r}: required argument '{after.name}' follows an argument with a default",
                arg="schema",
            )
    returns_text = returns_text.strip()
    if returns_text.startswith("(") and returns_text.endswith(")"):
        returns = tuple(_split_top_level(returns_text[1:-1]))
    else:
        returns = (returns_text,)
    return Schema(
        name=name,
        arguments=tuple(arguments),
        returns=returns,
        _index={a.name: i for i, a in enumerate(arguments)},
        _checks=tuple(_checker(a.type) for a in arguments),
        _meta_checks=tuple(_checker(a.type, _META_CHECKS) for a in arguments),
        n_positional=sum(1 for a in arguments if not a.kwarg_only),
    )


def _split_top_level(body: str) -> list[str]:
    if not any(mark in body for mark in "\"'(["):
        # nothing nested or quoted (most schemas): the comma split the loop below would make, at a
        # tenth of its cost (84 built-in schemas are parsed by the first opcore.run; issue 15)
        pieces = [piece.strip() for piece in body.split(",")]
        if not pieces[-1]:
            pieces.pop()
        return pieces
    pieces = []
    depth = 0
    quote = ""
    current: list[str] = []
    for char in body:
        if quote:
            current.append(char)
            if char == quote:
                quote = ""
            continue
        if char in "\"'":
            quote = char
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            pieces.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    if "".join(current).strip():
        pieces.append("".join(current).strip())
    return pieces


_UNION = re.compile(r"^\s*(\S+\|\S+?)(\??)\s+([A-Za-z_]\w*)\s*(=.+)?$", re.S)


def _parse_union(schema_text: str, piece: str, kwarg_only: bool) -> Argument | None:
    """``A|B name=default``: the first type with the others as its alternatives; None when the
    piece is not a union (``Tensor|Scalar`` is a type of its own)."""
    match = _UNION.match(piece)
    if not match or match.group(1) == BaseType.TENSOR_OR_SCALAR.value:
        return None
    types_text, optional, name, default_text = match.groups()
    parts = [_parse_argument(schema_text, f"{part} {name}", False).type for part in types_text.split("|")]
    if any(part.optional or part.alternatives for part in parts):
        raise ArgumentError(
            f"schema {schema_text!r}: in the union {types_text!r} only the whole union may be optional",
            arg="schema",
            fix=f"write {types_text.replace('?', '')}? {name}",
        )
    arg_type = replace(parts[0], alternatives=tuple(parts[1:]), optional=bool(optional))
    default = NO_DEFAULT
    if default_text is not None:
        default = _literal(schema_text, name, default_text[1:].strip())
        if default is None:
            arg_type = replace(arg_type, optional=True)
        else:
            default = _checker(arg_type)(schema_text, name, default)
    return Argument(name=name, type=arg_type, default=default, kwarg_only=kwarg_only)


_WORDS = {"None": None, "True": True, "False": False}
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)", re.ASCII)
_FLOAT = re.compile(r"-?(?:[0-9]+\.[0-9]*(?:e-?[0-9]+)?|[0-9]+e-?[0-9]+)", re.ASCII)


def _literal(schema_text: str, name: str, default_text: str) -> Any:
    # the usual defaults read without ast.literal_eval, which compiles each (~0.03 ms, ~90 of them
    # in the built-in schemas parsed by the first opcore.run; issue 15); the same values either way
    if default_text in _WORDS:
        return _WORDS[default_text]
    if _INT.fullmatch(default_text):
        return int(default_text)
    if _FLOAT.fullmatch(default_text):
        return float(default_text)
    try:
        return ast.literal_eval(default_text)
    except (ValueError, SyntaxError):
        raise ArgumentError(
            f"schema {schema_text!r}: the default of '{name}' ({default_text}) is not a literal",
            arg="schema",
        ) from None


def _parse_argument(schema_text: str, piece: str, kwarg_only: bool) -> Argument:
    union = _parse_union(schema_text, piece, kwarg_only)
    if union is not None:
        return union
    match = _ARG.match(piece)
    if not match:
        raise ArgumentError(
            f"schema {schema_text!r}: cannot read the argument {piece!r}",
            arg="schema",
            fix="write arguments as 'Type name' or 'Type name=default'",
        )
    base_text, element_optional, list_len, optional, name, default_text = match.groups()
    is_list = "[" in piece.split(maxsplit=1)[0]
    try:
        base = BaseType(base_text)
    except ValueError:
        raise ArgumentError(
            f"schema {schema_text!r}: unknown type {base_text!r}",
            arg="schema",
            fix="use one of " + ", ".join(b.value for b in BaseType),
        ) from None
    arg_type = ArgType(
        base=base,
        is_list=is_list,
        list_len=int(list_len) if list_len else None,
        optional=bool(optional) or (bool(element_optional) and not is_list),
        element_optional=bool(element_optional) and is_list,
    )
    default = NO_DEFAULT
    if default_text is not None:
        default = _literal(schema_text, name, default_text)
        if default is None and not arg_type.optional:
            arg_type = ArgType(base, is_list, arg_type.list_len, True, arg_type.element_optional)
        if default is not None:
            default = _checker(arg_type)(schema_text, name, default)
    return Argument(name=name, type=arg_type, default=default, kwarg_only=kwarg_only)


# --- value checks: each returns the normalised value or raises ArgumentError ------------------

_TENSOR_EXPECTED = "a tensor (numpy.ndarray or torch.Tensor)"


def _type_name(value: Any) -> str:
    return type(value).__name__


def _fail(op: str, arg: str, expected: str, value: Any, fix: str | None = None) -> ArgumentError:
    return ArgumentError(op=op, arg=arg, expected=expected, found=_type_name(value), fix=fix)


def _check_tensor(op: str, arg: str, value: Any) -> Any:
    if is_tensor(value):
        return value
    raise _fail(op, arg, _TENSOR_EXPECTED, value, "wrap Python data with numpy.asarray(...)")


def _as_scalar(value: Any) -> Any:
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, numpy.generic) and isinstance(value, (numpy.bool_, numpy.integer, numpy.floating)):
        return value.item()
    return NO_DEFAULT


def _check_tensor_or_scalar(op: str, arg: str, value: Any) -> Any:
    if is_tensor(value):
        return value
    scalar = _as_scalar(value)
    if scalar is NO_DEFAULT:
        raise _fail(op, arg, _TENSOR_EXPECTED + " or a Python number", value)
    return scalar


def _check_scalar(op: str, arg: str, value: Any) -> Any:
    scalar = _as_scalar(value)
    if scalar is NO_DEFAULT:
        raise _fail(op, arg, "a number (int, float or bool)", value)
    return scalar


def _check_int(op: str, arg: str, value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, numpy.integer):
        return int(value)
    raise _fail(op, arg, "an int", value)


def _check_float(op: str, arg: str, value: Any) -> Any:
    if isinstance(value, float):
        return value
    if isinstance(value, (int, numpy.integer, numpy.floating)) and not isinstance(value, bool):
        return float(value)
    raise _fail(op, arg, "a float", value)


def _check_bool(op: str, arg: str, value: Any) -> Any:
    if isinstance(value, (bool, numpy.bool_)):
        return bool(value)
    raise _fail(op, arg, "a bool", value)


def _check_str(op: str, arg: str, value: Any) -> Any:
    if isinstance(value, str):
        return value
    raise _fail(op, arg, "a str", value)


def _check_dtype_name(op: str, arg: str, value: Any) -> Any:
    """A dtype as its name: torch's ``torch.float32``, numpy's ``numpy.float32`` or ``numpy.dtype``,
    opcore's ``DType`` or a name (``"float32"``, ``"fp16"``); every backend then sees the same string."""
    if isinstance(value, bool) or value is None:
        raise _fail(op, arg, "a dtype (torch.float32, numpy.float32, 'float32' or opcore.DType)", value)
    try:
        return DType.parse(value).value
    except ArgumentError as error:
        error.op, error.arg = op, arg
        raise


def _check_device_name(op: str, arg: str, value: Any) -> Any:
    """A device as its text (``"cpu"``, ``"cuda:0"``): a str, a ``torch.device`` or opcore's ``Device``."""
    if not isinstance(value, (str, Device)) and type(value).__name__ != "device":
        raise _fail(op, arg, "a device ('cpu', 'cuda:0', torch.device or opcore.Device)", value)
    try:
        return str(Device.parse(value))
    except ArgumentError as error:
        error.op, error.arg = op, arg
        raise


_ELEMENT_CHECKS: dict[BaseType, Callable[[str, str, Any], Any]] = {
    BaseType.TENSOR: _check_tensor,
    BaseType.TENSOR_OR_SCALAR: _check_tensor_or_scalar,
    BaseType.INT: _check_int,
    BaseType.FLOAT: _check_float,
    BaseType.BOOL: _check_bool,
    BaseType.STR: _check_str,
    BaseType.SCALAR: _check_scalar,
    BaseType.DTYPE: _check_dtype_name,
    BaseType.DEVICE: _check_device_name,
}


def _check_meta(op: str, arg: str, value: Any) -> Any:
    if isinstance(value, TensorMeta):
        return value
    raise _fail(op, arg, "a TensorMeta", value, "describe tensors with opcore.TensorMeta(shape, dtype)")


def _check_meta_or_scalar(op: str, arg: str, value: Any) -> Any:
    if isinstance(value, TensorMeta):
        return value
    return _check_scalar(op, arg, value)


_META_CHECKS = _ELEMENT_CHECKS | {BaseType.TENSOR: _check_meta, BaseType.TENSOR_OR_SCALAR: _check_meta_or_scalar}


def _checker(
    arg_type: ArgType, element_checks: dict[BaseType, Callable[[str, str, Any], Any]] = _ELEMENT_CHECKS
) -> Callable[[str, str, Any], Any]:
    element = element_checks[arg_type.base]
    if arg_type.is_list:
        element = _list_checker(arg_type, element)
    if arg_type.alternatives:
        element = _union_checker(arg_type, element, element_checks)
    if arg_type.optional:
        inner = element

        def check_optional(op: str, arg: str, value: Any) -> Any:
            return None if value is None else inner(op, arg, value)

        return check_optional
    return element


def _union_checker(
    arg_type: ArgType,
    first: Callable[[str, str, Any], Any],
    element_checks: dict[BaseType, Callable[[str, str, Any], Any]],
) -> Callable[[str, str, Any], Any]:
    """The first of the union's types that takes the value, in order; else one error naming them all."""
    checks = (first, *(_checker(alternative, element_checks) for alternative in arg_type.alternatives))
    plain = replace(arg_type, alternatives=(), optional=False)
    described = " or ".join(str(t) for t in (plain, *arg_type.alternatives))

    def check_union(op: str, arg: str, value: Any) -> Any:
        for check in checks:
            try:
                return check(op, arg, value)
            except ArgumentError:
                continue
        raise _fail(op, arg, f"a value of type {described}", value)

    return check_union


def _list_checker(arg_type: ArgType, element: Callable[[str, str, Any], Any]) -> Callable[[str, str, Any], Any]:
    length = arg_type.list_len
    element_optional = arg_type.element_optional
    described = f"a list of {length or 'any number of'} {arg_type.base.value}" + ("?" if element_optional else "")
    # int[N] repeats one int or a one-element list N times; int?[N] (None for "as the input") does not
    # (torch's adaptive pools take exactly N sizes)
    repeats = arg_type.base is BaseType.INT and not element_optional

    def check_list(op: str, arg: str, value: Any) -> Any:
        if arg_type.base is BaseType.INT and not isinstance(value, (list, tuple)):
            try:
                single = _check_int(op, arg, value)
            except ArgumentError:
                pass
            else:
                return (single,) * (length or 1)
        if not isinstance(value, (list, tuple)) and type(value).__name__ != "Size":
            raise _fail(op, arg, described, value)
        items = tuple(
            None if (element_optional and item is None) else element(op, f"{arg}[{i}]", item)
            for i, item in enumerate(value)
        )
        if length is not None and len(items) == 1 and length > 1 and repeats:
            return items * length  # torch's pooling and convolution sizes: [2] is (2, 2)
        if length is not None and len(items) != length:
            raise ArgumentError(op=op, arg=arg, expected=f"{length} values", found=f"{len(items)}: {value!r}")
        return items

    return check_list
