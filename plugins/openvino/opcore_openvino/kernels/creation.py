"""zeros_like, ones_like, full_like: the value (a constant in the result dtype) broadcast to x's
shape; zeros, ones, full: broadcast to ``size`` (a model without inputs); arange: Range. The
checkers decline 64-bit and bfloat16 results, and integer aranges whose values torch wraps."""

from __future__ import annotations

import math
from typing import Any

import numpy

from opcore.extend import DType, arange_bounds, arange_dtype, arange_length, fill_dtype
from opcore_openvino.compiled import ov_kernel
from opcore_openvino.graph import Graph, Node, constant, dtype_of, ops

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
        return numpy.asarray(math.trunc(value) if isinstance(value, float) else value, dtype=numpy.int64).astype(dtype)
    return numpy.asarray(value).astype(dtype)


def build_full_like(g: Graph, x: Node, fill_value: Any, dtype: str | None, device: str | None = None) -> Node:
    out = dtype_of(x) if dtype is None else DType.parse(dtype).to_numpy()
    return ops.broadcast(constant(filled(fill_value, out)), ops.shape_of(x))


def build_zeros_like(g: Graph, x: Node, dtype: str | None, device: str | None = None) -> Node:
    return build_full_like(g, x, 0, dtype)


def build_ones_like(g: Graph, x: Node, dtype: str | None, device: str | None = None) -> Node:
    return build_full_like(g, x, 1, dtype)


def build_full(g: Graph, size: tuple[int | Node, ...], fill_value: Any, dtype: str | None, device: str) -> Node:
    """In a partition the sizes may be computed at run time (0-D nodes; a dynamic dim's size)."""
    out = fill_dtype(fill_value, dtype).to_numpy()
    return ops.broadcast(constant(filled(fill_value, out)), g.shape_of(size))


def build_zeros(g: Graph, size: tuple[int | Node, ...], dtype: str | None, device: str) -> Node:
    return build_full(g, size, 0, dtype or "float32", device)


def build_ones(g: Graph, size: tuple[int | Node, ...], dtype: str | None, device: str) -> Node:
    return build_full(g, size, 1, dtype or "float32", device)


def build_arange(g: Graph, start: Any, end: Any, step: Any, dtype: str | None, device: str) -> Node:
    """Range from the bounds for a floating dtype; for an integer one from int(start) by
    int(step) with the contract's length (the checker made sure the values fit the dtype)."""
    if end is None:
        start, end = 0, start
    target = arange_dtype(start, end, step, dtype)
    out = target.to_numpy()
    if target.is_floating:
        bounds = [numpy.asarray(float(v), numpy.float32) for v in (start, end, step)]
        return g.cast(ops.range(*map(ops.constant, bounds), output_type="f32"), out)
    length = arange_length(*arange_bounds(start, end, step, target))
    first, stride = int(start), int(step)
    bounds = [numpy.asarray(v, numpy.int32) for v in (first, first + length * stride, stride)]
    return g.cast(ops.range(*map(ops.constant, bounds), output_type="i32"), out)


zeros_like = ov_kernel("zeros_like", build_zeros_like)
ones_like = ov_kernel("ones_like", build_ones_like)
full_like = ov_kernel("full_like", build_full_like)
zeros = ov_kernel("zeros", build_zeros)
ones = ov_kernel("ones", build_ones)
full = ov_kernel("full", build_full)
arange = ov_kernel("arange", build_arange)


def chain_arange(g: Graph, start: Any, end: Any, step: Any, dtype: str | None, device: str) -> Node:
    """arange in a partition: its bounds may be sizes computed at run time (0-D int64 nodes): Range
    over them in int32 (the plan proved its values fit: the CPU plugin computes int64 in int32; in
    float32 for a floating dtype), then converted."""
    if all(_number(v) or v is None for v in (start, end, step)):
        return build_arange(g, start, end, step, dtype, device)
    if end is None:
        start, end = 0, start
    first, last, stride = (v if _number(v) else 1 for v in (start, end, step))
    target = arange_dtype(first, last, stride, dtype)
    compute = numpy.dtype(numpy.float32) if target.is_floating else numpy.dtype(numpy.int32)
    bounds = [ops.constant(numpy.asarray(v, compute)) if _number(v) else g.cast(v, compute) for v in (start, end, step)]
    kind = "f32" if target.is_floating else "i32"
    return g.cast(ops.range(*bounds, output_type=kind), target.to_numpy())


def _number(value: Any) -> bool:
    return isinstance(value, (int, float, bool, numpy.number))


arange.chain = chain_arange  # type: ignore[attr-defined]
