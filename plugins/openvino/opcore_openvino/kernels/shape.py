"""transpose, permute (Transpose), reshape (Reshape) and cat (Concat), for every dtype but the
64-bit ones (the CPU plugin narrows them to 32 bits).

reshape feeds its target shape as an input, so every target of the same length shares one
compiled model; cat leaves 1-D empty tensors out (torch's legacy rule) but promotes over all of them.
"""

from __future__ import annotations

import numpy
import openvino

from opcore.onemodel.builders import cat_through, promoted, transpose_perm
from opcore_openvino.compiled import ATTRIBUTE, TENSOR, TENSORS, ov_kernel
from opcore_openvino.graph import Graph, Node, dtype_of, ops, rank_of

__all__ = ["cat", "permute", "reshape", "transpose"]


def _transpose(g: Graph, x: Node, perm: list[int]) -> Node:
    if perm == sorted(perm):
        return x
    return ops.transpose(x, g.ints(perm))


def build_transpose(g: Graph, x: Node, dim0: int, dim1: int) -> Node:
    return _transpose(g, x, transpose_perm(rank_of(x), dim0, dim1))


def build_permute(g: Graph, x: Node, dims: tuple[int, ...]) -> Node:
    rank = rank_of(x)
    return _transpose(g, x, [d % rank for d in dims] if rank else [])


def build_reshape(g: Graph, x: Node, shape: Node, length: int) -> Node:
    # the CPU plugin needs the output rank: the target's length is fixed per compiled model
    if shape.get_type_name() == "Parameter":
        shape.set_partial_shape(openvino.PartialShape([length]))
    return ops.reshape(x, shape, False)  # special_zero False: a 0 is a size, as in torch


def build_cat(g: Graph, tensors: tuple[Node, ...], dim: int, dtype: numpy.dtype) -> Node:
    parts = [g.cast(t, dtype) for t in tensors]
    return ops.concat(parts, dim % max(rank_of(tensors[0]), 1))


transpose = ov_kernel("transpose", build_transpose)
permute = ov_kernel("permute", build_permute)
_reshape = ov_kernel("reshape", build_reshape, names=("x", "shape", "length"), roles=(TENSOR, TENSOR, ATTRIBUTE))


def reshape(x: numpy.ndarray, shape: tuple[int, ...]) -> numpy.ndarray:
    """x with a new shape (a copy); one compiled model per (dtype, rank, target rank)."""
    return _reshape(x, numpy.asarray(shape, dtype=numpy.int64), len(shape))


def chain_reshape(g: Graph, x: Node, shape: tuple[int | Node, ...]) -> Node:
    """reshape in a partition: the target shape is a constant, or sizes computed in the graph (a
    dynamic axis's size given as a 0-D value) joined with the constant ones."""
    if all(isinstance(size, int) for size in shape):
        return build_reshape(g, x, g.ints(shape), len(shape))  # type: ignore[arg-type]
    pieces = [
        g.ints([size])
        if isinstance(size, int)
        else ops.reshape(g.cast(size, numpy.dtype(numpy.int64)), g.ints([1]), False)
        for size in shape
    ]
    return build_reshape(g, x, ops.concat(pieces, 0), len(shape))


reshape.chain = chain_reshape  # type: ignore[attr-defined]

cat = cat_through(ov_kernel("cat", build_cat, names=("tensors", "dim", "dtype"), roles=(TENSORS, ATTRIBUTE, ATTRIBUTE)))


def chain_cat(g: Graph, tensors: tuple[Node, ...], dim: int) -> Node:
    """cat in a partition, in the promoted dtype (ranks must agree: torch's skipping of 1-D empty
    tensors is left to the one-op kernel, a partition fails to compile and is split there)."""
    return build_cat(g, tensors, dim, promoted(tuple(dtype_of(t) for t in tensors)))


cat.chain = chain_cat  # type: ignore[attr-defined]
