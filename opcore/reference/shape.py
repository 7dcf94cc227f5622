"""Reference kernels for the shape ops; transpose, permute, reshape and the view ops (unsqueeze,
squeeze, flatten, expand, slice, select) return views where numpy can, as torch does."""

from __future__ import annotations

import builtins
import math

import numpy

from opcore.opset.shape import is_skipped_in_cat, slice_bounds, squeezed_shape
from opcore.reference._common import promote

__all__ = [
    "cat",
    "clone",
    "expand",
    "flatten",
    "permute",
    "reshape",
    "select",
    "slice",
    "squeeze",
    "transpose",
    "unsqueeze",
]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "cat",
    "clone",
    "expand",
    "flatten",
    "permute",
    "reshape",
    "select",
    "slice",
    "squeeze",
    "transpose",
    "unsqueeze",
)


def transpose(x: numpy.ndarray, dim0: int, dim1: int) -> numpy.ndarray:
    """x with dim0 and dim1 swapped (a view)."""
    if x.ndim == 0:  # torch allows dims 0 and -1 on a scalar; numpy has no axis to swap
        return x.view()
    return numpy.swapaxes(x, dim0, dim1)


def permute(x: numpy.ndarray, dims: tuple[int, ...]) -> numpy.ndarray:
    """x with its dims reordered (a view)."""
    return numpy.transpose(x, dims)


def reshape(x: numpy.ndarray, shape: tuple[int, ...]) -> numpy.ndarray:
    """x with a new shape: a view when the strides allow it, else a copy (as torch.reshape)."""
    return numpy.reshape(x, shape)


def cat(tensors: tuple[numpy.ndarray, ...], dim: int) -> numpy.ndarray:
    """The tensors joined along dim in their promoted dtype; 1-D empty ones are left out."""
    dtype = promote(tuple(t.dtype for t in tensors))
    kept = [t for t in tensors if not is_skipped_in_cat(t.shape)]
    if not kept:
        return numpy.empty((0,), dtype)
    return numpy.concatenate(kept, axis=dim, dtype=dtype, casting="unsafe")


def clone(x: numpy.ndarray) -> numpy.ndarray:
    """A copy of x (never a view)."""
    return numpy.array(x, copy=True)


def unsqueeze(x: numpy.ndarray, dim: int) -> numpy.ndarray:
    """x with a size-1 dim at dim (a view)."""
    return numpy.expand_dims(x, dim % (x.ndim + 1))


def squeeze(x: numpy.ndarray, dim: tuple[int, ...] | None) -> numpy.ndarray:
    """x without its size-1 dims, or those of dim that have size 1 (a view: only size-1 dims go)."""
    return x.reshape(squeezed_shape(x.shape, dim))


def flatten(x: numpy.ndarray, start_dim: int, end_dim: int) -> numpy.ndarray:
    """x with dims start_dim..end_dim merged (a view when the strides allow it)."""
    if x.ndim == 0:
        return x.reshape(1)
    start, end = start_dim % x.ndim, end_dim % x.ndim
    return x.reshape((*x.shape[:start], math.prod(x.shape[start : end + 1]), *x.shape[end + 1 :]))


def expand(x: numpy.ndarray, size: tuple[int, ...]) -> numpy.ndarray:
    """x broadcast to size, -1 keeping a size (a view sharing x's memory, as torch's expanded tensors do;
    writable where x is, as torch's, so a torch caller gets a view too and not a copy)."""
    lead = len(size) - x.ndim
    shape = tuple(x.shape[i - lead] if wanted == -1 else wanted for i, wanted in enumerate(size))
    strides = numpy.broadcast_to(x, shape).strides
    return numpy.lib.stride_tricks.as_strided(x, shape, strides, writeable=x.flags.writeable)


def slice(x: numpy.ndarray, dim: int, start: int | None, end: int | None, step: int) -> numpy.ndarray:
    """x[start:end:step] along dim with torch's clamping (a view)."""
    axis = dim % x.ndim
    first, last = slice_bounds(x.shape[axis], start, end)
    index: list[builtins.slice] = [numpy.s_[:]] * x.ndim  # builtins: this module's slice is the op
    index[axis] = numpy.s_[first:last:step]
    return x[tuple(index)]


def select(x: numpy.ndarray, dim: int, index: int) -> numpy.ndarray:
    """x at index along dim (a view; 0-D results stay arrays)."""
    return numpy.moveaxis(x, dim % x.ndim, 0)[index, ...]
