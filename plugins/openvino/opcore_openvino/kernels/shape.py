"""transpose, permute (Transpose), reshape (Reshape), cat (Concat) and the view ops unsqueeze
(Unsqueeze), squeeze and flatten (Reshape to a target computed from ShapeOf), expand (Broadcast),
slice (Slice) and select (Gather), for every dtype but the 64-bit ones (the CPU plugin narrows
them to 32 bits).

Single calls of the view ops (transpose, permute, reshape, flatten, unsqueeze, squeeze, expand,
slice, select) return numpy views of x, as torch's do (``view_kernel``); the builders below write
their nodes in partitions. cat leaves 1-D empty tensors out (torch's legacy rule) but promotes over
all of them.
"""

from __future__ import annotations

import numpy
import openvino

from opcore.extend import Unsupported, cat_through, promoted, squeezed_shape, transpose_perm, view_kernel
from opcore_openvino.compiled import ATTRIBUTE, TENSOR, TENSORS, ov_kernel
from opcore_openvino.graph import Graph, Node, dtype_of, ops, rank_of

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
    return build_reshape(g, x, g.shape_of(shape), len(shape))


reshape.chain = chain_reshape  # type: ignore[attr-defined]

cat = cat_through(ov_kernel("cat", build_cat, names=("tensors", "dim", "dtype"), roles=(TENSORS, ATTRIBUTE, ATTRIBUTE)))


def chain_cat(g: Graph, tensors: tuple[Node, ...], dim: int) -> Node:
    """cat in a partition, in the promoted dtype (ranks must agree: torch's skipping of 1-D empty
    tensors is left to the one-op kernel, a partition fails to compile and is split there)."""
    return build_cat(g, tensors, dim, promoted(tuple(dtype_of(t) for t in tensors)))


cat.chain = chain_cat  # type: ignore[attr-defined]


_INT64_MAX = numpy.iinfo(numpy.int64).max


def build_clone(g: Graph, x: Node) -> Node:
    # the kernel's result is a fresh array; Graph.result copies a Parameter that is an output
    return x


def build_unsqueeze(g: Graph, x: Node, dim: int) -> Node:
    return ops.unsqueeze(x, g.ints([dim % (rank_of(x) + 1)]))


def squeeze(x: numpy.ndarray, dim: tuple[int, ...] | None) -> numpy.ndarray:
    """x without its size-1 dims: a reshape to the squeezed shape (the CPU plugin needs the output
    rank, which depends on the sizes, so the target is computed here)."""
    return reshape(x, squeezed_shape(x.shape, dim))


def chain_squeeze(g: Graph, x: Node, dim: tuple[int, ...] | None) -> Node:
    """squeeze in a partition: the dims it may drop must have static sizes there."""
    sizes = x.get_output_partial_shape(0)
    rank = rank_of(x)
    axes = range(rank) if dim is None else {d % max(rank, 1) for d in dim}
    if any(sizes[i].is_dynamic for i in axes if i < rank):
        raise Unsupported(f"squeeze needs static sizes at dims {sorted(axes)} in a partition, found {sizes}")
    # Squeeze with the size-1 axes (a Reshape to the squeezed sizes would hold a -1 per dynamic dim,
    # which Reshape refuses beyond one)
    ones = sorted(i for i in axes if i < rank and sizes[i].get_length() == 1)
    return ops.squeeze(x, g.ints(ones)) if ones else x


def build_flatten(g: Graph, x: Node, start_dim: int, end_dim: int) -> Node:
    rank = rank_of(x)
    if rank == 0:
        return ops.reshape(x, g.ints([1]), False)
    start, end = start_dim % rank, end_dim % rank
    if start == end:
        return x
    merged = ops.reduce_prod(g.dims(x, start, end + 1), g.ints([0]), True)
    parts = [p for p in (g.dims(x, 0, start) if start else None, merged,
                         g.dims(x, end + 1) if end + 1 < rank else None) if p is not None]  # fmt: skip
    return ops.reshape(x, ops.concat(parts, 0) if len(parts) > 1 else merged, False)


def build_expand(g: Graph, x: Node, size: tuple[int, ...]) -> Node:
    if not size:  # x is 0-D too; Broadcast to an empty target shape crashes the CPU plugin
        return x
    lead = len(size) - rank_of(x)
    # -1 keeps x's size: read it from x's shape (the CPU plugin mishandles bidirectional Broadcast)
    parts = [g.dims(x, i - lead, i - lead + 1) if wanted == -1 else g.ints([wanted]) for i, wanted in enumerate(size)]
    return ops.broadcast(x, ops.concat(parts, 0) if len(parts) > 1 else parts[0])


def build_slice(g: Graph, x: Node, dim: int, start: int | None, end: int | None, step: int) -> Node:
    # Slice-8 clamps negative and out-of-range bounds as Python (and torch) do
    first = 0 if start is None else start
    last = _INT64_MAX if end is None else end
    return ops.slice(x, g.ints([first]), g.ints([last]), g.ints([step]), g.ints([dim % max(rank_of(x), 1)]))


def build_select(g: Graph, x: Node, dim: int, index: int) -> Node:
    return ops.gather(x, g.const(numpy.int64(index)), dim % max(rank_of(x), 1))


clone = ov_kernel("clone", build_clone)
unsqueeze = ov_kernel("unsqueeze", build_unsqueeze)
squeeze.chain = chain_squeeze  # type: ignore[attr-defined]
flatten = ov_kernel("flatten", build_flatten)
expand = ov_kernel("expand", build_expand)
slice = ov_kernel("slice", build_slice)
select = ov_kernel("select", build_select)

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


def chain_expand(g: Graph, x: Node, size: tuple[int | Node, ...]) -> Node:
    """expand in a partition: sizes computed at run time (0-D nodes) among the constant ones (-1
    keeps x's size, read from its shape as build_expand does)."""
    if all(isinstance(s, int) for s in size):
        return build_expand(g, x, size)  # type: ignore[arg-type]
    lead = len(size) - rank_of(x)
    parts = [
        g.dims(x, i - lead, i - lead + 1) if isinstance(s, int) and s == -1 else g.shape_of([s])
        for i, s in enumerate(size)
    ]
    return ops.broadcast(x, ops.concat(parts, 0) if len(parts) > 1 else parts[0])


def chain_slice(g: Graph, x: Node, dim: int, start: int | Node | None, end: int | Node | None, step: int) -> Node:
    """slice in a partition: its bounds may be sizes computed at run time (0-D nodes)."""
    if all(v is None or isinstance(v, int) for v in (start, end)):
        return build_slice(g, x, dim, start, end, step)  # type: ignore[arg-type]
    first = g.shape_of([0 if start is None else start])
    last = g.shape_of([_INT64_MAX if end is None else end])
    return ops.slice(x, first, last, g.ints([step]), g.ints([dim % max(rank_of(x), 1)]))


expand.chain = chain_expand  # type: ignore[attr-defined]
slice.chain = chain_slice  # type: ignore[attr-defined]
