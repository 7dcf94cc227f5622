"""What the reference kernels share: compute dtypes, PyTorch's result dtypes, quiet numpy.

Floating math runs in float64 and integer math in int64; results are cast back to the
contract's output dtype. Inputs that were bfloat16 arrive as float32 (the dispatcher
upcasts them for numpy kernels and casts the result back), so float32 is returned then.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy

from opcore.meta import promote_types, result_type
from opcore.types import DType, TensorMeta

__all__ = ["F64", "FLOAT32", "I64", "binary_result_dtype", "finish", "float_result_dtype", "promote", "quiet"]

F64 = numpy.dtype(numpy.float64)
I64 = numpy.dtype(numpy.int64)
FLOAT32 = numpy.dtype(numpy.float32)


def quiet() -> Any:
    """A context that silences numpy's floating-point warnings: inf and NaN are results here,
    as in PyTorch, not problems (overflow to inf in a float16 cast, 0/0, exp(1000)).
    """
    return numpy.errstate(all="ignore")


def finish(result: Any, dtype: numpy.dtype) -> numpy.ndarray:
    """``result`` as an ndarray of ``dtype`` (numpy turns 0-D results into scalars)."""
    return numpy.asarray(result).astype(dtype, copy=False)


def float_result_dtype(dtype: numpy.dtype) -> numpy.dtype:
    """Floating inputs keep their dtype; integral and bool inputs give float32, as in torch."""
    return dtype if dtype.kind == "f" else FLOAT32


@lru_cache(maxsize=256)
def _result_of(first: tuple[numpy.dtype, bool] | type, second: tuple[numpy.dtype, bool] | type) -> numpy.dtype:
    operands = []
    for key in (first, second):
        if isinstance(key, tuple):
            dtype, zero_dim = key
            operands.append(TensorMeta(() if zero_dim else (1,), DType.from_numpy(dtype)))
        else:
            operands.append(key(1))  # a Python bool, int or float of that type
    return result_type(*operands).to_numpy()


def binary_result_dtype(x: numpy.ndarray, other: Any) -> numpy.dtype:
    """torch.result_type(x, other) for an array and an array or a Python number (cached)."""
    key: tuple[numpy.dtype, bool] | type = (
        (other.dtype, other.ndim == 0) if isinstance(other, numpy.ndarray) else type(other)
    )
    return _result_of((x.dtype, x.ndim == 0), key)


@lru_cache(maxsize=256)
def _promote(dtypes: tuple[numpy.dtype, ...]) -> numpy.dtype:
    found = DType.from_numpy(dtypes[0])
    for dtype in dtypes[1:]:
        found = promote_types(found, DType.from_numpy(dtype))
    return found.to_numpy()


def promote(dtypes: tuple[numpy.dtype, ...]) -> numpy.dtype:
    """torch.promote_types over several numpy dtypes (cached)."""
    return _promote(dtypes)
