"""Selection contracts: where, masked_fill, clamp (values picked or bounded elementwise).

>>> from opcore.types import TensorMeta, DType
>>> WHERE.meta(TensorMeta((2, 1), DType.BOOL), TensorMeta((3,), DType.INT32), 2.5).dtype
<DType.FLOAT32: 'float32'>
"""

from __future__ import annotations

from functools import partial

from opcore.contracts import OpContract, define_op
from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.meta import ALL_DTYPES, broadcast_shapes, result_type
from opcore.opset.elementwise import check_fits
from opcore.types import DType, TensorMeta

# every op defined here is of this module's family (opcore.opset.family_contracts checks it)
define = partial(define_op, family="selection")

__all__ = ["CLAMP", "CONTRACTS", "MASKED_FILL", "WHERE"]

Operand = TensorMeta | bool | int | float


def _check_mask(arg: str, meta: TensorMeta) -> None:
    if meta.dtype is not DType.BOOL:
        raise DTypeError(
            arg=arg,
            expected="a bool tensor",
            found=str(meta.dtype),
            fix=f"compare to get a mask, e.g. ({arg} != 0)",
        )


def _shape(named: list[tuple[str, Operand | None]]) -> tuple[int, ...]:
    """The broadcast shape of the tensors among ``named``; each Python int checked to fit int64."""
    shapes = []
    for name, value in named:
        if isinstance(value, TensorMeta):
            shapes.append((name, value.shape))
        elif value is not None:
            check_fits(name, value, DType.FLOAT64)  # only the int64 range of a Python int matters here
    return broadcast_shapes(*shapes)


def where_meta(condition: TensorMeta, x: Operand, other: Operand) -> TensorMeta:
    """x where condition, else other: the broadcast shape, x's and other's promoted dtype."""
    _check_mask("condition", condition)
    shape = _shape([("condition", condition), ("x", x), ("other", other)])
    dtype = result_type(x, other)
    if dtype not in (DType.FLOAT16, DType.BFLOAT16):  # torch lets a number overflow to inf in these two only
        for name, value in (("x", x), ("other", other)):
            if not isinstance(value, TensorMeta):
                check_fits(name, value, dtype)
    return TensorMeta(shape, dtype, condition.device)


def masked_fill_meta(x: TensorMeta, mask: TensorMeta, value: Operand) -> TensorMeta:
    """x with value where mask: x and mask broadcast, x's dtype; value a number that converts to
    x's dtype without overflow, or a 0-D tensor."""
    _check_mask("mask", mask)
    if isinstance(value, TensorMeta):
        if value.ndim:
            raise ShapeError(
                arg="value",
                expected="a number or a 0-D tensor",
                found=f"a {value.ndim}-D tensor",
                fix="to fill from a tensor of values use where(mask, values, x)",
            )
    else:
        check_fits("value", value, x.dtype)
    shape = broadcast_shapes(("x", x.shape), ("mask", mask.shape))
    return TensorMeta(shape, x.dtype, x.device)


def clamp_meta(x: TensorMeta, min: Operand | None, max: Operand | None) -> TensorMeta:
    """min(max(x, min), max): the broadcast shape and promoted dtype (never bool); min and max
    both numbers or both tensors (torch has no mixed form), at least one given."""
    given = [bound for bound in (min, max) if bound is not None]
    if not given:
        raise ArgumentError(
            arg="min",
            expected="at least one of 'min' and 'max'",
            found="both None",
            fix="pass min=, max= or both",
        )
    if len(given) == 2 and isinstance(min, TensorMeta) != isinstance(max, TensorMeta):
        raise ArgumentError(
            arg="max",
            expected=f"a {'tensor' if isinstance(min, TensorMeta) else 'number'} like 'min' "
            "(torch.clamp takes two tensors or two numbers)",
            found=type(max).__name__ if not isinstance(max, TensorMeta) else "a tensor",
            fix="pass both bounds as tensors or both as numbers",
        )
    shape = _shape([("x", x), ("min", min), ("max", max)])
    dtype = result_type(x, *given)
    if dtype is DType.BOOL:
        raise DTypeError(
            arg="x",
            expected="operands whose promoted dtype is not bool (torch has no bool clamp)",
            found="bool",
            fix="convert x to an integer dtype first",
        )
    for name, bound in (("min", min), ("max", max)):
        if bound is not None and not isinstance(bound, TensorMeta):
            check_fits(name, bound, dtype)  # torch: "value cannot be converted to type ... without overflow"
    return TensorMeta(shape, dtype, x.device)


WHERE = define(
    "where(Tensor condition, Tensor|Scalar x, Tensor|Scalar other) -> Tensor",
    meta=where_meta,
    dtypes={DType.BOOL},
    doc="x where condition, else other: broadcast, x and other type-promoted; mirrors torch.where.",
    tags=("selection",),
)
MASKED_FILL = define(
    "masked_fill(Tensor x, Tensor mask, Tensor|Scalar value) -> Tensor",
    meta=masked_fill_meta,
    dtypes=ALL_DTYPES,
    doc="x with value where mask (bool), keeping x's dtype; mirrors torch.masked_fill.",
    tags=("selection",),
)
CLAMP = define(
    "clamp(Tensor x, Tensor|Scalar? min=None, Tensor|Scalar? max=None) -> Tensor",
    meta=clamp_meta,
    dtypes=ALL_DTYPES,
    doc="min(max(x, min), max), broadcast and type-promoted (NaN stays NaN); mirrors torch.clamp.",
    tags=("selection", "elementwise"),
)

CONTRACTS: tuple[OpContract, ...] = (WHERE, MASKED_FILL, CLAMP)
