"""Reference kernel of the weight-only quantized linear: the weight dequantized in float64, then
the reference linear."""

from __future__ import annotations

import numpy

from opcore.quantize import dequantize
from opcore.reference._common import F64, finish, quiet
from opcore.reference.linear import _linear

__all__ = ["linear_wq"]

# the ops this module serves, each a module-level kernel named as its op: what the plugin registers
OPS = ("linear_wq",)


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
        return finish(_linear(x, weight, b), x.dtype)
