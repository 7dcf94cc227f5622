"""max_pool2d (MaxPool), avg_pool2d (AveragePool) and adaptive_avg_pool2d (two MatMuls with
averaging matrices built for the input's (H, W), or ReduceMean for a 1 x 1 output).

A 3-D input runs as a batch of one. float16 runs in float32, and int8/int16/int32 max pooling in
float64 (exact); checks.py declines what ONNX cannot say: int64 max pooling (float64 is inexact
there), avg_pool2d's divisor_override and int64.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy

from opcore.extend import ATTRIBUTE, TENSOR, adaptive_bounds, adaptive_output_size
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.kernels._common import F64, compute_float, finish
from opcore_onnxruntime.session import onnx_kernel

__all__ = ["adaptive_avg_pool2d", "avg_pool2d", "max_pool2d"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "max_pool2d",
)

# the dtypes ONNX Runtime's CPU MaxPool takes; others (int16, int32) are pooled in float64
_MAX_POOL_DTYPES = frozenset(numpy.dtype(d) for d in ("float32", "float64", "int8", "uint8"))


def _pooled(g: Graph, x: Value, compute: numpy.dtype, pool: Callable[[Value], Value]) -> Value:
    """pool over a 4-D view of x in ``compute``, back in x's rank and dtype."""
    a = g.cast(x, compute)
    if x.rank == 3:
        a = g.op("Unsqueeze", a, g.ints([0]), rank=4)
    out = pool(a)
    if x.rank == 3:
        out = g.op("Squeeze", out, g.ints([0]), rank=3)
    return finish(g, out, x.dtype)


def build_max_pool2d(
    g: Graph,
    x: Value,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    ceil_mode: bool,
    return_indices: bool = False,  # True is declined by the checker (checks.py)
) -> Value:
    compute = x.dtype if x.dtype in _MAX_POOL_DTYPES else compute_float(x.dtype) if x.dtype.kind == "f" else F64
    steps, pads = list(stride or kernel_size), [*padding, *padding]

    def pool(a: Value) -> Value:
        return g.op("MaxPool", a, kernel_shape=list(kernel_size), strides=steps, pads=pads, dilations=list(dilation),
                    ceil_mode=int(ceil_mode))  # fmt: skip

    return _pooled(g, x, compute, pool)


def build_avg_pool2d(
    g: Graph,
    x: Value,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> Value:
    steps, pads = list(stride or kernel_size), [*padding, *padding]

    def pool(a: Value) -> Value:
        return g.op("AveragePool", a, kernel_shape=list(kernel_size), strides=steps, pads=pads,
                    ceil_mode=int(ceil_mode), count_include_pad=int(count_include_pad))  # fmt: skip

    return _pooled(g, x, compute_float(x.dtype), pool)


def _averaging(size: int, out: int, dtype: numpy.dtype) -> numpy.ndarray:
    """(out, size): row i averages adaptive window i (windows may overlap and differ in size)."""
    matrix = numpy.zeros((out, size), dtype)
    for i, (start, end) in enumerate(adaptive_bounds(size, out)):
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


def build_adaptive_avg_pool2d(g: Graph, x: Value, output_size: tuple[int, ...], input_size: tuple[int, ...]) -> Value:
    compute = compute_float(x.dtype)
    if tuple(output_size) == (1, 1):  # any input size
        return _pooled(g, x, compute, lambda a: g.op("ReduceMean", a, g.ints([2, 3]), keepdims=1))
    # the mean over a rectangle is the mean over its rows of the means over its columns: rows @ x @ columns.T
    rows = g.const(_averaging(input_size[0], output_size[0], compute))
    columns = g.const(_averaging(input_size[1], output_size[1], compute).T)
    return _pooled(g, x, compute, lambda a: g.op("MatMul", rows, g.op("MatMul", a, columns), rank=4))


max_pool2d = onnx_kernel("max_pool2d", build_max_pool2d)
avg_pool2d = onnx_kernel("avg_pool2d", build_avg_pool2d)
_adaptive = onnx_kernel("adaptive_avg_pool2d", build_adaptive_avg_pool2d, names=("x", "output_size", "input_size"),
                        roles=(TENSOR, ATTRIBUTE, ATTRIBUTE))  # fmt: skip


def adaptive_avg_pool2d(x: numpy.ndarray, output_size: tuple[int | None, ...]) -> Any:
    """One model per input (H, W): the window follows from it (None in output_size: that input size)."""
    return _adaptive(x, adaptive_output_size(x.shape, output_size), x.shape[-2:])


def chain_adaptive_avg_pool2d(g: Graph, x: Value, output_size: tuple[int | None, ...]) -> Value:
    """In a partition: (H, W) must be static there (the window follows from it)."""
    sizes = tuple(g.size(x, axis % (x.rank or 1)) for axis in (-2, -1))
    if tuple(output_size) != (1, 1) and None in sizes:
        raise ValueError("adaptive_avg_pool2d's window follows from (H, W), which is dynamic here")
    resolved = adaptive_output_size(sizes, output_size)  # type: ignore[arg-type]
    return build_adaptive_avg_pool2d(g, x, resolved, sizes)  # type: ignore[arg-type]


adaptive_avg_pool2d.chain = chain_adaptive_avg_pool2d  # type: ignore[attr-defined]
