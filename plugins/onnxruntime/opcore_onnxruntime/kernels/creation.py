"""zeros_like, ones_like, full_like: the value (a constant in the result dtype) expanded to x's
shape; zeros, ones, full: expanded to ``size`` (a model without inputs); arange: Range."""

from __future__ import annotations

import math
from typing import Any

import numpy

from opcore.extend import DEFAULT_FLOAT, DType, arange_bounds, arange_dtype, arange_length, fill_dtype
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.kernels._common import I64
from opcore_onnxruntime.session import onnx_kernel

__all__ = ["arange", "full", "full_like", "ones", "ones_like", "zeros", "zeros_like"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "arange",
    "full",
    "full_like",
    "ones",
    "ones_like",
    "zeros",
    "zeros_like",
)


def filled(value: Any, dtype: numpy.dtype) -> numpy.ndarray:
    """A Python number as torch converts it into ``dtype``: floats truncate into integers, negative ints wrap."""
    if dtype.kind in "iu":
        return numpy.asarray(math.trunc(value) if isinstance(value, float) else value, dtype=I64).astype(dtype)
    return numpy.asarray(value).astype(dtype)


def build_full_like(g: Graph, x: Value, fill_value: Any, dtype: str | None, device: str | None = None) -> Value:
    out = x.dtype if dtype is None else DType.parse(dtype).to_numpy()
    shape = g.op("Shape", x, dtype=I64, rank=1)
    return g.op("Expand", g.const(filled(fill_value, out)), shape, rank=x.rank)


def build_zeros_like(g: Graph, x: Value, dtype: str | None, device: str | None = None) -> Value:
    return build_full_like(g, x, 0, dtype)


def build_ones_like(g: Graph, x: Value, dtype: str | None, device: str | None = None) -> Value:
    return build_full_like(g, x, 1, dtype)


def build_full(g: Graph, size: tuple[int | Value, ...], fill_value: Any, dtype: str | None, device: str) -> Value:
    """In a partition the sizes may be computed at run time (0-D values; a dynamic dim's size)."""
    out = fill_dtype(fill_value, dtype).to_numpy()
    return g.op("Expand", g.const(filled(fill_value, out)), g.shape_of(size), rank=len(size))


def build_zeros(g: Graph, size: tuple[int | Value, ...], dtype: str | None, device: str) -> Value:
    return build_full(g, size, 0, dtype or DEFAULT_FLOAT.value, device)


def build_ones(g: Graph, size: tuple[int | Value, ...], dtype: str | None, device: str) -> Value:
    return build_full(g, size, 1, dtype or DEFAULT_FLOAT.value, device)


def build_arange(g: Graph, start: Any, end: Any, step: Any, dtype: str | None, device: str) -> Value:
    """Range in int64 from int(start) by int(step) for an integer dtype (its length the contract's,
    so the limit is start + length * step), in float64 from the bounds for a floating one; then
    cast (integers wrap, as torch's)."""
    if end is None:
        start, end = 0, start
    target = arange_dtype(start, end, step, dtype)
    if target.is_floating:
        bounds = [g.const(float(v), numpy.dtype(numpy.float64)) for v in (start, end, step)]
    else:
        length = arange_length(*arange_bounds(start, end, step, target))
        first, stride = int(start), int(step)
        bounds = [g.const(v, I64) for v in (first, first + length * stride, stride)]
    return g.cast(g.op("Range", *bounds, rank=1), target.to_numpy())


zeros_like = onnx_kernel("zeros_like", build_zeros_like)
ones_like = onnx_kernel("ones_like", build_ones_like)
full_like = onnx_kernel("full_like", build_full_like)
zeros = onnx_kernel("zeros", build_zeros)
ones = onnx_kernel("ones", build_ones)
full = onnx_kernel("full", build_full)
arange = onnx_kernel("arange", build_arange)


def chain_arange(g: Graph, start: Any, end: Any, step: Any, dtype: str | None, device: str) -> Value:
    """arange in a partition: its bounds may be sizes computed at run time (0-D int64 values): Range
    over them in int64 (in float64 for a floating dtype), then cast."""
    if not any(isinstance(v, Value) for v in (start, end, step)):
        return build_arange(g, start, end, step, dtype, device)
    if end is None:
        start, end = 0, start
    # a size is an int: the dtype is what the contract gives for ints in its place
    first, last, stride = (1 if isinstance(v, Value) else v for v in (start, end, step))
    target = arange_dtype(first, last, stride, dtype)
    compute = numpy.dtype(numpy.float64) if target.is_floating else I64
    bounds = [g.cast(v, compute) if isinstance(v, Value) else g.const(v, compute) for v in (start, end, step)]
    return g.cast(g.op("Range", *bounds, rank=1), target.to_numpy())


arange.chain = chain_arange  # type: ignore[attr-defined]
