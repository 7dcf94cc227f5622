"""softmax, log_softmax, layer_norm (MVN, then scale and shift), rms_norm, batch_norm and group_norm
(group_norm: MVN over each group of channels; the others their formulas)."""

from __future__ import annotations

from typing import Any

import numpy

from opcore_openvino.compiled import ov_kernel
from opcore_openvino.graph import Graph, Node, dtype_of, ops, rank_of
from opcore_openvino.kernels._common import F32, finish

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


def _softmax(function: Any) -> Any:
    def build(g: Graph, x: Node, dim: int, dtype: str | None = None) -> Node:
        if dtype is not None:  # torch's dtype=: x cast to it first (the checker leaves float64 to others)
            x = g.cast(x, numpy.dtype(dtype))
        if rank_of(x) == 0:  # softmax of a scalar over a (1,) view
            return ops.squeeze(function(ops.unsqueeze(x, g.ints([0])), 0), g.ints([0]))
        out = function(x, dim)
        # torch gives a whole row of NaN when the row holds a NaN or +inf (x - max is NaN there);
        # the CPU plugin's Softmax gives finite values beside them
        poisoned = ops.logical_or(ops.is_nan(x), ops.is_inf(x, {"detect_negative": False}))
        row = ops.reduce_logical_or(poisoned, g.ints([dim]), True)
        return ops.select(row, g.const(numpy.nan, dtype_of(x)), out)

    build.__name__ = f"build_{function.__name__}"
    return build


def _compute(g: Graph, x: Node, *parameters: Node | None) -> numpy.dtype:
    """float32 when a parameter's dtype differs from x's (a float16 input with float32 weights)."""
    dtype = dtype_of(x)
    if any(p is not None and dtype_of(p) != dtype for p in parameters):
        return F32
    return dtype


def build_layer_norm(
    g: Graph, x: Node, normalized_shape: tuple[int, ...], weight: Node | None, bias: Node | None, eps: float
) -> Node:
    compute = _compute(g, x, weight, bias)
    axes = g.ints(range(-len(normalized_shape), 0))
    out = ops.mvn(g.cast(x, compute), axes, True, float(eps), "inside_sqrt")
    if weight is not None:
        out = ops.multiply(out, g.cast(weight, compute))
    if bias is not None:
        out = ops.add(out, g.cast(bias, compute))
    return finish(g, out, dtype_of(x))


def build_rms_norm(
    g: Graph, x: Node, normalized_shape: tuple[int, ...], weight: Node | None, eps: float | None
) -> Node:
    compute = _compute(g, x, weight)
    if eps is None:  # torch takes the epsilon of float32 for float16 and float32
        eps = float(numpy.finfo(numpy.float32).eps)
    a = g.cast(x, compute)
    axes = g.ints(range(-len(normalized_shape), 0))
    mean_square = ops.reduce_mean(ops.multiply(a, a), axes, True)
    out = ops.divide(a, ops.sqrt(ops.add(mean_square, g.const(eps, compute))))
    if weight is not None:
        out = ops.multiply(out, g.cast(weight, compute))
    return finish(g, out, dtype_of(x))


def _per_channel(g: Graph, parameter: Node, compute: numpy.dtype, rank: int) -> Node:
    """A (C,) parameter as (C, 1, ...): one value per channel (dim 1) of a rank-``rank`` x."""
    value = g.cast(parameter, compute)
    trailing = list(range(1, rank - 1))
    return ops.unsqueeze(value, g.ints(trailing)) if trailing else value


def build_group_norm(g: Graph, x: Node, num_groups: int, weight: Node | None, bias: Node | None, eps: float) -> Node:
    compute = _compute(g, x, weight, bias)
    rank = rank_of(x)
    grouped = ops.reshape(g.cast(x, compute), g.ints([0, num_groups, -1]), True)
    out = ops.reshape(ops.mvn(grouped, g.ints([2]), True, float(eps), "inside_sqrt"), ops.shape_of(x), False)
    if weight is not None:
        out = ops.multiply(out, _per_channel(g, weight, compute, rank))
    if bias is not None:
        out = ops.add(out, _per_channel(g, bias, compute, rank))
    return finish(g, out, dtype_of(x))


def build_batch_norm(
    g: Graph,
    x: Node,
    running_mean: Node,
    running_var: Node,
    weight: Node | None,
    bias: Node | None,
    training: bool,
    momentum: float,
    eps: float,
) -> Node:
    compute = _compute(g, x, running_mean, running_var, weight, bias)

    def channel(parameter: Node) -> Node:
        return _per_channel(g, parameter, compute, rank_of(x))

    scale = ops.sqrt(ops.add(channel(running_var), g.const(eps, compute)))
    out = ops.divide(ops.subtract(g.cast(x, compute), channel(running_mean)), scale)
    if weight is not None:
        out = ops.multiply(out, channel(weight))
    if bias is not None:
        out = ops.add(out, channel(bias))
    return finish(g, out, dtype_of(x))


softmax = ov_kernel("softmax", _softmax(ops.softmax))
log_softmax = ov_kernel("log_softmax", _softmax(ops.log_softmax))
layer_norm = ov_kernel("layer_norm", build_layer_norm)
rms_norm = ov_kernel("rms_norm", build_rms_norm)
batch_norm = ov_kernel("batch_norm", build_batch_norm)
# an empty x: the (N, groups, -1) view is ambiguous to OpenVINO's Reshape; its result is empty too
group_norm = ov_kernel("group_norm", build_group_norm, empty=True)
