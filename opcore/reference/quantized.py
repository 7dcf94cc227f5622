"""Reference kernels of the weight-only quantized ops: the weight (or the rows picked) dequantized
in float64, then the reference linear (or the rows as they are)."""

from __future__ import annotations

import numpy

from opcore.quantize import dequantize
from opcore.reference._common import F64, finish, quiet
from opcore.reference.linear import linear_f64
from opcore.reference.nn import embedding

__all__ = ["embedding_wq", "linear_wq"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = ("embedding_wq", "linear_wq")


def linear_wq(
    x: numpy.ndarray,
    qweight: numpy.ndarray,
    scale: numpy.ndarray,
    zero: numpy.ndarray | None,
    b: numpy.ndarray | None,
    bits: int,
    group_size: int,
) -> numpy.ndarray:
    """x @ ((qweight - zero) * scale).T + b, in float64."""
    with quiet():
        weight = dequantize(qweight, scale, zero, bits, group_size, F64)
        return finish(linear_f64(x, weight, b), x.dtype)


def embedding_wq(
    input: numpy.ndarray,
    qweight: numpy.ndarray,
    scale: numpy.ndarray,
    zero: numpy.ndarray | None,
    bits: int,
    group_size: int,
) -> numpy.ndarray:
    """The rows at the indices, dequantized in float64, in the scale's dtype."""
    flat = input.reshape(-1)
    codes = embedding(flat, qweight, None)  # checks the indices against the rows
    rows = dequantize(codes, scale[flat], None if zero is None else zero[flat], bits, group_size, F64)
    return finish(rows.reshape(*input.shape, rows.shape[-1]), scale.dtype)
