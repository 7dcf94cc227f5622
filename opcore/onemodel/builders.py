"""What the graph builders of one-model backends share: PyTorch's result dtype of graph values, the
permutation of transpose, cat's promotion and skipping, and data checks made before a run.

>>> transpose_perm(3, 0, -1)
[2, 1, 0]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache, reduce
from typing import Any

import numpy

from opcore.errors import ArgumentError
from opcore.meta import promote_types, result_type
from opcore.onemodel.op import Scalar
from opcore.opset import BUILTIN_CONTRACTS
from opcore.opset.indexing import check_embedding_range, check_index_range, chunk_sizes, split_pieces, split_sizes
from opcore.opset.shape import is_skipped_in_cat
from opcore.types import DType, TensorMeta

__all__ = [
    "VIEW_OPS",
    "IndexLayout",
    "cat_through",
    "check_embedding_indices",
    "check_gather_indices",
    "check_index_indices",
    "index_layout",
    "piece_bounds",
    "promoted",
    "result_dtype",
    "results_dtype",
    "split_kernels",
    "view_kernel",
    "transpose_perm",
]


def result_dtype(x: Any, other: Any, dtype_and_rank: Callable[[Any], tuple[numpy.dtype, int]]) -> numpy.dtype:
    """torch.result_type(x, other) of two graph values (or a Scalar for ``other``): 0-D tensors and
    Python numbers count less than tensors. ``dtype_and_rank(value)`` reads a graph value.

    >>> result_dtype(numpy.dtype("int8"), Scalar(float), lambda dtype: (dtype, 2))
    dtype('float32')
    """
    return result_type(_meta(x, dtype_and_rank), _meta(other, dtype_and_rank)).to_numpy()


def results_dtype(operands: Any, dtype_and_rank: Callable[[Any], tuple[numpy.dtype, int]]) -> numpy.dtype:
    """torch.result_type over any number of graph values and Scalars (None entries skipped), as
    where's and clamp's operands promote together.

    >>> results_dtype([numpy.dtype("int8"), None, Scalar(float)], lambda dtype: (dtype, 2))
    dtype('float32')
    """
    return result_type(*(_meta(v, dtype_and_rank) for v in operands if v is not None)).to_numpy()


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
    if input.size:
        check_embedding_range(int(input.min()), int(input.max()), weight.shape[0])


def check_gather_indices(x: numpy.ndarray, dim: int, index: numpy.ndarray) -> None:
    """A runtime's GatherElements wraps negative indices and fails (or reads past) for large ones;
    torch refuses both: the gather kernels check first."""
    if index.size:
        size = x.shape[dim] if x.ndim else 1
        check_index_range("index", int(index.min()), int(index.max()), size, negative=False)


def check_index_indices(x: numpy.ndarray, indices: tuple[numpy.ndarray | None, ...]) -> None:
    """A runtime's GatherND fails (or reads past) for indices out of range: the index kernels
    check first, with torch's range (negative ones count from the end)."""
    for d, idx in enumerate(indices):
        if idx is not None and idx.size:
            check_index_range(f"indices[{d}]", int(idx.min()), int(idx.max()), x.shape[d], negative=True)


@dataclass(frozen=True, slots=True)
class IndexLayout:
    """How x[i0, :, i2] becomes one GatherND: x transposed by ``perm`` (the indexed dims ``given``
    first), the indices broadcast to ``batch_rank`` dims and stacked, a result of ``out_rank``
    dims, then transposed by ``out_perm`` (empty: not at all) where torch keeps adjacent indexed
    dims in place.
    """

    given: tuple[int, ...]
    perm: tuple[int, ...]
    batch_rank: int
    out_rank: int
    out_perm: tuple[int, ...]


def index_layout(rank: int, index_ranks: Sequence[int | None]) -> IndexLayout:
    """The layout of index over an x of ``rank`` dims (``index_ranks``: None where no index).

    >>> index_layout(3, [None, 1]).out_perm
    (1, 0, 2)
    """
    given = tuple(d for d, r in enumerate(index_ranks) if r is not None)
    rest = [d for d in range(rank) if d not in given]
    batch_rank = max(index_ranks[d] or 0 for d in given)
    out_perm: tuple[int, ...] = ()
    before = given[0]
    if given == tuple(range(before, given[-1] + 1)) and before:  # adjacent, not leading: back in place
        after = len(rest) - before
        out_perm = (
            *(batch_rank + j for j in range(before)),
            *range(batch_rank),
            *(batch_rank + before + j for j in range(after)),
        )
    return IndexLayout(given, (*given, *rest), batch_rank, batch_rank + len(rest), out_perm)


def piece_bounds(split_sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(start, end) of each piece along the cut dim.

    >>> piece_bounds((2, 0, 3))
    [(0, 2), (2, 2), (2, 5)]
    """
    ends = list(itertools.accumulate(split_sizes))
    return list(zip([0, *ends[:-1]], ends))


def split_kernels(
    split_with_sizes: Callable[..., Any],
    build_split_with_sizes: Callable[..., Any],
    static_size: Callable[[Any, Any, int], int | None],  # (graph, value, dim; negative from the end)
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The split and chunk kernels of a backend, through its split_with_sizes kernel: the sizes of
    the pieces follow from the size of the cut dim (read from the array, or in a partition from
    ``static_size(graph, value, axis)``: the number of pieces is fixed when the graph is built).
    """

    def static(graph: Any, x: Any, dim: int) -> int:
        size = static_size(graph, x, dim)
        if size is None:
            raise ValueError(f"the number of pieces depends on the size of dim {dim}, which is dynamic here")
        return size

    def split(x: numpy.ndarray, split_size: int | tuple[int, ...], dim: int) -> Any:
        return split_with_sizes(x, tuple(split_pieces(x.shape[dim % x.ndim], split_size)), dim)

    def chunk(x: numpy.ndarray, chunks: int, dim: int) -> Any:
        return split_with_sizes(x, tuple(chunk_sizes(x.shape[dim % x.ndim], chunks)), dim)

    def chain_split(graph: Any, x: Any, split_size: int | tuple[int, ...], dim: int) -> Any:
        if isinstance(split_size, tuple):  # the sizes are given: no static size needed
            return build_split_with_sizes(graph, x, split_size, dim)
        return build_split_with_sizes(graph, x, tuple(split_sizes(static(graph, x, dim), split_size)), dim)

    def chain_chunk(graph: Any, x: Any, chunks: int, dim: int) -> Any:
        return build_split_with_sizes(graph, x, tuple(chunk_sizes(static(graph, x, dim), chunks)), dim)

    split.chain = chain_split  # type: ignore[attr-defined]
    chunk.chain = chain_chunk  # type: ignore[attr-defined]
    return split, chunk


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


# The ops whose contract is tagged "view": their result is a view of x on every backend, as in torch
# (reshape and flatten: where the strides allow, else a copy, as torch.reshape).
VIEW_OPS = frozenset(c.name for c in BUILTIN_CONTRACTS if "view" in c.tags)


def view_kernel(op: str, kernel: Any) -> Any:
    """A graph runtime's kernel of a view op for single calls: the numpy view itself (the reference
    backend's function), so the result aliases x as torch's does on every backend, exactly and
    without a runtime call; in a partition the runtime's builder (``kernel.chain``) writes the op's
    nodes, where views are internal to the compiled model.

    >>> from opcore.onemodel.builders import view_kernel
    >>> x = numpy.arange(6.0).reshape(2, 3)
    >>> numpy.shares_memory(view_kernel("transpose", None)(x, 0, 1), x)
    True
    """
    if op not in VIEW_OPS:
        raise ArgumentError(op="view_kernel", arg="op", expected=f"one of {sorted(VIEW_OPS)}", found=repr(op))
    from opcore.reference import indexing, shape

    view = getattr(shape, op, None) or getattr(indexing, op)

    def view_of(*args: Any) -> Any:
        return view(*args)

    view_of.__name__ = view_of.__qualname__ = op
    view_of.chain = getattr(kernel, "chain", None)  # type: ignore[attr-defined]
    return view_of
