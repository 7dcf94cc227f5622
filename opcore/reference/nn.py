"""Reference kernels for embedding, conv1d, conv2d and scaled_dot_product_attention."""

from __future__ import annotations

import math

import numpy
from numpy.lib.stride_tricks import as_strided

from opcore.opset.indexing import check_embedding_range
from opcore.opset.nn import Padding, conv_pads
from opcore.reference._common import F64, I64, finish, quiet

__all__ = ["conv1d", "conv2d", "embedding", "scaled_dot_product_attention"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "conv1d",
    "conv2d",
    "embedding",
    "scaled_dot_product_attention",
)


def embedding(input: numpy.ndarray, weight: numpy.ndarray, padding_idx: int | None) -> numpy.ndarray:
    """The rows of weight at the indices (a copy); padding_idx only matters for training."""
    if input.size:
        check_embedding_range(int(input.min()), int(input.max()), weight.shape[0])
    return numpy.take(weight, input, axis=0)


def conv2d(
    x: numpy.ndarray,
    weight: numpy.ndarray,
    bias: numpy.ndarray | None,
    stride: tuple[int, ...],
    padding: Padding,
    dilation: tuple[int, ...],
    groups: int,
) -> numpy.ndarray:
    """Cross-correlation as one batched matrix product (per group) of im2col windows and weights."""
    compute = F64 if x.dtype.kind == "f" else I64  # integer convolution is exact, as torch's
    a = (x[None] if x.ndim == 3 else x).astype(compute, copy=False)
    w = weight.astype(compute, copy=False)
    (top, left), (bottom, right) = conv_pads(padding, weight.shape[2:], dilation)
    (step_h, step_w), (dil_h, dil_w) = stride, dilation
    if top or left or bottom or right:  # zeros and a slice assignment: numpy.pad costs tens of microseconds more
        padded = numpy.zeros((*a.shape[:2], a.shape[2] + top + bottom, a.shape[3] + left + right), compute)
        padded[:, :, top : top + a.shape[2], left : left + a.shape[3]] = a
        a = padded
    batch, _, height, width = a.shape
    out_channels, group_channels, kernel_h, kernel_w = w.shape
    out_h = (height - dil_h * (kernel_h - 1) - 1) // step_h + 1
    out_w = (width - dil_w * (kernel_w - 1) - 1) // step_w + 1
    s_n, s_c, s_h, s_w = a.strides
    windows = as_strided(  # a read-only view: (batch, groups, channels, out_h, out_w, kernel_h, kernel_w)
        a,
        shape=(batch, groups, group_channels, out_h, out_w, kernel_h, kernel_w),
        strides=(s_n, group_channels * s_c, s_c, s_h * step_h, s_w * step_w, s_h * dil_h, s_w * dil_w),
        writeable=False,
    )
    patch = group_channels * kernel_h * kernel_w
    per_group = out_channels // groups
    columns = windows.transpose(1, 0, 3, 4, 2, 5, 6).reshape(groups, batch * out_h * out_w, patch)
    kernels = w.reshape(groups, per_group, patch).transpose(0, 2, 1)
    with quiet():
        out = numpy.matmul(columns, kernels)  # (groups, batch * out_h * out_w, per_group)
        out = out.reshape(groups, batch, out_h, out_w, per_group).transpose(1, 0, 4, 2, 3)
        out = out.reshape(batch, out_channels, out_h, out_w)
        if bias is not None:
            out = out + bias.astype(compute, copy=False)[:, None, None]
        return finish(out[0] if x.ndim == 3 else out, x.dtype)


def conv1d(
    x: numpy.ndarray,
    weight: numpy.ndarray,
    bias: numpy.ndarray | None,
    stride: tuple[int, ...],
    padding: Padding,
    dilation: tuple[int, ...],
    groups: int,
) -> numpy.ndarray:
    """conv2d over (..., C, 1, L) with a (O, I, 1, kL) weight: the same windows, one row high."""
    pads = padding if isinstance(padding, str) else (0, *padding)
    out = conv2d(x[..., None, :], weight[..., None, :], bias, (1, *stride), pads, (1, *dilation), groups)
    return out[..., 0, :]


def _softmax_last(scores: numpy.ndarray) -> numpy.ndarray:
    """Softmax over the last axis where a fully masked row (all -inf) gives zeros, as torch's SDPA."""
    top = scores.max(axis=-1, keepdims=True)
    top = numpy.where(top == -numpy.inf, 0.0, top)
    e = numpy.exp(scores - top)
    total = e.sum(axis=-1, keepdims=True)
    return e / numpy.where(total == 0.0, 1.0, total)


def scaled_dot_product_attention(
    query: numpy.ndarray,
    key: numpy.ndarray,
    value: numpy.ndarray,
    attn_mask: numpy.ndarray | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> numpy.ndarray:
    """softmax(query @ key.T * scale + mask) @ value (dropout_p is always 0.0 here)."""
    q, k, v = (t.astype(F64, copy=False) for t in (query, key, value))
    if enable_gqa:  # each key/value head serves a run of consecutive query heads
        heads = q.shape[-3]
        k = numpy.repeat(k, heads // k.shape[-3], axis=-3)
        v = numpy.repeat(v, heads // v.shape[-3], axis=-3)
    length, source = q.shape[-2], k.shape[-2]
    embed = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(embed) if embed else 1.0  # an empty E gives zero scores whatever the scale
    with quiet():
        scores = numpy.matmul(q * scale, numpy.swapaxes(k, -1, -2))
        if is_causal:
            scores = numpy.where(numpy.tril(numpy.ones((length, source), dtype=bool)), scores, -numpy.inf)
        elif attn_mask is not None:
            if attn_mask.dtype == numpy.bool_:
                scores = numpy.where(attn_mask, scores, -numpy.inf)
            else:
                scores = scores + attn_mask.astype(F64, copy=False)
        weights = _softmax_last(scores) if source else scores  # no keys: the output is zeros
        return finish(numpy.matmul(weights, v), query.dtype)
