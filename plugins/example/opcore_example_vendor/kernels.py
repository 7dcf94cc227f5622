"""The vendor's kernels: numpy here, your runtime in a real plugin.

Kernels get the bound arguments in schema order and return exactly the contract's output dtype.
This module may import the runtime at the top: opcore imports it only when a kernel first runs.
"""

from __future__ import annotations

import numpy

__all__ = ["clamp", "silu", "swiglu"]


def silu(x: numpy.ndarray) -> numpy.ndarray:
    """x * sigmoid(x) computed in x's own dtype (float32 or float64): no float64 round trip."""
    with numpy.errstate(all="ignore"):  # exp(-x) overflows for very negative x (x / inf = -0); nan stays nan
        return numpy.asarray(x / (1.0 + numpy.exp(-x)))  # numpy gives a scalar for 0-D: return an array


def swiglu(x: numpy.ndarray, gate: numpy.ndarray) -> numpy.ndarray:
    """x * silu(gate) with broadcasting; float16 is computed in float32 and rounded once."""
    compute = numpy.float32 if x.dtype == numpy.float16 else x.dtype
    g = gate.astype(compute, copy=False)
    with numpy.errstate(all="ignore"):
        out = x.astype(compute, copy=False) * (g / (1.0 + numpy.exp(-g)))
    return numpy.asarray(out).astype(x.dtype, copy=False)


def clamp(x: numpy.ndarray, min: float | None, max: float | None) -> numpy.ndarray:
    """min(max(x, min), max) for Python-number bounds (the checker declines tensor ones); None: no bound.
    NaN stays NaN, and min > max gives max, as torch.clamp."""
    out = x
    with numpy.errstate(all="ignore"):
        if min is not None:
            out = numpy.maximum(out, numpy.asarray(min, dtype=x.dtype))
        if max is not None:
            out = numpy.minimum(out, numpy.asarray(max, dtype=x.dtype))
    return numpy.asarray(out, dtype=x.dtype)
