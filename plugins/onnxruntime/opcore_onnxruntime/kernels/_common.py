"""What the ONNX builders share: dtypes, PyTorch's result dtypes, and compute-dtype rules.

Rules, as PyTorch's CPU kernels compute:
- float16 math runs in float32 inside the graph (Cast in, Cast out), as torch's "opmath";
- integer arithmetic runs in int64 and is cast back, so narrow integers wrap as in torch;
- Python numbers are fed as 0-D float64 / int64 / bool inputs and cast in the graph, so one
  session serves every value and no numpy overflow warning is raised for out-of-range values.
"""

from __future__ import annotations

import numpy

from opcore.extend import result_dtype
from opcore_onnxruntime.graph import Graph, Scalar, Value, onnx_type

__all__ = [
    "BOOL",
    "F16",
    "F32",
    "F64",
    "I32",
    "I64",
    "binary_result",
    "compute_float",
    "finish",
    "onnx_stash",
    "operand",
    "to_compute",
]

BOOL = numpy.dtype(numpy.bool_)
F16 = numpy.dtype(numpy.float16)
F32 = numpy.dtype(numpy.float32)
F64 = numpy.dtype(numpy.float64)
I32 = numpy.dtype(numpy.int32)
I64 = numpy.dtype(numpy.int64)


def _dtype_and_rank(value: Value) -> tuple[numpy.dtype, int]:
    return value.dtype, value.rank or 0


def binary_result(x: Value, other: Value | Scalar) -> numpy.dtype:
    """torch.result_type(x, other): 0-D tensors and Python numbers count less than tensors."""
    return result_dtype(x, other, _dtype_and_rank)


def compute_float(dtype: numpy.dtype) -> numpy.dtype:
    """The dtype float math runs in for a result of ``dtype`` (float16 -> float32)."""
    return F32 if dtype == F16 else dtype


def to_compute(dtype: numpy.dtype) -> numpy.dtype:
    """The dtype arithmetic runs in for a result of ``dtype``: float32 for float16, int64 for integers."""
    if dtype.kind in "iu":
        return I64
    return compute_float(dtype)


def operand(g: Graph, value: Value | Scalar, dtype: numpy.dtype) -> Value:
    """A tensor or a Python number, as a value of ``dtype``."""
    if isinstance(value, Scalar):
        value = g.scalar(value)
    return g.cast(value, dtype)


def finish(g: Graph, value: Value, dtype: numpy.dtype) -> Value:
    """The result in the contract's output dtype."""
    return g.cast(value, dtype)


def onnx_stash(dtype: numpy.dtype) -> int:
    """The ``stash_type`` of a normalization: its statistics in the compute dtype (float64 stays exact)."""
    return onnx_type(dtype)
