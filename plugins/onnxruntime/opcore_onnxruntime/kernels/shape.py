"""transpose, permute (Transpose), reshape (Reshape with allowzero) and cat (Concat), every dtype.

reshape feeds its target shape as an int64 input, so every target of the same length shares one
session; cat leaves 1-D empty tensors out (torch's legacy rule) but promotes over all of them.
"""

from __future__ import annotations

import numpy

from opcore.onemodel.builders import cat_through, promoted, transpose_perm
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.session import ATTRIBUTE, TENSOR, TENSORS, onnx_kernel

__all__ = ["cat", "permute", "reshape", "transpose"]


def _transpose(g: Graph, x: Value, perm: list[int]) -> Value:
    if perm == sorted(perm):
        return g.op("Identity", x)
    return g.op("Transpose", x, perm=perm)


def build_transpose(g: Graph, x: Value, dim0: int, dim1: int) -> Value:
    return _transpose(g, x, transpose_perm(x.rank or 0, dim0, dim1))


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


def reshape(x: numpy.ndarray, shape: tuple[int, ...]) -> numpy.ndarray:
    """x with a new shape (a copy); one session per (dtype, rank, target length)."""
    return _reshape(x, numpy.asarray(shape, dtype=numpy.int64))


def chain_reshape(g: Graph, x: Value, shape: tuple[int | Value, ...]) -> Value:
    """reshape in a partition: the target shape is a constant, or sizes computed in the graph (a
    dynamic axis's size given as a 0-D value) joined with the constant ones."""
    if all(isinstance(size, int) for size in shape):
        return build_reshape(g, x, g.ints(shape))  # type: ignore[arg-type]
    pieces = [
        g.ints([size])
        if isinstance(size, int)
        else g.op("Reshape", g.cast(size, numpy.dtype(numpy.int64)), g.ints([1]), rank=1)
        for size in shape
    ]
    return build_reshape(g, x, g.op("Concat", *pieces, axis=0, rank=1))


reshape.chain = chain_reshape  # type: ignore[attr-defined]

cat = cat_through(
    onnx_kernel("cat", build_cat, names=("tensors", "dim", "dtype"), roles=(TENSORS, ATTRIBUTE, ATTRIBUTE))
)


def chain_cat(g: Graph, tensors: tuple[Value, ...], dim: int) -> Value:
    """cat in a partition, in the promoted dtype (ranks must agree: torch's skipping of 1-D empty
    tensors is left to the one-op kernel, a partition fails to compile and is split there)."""
    return build_cat(g, tensors, dim, promoted(tuple(t.dtype for t in tensors)))


cat.chain = chain_cat  # type: ignore[attr-defined]
