"""gather (GatherElements) and pad (Pad, constant mode), every dtype.

gather checks its indices before the run: GatherElements wraps negative ones, torch refuses them.
split, split_with_sizes and chunk (list results) and index are left to the other backends.
"""

from __future__ import annotations

import numpy

from opcore.onemodel.builders import check_gather_indices as check_gather
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.session import onnx_kernel

__all__ = ["check_gather", "gather", "pad"]


def build_gather(g: Graph, x: Value, dim: int, index: Value) -> Value:
    if not x.rank:  # GatherElements needs a dimension: gather from shape (1,), then drop it
        one = g.ints([1])
        picked = g.op("GatherElements", g.op("Reshape", x, one, rank=1), g.op("Reshape", index, one, rank=1), axis=0)
        return g.op("Reshape", picked, g.ints([]), rank=0)
    return g.op("GatherElements", x, index, axis=dim % x.rank)


def build_pad(g: Graph, x: Value, pad: tuple[int, ...], mode: str, value: bool | int | float | None) -> Value:
    rank = x.rank or 0
    if not pad:  # Pad fails on a 0-D tensor, and nothing is padded
        return g.op("Identity", x)
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):  # torch lists the last dim first; ONNX wants all begins, then all ends
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    fill = g.const(numpy.array(0 if value is None else value).astype(x.dtype))
    return g.op("Pad", x, g.ints(begins + ends), fill, mode="constant")


gather = onnx_kernel("gather", build_gather, check=check_gather)
pad = onnx_kernel("pad", build_pad)
