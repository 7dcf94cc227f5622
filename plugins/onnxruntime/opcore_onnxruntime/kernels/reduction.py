"""Reductions: sum, mean, amax, amin (ReduceSum/Mean/Max/Min over an axes input), argmax (ArgMax)
and cumsum (CumSum), with torch's result dtypes (integers and bools sum to int64)."""

from __future__ import annotations

from typing import Any

import numpy

from opcore.extend import DType, Unsupported
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.kernels._common import BOOL, F16, F32, I32, I64, compute_float, finish, to_compute
from opcore_onnxruntime.session import onnx_kernel

__all__ = ["amax", "amin", "argmax", "check_sum", "cumsum", "mean", "sum"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "amax",
    "amin",
    "argmax",
    "cumsum",
    "mean",
    "sum",
)

I16 = numpy.dtype(numpy.int16)


def _axes(rank: int, dim: Any) -> list[int]:
    """The dims reduced (the contract checked dim): every dim for None or [], none of a 0-D x."""
    if not rank:
        return []
    return list(range(rank)) if not dim else sorted(d % rank for d in dim)


def _reduce(g: Graph, node: str, x: Value, dim: Any, keepdim: bool, compute: numpy.dtype) -> Value:
    rank = x.rank or 0
    axes = _axes(rank, dim)
    value = g.cast(x, compute)
    if not axes:  # a 0-D x: nothing to reduce
        return value
    return g.op(node, value, g.ints(axes), keepdims=int(keepdim), rank=rank if keepdim else rank - len(axes))


def build_sum(g: Graph, x: Value, dim: Any, keepdim: bool) -> Value:
    out = x.dtype if x.dtype.kind == "f" else I64
    return finish(g, _reduce(g, "ReduceSum", x, dim, keepdim, to_compute(out)), out)


def build_mean(g: Graph, x: Value, dim: Any, keepdim: bool) -> Value:
    """ReduceSum over the count of reduced elements: ReduceMean gives 0 for an empty dim, torch NaN (0 / 0)."""
    compute = compute_float(x.dtype)
    axes = _axes(x.rank or 0, dim)
    total = _reduce(g, "ReduceSum", x, dim, keepdim, compute)
    if not axes:
        return finish(g, total, x.dtype)
    sizes = g.op("Gather", g.op("Shape", x, dtype=I64, rank=1), g.ints(axes), axis=0)
    count = g.cast(g.op("ReduceProd", sizes, keepdims=0, rank=0), compute)
    return finish(g, g.op("Div", total, count), x.dtype)


def _exact(dtype: numpy.dtype) -> numpy.dtype:
    """A dtype ReduceMax/Min and ArgMax take that holds ``dtype`` exactly."""
    if dtype == F16:
        return F32
    return I32 if dtype in (I16, BOOL) else dtype


def _any_nan(g: Graph, x: Value, dim: Any, keepdim: bool) -> Value:
    """Whether each reduced slice holds a NaN (bool, the reduced shape)."""
    return g.cast(_reduce(g, "ReduceMax", g.cast(g.op("IsNaN", x, dtype=BOOL), I32), dim, keepdim, I32), BOOL)


def _extremum(g: Graph, node: str, x: Value, dim: Any, keepdim: bool) -> Value:
    """ReduceMax/Min, with NaN where the slice holds one (as torch; onnxruntime skips NaN)."""
    result = _reduce(g, node, x, dim, keepdim, _exact(x.dtype))
    if x.dtype.kind == "f" and x.rank:
        nan = g.const(numpy.asarray(numpy.nan, dtype=result.dtype))
        result = g.op("Where", _any_nan(g, x, dim, keepdim), nan, result, dtype=result.dtype, rank=result.rank)
    return finish(g, result, x.dtype)


def build_amax(g: Graph, x: Value, dim: Any, keepdim: bool) -> Value:
    return _extremum(g, "ReduceMax", x, dim, keepdim)


def build_amin(g: Graph, x: Value, dim: Any, keepdim: bool) -> Value:
    return _extremum(g, "ReduceMin", x, dim, keepdim)


def build_argmax(g: Graph, x: Value, dim: int | None, keepdim: bool) -> Value:
    """ArgMax along dim (the first largest); None: of x flattened, keepdim giving all-1 dims."""
    rank = x.rank or 0
    value = g.cast(x, _exact(x.dtype))
    if dim is None or not rank:
        flat = g.op("Reshape", value, g.ints([-1]), rank=1)
        index = _argmax(g, flat, 0, False, 0)
        return g.op("Reshape", index, g.ints([1] * rank), rank=rank) if keepdim and rank else index
    return _argmax(g, value, dim % rank, keepdim, rank if keepdim else rank - 1)


def _argmax(g: Graph, value: Value, axis: int, keepdim: bool, rank: int) -> Value:
    """ArgMax, but the first NaN where the slice holds one (as torch; onnxruntime's skips NaN)."""
    index = g.op("ArgMax", value, axis=axis, keepdims=int(keepdim), dtype=I64, rank=rank)
    if value.dtype.kind != "f":
        return index
    nan = g.cast(g.op("IsNaN", value, dtype=BOOL), I32)
    first_nan = g.op("ArgMax", nan, axis=axis, keepdims=int(keepdim), dtype=I64, rank=rank)
    any_nan = g.cast(g.op("ReduceMax", nan, g.ints([axis]), keepdims=int(keepdim), rank=rank), BOOL)
    return g.op("Where", any_nan, first_nan, index, dtype=I64, rank=rank)


def build_cumsum(g: Graph, x: Value, dim: int, dtype: str | None) -> Value:
    """CumSum in int64 or float32/float64, after converting x to dtype (if given)."""
    out = (x.dtype if x.dtype.kind == "f" else I64) if dtype is None else DType.parse(dtype).to_numpy()
    start = g.cast(g.cast(x, I64), out) if x.dtype.kind == "f" and out.kind in "iu" else g.cast(x, out)
    value = g.cast(start, to_compute(out))
    rank = x.rank or 0
    if not rank:
        return finish(g, value, out)
    axis = g.const(numpy.asarray(dim % rank, dtype=I64))
    return finish(g, g.op("CumSum", value, axis), out)


def check_sum(x: numpy.ndarray, dim: Any, keepdim: bool) -> None:
    """onnxruntime's integer ReduceSum saturates where torch's int64 sum wraps: refuse a sum that could overflow."""
    if x.dtype.kind in "iu" and x.size and int(numpy.abs(x).max()) * x.size >= 2**63:
        raise Unsupported("the int64 sum could overflow: ONNX Runtime's ReduceSum saturates where torch wraps")


sum = onnx_kernel("sum", build_sum, check=check_sum)
mean = onnx_kernel("mean", build_mean)
amax = onnx_kernel("amax", build_amax)
amin = onnx_kernel("amin", build_amin)
argmax = onnx_kernel("argmax", build_argmax)
cumsum = onnx_kernel("cumsum", build_cumsum)
