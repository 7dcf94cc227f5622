"""zeros_like, ones_like, full_like: the value (a constant in the result dtype) expanded to x's shape."""

from __future__ import annotations

import math
from typing import Any

import numpy

from opcore.types import DType
from opcore_onnxruntime.graph import Graph, Value
from opcore_onnxruntime.kernels._common import I64
from opcore_onnxruntime.session import onnx_kernel

__all__ = ["full_like", "ones_like", "zeros_like"]


def filled(value: Any, dtype: numpy.dtype) -> numpy.ndarray:
    """A Python number as torch converts it into ``dtype``: floats truncate into integers, negative ints wrap."""
    if dtype.kind in "iu":
        return numpy.asarray(math.trunc(value) if isinstance(value, float) else value, dtype=I64).astype(dtype)
    return numpy.asarray(value).astype(dtype)


def build_full_like(g: Graph, x: Value, fill_value: Any, dtype: str | None) -> Value:
    out = x.dtype if dtype is None else DType.parse(dtype).to_numpy()
    shape = g.op("Shape", x, dtype=I64, rank=1)
    return g.op("Expand", g.const(filled(fill_value, out)), shape, rank=x.rank)


def build_zeros_like(g: Graph, x: Value, dtype: str | None) -> Value:
    return build_full_like(g, x, 0, dtype)


def build_ones_like(g: Graph, x: Value, dtype: str | None) -> Value:
    return build_full_like(g, x, 1, dtype)


zeros_like = onnx_kernel("zeros_like", build_zeros_like)
ones_like = onnx_kernel("ones_like", build_ones_like)
full_like = onnx_kernel("full_like", build_full_like)
