"""The vendor's own op: its schema, meta function and decomposition.

Every input check lives in the meta function, which runs before any kernel, so every backend
(and the decomposition) raises the same error for the same bad input.

>>> from opcore.extend import DType, TensorMeta
>>> SWIGLU.meta(TensorMeta((4, 1, 3), DType.FLOAT32), TensorMeta((2, 1), DType.FLOAT32)).shape
(4, 2, 3)
"""

from __future__ import annotations

from typing import Any

from opcore.extend import TensorMeta, broadcast_shapes, check_floating, check_same_dtype, define_op

__all__ = ["SWIGLU", "swiglu_decomposition", "swiglu_meta"]


def swiglu_meta(x: TensorMeta, gate: TensorMeta) -> TensorMeta:
    """Floating x, gate of the same dtype, shapes that broadcast; the output has the broadcast shape."""
    check_floating("x", x)
    check_same_dtype(("x", x), ("gate", gate))
    shape = broadcast_shapes(("x", x.shape), ("gate", gate.shape))
    return TensorMeta(shape, x.dtype, x.device)


def swiglu_decomposition(x: Any, gate: Any) -> Any:
    """x * silu(gate), each part dispatched: any backend with mul and silu runs the op."""
    from opcore.extend import run

    return run("mul", x, run("silu", gate))


SWIGLU = define_op(
    "example.swiglu(Tensor x, Tensor gate) -> Tensor",
    meta=swiglu_meta,
    doc="x * silu(gate), the gated unit of SwiGLU feed-forward blocks, with broadcasting.",
    tags=("elementwise", "vendor"),
    decomposition=swiglu_decomposition,
)
