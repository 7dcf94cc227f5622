"""gather (GatherElements) and pad (Pad, constant mode), for every dtype but the 64-bit ones
(the CPU plugin narrows them to 32 bits).

gather is declined where index is smaller than x on a dim other than dim (checks.py); it checks
its indices before the run: GatherElements wraps negative ones, torch refuses them.
split, split_with_sizes and chunk (list results) and index are left to the other backends.
"""

from __future__ import annotations

import numpy

from opcore.onemodel.builders import check_gather_indices as check_gather
from opcore_openvino.compiled import ov_kernel
from opcore_openvino.graph import Graph, Node, dtype_of, ops, rank_of

__all__ = ["check_gather", "gather", "pad"]


def build_gather(g: Graph, x: Node, dim: int, index: Node) -> Node:
    if not rank_of(x):  # GatherElements needs a dimension: gather from shape (1,), then drop it
        one = g.ints([1])
        picked = ops.gather_elements(ops.reshape(x, one, False), ops.reshape(index, one, False), 0)
        return ops.reshape(picked, g.ints([]), False)
    return ops.gather_elements(x, index, dim % rank_of(x))


def build_pad(g: Graph, x: Node, pad: tuple[int, ...], mode: str, value: bool | int | float | None) -> Node:
    rank = rank_of(x)
    if not pad:  # Pad fails on a 0-D tensor, and nothing is padded
        return x
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):  # torch lists the last dim first
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    fill = ops.constant(numpy.array(0 if value is None else value).astype(dtype_of(x)))
    return ops.pad(x, g.ints(begins), g.ints(ends), "constant", fill)


gather = ov_kernel("gather", build_gather, check=check_gather)
pad = ov_kernel("pad", build_pad)
