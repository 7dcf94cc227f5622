"""Operator contracts: a schema, a meta function, and what else describes one op.

>>> from opcore.meta import unary_float
>>> contract = define_op("my.erf(Tensor x) -> Tensor", meta=unary_float, doc="Error function.")
>>> contract.name
'my.erf'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from opcore.errors import ArgumentError
from opcore.schema import Schema, parse_schema
from opcore.types import TensorMeta

__all__ = ["MetaFunction", "OpContract", "define_op", "source_of"]

MetaFunction = Callable[..., "TensorMeta | tuple[TensorMeta, ...]"]


@dataclass(frozen=True, slots=True)
class OpContract:
    """One operator: everything every backend agrees on.

    The meta function receives the bound arguments in schema order, with a
    TensorMeta for every tensor (None for an absent optional one, a tuple for a
    list), checks them, and returns the output metas. Every input check lives
    there, so every backend raises the same error for the same bad input.
    """

    schema: Schema
    meta: MetaFunction
    doc: str = ""
    tags: frozenset[str] = frozenset()
    # None: the op cannot be built from other ops. Otherwise called with the bound
    # arguments (the caller's arrays) and runs the parts through opcore.run.
    decomposition: Callable[..., Any] | None = None
    # None: the first tensor argument's dtype picks the kernel; else this argument's.
    dtype_arg: str | None = None
    # module:qualname of the meta function, or the plugin that contributed the contract.
    source: str = ""

    @property
    def name(self) -> str:
        return self.schema.name

    @property
    def dtype_position(self) -> int:
        if self.dtype_arg is not None:
            return self.schema.names.index(self.dtype_arg)
        return self.schema.tensor_positions[0]

    def summary(self) -> str:
        """The first line of the docstring."""
        return self.doc.strip().splitlines()[0] if self.doc.strip() else ""


def source_of(obj: Any) -> str:
    """``module:qualname`` of a function, for "already registered at ..." messages."""
    module = getattr(obj, "__module__", None) or "?"
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return f"{module}:{qualname}"


def define_op(
    schema: str,
    *,
    meta: MetaFunction,
    doc: str = "",
    tags: Iterable[str] = (),
    decomposition: Callable[..., Any] | None = None,
    dtype_arg: str | None = None,
) -> OpContract:
    """Build a contract from a schema string; the schema is parsed and checked here."""
    parsed = parse_schema(schema)
    if not parsed.tensor_positions:
        raise ArgumentError(
            f"schema {schema!r} has no tensor argument",
            op="define_op",
            fix="every op takes at least one Tensor; its dtype and device pick the kernel",
        )
    if dtype_arg is not None and dtype_arg not in parsed.names:
        raise ArgumentError(op="define_op", arg="dtype_arg", expected=f"one of {parsed.names}", found=repr(dtype_arg))
    if not callable(meta):
        raise ArgumentError(op="define_op", arg="meta", expected="a function", found=type(meta).__name__)
    return OpContract(
        schema=parsed,
        meta=meta,
        doc=doc,
        tags=frozenset(tags),
        decomposition=decomposition,
        dtype_arg=dtype_arg,
        source=source_of(meta),
    )
