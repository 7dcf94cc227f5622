"""Reference kernels for softmax, log_softmax, layer_norm, rms_norm, batch_norm and group_norm (float64 inside)."""

from __future__ import annotations

import numpy

from opcore.reference._common import F64, FLOAT32, finish, quiet

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


def _shifted(x: numpy.ndarray, dim: int) -> tuple[numpy.ndarray, int]:
    """x in float64 (0-D as shape (1,)) minus its max along dim, and the axis; for stability."""
    a = x.astype(F64, copy=False).reshape(x.shape or (1,))
    axis = dim % a.ndim
    return a - a.max(axis=axis, keepdims=True), axis


def _cast_first(x: numpy.ndarray, dtype: str | None) -> numpy.ndarray:
    """x in the contract's ``dtype`` (torch casts before it computes), as it is for None."""
    return x if dtype is None else x.astype(numpy.dtype(dtype), copy=False)


def softmax(x: numpy.ndarray, dim: int, dtype: str | None = None) -> numpy.ndarray:
    """exp(x) / sum(exp(x)) along dim (x cast to dtype first)."""
    x = _cast_first(x, dtype)
    if x.size == 0:
        return numpy.empty(x.shape, x.dtype)
    with quiet():
        shifted, axis = _shifted(x, dim)
        e = numpy.exp(shifted)
        return finish((e / e.sum(axis=axis, keepdims=True)).reshape(x.shape), x.dtype)


def log_softmax(x: numpy.ndarray, dim: int, dtype: str | None = None) -> numpy.ndarray:
    """x - log(sum(exp(x))) along dim (x cast to dtype first)."""
    x = _cast_first(x, dtype)
    if x.size == 0:
        return numpy.empty(x.shape, x.dtype)
    with quiet():
        shifted, axis = _shifted(x, dim)
        result = shifted - numpy.log(numpy.exp(shifted).sum(axis=axis, keepdims=True))
        return finish(result.reshape(x.shape), x.dtype)


def _trailing_axes(x: numpy.ndarray, normalized_shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(range(x.ndim - len(normalized_shape), x.ndim))


def layer_norm(
    x: numpy.ndarray,
    normalized_shape: tuple[int, ...],
    weight: numpy.ndarray | None,
    bias: numpy.ndarray | None,
    eps: float,
) -> numpy.ndarray:
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing dims (biased variance)."""
    if x.size == 0:
        return numpy.empty(x.shape, x.dtype)
    axes = _trailing_axes(x, normalized_shape)
    with quiet():
        a = x.astype(F64, copy=False)
        centered = a - a.mean(axis=axes, keepdims=True)
        out = centered / numpy.sqrt((centered * centered).mean(axis=axes, keepdims=True) + eps)
        if weight is not None:
            out = out * weight.astype(F64, copy=False)
        if bias is not None:
            out = out + bias.astype(F64, copy=False)
        return finish(out, x.dtype)


def rms_norm(
    x: numpy.ndarray, normalized_shape: tuple[int, ...], weight: numpy.ndarray | None, eps: float | None
) -> numpy.ndarray:
    """x / sqrt(mean(x**2) + eps) * weight over the trailing dims."""
    if x.size == 0:
        return numpy.empty(x.shape, x.dtype)
    if eps is None:
        # torch takes the epsilon of the type it computes in: float32 for float16 and bfloat16
        eps = float(numpy.finfo(F64 if x.dtype == F64 else FLOAT32).eps)
    axes = _trailing_axes(x, normalized_shape)
    with quiet():
        a = x.astype(F64, copy=False)
        out = a / numpy.sqrt((a * a).mean(axis=axes, keepdims=True) + eps)
        if weight is not None:
            out = out * weight.astype(F64, copy=False)
        return finish(out, x.dtype)


def batch_norm(
    x: numpy.ndarray,
    running_mean: numpy.ndarray,
    running_var: numpy.ndarray,
    weight: numpy.ndarray | None,
    bias: numpy.ndarray | None,
    training: bool,
    momentum: float,
    eps: float,
) -> numpy.ndarray:
    """(x - running_mean) / sqrt(running_var + eps) * weight + bias, per channel (dim 1)."""
    per_channel = (-1,) + (1,) * (x.ndim - 2)

    def channel(parameter: numpy.ndarray) -> numpy.ndarray:
        return parameter.astype(F64, copy=False).reshape(per_channel)

    with quiet():
        out = (x.astype(F64, copy=False) - channel(running_mean)) / numpy.sqrt(channel(running_var) + eps)
        if weight is not None:
            out = out * channel(weight)
        if bias is not None:
            out = out + channel(bias)
        return finish(out, x.dtype)


def group_norm(
    x: numpy.ndarray, num_groups: int, weight: numpy.ndarray | None, bias: numpy.ndarray | None, eps: float
) -> numpy.ndarray:
    """Each group of channels (with the dims after C) normalized (biased variance), then weight and bias per channel."""
    if x.size == 0:
        return numpy.empty(x.shape, x.dtype)
    per_channel = (-1,) + (1,) * (x.ndim - 2)
    with quiet():
        groups = x.astype(F64, copy=False).reshape(x.shape[0], num_groups, -1)
        centered = groups - groups.mean(axis=2, keepdims=True)
        out = (centered / numpy.sqrt((centered * centered).mean(axis=2, keepdims=True) + eps)).reshape(x.shape)
        if weight is not None:
            out = out * weight.astype(F64, copy=False).reshape(per_channel)
        if bias is not None:
            out = out + bias.astype(F64, copy=False).reshape(per_channel)
        return finish(out, x.dtype)
