"""Reference kernels for zeros_like, ones_like, full_like, zeros, ones, full and arange (bfloat16
results come back as float32, which the dispatcher rounds)."""

from __future__ import annotations

import math
from typing import Any

import numpy

from opcore.opset.creation import arange_bounds, arange_dtype, arange_length, fill_dtype
from opcore.reference._common import F64, I64, finish
from opcore.types import DType

__all__ = ["arange", "full", "full_like", "ones", "ones_like", "zeros", "zeros_like"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "arange",
    "full",
    "full_like",
    "ones",
    "ones_like",
    "zeros",
    "zeros_like",
)


def _numpy_dtype(target: DType) -> numpy.dtype:
    return numpy.dtype(numpy.float32) if target is DType.BFLOAT16 else target.to_numpy()


def _dtype(x: numpy.ndarray, dtype: str | None) -> numpy.dtype:
    return x.dtype if dtype is None else _numpy_dtype(DType.parse(dtype))


def _filled(shape: tuple[int, ...], fill_value: Any, out: numpy.dtype) -> numpy.ndarray:
    """fill_value converted as torch converts a Python number: floats truncate into integers,
    negative ints wrap into unsigned dtypes (the contract checked the range)."""
    value: Any = fill_value
    if out.kind in "iu" and isinstance(value, float):
        value = math.trunc(value)
    if out.kind in "iu":
        filled = numpy.full(shape, value, dtype=numpy.int64).astype(out)
    else:
        filled = numpy.full(shape, value).astype(out)
    return finish(filled, out)


def full_like(x: numpy.ndarray, fill_value: Any, dtype: str | None, device: str | None = None) -> numpy.ndarray:
    """fill_value in x's shape (converted as ``_filled`` says)."""
    return _filled(x.shape, fill_value, _dtype(x, dtype))


def zeros_like(x: numpy.ndarray, dtype: str | None, device: str | None = None) -> numpy.ndarray:
    """Zeros of x's shape."""
    return full_like(x, 0, dtype)


def ones_like(x: numpy.ndarray, dtype: str | None, device: str | None = None) -> numpy.ndarray:
    """Ones of x's shape."""
    return full_like(x, 1, dtype)


def zeros(size: tuple[int, ...], dtype: str | None, device: str) -> numpy.ndarray:
    """Zeros of ``size`` (default float32)."""
    return _filled(size, 0, _numpy_dtype(DType.parse(dtype or "float32")))


def ones(size: tuple[int, ...], dtype: str | None, device: str) -> numpy.ndarray:
    """Ones of ``size`` (default float32)."""
    return _filled(size, 1, _numpy_dtype(DType.parse(dtype or "float32")))


def full(size: tuple[int, ...], fill_value: Any, dtype: str | None, device: str) -> numpy.ndarray:
    """fill_value in ``size``; without dtype, torch.full's: bool, int64 or float32 from fill_value."""
    target = fill_dtype(fill_value, dtype)
    return _filled(size, fill_value, _numpy_dtype(target))


def arange(start: Any, end: Any, step: Any, dtype: str | None, device: str) -> numpy.ndarray:
    """start + step * i for i < the contract's length, as torch computes it: an integer dtype
    counts from int(start) by int(step) in int64 (and wraps into narrower ones), a floating one in
    float64."""
    if end is None:
        start, end = 0, start
    target = arange_dtype(start, end, step, dtype)
    out = _numpy_dtype(target)
    length = arange_length(*arange_bounds(start, end, step, target))
    if out.kind in "iu":
        counted = int(start) + int(step) * numpy.arange(length, dtype=I64)
        return finish(counted.astype(out), out)
    values = float(start) + float(step) * numpy.arange(length, dtype=F64)
    return finish(values.astype(out), out)
