"""Elementwise contracts: arithmetic with broadcasting and PyTorch's type promotion, and activations.

>>> from opcore.types import TensorMeta, DType
>>> ADD.meta(TensorMeta((2, 1), DType.INT32), 2.5, 1).dtype
<DType.FLOAT32: 'float32'>
"""

from __future__ import annotations

import math
import sys
from functools import partial
from typing import Any

import numpy

from opcore.contracts import OpContract, define_op
from opcore.errors import ArgumentError, DTypeError
from opcore.meta import (
    ALL_DTYPES,
    DEFAULT_FLOAT,
    FLOATING,
    INTEGRAL,
    broadcast_shapes,
    check_choice,
    check_dtype,
    check_floating,
    result_type,
    unary_float,
    unary_promote_to_float,
)
from opcore.types import DType, TensorMeta

# every op defined here is of this module's family (opcore.opset.family_contracts checks it)
define = partial(define_op, family="elementwise")

__all__ = [
    "ABS",
    "ADD",
    "CAST",
    "CEIL",
    "CONTRACTS",
    "COS",
    "DIV",
    "ERF",
    "EXP",
    "EQ",
    "GE",
    "GELU",
    "GT",
    "HARDSIGMOID",
    "HARDSWISH",
    "LE",
    "LOG",
    "LOGICAL_AND",
    "LOGICAL_NOT",
    "LOGICAL_OR",
    "LT",
    "MINIMUM",
    "MUL",
    "NE",
    "NEG",
    "POW",
    "RELU",
    "RSQRT",
    "SIGMOID",
    "SIGN",
    "SILU",
    "SIN",
    "SOFTPLUS",
    "SQRT",
    "SUB",
    "TANH",
    "check_fits",
    "check_scalar_factor",
]

Operand = TensorMeta | bool | int | float

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Largest finite value per floating dtype: torch refuses an alpha that overflows the result type.
_FLOAT_MAX = {
    DType.FLOAT16: 65504.0,
    DType.BFLOAT16: 3.3895313892515355e38,
    DType.FLOAT32: 3.4028234663852886e38,
    DType.FLOAT64: sys.float_info.max,
}
APPROXIMATIONS = ("none", "tanh")
ROUNDING_MODES = (None, "trunc", "floor")


def _check_python_int(arg: str, value: Any) -> None:
    # numpy (and torch) hold Python ints as int64; a larger one cannot reach any kernel.
    if isinstance(value, int) and not isinstance(value, bool) and not _INT64_MIN <= value <= _INT64_MAX:
        raise ArgumentError(arg=arg, expected="an int within the int64 range", found=str(value))


def _binary(x: TensorMeta, other: Operand) -> TensorMeta:
    """Broadcast shape and promoted dtype of ``x`` and ``other``."""
    if isinstance(other, TensorMeta):
        shape = broadcast_shapes(("x", x.shape), ("other", other.shape))
    else:
        _check_python_int("other", other)
        shape = x.shape
    return TensorMeta(shape, result_type(x, other), x.device)


def check_scalar_factor(alpha: bool | int | float, dtype: DType, *, negated: bool = False, arg: str = "alpha") -> None:
    """torch's rules for ``alpha`` in add and sub (and addmm's ``beta``/``alpha``, named by ``arg``): its
    kind and value must fit the result's dtype (sub checks -alpha, since torch computes it as add with -alpha).
    """
    if isinstance(alpha, bool):
        if dtype is not DType.BOOL:
            raise ArgumentError(
                arg=arg,
                expected=f"an int or a float for a {dtype} result (a bool {arg} is only for bool results)",
                found=repr(alpha),
            )
        return
    if isinstance(alpha, float) and dtype not in FLOATING:
        raise ArgumentError(
            arg=arg,
            expected=f"an int for integral inputs (the result is {dtype})",
            found=repr(alpha),
            fix=f"pass {arg} as an int, or convert the inputs to a floating dtype",
        )
    value = -alpha if negated else alpha
    if dtype in INTEGRAL:
        info = numpy.iinfo(dtype.value)
        low = -info.max if info.min == 0 else info.min  # torch lets negative values wrap into unsigned types
        if not low <= value <= info.max:
            what = f"-{arg} to fit in {dtype}" if negated else f"a value that fits in {dtype}"
            raise ArgumentError(arg=arg, expected=f"{what} [{low}, {info.max}]", found=repr(alpha))
    elif dtype in FLOATING:
        _check_python_int(arg, alpha)
        limit = _FLOAT_MAX[dtype]
        if math.isfinite(alpha) and abs(alpha) > limit:
            raise ArgumentError(
                arg=arg, expected=f"a value that fits in {dtype} (|{arg}| <= {limit:g})", found=repr(alpha)
            )


def add_meta(x: TensorMeta, other: Operand, alpha: bool | int | float) -> TensorMeta:
    """Broadcast shape, promoted dtype, and an alpha that fits the result (torch.add's rules)."""
    out = _binary(x, other)
    check_scalar_factor(alpha, out.dtype)
    return out


def _is_bool(operand: Operand) -> bool:
    return operand.dtype is DType.BOOL if isinstance(operand, TensorMeta) else isinstance(operand, bool)


def sub_meta(x: TensorMeta, other: Operand, alpha: bool | int | float) -> TensorMeta:
    """As add, and no bool operand (torch.sub refuses them)."""
    if _is_bool(x) and _is_bool(other):
        raise DTypeError(
            arg="other",
            expected="a non-bool operand (subtracting two bool tensors is not supported)",
            found="bool and bool",
            fix="use numpy.logical_xor (the ^ operator) instead",
        )
    for name, operand in (("x", x), ("other", other)):
        if _is_bool(operand):
            raise DTypeError(
                arg=name,
                expected="a non-bool operand (subtraction with a bool tensor is not supported)",
                found="bool",
                fix="to invert a mask use numpy.logical_not (the ~ operator); else convert it to an int dtype",
            )
    out = _binary(x, other)
    check_scalar_factor(alpha, out.dtype, negated=True)
    return out


def mul_meta(x: TensorMeta, other: Operand) -> TensorMeta:
    """Broadcast shape and promoted dtype."""
    return _binary(x, other)


def div_meta(x: TensorMeta, other: Operand, rounding_mode: str | None) -> TensorMeta:
    """True division gives a floating dtype; rounded division keeps the promoted one, never bool."""
    check_choice("rounding_mode", rounding_mode, ROUNDING_MODES)
    out = _binary(x, other)
    if rounding_mode is None:
        # true division: integral and bool operands give the default float dtype
        return out if out.dtype in FLOATING else out.replace(dtype=DEFAULT_FLOAT)
    if out.dtype is DType.BOOL:
        raise DTypeError(
            arg="x",
            expected=f"operands whose result is not bool for rounding_mode={rounding_mode!r}",
            found="bool and bool",
            fix="convert the operands to an integer dtype first",
        )
    return out


def relu_meta(x: TensorMeta) -> TensorMeta:
    """Same shape and dtype; every dtype but bool."""
    check_dtype("x", x, ALL_DTYPES - {DType.BOOL}, fix="relu of a bool tensor is the tensor itself")
    return TensorMeta(x.shape, x.dtype, x.device)


def neg_meta(x: TensorMeta) -> TensorMeta:
    """Same shape and dtype; every dtype but bool (torch refuses to negate a bool tensor)."""
    check_dtype("x", x, ALL_DTYPES - {DType.BOOL}, fix="to invert a mask use logical_not (the ~ operator)")
    return TensorMeta(x.shape, x.dtype, x.device)


def abs_meta(x: TensorMeta) -> TensorMeta:
    """Same shape and dtype; every dtype but bool (torch has no abs of a bool tensor)."""
    check_dtype("x", x, ALL_DTYPES - {DType.BOOL}, fix="a bool tensor is its own absolute value")
    return TensorMeta(x.shape, x.dtype, x.device)


def ceil_meta(x: TensorMeta) -> TensorMeta:
    """Same shape and dtype; every dtype but bool (torch has no ceil of a bool tensor; of an integer
    tensor it is the tensor itself)."""
    check_dtype("x", x, ALL_DTYPES - {DType.BOOL}, fix="a bool tensor is its own ceiling; convert it to an int dtype")
    return TensorMeta(x.shape, x.dtype, x.device)


def sign_meta(x: TensorMeta) -> TensorMeta:
    """Same shape and dtype (every dtype: a bool tensor is its own sign)."""
    return TensorMeta(x.shape, x.dtype, x.device)


def minimum_meta(x: TensorMeta, other: TensorMeta) -> TensorMeta:
    """Broadcast shape and promoted dtype (two tensors: torch.minimum takes no Python number)."""
    return _binary(x, other)


def compare_meta(x: TensorMeta, other: Operand) -> TensorMeta:
    """Broadcast shape, bool result; the operands are compared in their promoted dtype."""
    return _binary(x, other).replace(dtype=DType.BOOL)


def logical_binary_meta(x: TensorMeta, other: TensorMeta) -> TensorMeta:
    """Broadcast shape, bool result (any dtype: nonzero is true)."""
    shape = broadcast_shapes(("x", x.shape), ("other", other.shape))
    return TensorMeta(shape, DType.BOOL, x.device)


def logical_not_meta(x: TensorMeta) -> TensorMeta:
    """Same shape, bool result."""
    return TensorMeta(x.shape, DType.BOOL, x.device)


def gelu_meta(x: TensorMeta, approximate: str) -> TensorMeta:
    """Same shape and dtype; floating dtypes, approximate "none" or "tanh"."""
    check_choice("approximate", approximate, APPROXIMATIONS)
    check_floating("x", x)
    return TensorMeta(x.shape, x.dtype, x.device)


def check_fits(arg: str, value: bool | int | float, dtype: DType) -> None:
    """torch's check that a Python number converts to ``dtype`` without overflow (masked_fill's
    value): integral dtypes take finite values in range (unsigned ones also wrap negatives down
    to -max), floating dtypes any finite value below their largest, inf or NaN; bool anything.
    """
    _check_python_int(arg, value)
    if dtype is DType.BOOL or isinstance(value, bool):
        return
    if dtype in INTEGRAL:
        info = numpy.iinfo(dtype.value)
        low = -int(info.max) if info.min == 0 else int(info.min)
        if not (math.isfinite(value) and low <= value <= info.max):
            raise ArgumentError(
                arg=arg,
                expected=f"a value that converts to {dtype} without overflow [{low}, {info.max}]",
                found=repr(value),
                fix=f"use a value within {dtype}'s range, or convert x to a wider dtype first",
            )
    elif math.isfinite(value) and abs(value) > _FLOAT_MAX[dtype]:
        raise ArgumentError(
            arg=arg,
            expected=f"a value that converts to {dtype} without overflow (|value| <= {_FLOAT_MAX[dtype]:g}, or inf)",
            found=repr(value),
            fix="use a smaller value, or convert x to a wider dtype first",
        )


def pow_meta(x: TensorMeta, exponent: Operand) -> TensorMeta:
    """Broadcast shape and promoted dtype, never bool; an integral result takes no negative Python
    int exponent (torch: "Integers to negative integer powers are not allowed")."""
    if isinstance(exponent, TensorMeta):
        shape = broadcast_shapes(("x", x.shape), ("exponent", exponent.shape))
    else:
        _check_python_int("exponent", exponent)
        shape = x.shape
    dtype = result_type(x, exponent)
    if dtype is DType.BOOL:
        raise DTypeError(
            arg="exponent",
            expected="operands whose promoted dtype is not bool (torch has no bool pow)",
            found="bool and bool",
            fix="convert x to an integer or floating dtype first",
        )
    if dtype in INTEGRAL and isinstance(exponent, int) and not isinstance(exponent, bool) and exponent < 0:
        raise ArgumentError(
            arg="exponent",
            expected=f"an exponent >= 0 for an integral result ({dtype})",
            found=repr(exponent),
            fix="convert x to a floating dtype first (x.to(float32)), or pass a float exponent",
        )
    return TensorMeta(shape, dtype, x.device)


def cast_meta(x: TensorMeta, dtype: str) -> TensorMeta:
    """Same shape, the dtype asked for (any dtype to any dtype, as Tensor.to(dtype))."""
    return TensorMeta(x.shape, DType.parse(dtype), x.device)


def softplus_meta(x: TensorMeta, beta: bool | int | float, threshold: bool | int | float) -> TensorMeta:
    """Same shape and dtype; floating dtypes only (torch has no integral softplus)."""
    check_floating("x", x)
    return TensorMeta(x.shape, x.dtype, x.device)


ADD = define(
    "add(Tensor x, Tensor|Scalar other, *, Scalar alpha=1) -> Tensor",
    meta=add_meta,
    dtypes=ALL_DTYPES,
    doc="x + alpha * other, broadcast and type-promoted; mirrors torch.add.",
    tags=("elementwise", "binary"),
)
SUB = define(
    "sub(Tensor x, Tensor|Scalar other, *, Scalar alpha=1) -> Tensor",
    meta=sub_meta,
    dtypes=ALL_DTYPES - {DType.BOOL},
    doc="x - alpha * other, broadcast and type-promoted; mirrors torch.sub (no bool operands).",
    tags=("elementwise", "binary"),
)
MUL = define(
    "mul(Tensor x, Tensor|Scalar other) -> Tensor",
    meta=mul_meta,
    dtypes=ALL_DTYPES,
    doc="x * other, broadcast and type-promoted; mirrors torch.mul.",
    tags=("elementwise", "binary"),
)
DIV = define(
    "div(Tensor x, Tensor|Scalar other, *, str? rounding_mode=None) -> Tensor",
    meta=div_meta,
    dtypes=ALL_DTYPES,
    doc="x / other: true division (ints give float32), or rounded with 'trunc' or 'floor'; mirrors torch.div.",
    tags=("elementwise", "binary"),
)
RELU = define(
    "relu(Tensor x) -> Tensor",
    meta=relu_meta,
    dtypes=ALL_DTYPES - {DType.BOOL},
    doc="max(x, 0), keeping the dtype; mirrors torch.relu (bool is rejected).",
    tags=("elementwise", "activation"),
)
GELU = define(
    'gelu(Tensor x, *, str approximate="none") -> Tensor',
    meta=gelu_meta,
    dtypes=FLOATING,
    doc="Gaussian error linear unit, exact ('none') or the tanh approximation; mirrors torch.nn.functional.gelu.",
    tags=("elementwise", "activation"),
)
SILU = define(
    "silu(Tensor x) -> Tensor",
    meta=unary_float,
    dtypes=FLOATING,
    doc="x * sigmoid(x), floating dtypes only; mirrors torch.nn.functional.silu.",
    tags=("elementwise", "activation"),
)
SIGMOID = define(
    "sigmoid(Tensor x) -> Tensor",
    meta=unary_promote_to_float,
    dtypes=ALL_DTYPES,
    doc="1 / (1 + exp(-x)); integral and bool inputs give float32; mirrors torch.sigmoid.",
    tags=("elementwise", "activation"),
)
TANH = define(
    "tanh(Tensor x) -> Tensor",
    meta=unary_promote_to_float,
    dtypes=ALL_DTYPES,
    doc="Hyperbolic tangent; integral and bool inputs give float32; mirrors torch.tanh.",
    tags=("elementwise", "activation"),
)
EXP = define(
    "exp(Tensor x) -> Tensor",
    meta=unary_promote_to_float,
    dtypes=ALL_DTYPES,
    doc="e ** x; integral and bool inputs give float32; mirrors torch.exp.",
    tags=("elementwise",),
)
NEG = define(
    "neg(Tensor x) -> Tensor",
    meta=neg_meta,
    dtypes=ALL_DTYPES - {DType.BOOL},
    doc="-x, keeping the dtype (integers wrap); mirrors torch.neg (bool is rejected).",
    tags=("elementwise", "unary"),
)
ABS = define(
    "abs(Tensor x) -> Tensor",
    meta=abs_meta,
    dtypes=ALL_DTYPES - {DType.BOOL},
    doc="|x|, keeping the dtype (the most negative integer stays itself); mirrors torch.abs (no bool).",
    tags=("elementwise", "unary"),
)
SQRT = define(
    "sqrt(Tensor x) -> Tensor",
    meta=unary_promote_to_float,
    dtypes=ALL_DTYPES,
    doc="Square root (NaN below 0); integral and bool inputs give float32; mirrors torch.sqrt.",
    tags=("elementwise", "unary"),
)
RSQRT = define(
    "rsqrt(Tensor x) -> Tensor",
    meta=unary_promote_to_float,
    dtypes=ALL_DTYPES,
    doc="1 / sqrt(x) (inf at 0); integral and bool inputs give float32; mirrors torch.rsqrt.",
    tags=("elementwise", "unary"),
)
ERF = define(
    "erf(Tensor x) -> Tensor",
    meta=unary_promote_to_float,
    dtypes=ALL_DTYPES,
    doc="The Gauss error function; integral and bool inputs give float32; mirrors torch.erf.",
    tags=("elementwise", "unary"),
)
COS = define(
    "cos(Tensor x) -> Tensor",
    meta=unary_promote_to_float,
    dtypes=ALL_DTYPES,
    doc="Cosine (radians); integral and bool inputs give float32; mirrors torch.cos.",
    tags=("elementwise", "unary"),
)
SIN = define(
    "sin(Tensor x) -> Tensor",
    meta=unary_promote_to_float,
    dtypes=ALL_DTYPES,
    doc="Sine (radians); integral and bool inputs give float32; mirrors torch.sin.",
    tags=("elementwise", "unary"),
)
LOG = define(
    "log(Tensor x) -> Tensor",
    meta=unary_promote_to_float,
    dtypes=ALL_DTYPES,
    doc="Natural logarithm (-inf at 0, NaN below 0); integral and bool inputs give float32; mirrors torch.log.",
    tags=("elementwise", "unary"),
)
CEIL = define(
    "ceil(Tensor x) -> Tensor",
    meta=ceil_meta,
    dtypes=ALL_DTYPES - {DType.BOOL},
    doc="The smallest integer >= x, keeping the dtype (integers are returned as they are); mirrors torch.ceil.",
    tags=("elementwise", "unary"),
)
SIGN = define(
    "sign(Tensor x) -> Tensor",
    meta=sign_meta,
    dtypes=ALL_DTYPES,
    doc="-1, 0 or 1 by the sign of x, keeping the dtype (0 for NaN and -0.0, as torch); mirrors torch.sign.",
    tags=("elementwise", "unary"),
)

EQ = define(
    "eq(Tensor x, Tensor|Scalar other) -> Tensor",
    meta=compare_meta,
    dtypes=ALL_DTYPES,
    doc="x == other as bool, broadcast, compared in the promoted dtype; mirrors torch.eq.",
    tags=("elementwise", "comparison"),
)
NE = define(
    "ne(Tensor x, Tensor|Scalar other) -> Tensor",
    meta=compare_meta,
    dtypes=ALL_DTYPES,
    doc="x != other as bool, broadcast, compared in the promoted dtype; mirrors torch.ne.",
    tags=("elementwise", "comparison"),
)
LT = define(
    "lt(Tensor x, Tensor|Scalar other) -> Tensor",
    meta=compare_meta,
    dtypes=ALL_DTYPES,
    doc="x < other as bool, broadcast, compared in the promoted dtype; mirrors torch.lt.",
    tags=("elementwise", "comparison"),
)
LE = define(
    "le(Tensor x, Tensor|Scalar other) -> Tensor",
    meta=compare_meta,
    dtypes=ALL_DTYPES,
    doc="x <= other as bool, broadcast, compared in the promoted dtype; mirrors torch.le.",
    tags=("elementwise", "comparison"),
)
GT = define(
    "gt(Tensor x, Tensor|Scalar other) -> Tensor",
    meta=compare_meta,
    dtypes=ALL_DTYPES,
    doc="x > other as bool, broadcast, compared in the promoted dtype; mirrors torch.gt.",
    tags=("elementwise", "comparison"),
)
GE = define(
    "ge(Tensor x, Tensor|Scalar other) -> Tensor",
    meta=compare_meta,
    dtypes=ALL_DTYPES,
    doc="x >= other as bool, broadcast, compared in the promoted dtype; mirrors torch.ge.",
    tags=("elementwise", "comparison"),
)
LOGICAL_AND = define(
    "logical_and(Tensor x, Tensor other) -> Tensor",
    meta=logical_binary_meta,
    dtypes=ALL_DTYPES,
    doc="x and other as bool (nonzero is true), broadcast; mirrors torch.logical_and.",
    tags=("elementwise", "logical"),
)
LOGICAL_OR = define(
    "logical_or(Tensor x, Tensor other) -> Tensor",
    meta=logical_binary_meta,
    dtypes=ALL_DTYPES,
    doc="x or other as bool (nonzero is true), broadcast; mirrors torch.logical_or.",
    tags=("elementwise", "logical"),
)
LOGICAL_NOT = define(
    "logical_not(Tensor x) -> Tensor",
    meta=logical_not_meta,
    dtypes=ALL_DTYPES,
    doc="not x as bool (zero is false); mirrors torch.logical_not.",
    tags=("elementwise", "logical"),
)

POW = define(
    "pow(Tensor x, Tensor|Scalar exponent) -> Tensor",
    meta=pow_meta,
    dtypes=ALL_DTYPES,
    doc="x ** exponent, broadcast and type-promoted (integers wrap; no bool result); mirrors torch.pow.",
    tags=("elementwise", "binary"),
)
MINIMUM = define(
    "minimum(Tensor x, Tensor other) -> Tensor",
    meta=minimum_meta,
    dtypes=ALL_DTYPES,
    doc="The smaller of x and other, broadcast and type-promoted (NaN if either is NaN); mirrors torch.minimum.",
    tags=("elementwise", "binary"),
)
CAST = define(
    "cast(Tensor x, ScalarType dtype) -> Tensor",
    meta=cast_meta,
    dtypes=ALL_DTYPES,
    doc="x converted to dtype (floats to integers truncate, nonzero is true); mirrors Tensor.to(dtype).",
    tags=("elementwise", "unary"),
)
SOFTPLUS = define(
    "softplus(Tensor x, Scalar beta=1, Scalar threshold=20) -> Tensor",
    meta=softplus_meta,
    dtypes=FLOATING,
    doc="log(1 + exp(beta * x)) / beta, x itself where beta * x > threshold; mirrors torch.nn.functional.softplus.",
    tags=("elementwise", "activation"),
)
HARDSWISH = define(
    "hardswish(Tensor x) -> Tensor",
    meta=unary_float,
    dtypes=FLOATING,
    doc="x * relu6(x + 3) / 6, floating dtypes only; mirrors torch.nn.functional.hardswish.",
    tags=("elementwise", "activation"),
)
HARDSIGMOID = define(
    "hardsigmoid(Tensor x) -> Tensor",
    meta=unary_float,
    dtypes=FLOATING,
    doc="relu6(x + 3) / 6, floating dtypes only; mirrors torch.nn.functional.hardsigmoid.",
    tags=("elementwise", "activation"),
)

CONTRACTS: tuple[OpContract, ...] = (
    ADD,
    SUB,
    MUL,
    DIV,
    RELU,
    GELU,
    SILU,
    SIGMOID,
    TANH,
    EXP,
    NEG,
    ABS,
    SQRT,
    RSQRT,
    ERF,
    COS,
    SIN,
    LOG,
    CEIL,
    SIGN,
    EQ,
    NE,
    LT,
    LE,
    GT,
    GE,
    LOGICAL_AND,
    LOGICAL_OR,
    LOGICAL_NOT,
    POW,
    MINIMUM,
    CAST,
    SOFTPLUS,
    HARDSWISH,
    HARDSIGMOID,
)
