"""Reductions: sum and mean of floats (ReduceSum/ReduceMean), amax, amin (ReduceMax/ReduceMin,
NaN kept), cumsum of floats (CumSum), argmax (a stable TopK of 1: the first largest, the first NaN
where a slice holds one, as torch). Integer sums give int64, which the CPU plugin computes in
int32, so the checkers decline them; argmax's int64 positions likewise, except in a plan whose
value ranges prove them (positions below the dim's size: opcore.graph.ranges)."""

from __future__ import annotations

from typing import Any

import numpy

from opcore_openvino.compiled import ov_kernel
from opcore_openvino.graph import Graph, Node, dtype_of, floating, ops, rank_of
from opcore_openvino.kernels._common import BOOL, I32

__all__ = ["amax", "amin", "argmax", "cumsum", "mean", "sum"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "amax",
    "amin",
    "argmax",
    "cumsum",
    "mean",
    "sum",
)


def _axes(rank: int, dim: Any) -> list[int]:
    """The dims reduced (the contract checked dim): every dim for None or [], none of a 0-D x."""
    if not rank:
        return []
    return list(range(rank)) if not dim else sorted(d % rank for d in dim)


def _reduce(g: Graph, function: Any, x: Node, dim: Any, keepdim: bool) -> Node:
    axes = _axes(rank_of(x), dim)
    return function(x, g.ints(axes), keepdim) if axes else x


def build_sum(g: Graph, x: Node, dim: Any, keepdim: bool) -> Node:
    return _reduce(g, ops.reduce_sum, x, dim, keepdim)


def build_mean(g: Graph, x: Node, dim: Any, keepdim: bool) -> Node:
    """ReduceSum over the count of reduced elements: ReduceMean gives 0 for an empty dim, torch NaN (0 / 0)."""
    axes = _axes(rank_of(x), dim)
    total = _reduce(g, ops.reduce_sum, x, dim, keepdim)
    if not axes:
        return total
    count = ops.reduce_prod(ops.gather(ops.shape_of(x), g.ints(axes), g.ints([0])), g.ints([0]), False)
    return ops.divide(total, g.cast(count, dtype_of(x)))


def _extremum(g: Graph, function: Any, x: Node, dim: Any, keepdim: bool) -> Node:
    """ReduceMax/Min in a dtype that holds x (bools as int32), NaN where the slice holds one."""
    dtype = dtype_of(x)
    result = _reduce(g, function, g.cast(x, I32) if dtype == BOOL else x, dim, keepdim)
    if floating(dtype) and rank_of(x):
        nan = _reduce(g, ops.reduce_logical_or, ops.is_nan(x), dim, keepdim)
        result = ops.select(nan, g.const(numpy.nan, dtype), result)
    return g.cast(result, dtype)


def build_amax(g: Graph, x: Node, dim: Any, keepdim: bool) -> Node:
    return _extremum(g, ops.reduce_max, x, dim, keepdim)


def build_amin(g: Graph, x: Node, dim: Any, keepdim: bool) -> Node:
    return _extremum(g, ops.reduce_min, x, dim, keepdim)


def build_argmax(g: Graph, x: Node, dim: int | None, keepdim: bool) -> Node:
    """The position of the first largest along dim; None: of x flattened, keepdim giving all-1 dims."""
    rank = rank_of(x)
    value = g.cast(x, I32) if dtype_of(x) == BOOL else x
    if dim is None or not rank:
        index = _argmax(g, ops.reshape(value, g.ints([-1]), False), 0, keepdim=False)
        return ops.reshape(index, g.ints([1] * rank if keepdim else []), False)
    return _argmax(g, value, dim % rank, keepdim)


def _argmax(g: Graph, value: Node, axis: int, keepdim: bool) -> Node:
    """TopK of 1, stable (of equal values, the first), the first NaN where the slice holds one."""

    def first_largest(of: Node) -> Node:
        top = ops.topk(of, g.const(1, I32), axis, "max", "value", "i64", stable=True)
        index = ops.convert(top.output(1), "i64")  # a node of the positions alone (as pooling's)
        return index if keepdim else ops.squeeze(index, g.ints([axis]))

    index = first_largest(value)
    if not floating(dtype_of(value)):
        return index
    nan = ops.is_nan(value)
    any_nan = ops.reduce_logical_or(nan, g.ints([axis]), keepdim)
    return ops.select(any_nan, first_largest(g.cast(nan, I32)), index)


def build_cumsum(g: Graph, x: Node, dim: int, dtype: str | None) -> Node:
    """CumSum of a float32/float16 result (the checker declines the rest)."""
    out = dtype_of(x) if dtype is None else numpy.dtype(dtype)
    value = g.cast(x, out)
    rank = rank_of(x)
    return ops.cumsum(value, g.const(dim % rank, I32)) if rank else value


sum = ov_kernel("sum", build_sum)
mean = ov_kernel("mean", build_mean)
amax = ov_kernel("amax", build_amax)
amin = ov_kernel("amin", build_amin)
argmax = ov_kernel("argmax", build_argmax)
cumsum = ov_kernel("cumsum", build_cumsum)
