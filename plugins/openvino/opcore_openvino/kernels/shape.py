"""transpose, permute (Transpose), reshape (Reshape) and cat (Concat), for every dtype but the
64-bit ones (the CPU plugin narrows them to 32 bits).

reshape feeds its target shape as an input, so every target of the same length shares one
compiled model; cat leaves 1-D empty tensors out (torch's legacy rule) but promotes over all of them.
"""

from __future__ import annotations

from functools import lru_cache, reduce

import numpy
import openvino

from opcore.meta import promote_types
from opcore.opset.shape import is_skipped_in_cat
from opcore.types import DType
from opcore_openvino.compiled import ATTRIBUTE, TENSOR, TENSORS, ov_kernel
from opcore_openvino.graph import Graph, Node, ops, rank_of

__all__ = ["cat", "permute", "reshape", "transpose"]


def _transpose(g: Graph, x: Node, perm: list[int]) -> Node:
    if perm == sorted(perm):
        return x
    return ops.transpose(x, g.ints(perm))


def build_transpose(g: Graph, x: Node, dim0: int, dim1: int) -> Node:
    rank = rank_of(x)
    perm = list(range(rank))
    if rank:
        first, second = dim0 % rank, dim1 % rank
        perm[first], perm[second] = perm[second], perm[first]
    return _transpose(g, x, perm)


def build_permute(g: Graph, x: Node, dims: tuple[int, ...]) -> Node:
    rank = rank_of(x)
    return _transpose(g, x, [d % rank for d in dims] if rank else [])


def build_reshape(g: Graph, x: Node, shape: Node, length: int) -> Node:
    # the CPU plugin needs the output rank: the target's length is fixed per compiled model
    shape.set_partial_shape(openvino.PartialShape([length]))
    return ops.reshape(x, shape, False)  # special_zero False: a 0 is a size, as in torch


def build_cat(g: Graph, tensors: tuple[Node, ...], dim: int, dtype: numpy.dtype) -> Node:
    parts = [g.cast(t, dtype) for t in tensors]
    return ops.concat(parts, dim % max(rank_of(tensors[0]), 1))


transpose = ov_kernel("transpose", build_transpose)
permute = ov_kernel("permute", build_permute)
_reshape = ov_kernel("reshape", build_reshape, names=("x", "shape", "length"), roles=(TENSOR, TENSOR, ATTRIBUTE))
_cat = ov_kernel("cat", build_cat, names=("tensors", "dim", "dtype"), roles=(TENSORS, ATTRIBUTE, ATTRIBUTE))


def reshape(x: numpy.ndarray, shape: tuple[int, ...]) -> numpy.ndarray:
    """x with a new shape (a copy); one compiled model per (dtype, rank, target rank)."""
    return _reshape(x, numpy.asarray(shape, dtype=numpy.int64), len(shape))


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
