"""gather (GatherElements), index (GatherND), split, split_with_sizes and chunk (one Slice per
piece) and pad (Pad: constant, reflect, replicate, circular), every dtype.

gather and index check their indices before the run: GatherElements wraps negative ones where
torch refuses them, and GatherND fails on indices out of range.
"""

from __future__ import annotations

import numpy

from opcore.extend import check_gather_indices as check_gather
from opcore.extend import check_index_indices as check_index
from opcore.extend import index_layout, piece_bounds, split_kernels, view_kernel
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.session import onnx_kernel

__all__ = ["check_gather", "check_index", "chunk", "gather", "index", "pad", "split", "split_with_sizes"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "chunk",
    "gather",
    "index",
    "pad",
    "split",
    "split_with_sizes",
)

_INT64 = numpy.dtype(numpy.int64)


def build_gather(g: Graph, x: Value, dim: int, index: Value) -> Value:
    if not x.rank or not index.rank:
        # torch takes a 0-D x or index as 1-D (the other is then at most 1-D); GatherElements needs
        # equal ranks of at least 1: gather both as 1-D, then drop the dimension for a 0-D index
        flat = g.ints([-1])
        picked = g.op("GatherElements", g.op("Reshape", x, flat, rank=1), g.op("Reshape", index, flat, rank=1), axis=0)
        return picked if index.rank else g.op("Reshape", picked, g.ints([]), rank=0)
    return g.op("GatherElements", x, index, axis=dim % x.rank)


def build_pad(g: Graph, x: Value, pad: tuple[int, ...], mode: str, value: bool | int | float | None) -> Value:
    rank = x.rank or 0
    if not pad:  # Pad fails on a 0-D tensor, and nothing is padded
        return g.op("Identity", x)
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):  # torch lists the last dim first; ONNX wants all begins, then all ends
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    if mode != "constant":  # ONNX Pad's reflect, edge and wrap (opset 19) are torch's modes
        return g.op("Pad", x, g.ints(begins + ends), mode=_ONNX_MODES[mode])
    fill = g.const(numpy.array(0 if value is None else value).astype(x.dtype))
    return g.op("Pad", x, g.ints(begins + ends), fill, mode="constant")


_ONNX_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _from_the_end(g: Graph, x: Value, d: int, index: Value) -> Value:
    """``index`` (int64) with its negative values counted from the end of ``x``'s dim ``d`` (GatherND
    takes them too, but this keeps one rule); made once per indices and static size."""
    static = g.size(x, d)
    key = ("index", index.name, static)
    if static is not None and key in g.shared:
        return g.shared[key]
    idx = g.cast(index, _INT64)
    zero = g.const(numpy.asarray(0, dtype=_INT64))
    if static is None:
        size = g.op("Reshape", g.shape(x, d, d + 1), g.ints([]), rank=0)
    else:
        size = g.const(numpy.asarray(static, dtype=_INT64))
    idx = g.op("Where", g.op("Less", idx, zero, dtype=numpy.bool_), g.op("Add", idx, size), idx)
    if static is not None:
        g.shared[key] = idx
    return idx


def build_index(g: Graph, x: Value, indices: tuple[Value | None, ...]) -> Value:
    layout = index_layout(x.rank or 0, [None if i is None else i.rank or 0 for i in indices])
    fixed = [_from_the_end(g, x, d, indices[d]) for d in layout.given]  # type: ignore[arg-type]
    if len(fixed) == 1:
        # x[:, :, i]: one Gather along that dim, torch's result as it is; GatherND would take x
        # transposed, a copy of all of it (a decode step's window of a cache: every slot, each step)
        (d,) = layout.given
        return g.op("Gather", x, fixed[0], axis=d, rank=(x.rank or 0) - 1 + (fixed[0].rank or 0))
    a = g.op("Transpose", x, perm=layout.perm) if layout.perm != sorted(layout.perm) else x
    zero = g.const(numpy.asarray(0, dtype=_INT64))
    # the indices broadcast together: each plus a zero of the common shape
    total = fixed[0]
    for idx in fixed[1:]:
        total = g.op("Add", total, idx, rank=layout.batch_rank)
    zeros = g.op("Mul", total, zero, rank=layout.batch_rank)
    columns = [g.op("Unsqueeze", g.op("Add", idx, zeros, rank=layout.batch_rank), g.ints([-1]),
                    rank=layout.batch_rank + 1) for idx in fixed]  # fmt: skip
    stacked = g.op("Concat", *columns, axis=-1)
    out = g.op("GatherND", a, stacked, rank=layout.out_rank)
    return g.op("Transpose", out, perm=layout.out_perm) if layout.out_perm else out


def build_split_with_sizes(g: Graph, x: Value, split_sizes: tuple[int, ...], dim: int) -> tuple[Value, ...]:
    axis = dim % (x.rank or 1)
    axes = g.ints([axis])
    return tuple(g.op("Slice", x, g.ints([start]), g.ints([end]), axes) for start, end in piece_bounds(split_sizes))


def _static_size(g: Graph, x: Value, dim: int) -> int | None:
    return g.size(x, dim % (x.rank or 1))


gather = onnx_kernel("gather", build_gather, check=check_gather)
index = onnx_kernel("index", build_index, check=check_index)
pad = onnx_kernel("pad", build_pad)
split_with_sizes = onnx_kernel("split_with_sizes", build_split_with_sizes)
split, chunk = split_kernels(split_with_sizes, build_split_with_sizes, _static_size)
# single calls return numpy views of x (as torch's split does); the builders stay for partitions
split_with_sizes, split, chunk = (
    view_kernel(op, kernel)
    for op, kernel in (("split_with_sizes", split_with_sizes), ("split", split), ("chunk", chunk))
)
