"""gather (GatherElements), index (GatherND), split, split_with_sizes and chunk (one Slice per
piece) and pad (Pad: constant, reflect, replicate; circular declined), for every dtype but the 64-bit
ones (the CPU plugin narrows them to 32 bits).

gather is declined where index is smaller than x on a dim other than dim (checks.py); gather and
index check their indices before the run: GatherElements wraps negative ones where torch refuses
them, and GatherND reads past the end for indices out of range.
"""

from __future__ import annotations

import numpy

from opcore.extend import check_gather_indices as check_gather
from opcore.extend import check_index_indices as check_index
from opcore.extend import index_layout, piece_bounds, split_kernels, view_kernel
from opcore_openvino.compiled import ov_kernel
from opcore_openvino.graph import Graph, Node, constant, dtype_of, ops, rank_of

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


def build_gather(g: Graph, x: Node, dim: int, index: Node) -> Node:
    if not rank_of(x) or not rank_of(index):
        # torch takes a 0-D x or index as 1-D (the other is then at most 1-D); GatherElements needs
        # equal ranks of at least 1: gather both as 1-D, then drop the dimension for a 0-D index
        flat = g.ints([-1])
        picked = ops.gather_elements(ops.reshape(x, flat, False), ops.reshape(index, flat, False), 0)
        return picked if rank_of(index) else ops.reshape(picked, g.ints([]), False)
    return ops.gather_elements(x, index, dim % rank_of(x))


def build_pad(g: Graph, x: Node, pad: tuple[int, ...], mode: str, value: bool | int | float | None) -> Node:
    rank = rank_of(x)
    if not pad:  # Pad fails on a 0-D tensor, and nothing is padded
        return x
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):  # torch lists the last dim first
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    if mode != "constant":  # OpenVINO's reflect and edge are torch's reflect and replicate (circular declined)
        return ops.pad(x, g.ints(begins), g.ints(ends), _OV_MODES[mode])
    fill = constant(numpy.array(0 if value is None else value).astype(dtype_of(x)))
    return ops.pad(x, g.ints(begins), g.ints(ends), "constant", fill)


_OV_MODES = {"reflect": "reflect", "replicate": "edge"}


def build_index(g: Graph, x: Node, indices: tuple[Node | None, ...]) -> Node:
    rank = rank_of(x)
    layout = index_layout(rank, [None if i is None else rank_of(i) for i in indices])
    zero = g.const(0, "int64")
    fixed: list[Node] = []
    for d in layout.given:
        idx = g.cast(indices[d], numpy.int64)  # type: ignore[arg-type]
        size = ops.squeeze(g.dims(x, d, d + 1), g.ints([0]))
        # negative indices count from the end
        fixed.append(ops.select(ops.less(idx, zero), ops.add(idx, size), idx))
    if len(fixed) == 1:  # x[:, :, i]: one Gather along that dim, x not transposed (copied) first
        return ops.gather(x, fixed[0], layout.given[0])
    a = ops.transpose(x, g.ints(layout.perm)) if layout.perm != tuple(range(rank)) else x
    total = fixed[0]  # the indices broadcast together: each plus a zero of the common shape
    for idx in fixed[1:]:
        total = ops.add(total, idx)
    zeros = ops.multiply(total, zero)
    stacked = ops.concat([ops.unsqueeze(ops.add(idx, zeros), g.ints([-1])) for idx in fixed], -1)
    out = ops.gather_nd(a, stacked)
    return ops.transpose(out, g.ints(layout.out_perm)) if layout.out_perm else out


def build_split_with_sizes(g: Graph, x: Node, split_sizes: tuple[int, ...], dim: int) -> tuple[Node, ...]:
    axis = dim % max(rank_of(x), 1)
    one, axes = g.ints([1]), g.ints([axis])
    return tuple(ops.slice(x, g.ints([start]), g.ints([end]), one, axes) for start, end in piece_bounds(split_sizes))


def _static_size(g: Graph, x: Node, dim: int) -> int | None:
    return g.size(x, dim)


gather = ov_kernel("gather", build_gather, check=check_gather)
index = ov_kernel("index", build_index, check=check_index)
pad = ov_kernel("pad", build_pad)
split_with_sizes = ov_kernel("split_with_sizes", build_split_with_sizes)
split, chunk = split_kernels(split_with_sizes, build_split_with_sizes, _static_size)
# single calls return numpy views of x (as torch's split does); the builders stay for partitions
split_with_sizes, split, chunk = (
    view_kernel(op, kernel)
    for op, kernel in (("split_with_sizes", split_with_sizes), ("split", split), ("chunk", chunk))
)
