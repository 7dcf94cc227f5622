"""transpose, permute (Transpose), reshape (Reshape with allowzero), cat (Concat) and the view ops
unsqueeze (Unsqueeze), squeeze and flatten (Reshape to a target computed from Shape), expand (Expand),
slice (Slice) and select (Gather), every dtype.

Single calls of the view ops (transpose, permute, reshape, flatten, unsqueeze, squeeze, expand,
slice, select) return numpy views of x, as torch's do (``view_kernel``); the builders below write
their nodes in partitions. There reshape's target shape is a constant or computed in the graph;
squeeze decides which listed dims have size 1 (Compress of the shape). cat leaves 1-D empty
tensors out (torch's legacy rule) but promotes over all of them.
"""

from __future__ import annotations

import numpy

from opcore.extend import cat_through, promoted, transpose_perm, view_kernel
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.session import ATTRIBUTE, TENSOR, TENSORS, onnx_kernel

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


def _transpose(g: Graph, x: Value, perm: list[int]) -> Value:
    """Transpose, or Identity for no move; where ``x``'s sizes are static (a partition's decode step)
    and the dims the permutation moves past each other all have size 1 (a (1, 1, 14, 64) head split
    of one token turned (1, 14, 1, 64)), the bytes keep their order: a Reshape, which onnxruntime runs
    without a copy, instead of a Transpose kernel."""
    if perm == sorted(perm):
        return g.op("Identity", x)
    sizes = [s for s in g.sizes.get(x.name, ()) if isinstance(s, int)]
    if len(sizes) == len(perm):
        moved = [p for p in perm if sizes[p] != 1]
        if moved == sorted(moved):
            return g.op("Reshape", x, g.ints([sizes[p] for p in perm]), allowzero=1, rank=len(perm))
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
    return build_reshape(g, x, g.shape_of(shape))


reshape.chain = chain_reshape  # type: ignore[attr-defined]

cat = cat_through(
    onnx_kernel("cat", build_cat, names=("tensors", "dim", "dtype"), roles=(TENSORS, ATTRIBUTE, ATTRIBUTE))
)


def chain_cat(g: Graph, tensors: tuple[Value, ...], dim: int) -> Value:
    """cat in a partition, in the promoted dtype (ranks must agree: torch's skipping of 1-D empty
    tensors is left to the one-op kernel, a partition fails to compile and is split there)."""
    return build_cat(g, tensors, dim, promoted(tuple(t.dtype for t in tensors)))


cat.chain = chain_cat  # type: ignore[attr-defined]


_INT64_MAX = numpy.iinfo(numpy.int64).max


def build_clone(g: Graph, x: Value) -> Value:
    return g.op("Identity", x)


def build_unsqueeze(g: Graph, x: Value, dim: int) -> Value:
    rank = x.rank or 0
    return g.op("Unsqueeze", x, g.ints([dim % (rank + 1)]), rank=rank + 1)


def build_squeeze(g: Graph, x: Value, dim: tuple[int, ...] | None) -> Value:
    rank = x.rank or 0
    if rank == 0:
        return g.op("Identity", x)
    listed = set(range(rank)) if dim is None else {d % rank for d in dim}
    shape = g.shape(x)
    is_one = g.op("Equal", shape, g.ints([1]), dtype=numpy.bool_)
    listed_mask = g.const(numpy.array([i in listed for i in range(rank)]))
    dropped = g.op("And", is_one, listed_mask)
    kept = g.op("Compress", shape, g.op("Not", dropped), axis=0)
    return g.op("Reshape", x, kept, allowzero=1, rank=None)


def build_flatten(g: Graph, x: Value, start_dim: int, end_dim: int) -> Value:
    rank = x.rank or 0
    if rank == 0:
        return g.op("Reshape", x, g.ints([1]), rank=1)
    start, end = start_dim % rank, end_dim % rank
    if start == end:
        return g.op("Identity", x)
    merged = g.op("ReduceProd", g.shape(x, start, end + 1), keepdims=1)
    parts = [p for p in (g.shape(x, 0, start) if start else None, merged,
                         g.shape(x, end + 1) if end + 1 < rank else None) if p is not None]  # fmt: skip
    target = g.op("Concat", *parts, axis=0) if len(parts) > 1 else merged
    return g.op("Reshape", x, target, allowzero=1, rank=rank - (end - start))


def build_expand(g: Graph, x: Value, size: tuple[int, ...]) -> Value:
    # Expand broadcasts both ways: a 1 in the target keeps x's size, as -1 does in torch
    return g.op("Expand", x, g.ints([1 if s == -1 else s for s in size]), rank=len(size))


def build_slice(g: Graph, x: Value, dim: int, start: int | None, end: int | None, step: int) -> Value:
    # ONNX Slice clamps negative and out-of-range bounds as Python (and torch) do
    first = 0 if start is None else start
    last = _INT64_MAX if end is None else end
    return g.op("Slice", x, g.ints([first]), g.ints([last]), g.ints([dim % (x.rank or 1)]), g.ints([step]))


def build_select(g: Graph, x: Value, dim: int, index: int) -> Value:
    rank = x.rank or 1
    return g.op("Gather", x, g.const(numpy.int64(index)), axis=dim % rank, rank=rank - 1)


clone = onnx_kernel("clone", build_clone)
unsqueeze = onnx_kernel("unsqueeze", build_unsqueeze)
squeeze = onnx_kernel("squeeze", build_squeeze)
flatten = onnx_kernel("flatten", build_flatten)
expand = onnx_kernel("expand", build_expand)
slice = onnx_kernel("slice", build_slice)
select = onnx_kernel("select", build_select)

# single calls of the view ops return numpy views of x (aliasing it, as torch's do); their builders
# stay the kernels' ``chain`` for partitions
transpose, permute, reshape, unsqueeze, squeeze, flatten, expand, slice, select = (
    view_kernel(op, kernel)
    for op, kernel in (
        ("transpose", transpose),
        ("permute", permute),
        ("reshape", reshape),
        ("unsqueeze", unsqueeze),
        ("squeeze", squeeze),
        ("flatten", flatten),
        ("expand", expand),
        ("slice", slice),
        ("select", select),
    )
)


def chain_expand(g: Graph, x: Value, size: tuple[int | Value, ...]) -> Value:
    """expand in a partition: sizes computed at run time (0-D values) among the constant ones."""
    if all(isinstance(s, int) for s in size):
        return build_expand(g, x, size)  # type: ignore[arg-type]
    return g.op("Expand", x, g.shape_of([1 if s == -1 else s for s in size]), rank=len(size))


def chain_slice(g: Graph, x: Value, dim: int, start: int | Value | None, end: int | Value | None, step: int) -> Value:
    """slice in a partition: its bounds may be sizes computed at run time (0-D values)."""
    if not isinstance(start, Value) and not isinstance(end, Value):
        return build_slice(g, x, dim, start, end, step)
    first = g.shape_of([0 if start is None else start])
    last = g.shape_of([_INT64_MAX if end is None else end])
    return g.op("Slice", x, first, last, g.ints([dim % (x.rank or 1)]), g.ints([step]))


expand.chain = chain_expand  # type: ignore[attr-defined]
slice.chain = chain_slice  # type: ignore[attr-defined]
