"""zeros_like, ones_like, full_like: the value (a constant in the result dtype) broadcast to x's
shape; the checkers decline 64-bit and bfloat16 results."""

from __future__ import annotations

import math
from typing import Any

import numpy

from opcore.types import DType
from opcore_openvino.compiled import ov_kernel
from opcore_openvino.graph import Graph, Node, dtype_of, ops

__all__ = ["full_like", "ones_like", "zeros_like"]


def filled(value: Any, dtype: numpy.dtype) -> numpy.ndarray:
    """A Python number as torch converts it into ``dtype``: floats truncate into integers, negative ints wrap."""
    if dtype.kind in "iu":
        return numpy.asarray(math.trunc(value) if isinstance(value, float) else value, dtype=numpy.int64).astype(dtype)
    return numpy.asarray(value).astype(dtype)


def build_full_like(g: Graph, x: Node, fill_value: Any, dtype: str | None) -> Node:
    out = dtype_of(x) if dtype is None else DType.parse(dtype).to_numpy()
    return ops.broadcast(ops.constant(filled(fill_value, out)), ops.shape_of(x))


def build_zeros_like(g: Graph, x: Node, dtype: str | None) -> Node:
    return build_full_like(g, x, 0, dtype)


def build_ones_like(g: Graph, x: Node, dtype: str | None) -> Node:
    return build_full_like(g, x, 1, dtype)


zeros_like = ov_kernel("zeros_like", build_zeros_like)
ones_like = ov_kernel("ones_like", build_ones_like)
full_like = ov_kernel("full_like", build_full_like)
