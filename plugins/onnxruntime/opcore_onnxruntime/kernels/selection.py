"""where, masked_fill and clamp (Where, Max, Min), exact in every dtype: values are picked in a
dtype that holds them (integers in int64, float16 in float32)."""

from __future__ import annotations

import builtins

import numpy

from opcore.extend import results_dtype
from opcore_onnxruntime.graph import Graph, Scalar, Value
from opcore_onnxruntime.kernels._common import BOOL, I64, finish, operand, to_compute
from opcore_onnxruntime.session import onnx_kernel

__all__ = ["clamp", "masked_fill", "where"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "clamp",
    "masked_fill",
    "where",
)

Operand = Value | Scalar


def _dtype_and_rank(value: Value) -> tuple[numpy.dtype, int]:
    return value.dtype, value.rank or 0


def _picked(g: Graph, value: Operand, out: numpy.dtype) -> Value:
    """``value`` rounded to the result dtype ``out``, then in a dtype Where/Max/Min take (bools as int64)."""
    return g.cast(operand(g, value, out), to_compute(out) if out != BOOL else I64)


def _rank(*values: Value) -> int:
    return builtins.max((v.rank or 0) for v in values)


def _where(g: Graph, condition: Value, a: Value, b: Value) -> Value:
    """Where with the picked values' dtype and the broadcast rank (not the condition's)."""
    rank = _rank(condition, a, b)
    return g.op("Where", condition, a, b, dtype=a.dtype, rank=rank)


def build_where(g: Graph, condition: Value, x: Operand, other: Operand) -> Value:
    out = results_dtype((x, other), _dtype_and_rank)
    return finish(g, _where(g, condition, _picked(g, x, out), _picked(g, other, out)), out)


def build_masked_fill(g: Graph, x: Value, mask: Value, value: Operand) -> Value:
    fill = _picked(g, value, x.dtype)
    return finish(g, _where(g, mask, fill, _picked(g, x, x.dtype)), x.dtype)


def build_clamp(g: Graph, x: Value, min: Operand | None, max: Operand | None) -> Value:
    """Max then Min, NaN kept: Max/Min of a NaN operand are not NaN in every runtime kernel."""
    out = results_dtype((x, min, max), _dtype_and_rank)
    result = _picked(g, x, out)
    for bound, node in ((min, "Max"), (max, "Min")):
        if bound is not None:
            limit = _picked(g, bound, out)
            rank = _rank(result, limit)
            bounded = g.op(node, result, limit, rank=rank)
            if out.kind == "f":
                nan = g.op("Or", g.op("IsNaN", result, dtype=BOOL), g.op("IsNaN", limit, dtype=BOOL), dtype=BOOL)
                bounded = _where(g, nan, g.op("Add", result, limit, rank=rank), bounded)
            result = bounded
    return finish(g, result, out)


where = onnx_kernel("where", build_where)
masked_fill = onnx_kernel("masked_fill", build_masked_fill)
clamp = onnx_kernel("clamp", build_clamp)
