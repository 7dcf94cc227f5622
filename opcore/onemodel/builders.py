"""What the graph builders of one-model backends share: PyTorch's result dtype of graph values, the
permutation of transpose, cat's promotion and skipping, and data checks made before a run.

>>> transpose_perm(3, 0, -1)
[2, 1, 0]
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, reduce
from typing import Any

import numpy

from opcore.errors import ArgumentError
from opcore.meta import promote_types, result_type
from opcore.onemodel.op import Scalar
from opcore.opset.indexing import check_index_range
from opcore.opset.shape import is_skipped_in_cat
from opcore.types import DType, TensorMeta

__all__ = [
    "cat_through",
    "check_embedding_indices",
    "check_gather_indices",
    "promoted",
    "result_dtype",
    "transpose_perm",
]


def result_dtype(x: Any, other: Any, dtype_and_rank: Callable[[Any], tuple[numpy.dtype, int]]) -> numpy.dtype:
    """torch.result_type(x, other) of two graph values (or a Scalar for ``other``): 0-D tensors and
    Python numbers count less than tensors. ``dtype_and_rank(value)`` reads a graph value.

    >>> result_dtype(numpy.dtype("int8"), Scalar(float), lambda dtype: (dtype, 2))
    dtype('float32')
    """
    return result_type(_meta(x, dtype_and_rank), _meta(other, dtype_and_rank)).to_numpy()


def _meta(value: Any, dtype_and_rank: Callable[[Any], tuple[numpy.dtype, int]]) -> TensorMeta | bool | int | float:
    if isinstance(value, Scalar):
        return value.kind(1)
    dtype, rank = dtype_and_rank(value)
    return TensorMeta((1,) * rank, DType.from_numpy(dtype))


def transpose_perm(rank: int, dim0: int, dim1: int) -> list[int]:
    """The permutation of transpose(x, dim0, dim1) for an x of ``rank`` dimensions (0-D: none).

    >>> transpose_perm(3, 0, -1)
    [2, 1, 0]
    """
    perm = list(range(rank))
    if rank:
        first, second = dim0 % rank, dim1 % rank
        perm[first], perm[second] = perm[second], perm[first]
    return perm


def check_embedding_indices(input: numpy.ndarray, weight: numpy.ndarray, padding_idx: int | None) -> None:
    """A runtime's Gather wraps negative indices and fails (or gives zeros) for large ones; torch
    refuses both: the embedding kernels check first.
    """
    rows = weight.shape[0]
    if input.size:
        low, high = int(input.min()), int(input.max())
        if low < 0 or high >= rows:
            raise ArgumentError(
                arg="input",
                expected=f"indices in [0, {rows - 1}] (the weight has {rows} rows)",
                found=f"index {low if low < 0 else high} (index out of range)",
                fix="indices must be non-negative and below num_embeddings",
            )


def check_gather_indices(x: numpy.ndarray, dim: int, index: numpy.ndarray) -> None:
    """A runtime's GatherElements wraps negative indices and fails (or reads past) for large ones;
    torch refuses both: the gather kernels check first."""
    if index.size:
        size = x.shape[dim] if x.ndim else 1
        check_index_range("index", int(index.min()), int(index.max()), size, negative=False)


def cat_through(kernel: Callable[..., Any]) -> Callable[[tuple[numpy.ndarray, ...], int], numpy.ndarray]:
    """The cat kernel over a kernel of (tensors, dim, dtype): the tensors joined along dim in their
    promoted dtype, 1-D empty ones left out (torch's legacy rule) but promoted over.
    """

    def cat(tensors: tuple[numpy.ndarray, ...], dim: int) -> numpy.ndarray:
        dtype = promoted(tuple(t.dtype for t in tensors))
        kept = tuple(t for t in tensors if not is_skipped_in_cat(t.shape))
        if not kept:
            return numpy.empty((0,), dtype)
        return kernel(kept, dim, dtype)

    return cat


@lru_cache(maxsize=256)
def promoted(dtypes: tuple[numpy.dtype, ...]) -> numpy.dtype:
    """torch.promote_types over the tensors' dtypes.

    >>> promoted((numpy.dtype("int8"), numpy.dtype("float16")))
    dtype('float16')
    """
    return reduce(promote_types, (DType.from_numpy(d) for d in dtypes)).to_numpy()
