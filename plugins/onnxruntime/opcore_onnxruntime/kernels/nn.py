"""embedding (Gather), conv1d and conv2d (Conv) and scaled_dot_product_attention (MatMul, Softmax, MatMul)."""

from __future__ import annotations

from typing import Any

import numpy

from opcore.extend import Padding
from opcore.extend import check_embedding_indices as check_embedding
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.kernels._common import BOOL, compute_float, finish
from opcore_onnxruntime.session import onnx_kernel

__all__ = ["check_embedding", "conv1d", "conv2d", "embedding", "scaled_dot_product_attention"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "conv1d",
    "conv2d",
    "embedding",
    "scaled_dot_product_attention",
)


def build_embedding(g: Graph, input: Value, weight: Value, padding_idx: int | None) -> Value:
    # padding_idx only changes gradients
    return g.op("Gather", weight, input, axis=0, rank=input.ndim + 1)


def build_conv(
    g: Graph,
    x: Value,
    weight: Value,
    bias: Value | None,
    stride: tuple[int, ...],
    padding: Padding,
    dilation: tuple[int, ...],
    groups: int,
) -> Value:
    """Conv over the last len(stride) dims of a batched or unbatched x. Padding "same" (stride 1,
    the contract's rule): ONNX's auto_pad SAME_UPPER, which pads as torch does (k - 1 in all, the
    odd one at the end) but refuses dilations; with a dilation, an explicit Pad of d * (k - 1)
    split the same way, computed from the weight's shape."""
    spatial = len(stride)
    compute = compute_float(x.dtype)
    a = g.cast(x, compute)
    batched = x.rank == spatial + 2
    if not batched:
        a = g.op("Unsqueeze", a, g.ints([0]), rank=spatial + 2)
    attributes: dict[str, Any] = {"strides": list(stride), "dilations": list(dilation), "group": groups}
    if padding == "same" and all(d == 1 for d in dilation):
        attributes["auto_pad"] = "SAME_UPPER"
    elif padding == "same":
        total = g.op("Mul", g.op("Sub", g.shape(weight, 2), g.ints([1])), g.ints(list(dilation)))
        before = g.op("Div", total, g.ints([2]))
        zeros = g.ints([0, 0])
        pads = g.op("Concat", zeros, before, zeros, g.op("Sub", total, before), axis=0)
        a = g.op("Pad", a, pads, rank=spatial + 2)
        attributes["pads"] = [0] * (2 * spatial)
    else:
        sizes = (0,) * spatial if isinstance(padding, str) else padding  # "valid": none
        attributes["pads"] = [*sizes, *sizes]
    out = g.op("Conv", a, g.cast(weight, compute), g.cast(bias, compute) if bias is not None else None, **attributes)
    if not batched:
        out = g.op("Squeeze", out, g.ints([0]), rank=spatial + 1)
    return finish(g, out, x.dtype)


def _grouped(g: Graph, x: Value, query: Value, kv: Value) -> Value:
    """(..., Hq, L, X) -> (..., Hkv, G * L, X), G = Hq / Hkv: the query heads that share a key/value
    head side by side (head h reads key/value head h // G), so that one MatMul against the key or
    value's own Hkv heads serves them all: the cache is read as it is, never repeated per head."""
    kv_heads = g.shape(kv, -3, -2)
    rows = g.op("Mul", g.op("Div", g.shape(query, -3, -2), kv_heads), g.shape(x, -2, -1))
    target = g.op("Concat", g.shape(x, 0, -3), kv_heads, rows, g.shape(x, -1), axis=0)
    return g.op("Reshape", x, target, rank=x.rank)


def _ungrouped(g: Graph, x: Value, query: Value) -> Value:
    """(..., Hkv, G * L, X) -> (..., Hq, L, X), ``_grouped``'s inverse (Hq and L: query's; the
    batch dims x's own, where the query's broadcast against the key's)."""
    target = g.op("Concat", g.shape(x, 0, -3), g.shape(query, -3, -1), g.shape(x, -1), axis=0)
    return g.op("Reshape", x, target, rank=x.rank)


def build_sdpa(
    g: Graph,
    query: Value,
    key: Value,
    value: Value,
    attn_mask: Value | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> Value:
    compute = compute_float(query.dtype)
    q, k, v = (g.cast(t, compute) for t in (query, key, value))
    if scale is None:  # 1 / sqrt(E), E read at run time (an empty E gives zero scores whatever the scale)
        embed = g.cast(g.shape(q, -1), compute)
        one = g.const(numpy.asarray([1], dtype=compute))
        embed = g.op("Max", embed, one)
        factor = g.op("Reciprocal", g.op("Sqrt", embed))
    else:
        factor = g.const(numpy.asarray([scale], dtype=compute))
    perm = list(range(k.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    scaled = g.op("Mul", q, factor)
    if enable_gqa:  # (..., Hkv, G * L, S) -> (..., Hq, L, S): masks broadcast against the query's heads
        scores = g.op("MatMul", _grouped(g, scaled, q, k), g.op("Transpose", k, perm=perm), rank=q.rank)
        scores = _ungrouped(g, scores, q)
    else:
        scores = g.op("MatMul", scaled, g.op("Transpose", k, perm=perm), rank=None)
    minus_inf = g.const(numpy.asarray(-numpy.inf, dtype=compute))
    masked = is_causal or attn_mask is not None
    if is_causal:
        size = g.op("Concat", g.shape(q, -2, -1), g.shape(k, -2, -1), axis=0)
        ones = g.op("Expand", g.const(numpy.asarray(1, dtype=numpy.int64)), size, rank=2)
        keep = g.cast(g.op("Trilu", ones, None, upper=0), BOOL)
        scores = g.op("Where", keep, scores, minus_inf, dtype=compute)
    elif attn_mask is not None:
        if attn_mask.dtype == BOOL:
            scores = g.op("Where", attn_mask, scores, minus_inf, dtype=compute)
        else:
            scores = g.op("Add", scores, g.cast(attn_mask, compute))
    weights = g.op("Softmax", scores, axis=-1)
    if masked:  # a fully masked row gives zeros, as torch, not NaN
        top = g.op("ReduceMax", scores, g.ints([-1]), keepdims=1)
        empty = g.op("Equal", top, minus_inf, dtype=BOOL)
        weights = g.op("Where", empty, g.const(numpy.asarray(0, dtype=compute)), weights, dtype=compute)
    if enable_gqa:
        return finish(g, _ungrouped(g, g.op("MatMul", _grouped(g, weights, q, v), v, rank=q.rank), q), query.dtype)
    return finish(g, g.op("MatMul", weights, v), query.dtype)


embedding = onnx_kernel("embedding", build_embedding, check=check_embedding)
conv1d = onnx_kernel("conv1d", build_conv)
conv2d = onnx_kernel("conv2d", build_conv)
scaled_dot_product_attention = onnx_kernel("scaled_dot_product_attention", build_sdpa)
