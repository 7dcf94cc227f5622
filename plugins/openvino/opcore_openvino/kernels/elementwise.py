"""Elementwise kernels: add, sub, mul, div (PyTorch's promotion and rounding modes) and activations."""

from __future__ import annotations

from typing import Any

import numpy

from opcore.extend import DType
from opcore_openvino.compiled import ov_kernel
from opcore_openvino.graph import Graph, Node, Scalar, constant, dtype_of, floating, ops
from opcore_openvino.kernels._common import BOOL, F32, I32, binary_result, finish, operand, to_compute

__all__ = [
    "abs",
    "add",
    "apply_gelu",
    "apply_relu",
    "apply_silu",
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
    "keep_nan",
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

Operand = Node | Scalar


def _add(g: Graph, x: Node, other: Operand, alpha: Any, combine: Any) -> Node:
    out = binary_result(x, other)
    if out == BOOL:  # bool + bool is logical or (sub refuses bools in its contract)
        return ops.logical_or(x, operand(g, other, BOOL)) if alpha else x
    compute = to_compute(out)
    a, b = g.cast(x, compute), operand(g, other, compute)
    if alpha != 1:
        b = ops.multiply(b, g.const(alpha, compute))
    return finish(g, combine(a, b), out)


def build_add(g: Graph, x: Node, other: Operand, alpha: Any) -> Node:
    return _add(g, x, other, alpha, ops.add)


def build_sub(g: Graph, x: Node, other: Operand, alpha: Any) -> Node:
    return _add(g, x, other, alpha, ops.subtract)


def build_mul(g: Graph, x: Node, other: Operand) -> Node:
    out = binary_result(x, other)
    if out == BOOL:
        return ops.logical_and(x, operand(g, other, BOOL))
    compute = to_compute(out)
    return finish(g, ops.multiply(g.cast(x, compute), operand(g, other, compute)), out)


def build_div(g: Graph, x: Node, other: Operand, rounding_mode: str | None) -> Node:
    out = binary_result(x, other)
    if rounding_mode is None:
        out = out if floating(out) else F32  # true division of integers gives float32
        return finish(g, ops.divide(g.cast(x, out), operand(g, other, out)), out)
    # trunc of floats only: the checker declines the rest (see checks._div)
    a, b = g.cast(x, out), operand(g, other, out)
    quotient = ops.divide(a, b)
    return ops.select(ops.less(quotient, g.const(0, out)), ops.ceiling(quotient), ops.floor(quotient))


add = ov_kernel("add", build_add)
sub = ov_kernel("sub", build_sub)
mul = ov_kernel("mul", build_mul)
div = ov_kernel("div", build_div)


def apply_relu(g: Graph, x: Node) -> Node:
    """max(x, 0) in x's dtype; integers through Maximum in int32 (the CPU's Relu rounds them via float).

    Floats as Select(x < 0, 0, x): NaN < 0 is false, so NaN stays NaN, and -0.0 stays -0.0, as in
    torch. The CPU plugin's Relu turns NaN into 0; it was Select(IsNaN(x), x, Relu(x)), which the
    plugin runs as two passes over x after the producer (an IsNaN Eltwise and a Subgraph): 13 of
    each in the ResNet-style CNN, ~4 % of its time (docs/benchmarks.md). This form is one fused
    Subgraph pass; a NaN-keeping form that fuses into the Convolution (Abs(Elu(x, 0))) ran slower,
    its exp on every element."""
    dtype = dtype_of(x)
    if dtype.kind == "u":
        return x
    if dtype.kind == "i":
        return g.cast(ops.maximum(g.cast(x, I32), g.const(0, I32)), dtype)
    zero = g.const(0, dtype)
    return ops.select(ops.less(x, zero), zero, x)


def keep_nan(x: Node, result: Node) -> Node:
    """``result`` with NaN wherever x is NaN: the CPU plugin's Exp turns NaN into inf."""
    return ops.select(ops.is_nan(x), x, result)


def apply_gelu(g: Graph, x: Node, approximate: str) -> Node:
    return ops.gelu(x, "tanh" if approximate == "tanh" else "erf")


def apply_silu(g: Graph, x: Node) -> Node:
    return ops.multiply(x, ops.sigmoid(x))  # the CPU plugin fuses this into Swish


def build_relu(g: Graph, x: Node) -> Node:
    return apply_relu(g, x)


def build_gelu(g: Graph, x: Node, approximate: str) -> Node:
    return apply_gelu(g, x, approximate)


def build_silu(g: Graph, x: Node) -> Node:
    return apply_silu(g, x)


def _unary_float(function: Any, *, nan_safe: bool = True) -> Any:
    def build(g: Graph, x: Node) -> Node:
        dtype = dtype_of(x)
        if not floating(dtype):  # integers and bools give float32
            return function(g.cast(x, F32))
        return function(x) if nan_safe else keep_nan(x, function(x))

    build.__name__ = f"build_{function.__name__}"
    return build


relu = ov_kernel("relu", build_relu)
gelu = ov_kernel("gelu", build_gelu)
silu = ov_kernel("silu", build_silu)
sigmoid = ov_kernel("sigmoid", _unary_float(ops.sigmoid))
tanh = ov_kernel("tanh", _unary_float(ops.tanh))
exp = ov_kernel("exp", _unary_float(ops.exp, nan_safe=False))


# --- unary math -------------------------------------------------------------------------------


def build_neg(g: Graph, x: Node) -> Node:
    """-x in x's dtype; integers negate in int32 and wrap back (the CPU plugin saturates int8/uint8)."""
    dtype = dtype_of(x)
    return finish(g, ops.negative(g.cast(x, to_compute(dtype))), dtype)


def build_abs(g: Graph, x: Node) -> Node:
    """|x| in x's dtype; unsigned values are their own absolute value."""
    dtype = dtype_of(x)
    if dtype.kind == "u":
        return x
    return finish(g, ops.abs(g.cast(x, to_compute(dtype))), dtype)


def _rsqrt(x: Node) -> Node:
    return ops.divide(constant(numpy.asarray(1.0, dtype=dtype_of(x))), ops.sqrt(x))


neg = ov_kernel("neg", build_neg)
abs = ov_kernel("abs", build_abs)
sqrt = ov_kernel("sqrt", _unary_float(ops.sqrt))
rsqrt = ov_kernel("rsqrt", _unary_float(_rsqrt))
erf = ov_kernel("erf", _unary_float(ops.erf))
cos = ov_kernel("cos", _unary_float(ops.cos))
sin = ov_kernel("sin", _unary_float(ops.sin))


# --- log, ceil, sign, minimum (relative-position buckets: T5, DeBERTa) -------------------------


def build_ceil(g: Graph, x: Node) -> Node:
    """Ceiling in x's dtype; integers are their own ceiling."""
    return x if dtype_of(x).kind in "iu" else ops.ceiling(x)


def build_sign(g: Graph, x: Node) -> Node:
    """-1, 0 or 1 in x's dtype (integers in int32); 0 for NaN, as torch; a bool is its own sign."""
    dtype = dtype_of(x)
    if dtype == BOOL:
        return x
    if dtype.kind in "iu":
        return finish(g, ops.sign(g.cast(x, to_compute(dtype))), dtype)
    return ops.select(ops.is_nan(x), g.const(0, dtype), ops.sign(x))


def build_minimum(g: Graph, x: Node, other: Node) -> Node:
    """Minimum in the promoted dtype (integers in int32; bools as logical and), NaN in either operand kept."""
    out = binary_result(x, other)
    if out == BOOL:
        return ops.logical_and(x, other)
    compute = to_compute(out)
    a, b = g.cast(g.cast(x, out), compute), g.cast(g.cast(other, out), compute)
    result = ops.minimum(a, b)
    if floating(out):
        result = ops.select(ops.logical_or(ops.is_nan(a), ops.is_nan(b)), ops.add(a, b), result)
    return finish(g, result, out)


log = ov_kernel("log", _unary_float(ops.log, nan_safe=False))
ceil = ov_kernel("ceil", build_ceil)
sign = ov_kernel("sign", build_sign)
minimum = ov_kernel("minimum", build_minimum)


# --- comparisons and logic --------------------------------------------------------------------


def _comparison(function: Any) -> Any:
    def build(g: Graph, x: Node, other: Operand) -> Node:
        # both operands rounded to the promoted dtype first, as torch compares; integers and bools in int32
        out = binary_result(x, other)
        compute = I32 if out.kind in "biu" else out
        return function(g.cast(g.cast(x, out), compute), g.cast(operand(g, other, out), compute))

    build.__name__ = f"build_{function.__name__}"
    return build


def _truth(g: Graph, x: Node) -> Node:
    """x != 0 as bool: the CPU plugin's Convert turns NaN into false, where torch counts it true."""
    dtype = dtype_of(x)
    return x if dtype == BOOL else ops.not_equal(x, g.const(0, dtype))


def build_logical_and(g: Graph, x: Node, other: Node) -> Node:
    return ops.logical_and(_truth(g, x), _truth(g, other))


def build_logical_or(g: Graph, x: Node, other: Node) -> Node:
    return ops.logical_or(_truth(g, x), _truth(g, other))


def build_logical_not(g: Graph, x: Node) -> Node:
    return ops.logical_not(_truth(g, x))


def _greater(x: Node, other: Node) -> Node:
    """x > other as other < x: OpenVINO 2026.4's CPU plugin answers Greater true where an operand is NaN
    on an AVX-512 CPU (measured on an AMD EPYC with AVX512_BF16; right on AVX2), and Less is right on both."""
    return ops.less(other, x)


def _greater_equal(x: Node, other: Node) -> Node:
    """x >= other as other <= x (GreaterEqual is true with a NaN operand there, as Greater is)."""
    return ops.less_equal(other, x)


eq = ov_kernel("eq", _comparison(ops.equal))
ne = ov_kernel("ne", _comparison(ops.not_equal))
lt = ov_kernel("lt", _comparison(ops.less))
le = ov_kernel("le", _comparison(ops.less_equal))
gt = ov_kernel("gt", _comparison(_greater))
ge = ov_kernel("ge", _comparison(_greater_equal))
logical_and = ov_kernel("logical_and", build_logical_and)
logical_or = ov_kernel("logical_or", build_logical_or)
logical_not = ov_kernel("logical_not", build_logical_not)


# --- pow, cast, softplus, hardswish -----------------------------------------------------------


def build_pow(g: Graph, x: Node, exponent: Operand) -> Node:
    """x ** exponent of a float32/float16 result; the checker declines the rest."""
    out = binary_result(x, exponent)
    return ops.power(g.cast(x, out), operand(g, exponent, out))


def build_cast(g: Graph, x: Node, dtype: str) -> Node:
    """Convert (the checker declines 64-bit and bfloat16 targets); floats to integers through
    int32 first, which truncates, then wraps into a narrower type as torch's conversion."""
    out = DType.parse(dtype).to_numpy()
    if out == BOOL:
        return _truth(g, x)
    if floating(dtype_of(x)) and out.kind in "iu" and out != I32:
        return g.cast(g.cast(x, I32), out)
    return g.cast(x, out)


def build_softplus(g: Graph, x: Node, beta: Any, threshold: Any) -> Node:
    """SoftPlus(beta * x) / beta, x itself where beta * x > threshold."""
    dtype = dtype_of(x)
    scaled = ops.multiply(x, g.const(beta, dtype))
    soft = ops.divide(ops.softplus(scaled), g.const(beta, dtype))
    return ops.select(ops.greater(scaled, g.const(threshold, dtype)), x, soft)


def build_hardsigmoid(g: Graph, x: Node) -> Node:
    """OpenVINO HSigmoid: min(max(x + 3, 0), 6) / 6; the CPU plugin's gives 0 for NaN, kept NaN as torch."""
    return keep_nan(x, ops.hsigmoid(x))


def build_hardswish(g: Graph, x: Node) -> Node:
    return ops.hswish(x)


pow = ov_kernel("pow", build_pow)
cast = ov_kernel("cast", build_cast)
softplus = ov_kernel("softplus", build_softplus)
hardswish = ov_kernel("hardswish", build_hardswish)
hardsigmoid = ov_kernel("hardsigmoid", build_hardsigmoid)
