"""transpose, permute (Transpose), reshape (Reshape with allowzero) and cat (Concat), every dtype.

reshape feeds its target shape as an int64 input, so every target of the same length shares one
session; cat leaves 1-D empty tensors out (torch's legacy rule) but promotes over all of them.
"""

from __future__ import annotations

from functools import lru_cache, reduce

import numpy

from opcore.meta import promote_types
from opcore.opset.shape import is_skipped_in_cat
from opcore.types import DType
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.session import ATTRIBUTE, TENSOR, TENSORS, onnx_kernel

__all__ = ["cat", "permute", "reshape", "transpose"]


def _transpose(g: Graph, x: Value, perm: list[int]) -> Value:
    if perm == sorted(perm):
        return g.op("Identity", x)
    return g.op("Transpose", x, perm=perm)


def build_transpose(g: Graph, x: Value, dim0: int, dim1: int) -> Value:
    rank = x.rank or 0
    perm = list(range(rank))
    if rank:
        first, second = dim0 % rank, dim1 % rank
        perm[first], perm[second] = perm[second], perm[first]
    return _transpose(g, x, perm)


def build_permute(g: Graph, x: Value, dims: tuple[int, ...]) -> Value:
    rank = x.rank or 0
    return _transpose(g, x, [d % rank for d in dims] if rank else [])


def build_reshape(g: Graph, x: Value, shape: Value) -> Value:
    return g.op("Reshape", x, shape, allowzero=1, rank=None)


def build_cat(g: Graph, tensors: tuple[Value, ...], dim: int, dtype: numpy.dtype) -> Value:
    parts = [g.cast(t, dtype) for t in tensors]
    rank = tensors[0].rank or 1
    return g.op("Concat", *parts, axis=dim % rank, dtype=dtype)


transpose = onnx_kernel("transpose", build_transpose)
permute = onnx_kernel("permute", build_permute)
_reshape = onnx_kernel("reshape", build_reshape, names=("x", "shape"), roles=(TENSOR, TENSOR))
_cat = onnx_kernel("cat", build_cat, names=("tensors", "dim", "dtype"), roles=(TENSORS, ATTRIBUTE, ATTRIBUTE))


def reshape(x: numpy.ndarray, shape: tuple[int, ...]) -> numpy.ndarray:
    """x with a new shape (a copy); one session per (dtype, rank, target length)."""
    return _reshape(x, numpy.asarray(shape, dtype=numpy.int64))


def cat(tensors: tuple[numpy.ndarray, ...], dim: int) -> numpy.ndarray:
    """The tensors joined along dim in their promoted dtype; 1-D empty ones are left out."""
    dtype = _promoted(tuple(t.dtype for t in tensors))
    kept = tuple(t for t in tensors if not is_skipped_in_cat(t.shape))
    if not kept:
        return numpy.empty((0,), dtype)
    return _cat(kept, dim, dtype)


@lru_cache(maxsize=256)
def _promoted(dtypes: tuple[numpy.dtype, ...]) -> numpy.dtype:
    """torch.promote_types over the tensors' dtypes."""
    return reduce(promote_types, (DType.from_numpy(d) for d in dtypes)).to_numpy()
