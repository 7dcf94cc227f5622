"""Reference kernels for the shape ops; transpose, permute and reshape return views where numpy can."""

from __future__ import annotations

import numpy

from opcore.opset.shape import is_skipped_in_cat
from opcore.reference._common import promote

__all__ = ["cat", "permute", "reshape", "transpose"]


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
