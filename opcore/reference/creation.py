"""Reference kernels for zeros_like, ones_like, full_like (bfloat16 results come back as float32,
which the dispatcher rounds)."""

from __future__ import annotations

import math
from typing import Any

import numpy

from opcore.reference._common import finish
from opcore.types import DType

__all__ = ["full_like", "ones_like", "zeros_like"]


def _dtype(x: numpy.ndarray, dtype: str | None) -> numpy.dtype:
    if dtype is None:
        return x.dtype
    target = DType.parse(dtype)
    return numpy.dtype(numpy.float32) if target is DType.BFLOAT16 else target.to_numpy()


def full_like(x: numpy.ndarray, fill_value: Any, dtype: str | None) -> numpy.ndarray:
    """fill_value converted as torch converts a Python number: floats truncate into integers,
    negative ints wrap into unsigned dtypes (the contract checked the range)."""
    out = _dtype(x, dtype)
    value: Any = fill_value
    if out.kind in "iu" and isinstance(value, float):
        value = math.trunc(value)
    if out.kind in "iu":
        filled = numpy.full(x.shape, value, dtype=numpy.int64).astype(out)
    else:
        filled = numpy.full(x.shape, value).astype(out)
    return finish(filled, out)


def zeros_like(x: numpy.ndarray, dtype: str | None) -> numpy.ndarray:
    """Zeros of x's shape."""
    return full_like(x, 0, dtype)


def ones_like(x: numpy.ndarray, dtype: str | None) -> numpy.ndarray:
    """Ones of x's shape."""
    return full_like(x, 1, dtype)
