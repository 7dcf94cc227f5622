"""softmax, log_softmax, layer_norm (LayerNormalization), rms_norm (RMSNormalization from opset 23,
else its formula), batch_norm (BatchNormalization, ones / zeros for an absent weight / bias) and
group_norm (its formula: GroupNormalization requires weight and bias).
float16 runs in float32 inside; statistics of float64 inputs stay in float64.
"""

from __future__ import annotations

import numpy

from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.kernels._common import F32, F64, compute_float, finish, onnx_stash
from opcore_onnxruntime.session import onnx_kernel

__all__ = ["batch_norm", "group_norm", "layer_norm", "log_softmax", "rms_norm", "softmax"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "batch_norm",
    "group_norm",
    "layer_norm",
    "log_softmax",
    "rms_norm",
    "softmax",
)


def _softmax(node: str):
    def build(g: Graph, x: Value, dim: int, dtype: str | None = None) -> Value:
        if dtype is not None:  # torch's dtype=: x cast to it first
            x = g.cast(x, numpy.dtype(dtype))
        compute = compute_float(x.dtype)
        a = g.cast(x, compute)
        if x.rank == 0:  # ONNX wants at least one dimension: softmax of a scalar over a (1,) view
            a = g.op("Unsqueeze", a, g.ints([0]), rank=1)
            return finish(g, g.op("Squeeze", g.op(node, a, axis=0), g.ints([0]), rank=0), x.dtype)
        if node == "LogSoftmax" and compute == F64:
            # onnxruntime's float64 LogSoftmax gives finite values beside a NaN; torch's whole row is NaN
            shifted = g.op("Sub", a, g.op("ReduceMax", a, g.ints([dim]), keepdims=1))
            total = g.op("ReduceSum", g.op("Exp", shifted), g.ints([dim]), keepdims=1)
            return g.op("Sub", shifted, g.op("Log", total))
        return finish(g, g.op(node, a, axis=dim), x.dtype)

    build.__name__ = f"build_{node.lower()}"
    return build


def _scale(g: Graph, parameter: Value | None, normalized_shape: tuple[int, ...], dtype: numpy.dtype) -> Value:
    """The parameter in the compute dtype, or ones (ONNX requires the scale input)."""
    if parameter is None:
        return g.const(numpy.ones(normalized_shape, dtype=dtype))
    return g.cast(parameter, dtype)


def build_layer_norm(
    g: Graph,
    x: Value,
    normalized_shape: tuple[int, ...],
    weight: Value | None,
    bias: Value | None,
    eps: float,
) -> Value:
    compute = compute_float(x.dtype)
    scale = _scale(g, weight, normalized_shape, compute)
    shift = g.cast(bias, compute) if bias is not None else None
    out = g.op(
        "LayerNormalization",
        g.cast(x, compute),
        scale,
        shift,
        axis=-len(normalized_shape),
        epsilon=float(eps),
        stash_type=onnx_stash(compute),
    )
    return finish(g, out, x.dtype)


def build_rms_norm(
    g: Graph, x: Value, normalized_shape: tuple[int, ...], weight: Value | None, eps: float | None
) -> Value:
    compute = compute_float(x.dtype)
    if eps is None:  # torch takes the epsilon of the type it computes in (float32 for float16)
        eps = float(numpy.finfo(F64 if compute == F64 else F32).eps)
    a = g.cast(x, compute)
    scale = _scale(g, weight, normalized_shape, compute)
    count = len(normalized_shape)
    if g.opset >= 23:
        out = g.op("RMSNormalization", a, scale, axis=-count, epsilon=float(eps), stash_type=onnx_stash(compute))
        return finish(g, out, x.dtype)
    axes = g.ints(range(-count, 0))
    mean_square = g.op("ReduceMean", g.op("Mul", a, a), axes, keepdims=1)
    root = g.op("Sqrt", g.op("Add", mean_square, g.const(numpy.asarray(eps, dtype=compute))))
    return finish(g, g.op("Mul", g.op("Div", a, root), scale), x.dtype)


def _per_channel(g: Graph, parameter: Value, compute: numpy.dtype, rank: int) -> Value:
    """A (C,) parameter as (C, 1, ...): one value per channel (dim 1) of a rank-``rank`` x."""
    value = g.cast(parameter, compute)
    trailing = list(range(1, rank - 1))
    return g.op("Unsqueeze", value, g.ints(trailing), rank=rank - 1) if trailing else value


def build_group_norm(
    g: Graph, x: Value, num_groups: int, weight: Value | None, bias: Value | None, eps: float
) -> Value:
    compute = compute_float(x.dtype)
    rank = x.rank or 0
    grouped = g.op("Reshape", g.cast(x, compute), g.ints([0, num_groups, -1]), rank=3)
    axes = g.ints([2])
    centered = g.op("Sub", grouped, g.op("ReduceMean", grouped, axes, keepdims=1))
    variance = g.op("ReduceMean", g.op("Mul", centered, centered), axes, keepdims=1)
    scale = g.op("Sqrt", g.op("Add", variance, g.const(numpy.asarray(eps, dtype=compute))))
    out = g.op("Reshape", g.op("Div", centered, scale), g.shape(x), rank=rank)
    if weight is not None:
        out = g.op("Mul", out, _per_channel(g, weight, compute, rank))
    if bias is not None:
        out = g.op("Add", out, _per_channel(g, bias, compute, rank))
    return finish(g, out, x.dtype)


def build_batch_norm(
    g: Graph,
    x: Value,
    running_mean: Value,
    running_var: Value,
    weight: Value | None,
    bias: Value | None,
    training: bool,
    momentum: float,
    eps: float,
) -> Value:
    # BatchNormalization, not its formula: ONNX Runtime folds a BatchNormalization with constant
    # statistics into the Conv before it (ConvBNFusion), which then fuses with the Add and Relu after
    # it; a Sub/Div/Mul/Add formula stays four passes over the activations (docs/benchmarks.md).
    # The contract is inference only (training False), which is what BatchNormalization computes.
    compute = compute_float(x.dtype)
    mean, variance = g.cast(running_mean, compute), g.cast(running_var, compute)
    # ONNX requires scale and bias: ones / zeros of the statistics' shape (C,) where they are absent
    scale = (
        g.cast(weight, compute)
        if weight is not None
        else g.op("Expand", g.const(numpy.ones(1, compute)), g.shape(mean))
    )
    shift = (
        g.cast(bias, compute) if bias is not None else g.op("Expand", g.const(numpy.zeros(1, compute)), g.shape(mean))
    )
    out = g.op("BatchNormalization", g.cast(x, compute), scale, shift, mean, variance, epsilon=float(eps))
    return finish(g, out, x.dtype)


softmax = onnx_kernel("softmax", _softmax("Softmax"))
log_softmax = onnx_kernel("log_softmax", _softmax("LogSoftmax"))
layer_norm = onnx_kernel("layer_norm", build_layer_norm)
rms_norm = onnx_kernel("rms_norm", build_rms_norm)
batch_norm = onnx_kernel("batch_norm", build_batch_norm)
group_norm = onnx_kernel("group_norm", build_group_norm)
