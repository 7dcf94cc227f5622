"""Reference kernels for the reductions (float64 / int64 inside, exact for amax, amin, argmax)."""

from __future__ import annotations

from typing import Any

import numpy

from opcore.reference._common import F64, I64, finish, quiet
from opcore.types import DType

__all__ = ["amax", "amin", "argmax", "cumsum", "mean", "sum"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "amax",
    "amin",
    "argmax",
    "cumsum",
    "mean",
    "sum",
)


def _axes(x: numpy.ndarray, dim: Any) -> tuple[int, ...]:
    """The dims reduced (the contract checked dim): every dim for None or [], none of a 0-D x."""
    if not x.ndim:
        return ()
    return tuple(range(x.ndim)) if not dim else tuple(d % x.ndim for d in dim)


def _compute(dtype: numpy.dtype) -> numpy.dtype:
    return F64 if dtype.kind == "f" else I64


def sum(x: numpy.ndarray, dim: Any, keepdim: bool) -> numpy.ndarray:
    """Sum over dim; integers and bools give int64 (wrapping as torch)."""
    out = x.dtype if x.dtype.kind == "f" else I64
    with quiet():
        return finish(numpy.sum(x.astype(_compute(x.dtype)), axis=_axes(x, dim), keepdims=keepdim), out)


def mean(x: numpy.ndarray, dim: Any, keepdim: bool) -> numpy.ndarray:
    """Sum over dim divided by the count (numpy.mean warns on an empty dim; this gives NaN, as torch)."""
    axes = _axes(x, dim)
    count = int(numpy.prod([x.shape[a] for a in axes]))
    with quiet():
        total = numpy.sum(x.astype(F64), axis=axes, keepdims=keepdim)
        return finish(total / F64.type(count), x.dtype)


def amax(x: numpy.ndarray, dim: Any, keepdim: bool) -> numpy.ndarray:
    """The largest value over dim, exact in x's dtype; NaN wins."""
    return finish(numpy.amax(x, axis=_axes(x, dim), keepdims=keepdim), x.dtype)


def amin(x: numpy.ndarray, dim: Any, keepdim: bool) -> numpy.ndarray:
    """The smallest value over dim, exact in x's dtype; NaN wins."""
    return finish(numpy.amin(x, axis=_axes(x, dim), keepdims=keepdim), x.dtype)


def argmax(x: numpy.ndarray, dim: int | None, keepdim: bool) -> numpy.ndarray:
    """The index of the first largest value (the first NaN if any), as int64."""
    if dim is None:
        index = numpy.argmax(x.reshape(-1))
        return finish(numpy.reshape(index, (1,) * x.ndim if keepdim else ()), I64)
    if not x.ndim:
        return finish(0, I64)
    return finish(numpy.argmax(x, axis=dim % x.ndim, keepdims=keepdim), I64)


def cumsum(x: numpy.ndarray, dim: int, dtype: str | None) -> numpy.ndarray:
    """The running sum along dim, after converting x to dtype (if given; floats to integers
    truncate); integers and bools give int64. bfloat16 comes back as float32 for the dispatcher."""
    if dtype is None:
        out = x.dtype if x.dtype.kind == "f" else I64
    else:
        target = DType.parse(dtype)
        out = numpy.dtype(numpy.float32) if target is DType.BFLOAT16 else target.to_numpy()
    with quiet():
        if out.kind in "iu" and x.dtype.kind == "f":
            x = numpy.trunc(x).astype(I64)
        start = x.astype(out) if out.kind != "b" else x.astype(I64)
        if not x.ndim:
            return finish(start, out)
        return finish(numpy.cumsum(start.astype(_compute(out)), axis=dim % x.ndim), out)
