"""Building blocks for meta functions: checks that raise the right error, broadcasting,
and PyTorch's type promotion.

Errors raised here name the argument; the dispatcher adds the op's name.

>>> broadcast_shapes(("x", (2, 1)), ("y", (3,)))
(2, 3)
>>> result_type(TensorMeta((2,), DType.INT32), 2.5)
<DType.FLOAT32: 'float32'>
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy

from opcore.errors import ArgumentError, DeviceError, DTypeError, ShapeError
from opcore.types import CPU, Device, DType, TensorMeta

__all__ = [
    "ALL_DTYPES",
    "DEFAULT_FLOAT",
    "FLOATING",
    "INTEGRAL",
    "NUMERIC",
    "broadcast_shapes",
    "check_choice",
    "check_dtype",
    "check_floating",
    "check_max_rank",
    "check_min_rank",
    "check_positive",
    "check_rank",
    "check_same_dtype",
    "common_device",
    "normalize_dim",
    "promote_types",
    "result_type",
    "shape_text",
    "unary_float",
    "unary_promote_to_float",
]

FLOATING = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64})
INTEGRAL = frozenset({DType.UINT8, DType.INT8, DType.INT16, DType.INT32, DType.INT64})
NUMERIC = FLOATING | INTEGRAL
ALL_DTYPES = frozenset(DType)
DEFAULT_FLOAT = DType.FLOAT32  # torch's default dtype: what int tensors and Python floats promote to


def shape_text(shape: Iterable[int]) -> str:
    """A shape as Python writes a tuple: ``(2, 3)``, ``(3,)``, ``()``.

    >>> shape_text((3,))
    '(3,)'
    """
    shape = tuple(shape)
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _names(allowed: Iterable[DType]) -> str:
    return ", ".join(d.value for d in sorted(allowed, key=lambda d: list(DType).index(d)))


def check_rank(arg: str, meta: TensorMeta, ranks: int | Iterable[int], *, what: str | None = None) -> None:
    """The tensor's ndim must be ``ranks`` (an int, or any of several)."""
    allowed = (ranks,) if isinstance(ranks, int) else tuple(ranks)
    if meta.ndim not in allowed:
        expected = what or (" or ".join(f"{r}-D" for r in allowed) + " tensor")
        raise ShapeError(
            arg=arg,
            expected=expected if what else "a " + expected,
            found=f"a {meta.ndim}-D tensor of shape {shape_text(meta.shape)}",
        )


def check_min_rank(arg: str, meta: TensorMeta, minimum: int, *, what: str | None = None) -> None:
    """The tensor must have at least ``minimum`` dimensions."""
    if meta.ndim < minimum:
        plural = "s" if minimum != 1 else ""
        raise ShapeError(
            arg=arg,
            expected=what or f"a tensor with at least {minimum} dimension{plural}",
            found=f"a {meta.ndim}-D tensor of shape {shape_text(meta.shape)}",
        )


def check_max_rank(arg: str, meta: TensorMeta, maximum: int = 64, *, why: str = "torch's reductions") -> None:
    """At most ``maximum`` dims: torch's reductions and numpy stop at 64 (a 65-dim torch tensor exists)."""
    if meta.ndim > maximum:
        raise ShapeError(
            arg=arg,
            expected=f"a tensor of at most {maximum} dimensions ({why} take no more)",
            found=f"a {meta.ndim}-D tensor",
            fix="merge dims with reshape first",
        )


def check_positive(arg: str, values: tuple[int, ...], *, allow_zero: bool = False) -> None:
    """Every value must be > 0 (or >= 0 with ``allow_zero``), as torch's conv attributes."""
    bad = [v for v in values if v < 0 or (v == 0 and not allow_zero)]
    if bad:
        raise ArgumentError(
            arg=arg,
            expected="non-negative values" if allow_zero else "positive values",
            found=repr(list(values)),
        )


def check_dtype(arg: str, meta: TensorMeta, allowed: Iterable[DType], *, fix: str | None = None) -> None:
    allowed = frozenset(allowed)
    if meta.dtype not in allowed:
        raise DTypeError(arg=arg, expected=f"dtype in ({_names(allowed)})", found=meta.dtype.value, fix=fix)


def check_floating(arg: str, meta: TensorMeta) -> None:
    """Only floating dtypes, as PyTorch's kernels for this op."""
    check_dtype(arg, meta, FLOATING, fix=f"convert '{arg}' to a floating dtype, e.g. x.astype('float32')")


def check_same_dtype(first: tuple[str, TensorMeta], *others: tuple[str, TensorMeta | None]) -> None:
    name, meta = first
    for other_name, other in others:
        if other is not None and other.dtype is not meta.dtype:
            raise DTypeError(
                arg=other_name,
                expected=f"the dtype of '{name}' ({meta.dtype.value})",
                found=other.dtype.value,
                fix="convert both to one dtype",
            )


def check_choice(arg: str, value: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise ArgumentError(arg=arg, expected="one of " + ", ".join(map(repr, choices)), found=repr(value))


def normalize_dim(arg: str, dim: int, ndim: int) -> int:
    """A dim in [-ndim, ndim) made non-negative; 0-D tensors accept -1 and 0 as PyTorch does."""
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise ShapeError(
            arg=arg,
            expected=f"a dim in the range [{-bound}, {bound - 1}] for a {ndim}-D tensor",
            found=str(dim),
        )
    return dim % bound


def broadcast_shapes(*named: tuple[str, tuple[int, ...]]) -> tuple[int, ...]:
    """NumPy/PyTorch broadcasting, with an error naming the arguments that disagree."""
    try:
        return tuple(numpy.broadcast_shapes(*(shape for _, shape in named)))
    except ValueError:
        described = ", ".join(f"{name} {shape_text(shape)}" for name, shape in named)
        raise ShapeError(
            arg=named[-1][0],
            expected="shapes that broadcast together (each trailing size equal, or 1)",
            found=described,
        ) from None


def common_device(named: Iterable[tuple[str, TensorMeta]]) -> Device:
    """The one device all tensors are on; inputs on two devices raise DeviceError."""
    device: Device | None = None
    first = ""
    for name, meta in named:
        if device is None:
            device, first = meta.device, name
        elif meta.device != device:
            raise DeviceError(
                arg=name,
                expected=f"the device of '{first}' ({device})",
                found=str(meta.device),
                fix="move all inputs to one device first, e.g. tensor.to('cpu')",
            )
    return device or CPU


# --- type promotion, as torch.result_type ------------------------------------------------------


def _category(dtype: DType | None) -> int:
    if dtype is None:
        return -1
    if dtype is DType.BOOL:
        return 0
    return 2 if dtype in FLOATING else 1


def promote_types(a: DType, b: DType) -> DType:
    """``torch.promote_types`` for the dtypes opcore knows.

    >>> promote_types(DType.BFLOAT16, DType.FLOAT16), promote_types(DType.INT64, DType.FLOAT16)
    (<DType.FLOAT32: 'float32'>, <DType.FLOAT16: 'float16'>)
    """
    if a is b:
        return a
    a_float, b_float = a in FLOATING, b in FLOATING
    if a_float and b_float:
        if {a, b} == {DType.FLOAT16, DType.BFLOAT16}:
            return DType.FLOAT32
        return a if a.itemsize >= b.itemsize else b
    if a_float:
        return a
    if b_float:
        return b
    return DType.from_numpy(numpy.promote_types(a.value, b.value))


def _combine(higher: DType | None, lower: DType | None) -> DType | None:
    # torch's combine_categories (c10/core/ScalarType / TensorIterator's ResultTypeState)
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher in FLOATING:
        return higher
    if higher is DType.BOOL or lower in FLOATING:
        return promote_types(higher, lower)
    return higher


def result_type(*operands: TensorMeta | bool | int | float) -> DType:
    """The dtype PyTorch gives a binary op of these operands: tensors with dimensions
    win over 0-D tensors, which win over Python numbers, unless a later group is of a
    higher category (bool < integer < floating).
    """
    dim_result: DType | None = None
    zero_result: DType | None = None
    wrapped_result: DType | None = None
    for operand in operands:
        if isinstance(operand, TensorMeta):
            if operand.ndim:
                dim_result = operand.dtype if dim_result is None else promote_types(dim_result, operand.dtype)
            else:
                zero_result = operand.dtype if zero_result is None else promote_types(zero_result, operand.dtype)
        else:
            wrapped = (
                DType.BOOL if isinstance(operand, bool) else DType.INT64 if isinstance(operand, int) else DEFAULT_FLOAT
            )
            wrapped_result = wrapped if wrapped_result is None else promote_types(wrapped_result, wrapped)
    combined = _combine(dim_result, _combine(zero_result, wrapped_result))
    if combined is None:
        raise DTypeError("result_type() needs at least one operand")
    return combined


# --- common meta functions ----------------------------------------------------------------------


def unary_float(x: TensorMeta) -> TensorMeta:
    """Same shape and dtype; floating dtypes only (as torch's gelu, silu)."""
    check_floating("x", x)
    return TensorMeta(x.shape, x.dtype, x.device)


def unary_promote_to_float(x: TensorMeta) -> TensorMeta:
    """Same shape; integer and bool inputs give float32 (as torch.exp, torch.sigmoid)."""
    dtype = x.dtype if x.dtype in FLOATING else DEFAULT_FLOAT
    return TensorMeta(x.shape, dtype, x.device)
