"""max_pool2d (MaxPool, opset14's "ceil_torch" rounding), avg_pool2d (AvgPool) and
adaptive_avg_pool2d (AdaptiveAvgPool).

A 3-D input runs as a batch of one. int8, uint8 and int16 max pooling runs in float32 (exact);
checks.py declines the rest (64-bit dtypes, int32 max pooling, avg_pool2d's divisor_override).
An empty batch (which the CPU plugin fails to pool) gets its empty result from the contract's meta.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy
import openvino.opset8 as ops8
import openvino.opset14 as ops14

from opcore_openvino.compiled import ov_kernel
from opcore_openvino.graph import Graph, Node, dtype_of, floating, ops, rank_of

__all__ = ["adaptive_avg_pool2d", "avg_pool2d", "max_pool2d"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "max_pool2d",
)

_F32 = numpy.dtype(numpy.float32)


def _pooled(g: Graph, x: Node, pool: Callable[[Node], Node]) -> Node:
    """pool over a 4-D view of x (integers in float32), back in x's rank and dtype."""
    dtype = dtype_of(x)
    a = x if floating(dtype) else g.cast(x, _F32)
    batched = rank_of(x) == 4
    if not batched:
        a = ops.unsqueeze(a, g.ints([0]))
    out = pool(a)
    if not batched:
        out = ops.squeeze(out, g.ints([0]))
    return g.cast(out, dtype)


def _rounding(ceil_mode: bool) -> str:
    # "ceil_torch": ceil, but a last window must start inside the input or its left padding (torch's rule)
    return "ceil_torch" if ceil_mode else "floor"


def build_max_pool2d(
    g: Graph,
    x: Node,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    ceil_mode: bool,
    return_indices: bool = False,  # True is declined by the checker (checks.py)
) -> Node:
    def max_of(a: Node) -> Node:
        pooled = ops14.max_pool(a, list(stride or kernel_size), list(dilation), list(padding), list(padding),
                                list(kernel_size), _rounding(ceil_mode))  # fmt: skip
        # MaxPool also gives the indices: a Convert to the same type makes the values a node of their own
        return ops.convert(pooled.output(0), pooled.get_output_element_type(0))

    def pool(a: Node) -> Node:
        pooled = max_of(a)
        if not floating(dtype_of(x)):
            return pooled
        # the CPU plugin's MaxPool skips NaN and gives the lowest float for a window of -inf; torch
        # gives NaN and -inf: two more poolings of masks say where
        dtype = dtype_of(a)
        any_nan = ops.greater(max_of(g.cast(ops.is_nan(a), dtype)), g.const(0.0, dtype))
        above = ops.not_equal(a, g.const(-numpy.inf, dtype))
        any_above = ops.greater(max_of(g.cast(above, dtype)), g.const(0.0, dtype))
        lowest = ops.select(any_above, pooled, g.const(-numpy.inf, dtype))
        return ops.select(any_nan, g.const(numpy.nan, dtype), lowest)

    return _pooled(g, x, pool)


def build_avg_pool2d(
    g: Graph,
    x: Node,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> Node:
    steps, pads, kernel = list(stride or kernel_size), list(padding), list(kernel_size)
    exclude = not count_include_pad
    return _pooled(g, x, lambda a: ops14.avg_pool(a, steps, pads, pads, kernel, exclude, _rounding(ceil_mode)))


def build_adaptive_avg_pool2d(g: Graph, x: Node, output_size: tuple[int | None, ...]) -> Node:
    """None in output_size: that input size, read from x's shape (static or not)."""

    def sizes(a: Node) -> Node:
        if None not in output_size:
            return g.ints([int(out) for out in output_size if out is not None])
        parts = [g.dims(a, 2 + i, 3 + i) if out is None else g.ints([out]) for i, out in enumerate(output_size)]
        return ops.concat(parts, 0)

    return _pooled(g, x, lambda a: ops8.adaptive_avg_pool(a, sizes(a)))


# the CPU plugin fails pooling an empty batch: an empty result is made from the contract's meta
max_pool2d = ov_kernel("max_pool2d", build_max_pool2d, empty=True)
avg_pool2d = ov_kernel("avg_pool2d", build_avg_pool2d, empty=True)
adaptive_avg_pool2d = ov_kernel("adaptive_avg_pool2d", build_adaptive_avg_pool2d)
