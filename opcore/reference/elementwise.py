"""Reference kernels for the elementwise ops (float64 / int64 inside)."""

from __future__ import annotations

import math
from typing import Any

import numpy

from opcore.errors import ArgumentError
from opcore.reference._common import F64, I64, binary_result_dtype, finish, float_result_dtype, quiet
from opcore.types import DType

__all__ = [
    "abs",
    "add",
    "cast",
    "ceil",
    "cos",
    "div",
    "eq",
    "erf",
    "exp",
    "ge",
    "gelu",
    "gelu_f64",
    "gt",
    "hardsigmoid",
    "hardswish",
    "le",
    "log",
    "logical_and",
    "logical_not",
    "logical_or",
    "lt",
    "minimum",
    "mul",
    "ne",
    "neg",
    "pow",
    "relu",
    "rsqrt",
    "sigmoid",
    "sigmoid_f64",
    "sign",
    "silu",
    "sin",
    "softplus",
    "sqrt",
    "sub",
    "tanh",
]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "abs",
    "add",
    "cast",
    "ceil",
    "cos",
    "div",
    "eq",
    "erf",
    "exp",
    "ge",
    "gelu",
    "gt",
    "hardsigmoid",
    "hardswish",
    "le",
    "log",
    "logical_and",
    "logical_not",
    "logical_or",
    "lt",
    "minimum",
    "mul",
    "ne",
    "neg",
    "pow",
    "relu",
    "rsqrt",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "softplus",
    "sqrt",
    "sub",
    "tanh",
)

Operand = Any  # a numpy array or a Python number


def _operands(x: numpy.ndarray, other: Operand, out: numpy.dtype) -> tuple[Any, Any]:
    """Both operands in the compute dtype of ``out``: float64 for floating results, else int64."""
    compute = F64 if out.kind == "f" else I64
    if isinstance(other, numpy.ndarray):
        return x.astype(compute, copy=False), other.astype(compute, copy=False)
    return x.astype(compute, copy=False), (float(other) if out.kind == "f" else int(other))


def _add(x: numpy.ndarray, other: Operand, alpha: Any, sign: int) -> numpy.ndarray:
    out = binary_result_dtype(x, other)
    with quiet():
        if out.kind == "b":  # only add reaches here: bool + bool is logical or
            return finish(numpy.logical_or(x, numpy.logical_and(other, bool(alpha))), out)
        a, b = _operands(x, other, out)
        if alpha != 1:
            b = b * alpha
        return finish(a + b if sign > 0 else a - b, out)


def add(x: numpy.ndarray, other: Operand, alpha: Any) -> numpy.ndarray:
    """x + alpha * other."""
    return _add(x, other, alpha, 1)


def sub(x: numpy.ndarray, other: Operand, alpha: Any) -> numpy.ndarray:
    """x - alpha * other."""
    return _add(x, other, alpha, -1)


def mul(x: numpy.ndarray, other: Operand) -> numpy.ndarray:
    """x * other."""
    out = binary_result_dtype(x, other)
    with quiet():
        if out.kind == "b":
            return finish(numpy.logical_and(x, other), out)
        a, b = _operands(x, other, out)
        return finish(a * b, out)


def _integer_divide(a: Any, b: Any, rounding_mode: str) -> Any:
    if not numpy.all(b):
        raise ArgumentError(
            arg="other",
            expected=f"no zero divisor for an integer division with rounding_mode={rounding_mode!r}",
            found="a zero",
            fix="divide floating tensors to get inf/nan instead",
        )
    quotient = numpy.floor_divide(a, b)
    if rounding_mode == "trunc":
        # floor and trunc differ by one where the division is inexact and the signs differ
        inexact = numpy.remainder(a, b) != 0
        quotient = quotient + (inexact & ((numpy.asarray(a) < 0) != (numpy.asarray(b) < 0)))
    return quotient


def div(x: numpy.ndarray, other: Operand, rounding_mode: str | None) -> numpy.ndarray:
    """x / other, optionally rounded toward zero ('trunc') or down ('floor')."""
    out = binary_result_dtype(x, other)
    with quiet():
        if rounding_mode is None:
            out = float_result_dtype(out)
            a, b = _operands(x, other, out)
            return finish(numpy.true_divide(a, b), out)
        a, b = _operands(x, other, out)
        if out.kind != "f":
            return finish(_integer_divide(a, b, rounding_mode), out)
        if rounding_mode == "trunc":
            # torch truncates the quotient rounded to the result dtype (float16: 5.998 -> 6.0 -> 6)
            return finish(numpy.trunc(numpy.true_divide(a, b).astype(out)), out)
        return finish(numpy.floor_divide(a, b), out)  # Python's float floor division, as torch's


def relu(x: numpy.ndarray) -> numpy.ndarray:
    """max(x, 0); exact in the input dtype, NaN stays NaN."""
    return finish(numpy.maximum(x, x.dtype.type(0)), x.dtype)


_erf = numpy.frompyfunc(math.erf, 1, 1)  # libm's erf, as torch's CPU kernel; numpy has no erf


def gelu_f64(a: numpy.ndarray, approximate: str) -> Any:
    """gelu of a float64 array (shared with the fused linear kernels)."""
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (a + 0.044715 * a * a * a)
        return 0.5 * a * (1.0 + numpy.tanh(inner))
    return 0.5 * a * (1.0 + numpy.asarray(_erf(a * math.sqrt(0.5)), dtype=F64))


def sigmoid_f64(a: numpy.ndarray) -> Any:
    """sigmoid of a float64 array; exp overflows to inf for very negative a, and 1/inf = 0."""
    return 1.0 / (1.0 + numpy.exp(-a))


def gelu(x: numpy.ndarray, approximate: str) -> numpy.ndarray:
    """x * Phi(x), exactly or with the tanh approximation."""
    with quiet():
        return finish(gelu_f64(x.astype(F64, copy=False), approximate), x.dtype)


def silu(x: numpy.ndarray) -> numpy.ndarray:
    """x * sigmoid(x)."""
    a = x.astype(F64, copy=False)
    with quiet():
        return finish(a * sigmoid_f64(a), x.dtype)


def _unary_float(x: numpy.ndarray, function: Any) -> numpy.ndarray:
    with quiet():
        return finish(function(x.astype(F64, copy=False)), float_result_dtype(x.dtype))


def sigmoid(x: numpy.ndarray) -> numpy.ndarray:
    """1 / (1 + exp(-x)); integral and bool inputs give float32."""
    return _unary_float(x, sigmoid_f64)


def tanh(x: numpy.ndarray) -> numpy.ndarray:
    """tanh(x); integral and bool inputs give float32."""
    return _unary_float(x, numpy.tanh)


def exp(x: numpy.ndarray) -> numpy.ndarray:
    """e ** x; integral and bool inputs give float32."""
    return _unary_float(x, numpy.exp)


def neg(x: numpy.ndarray) -> numpy.ndarray:
    """-x in x's dtype: exact, and integers wrap (-(-128) is -128 in int8, -1 is 255 in uint8), as torch."""
    with quiet():
        return finish(numpy.negative(x), x.dtype)


def abs(x: numpy.ndarray) -> numpy.ndarray:
    """|x| in x's dtype: exact; the most negative integer stays itself, as in torch."""
    if x.dtype.kind == "u":
        return finish(x.copy(), x.dtype)
    with quiet():
        return finish(numpy.absolute(x), x.dtype)


def sqrt(x: numpy.ndarray) -> numpy.ndarray:
    """sqrt(x), NaN below 0; integral and bool inputs give float32."""
    return _unary_float(x, numpy.sqrt)


def rsqrt(x: numpy.ndarray) -> numpy.ndarray:
    """1 / sqrt(x): inf at +-0, NaN below 0; integral and bool inputs give float32."""
    return _unary_float(x, lambda a: 1.0 / numpy.sqrt(a))


def erf(x: numpy.ndarray) -> numpy.ndarray:
    """The error function (libm's, as torch's CPU kernel); integral and bool inputs give float32."""
    return _unary_float(x, lambda a: numpy.asarray(_erf(a), dtype=F64))


def cos(x: numpy.ndarray) -> numpy.ndarray:
    """cos(x); integral and bool inputs give float32."""
    return _unary_float(x, numpy.cos)


def sin(x: numpy.ndarray) -> numpy.ndarray:
    """sin(x); integral and bool inputs give float32."""
    return _unary_float(x, numpy.sin)


def log(x: numpy.ndarray) -> numpy.ndarray:
    """The natural logarithm: -inf at +-0, NaN below 0; integral and bool inputs give float32."""
    return _unary_float(x, numpy.log)


def ceil(x: numpy.ndarray) -> numpy.ndarray:
    """The smallest integer >= x in x's dtype (-0.5 gives -0.0); integers are returned as they are."""
    if x.dtype.kind in "iu":
        return finish(x.copy(), x.dtype)
    with quiet():
        return finish(numpy.ceil(x.astype(F64, copy=False)), x.dtype)


def sign(x: numpy.ndarray) -> numpy.ndarray:
    """-1, 0 or 1 in x's dtype; 0 for NaN (torch's kernel, where numpy gives NaN); a bool is its own sign."""
    if x.dtype.kind == "b":
        return finish(x.copy(), x.dtype)
    if x.dtype.kind == "u":
        return finish((x != 0).astype(x.dtype), x.dtype)
    if x.dtype.kind == "i":
        return finish(numpy.sign(x.astype(I64, copy=False)), x.dtype)
    with quiet():  # + 0.0: -0.0 gives 0.0, as torch
        return finish(numpy.sign(numpy.nan_to_num(x.astype(F64, copy=False), nan=0.0)) + 0.0, x.dtype)


def minimum(x: numpy.ndarray, other: numpy.ndarray) -> numpy.ndarray:
    """The smaller of x and other, both first converted to the promoted dtype (a 0-D int64 -1 beside
    uint8 is 255, as torch); NaN where either is NaN; bools as logical and."""
    out = binary_result_dtype(x, other)
    with quiet():
        if out.kind == "b":
            return finish(numpy.logical_and(x, other), out)
        return finish(numpy.minimum(x.astype(out), other.astype(out)), out)


def _compared(x: numpy.ndarray, other: Operand, function: Any) -> numpy.ndarray:
    """function(x, other) on both operands rounded to their promoted dtype first, as torch compares
    (an int64 beside a float32 compares as float32), then widened so numpy compares exactly.
    """
    out = binary_result_dtype(x, other)
    compute = F64 if out.kind == "f" else I64
    with quiet():
        a = x.astype(out).astype(compute, copy=False)
        b = numpy.asarray(other).astype(out).astype(compute, copy=False)
        return finish(function(a, b), numpy.dtype(bool))


def eq(x: numpy.ndarray, other: Operand) -> numpy.ndarray:
    """x == other (NaN equals nothing)."""
    return _compared(x, other, numpy.equal)


def ne(x: numpy.ndarray, other: Operand) -> numpy.ndarray:
    """x != other (NaN differs from everything)."""
    return _compared(x, other, numpy.not_equal)


def lt(x: numpy.ndarray, other: Operand) -> numpy.ndarray:
    """x < other."""
    return _compared(x, other, numpy.less)


def le(x: numpy.ndarray, other: Operand) -> numpy.ndarray:
    """x <= other."""
    return _compared(x, other, numpy.less_equal)


def gt(x: numpy.ndarray, other: Operand) -> numpy.ndarray:
    """x > other."""
    return _compared(x, other, numpy.greater)


def ge(x: numpy.ndarray, other: Operand) -> numpy.ndarray:
    """x >= other."""
    return _compared(x, other, numpy.greater_equal)


def logical_and(x: numpy.ndarray, other: numpy.ndarray) -> numpy.ndarray:
    """x and other, nonzero (NaN included) being true."""
    return finish(numpy.logical_and(x, other), numpy.dtype(bool))


def logical_or(x: numpy.ndarray, other: numpy.ndarray) -> numpy.ndarray:
    """x or other, nonzero (NaN included) being true."""
    return finish(numpy.logical_or(x, other), numpy.dtype(bool))


def logical_not(x: numpy.ndarray) -> numpy.ndarray:
    """not x, zero (and -0.0) being false."""
    return finish(numpy.logical_not(x), numpy.dtype(bool))


def _integer_power(a: numpy.ndarray, e: numpy.ndarray) -> Any:
    """a ** e in int64, wrapping as torch's integer pow; a negative exponent gives 0, but 1 for a
    base of 1 and +-1 for a base of -1 (torch's rule, where numpy refuses)."""
    result = numpy.power(a, numpy.maximum(e, 0))
    negative = e < 0
    if not numpy.any(negative):
        return result
    odd = numpy.remainder(e, 2) == 1
    inverse = numpy.where(a == 1, 1, numpy.where(a == -1, numpy.where(odd, -1, 1), 0))
    return numpy.where(negative, inverse, result)


def pow(x: numpy.ndarray, exponent: Operand) -> numpy.ndarray:
    """x ** exponent in the promoted dtype (float64 inside for floats, wrapping int64 for integers)."""
    out = binary_result_dtype(x, exponent)
    with quiet():
        a, b = _operands(x, exponent, out)
        if out.kind == "f":
            return finish(numpy.power(a, b), out)
        return finish(_integer_power(a, numpy.asarray(b, dtype=I64)), out)


def cast(x: numpy.ndarray, dtype: str) -> numpy.ndarray:
    """x converted to dtype: floats to integers truncate toward zero, nonzero (NaN too) is true;
    bfloat16 is returned as float32 (the dispatcher rounds it)."""
    target = DType.parse(dtype)
    out = numpy.dtype(numpy.float32) if target is DType.BFLOAT16 else target.to_numpy()
    with quiet():
        if out.kind in "iu" and x.dtype.kind == "f":
            return finish(numpy.trunc(x).astype(I64), out)  # through int64, as torch wraps narrow ints
        return finish(x.astype(out), out)


def softplus(x: numpy.ndarray, beta: Any, threshold: Any) -> numpy.ndarray:
    """log1p(exp(beta * x)) / beta, and x itself where beta * x > threshold."""
    a = x.astype(F64, copy=False)
    with quiet():
        scaled = a * beta
        return finish(numpy.where(scaled > threshold, a, numpy.log1p(numpy.exp(scaled)) / beta), x.dtype)


def hardsigmoid(x: numpy.ndarray) -> numpy.ndarray:
    """min(max(x + 3, 0), 6) / 6: 0 at -inf, 1 at inf, NaN stays NaN (as torch)."""
    a = x.astype(F64, copy=False)
    with quiet():
        return finish(numpy.clip(a + 3.0, 0.0, 6.0) / 6.0, x.dtype)


def hardswish(x: numpy.ndarray) -> numpy.ndarray:
    """x * min(max(x + 3, 0), 6) / 6, as torch's kernel computes it (so -inf gives NaN: -inf * 0)."""
    a = x.astype(F64, copy=False)
    with quiet():
        return finish(a * numpy.clip(a + 3.0, 0.0, 6.0) / 6.0, x.dtype)
