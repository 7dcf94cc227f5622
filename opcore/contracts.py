"""Operator contracts: a schema, a meta function, and what else describes one op.

>>> from opcore.meta import unary_float
>>> contract = define_op("my.erf(Tensor x) -> Tensor", meta=unary_float, doc="Error function.")
>>> contract.name, sorted(d.value for d in contract.dtypes)[:2]
('my.erf', ['bfloat16', 'bool'])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from opcore.errors import ArgumentError
from opcore.fast_records import record
from opcore.schema import BaseType, Schema, parse_schema
from opcore.types import DType, TensorMeta

__all__ = ["ALL_DTYPES", "MetaFunction", "OpContract", "define_op", "source_of"]

ALL_DTYPES: frozenset[DType] = frozenset(DType)

MetaFunction = Callable[..., "TensorMeta | tuple[TensorMeta, ...]"]


@record
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
    # None: the first tensor argument's dtype picks the kernel; else this argument's. An op without
    # a tensor argument (a creation op) names its ``ScalarType?`` dtype attribute here; its meta function
    # reads that attribute (None: the op's default, as torch's) and its device attribute, and the
    # output meta's dtype and device pick the kernel.
    dtype_arg: str | None = None
    # module:qualname of the meta function, or the plugin that contributed the contract.
    source: str = ""
    # The dtypes accepted for the argument whose dtype picks the kernel: what a complete backend
    # registers (BUILTIN_DTYPES, the reference backend, the torch and graph backends derive theirs).
    dtypes: frozenset[DType] = ALL_DTYPES
    # The family module the op lives in (opcore.families); "" for a plugin's own contract.
    family: str = ""

    @property
    def name(self) -> str:
        return self.schema.name

    @property
    def dtype_position(self) -> int:
        if self.dtype_arg is not None:
            return self.schema.names.index(self.dtype_arg)
        return self.schema.tensor_positions[0]

    @property
    def creates(self) -> bool:
        """True for an op without a tensor argument: its output's dtype and device pick the kernel."""
        return not self.schema.tensor_positions

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
    dtypes: Iterable[DType | str] = ALL_DTYPES,
    family: str = "",
) -> OpContract:
    """Build a contract from a schema string; the schema is parsed and checked here.

    ``dtypes``: what the op accepts for the argument whose dtype picks the kernel (the first
    tensor, or ``dtype_arg``); ``family``: its module under ``opcore.opset`` for a built-in op.
    An op without a tensor argument (``zeros(int[] size, *, ScalarType? dtype=None, Device device="cpu")``)
    names its dtype attribute as ``dtype_arg``; its meta function returns the output with the
    dtype and device those attributes ask for (``DType.parse``, ``Device.parse``; None: the op's
    default), and that dtype and device pick the kernel. Its result comes back as a numpy array
    on the CPU (a torch tensor for bfloat16), as a torch tensor on any other device.
    """
    parsed = parse_schema(schema)
    if dtype_arg is not None and dtype_arg not in parsed.names:
        raise ArgumentError(op="define_op", arg="dtype_arg", expected=f"one of {parsed.names}", found=repr(dtype_arg))
    if not parsed.tensor_positions:
        dtype_type = None if dtype_arg is None else parsed.arguments[parsed.names.index(dtype_arg)].type
        if dtype_type is None or dtype_type.base not in (BaseType.DTYPE, BaseType.STR) or dtype_type.is_list:
            raise ArgumentError(
                f"schema {schema!r} has no tensor argument",
                op="define_op",
                arg="dtype_arg",
                expected="the name of a ScalarType (or str) dtype attribute (say dtype_arg='dtype'), for an op "
                "without a tensor",
                found=repr(dtype_arg),
                fix="take a Tensor, or name the ScalarType? dtype attribute that picks the kernel",
            )
    accepted = frozenset(DType.parse(d) for d in dtypes)
    if not accepted:
        raise ArgumentError(op="define_op", arg="dtypes", expected="at least one dtype", found="none")
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
        dtypes=accepted,
        family=family,
    )
