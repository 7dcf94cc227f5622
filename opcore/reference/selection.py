"""Reference kernels for where, masked_fill and clamp (exact: values are picked, not computed)."""

from __future__ import annotations

from typing import Any

import numpy

from opcore.meta import result_type
from opcore.reference._common import finish, quiet
from opcore.types import DType, TensorMeta

__all__ = ["clamp", "masked_fill", "where", "where_dtype"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = (
    "clamp",
    "masked_fill",
    "where",
)


def where_dtype(*operands: Any) -> numpy.dtype:
    """torch.result_type of arrays and Python numbers, as a numpy dtype (bfloat16 travels as float32)."""
    metas = [TensorMeta(v.shape, DType.from_numpy(v.dtype)) if isinstance(v, numpy.ndarray) else v for v in operands]
    return result_type(*metas).to_numpy()


def _as(value: Any, dtype: numpy.dtype) -> numpy.ndarray:
    """A tensor or a Python number in ``dtype`` (negative ints wrap into unsigned dtypes, as torch)."""
    if isinstance(value, numpy.ndarray):
        return value.astype(dtype, copy=False)
    if dtype.kind in "iu" and isinstance(value, int):
        return numpy.asarray(value, dtype=numpy.int64).astype(dtype)
    return numpy.asarray(value).astype(dtype)


def where(condition: numpy.ndarray, x: Any, other: Any) -> numpy.ndarray:
    """x where condition, else other, in their promoted dtype."""
    out = where_dtype(x, other)
    with quiet():
        return finish(numpy.where(condition, _as(x, out), _as(other, out)), out)


def masked_fill(x: numpy.ndarray, mask: numpy.ndarray, value: Any) -> numpy.ndarray:
    """x with value (converted to x's dtype: floats truncate into integers) where mask."""
    with quiet():
        fill = _as(numpy.trunc(value) if x.dtype.kind in "iu" and isinstance(value, float) else value, x.dtype)
        return finish(numpy.where(mask, fill, x), x.dtype)


def clamp(x: numpy.ndarray, min: Any, max: Any) -> numpy.ndarray:
    """min(max(x, min), max) in the promoted dtype; NaN in any operand gives NaN."""
    out = where_dtype(x, *(bound for bound in (min, max) if bound is not None))
    result = _as(x, out)
    with quiet():
        if min is not None:
            result = numpy.maximum(result, _as(min, out))
        if max is not None:
            result = numpy.minimum(result, _as(max, out))
        return finish(result, out)
