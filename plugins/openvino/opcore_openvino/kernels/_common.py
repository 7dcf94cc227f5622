"""What the OpenVINO builders share: dtypes, PyTorch's result dtypes, and compute-dtype rules.

Rules (the CPU plugin runs float64 as float32 and int64 as int32, so the checkers decline those):
- float16 models are compiled with a float32 precision hint: math runs in float32, I/O stays float16;
- integer arithmetic runs in int32 and is converted back, so narrow integers wrap as in torch
  (the CPU plugin saturates int8/uint8 arithmetic; its Convert wraps);
- Python numbers are fed as 0-D float64 / int32 / bool inputs and converted in the graph.
"""

from __future__ import annotations

import numpy

from opcore.extend import result_dtype
from opcore_openvino.graph import Graph, Node, Scalar, dtype_of, rank_of

__all__ = ["BOOL", "F16", "F32", "I32", "binary_result", "finish", "operand", "to_compute"]

BOOL = numpy.dtype(numpy.bool_)
F16 = numpy.dtype(numpy.float16)
F32 = numpy.dtype(numpy.float32)
I32 = numpy.dtype(numpy.int32)


def _dtype_and_rank(node: Node) -> tuple[numpy.dtype, int]:
    return dtype_of(node), rank_of(node)


def binary_result(x: Node, other: Node | Scalar) -> numpy.dtype:
    """torch.result_type(x, other): 0-D tensors and Python numbers count less than tensors."""
    return result_dtype(x, other, _dtype_and_rank)


def to_compute(dtype: numpy.dtype) -> numpy.dtype:
    """The dtype arithmetic runs in for a result of ``dtype``: int32 for integers, else itself."""
    return I32 if dtype.kind in "iu" else dtype


def operand(g: Graph, value: Node | Scalar, dtype: numpy.dtype) -> Node:
    """A tensor or a Python number, as a node of ``dtype``."""
    if isinstance(value, Scalar):
        value = g.scalar(value, numpy.dtype(dtype))
    return g.cast(value, dtype)


def finish(g: Graph, node: Node, dtype: numpy.dtype) -> Node:
    """The result in the contract's output dtype."""
    return g.cast(node, dtype)
