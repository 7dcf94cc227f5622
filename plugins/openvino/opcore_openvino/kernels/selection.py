"""where, masked_fill and clamp (Select, Maximum, Minimum) in the promoted dtype (integers in
int32); the checkers decline 64-bit and bfloat16 results."""

from __future__ import annotations

import numpy

from opcore.extend import results_dtype
from opcore_openvino.compiled import ov_kernel
from opcore_openvino.graph import Graph, Node, Scalar, dtype_of, floating, ops, rank_of
from opcore_openvino.kernels._common import finish, operand, to_compute

__all__ = ["clamp", "masked_fill", "where"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "clamp",
    "masked_fill",
    "where",
)

Operand = Node | Scalar


def _dtype_and_rank(node: Node) -> tuple[numpy.dtype, int]:
    return dtype_of(node), rank_of(node)


def _value(g: Graph, value: Operand, dtype: numpy.dtype) -> Node:
    """A tensor or a Python number in ``dtype``; a baked number is converted here, since the CPU
    plugin's Convert saturates an infinite float64 to the largest float32 (fed ones are fed in
    ``dtype``: Graph.scalar)."""
    if isinstance(value, Scalar) and value.value is not None:
        with numpy.errstate(over="ignore"):  # 1e300 in float32 is inf, as torch makes it
            return g.const(numpy.asarray(value.value).astype(dtype))
    return operand(g, value, dtype)


def build_where(g: Graph, condition: Node, x: Operand, other: Operand) -> Node:
    out = results_dtype((x, other), _dtype_and_rank)
    return ops.select(condition, _value(g, x, out), _value(g, other, out))


def build_masked_fill(g: Graph, x: Node, mask: Node, value: Operand) -> Node:
    return ops.select(mask, _value(g, value, dtype_of(x)), x)


def build_clamp(g: Graph, x: Node, min: Operand | None, max: Operand | None) -> Node:
    """Maximum then Minimum in the compute dtype, NaN in any operand kept (as torch)."""
    out = results_dtype((x, min, max), _dtype_and_rank)
    compute = to_compute(out)
    result = g.cast(g.cast(x, out), compute)
    for bound, function in ((min, ops.maximum), (max, ops.minimum)):
        if bound is not None:
            limit = g.cast(_value(g, bound, out), compute)
            bounded = function(result, limit)
            if floating(out):
                nan = ops.logical_or(ops.is_nan(result), ops.is_nan(limit))
                bounded = ops.select(nan, ops.add(result, limit), bounded)
            result = bounded
    return finish(g, result, out)


where = ov_kernel("where", build_where)
masked_fill = ov_kernel("masked_fill", build_masked_fill)
clamp = ov_kernel("clamp", build_clamp)
