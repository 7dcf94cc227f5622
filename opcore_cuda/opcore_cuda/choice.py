"""When the cuBLASLt epilogue kernels run and when cuda/aten does: their checkers.

They see TensorMeta, never data (the answer is cached per signature), and this module imports no
torch, because the plugin hands these functions to the registry at load time.

``torch._addmm_activation(b, x, w.t(), use_gelu=...)`` computes ``act(b + x @ w.t())`` with the
activation as a cuBLASLt epilogue when torch's conditions hold (a contiguous 1-D bias of N
elements, both matrices larger than 1x1, ...; otherwise a cuBLAS GEMM with the activation applied
after it, still correct). What it cannot do is declined here, so cuda/aten runs it:

- no bias (the epilogue adds one; ``_addmm_activation`` needs ``self``), or a bias that is not
  ``(out_features,)``; a 1-D weight;
- ``in_features == 0``: torch's CUDA addmm returns the bias at once for an empty reduction,
  skipping the activation (its CPU addmm applies it);
- ``linear_gelu`` with ``approximate="none"``: on CUDA both the GELU epilogue and torch's
  fallback after the GEMM compute the tanh approximation (``gelu_(result, "tanh")``).

>>> from opcore import DType, TensorMeta
>>> x, w = TensorMeta((8, 64), DType.FLOAT16), TensorMeta((32, 64), DType.FLOAT16)
>>> relu_epilogue_checker(x, w, TensorMeta((32,), DType.FLOAT16))
True
>>> gelu_epilogue_checker(x, w, TensorMeta((32,), DType.FLOAT16), "none")[:48]
"cuBLASLt's GELU epilogue is the tanh approximati"
"""

from __future__ import annotations

from opcore.extend import Layout, TensorMeta

__all__ = ["gelu_epilogue_checker", "relu_epilogue_checker"]


def relu_epilogue_checker(x: TensorMeta, w: TensorMeta, b: TensorMeta | None, *_: object) -> bool | str:
    """linear_relu (and linear_gelu's shapes): a 2-D weight, a (out_features,) bias, in_features > 0."""
    for meta in (x, w, b):
        if meta is not None and meta.layout is not Layout.STRIDED:
            return f"a {meta.layout} tensor (cuBLASLt takes strided tensors)"
    if w.ndim != 2:
        return "the cuBLASLt epilogue needs a 2-D weight (out_features, in_features)"
    if b is None:
        return "no bias: torch._addmm_activation fuses a bias epilogue and needs one (cuda/aten runs it)"
    if b.shape != (w.shape[0],):
        return f"the cuBLASLt bias epilogue takes a bias of shape ({w.shape[0]},) only, not {b.shape}"
    if w.shape[1] == 0:
        return "in_features is 0: torch's CUDA addmm returns the bias without the activation there"
    return True


def gelu_epilogue_checker(x: TensorMeta, w: TensorMeta, b: TensorMeta | None, approximate: str) -> bool | str:
    """linear_gelu: relu_epilogue_checker's conditions, and approximate="tanh" (what CUDA computes)."""
    if approximate != "tanh":
        return (
            f"cuBLASLt's GELU epilogue is the tanh approximation, not approximate={approximate!r} "
            "(cuda/aten runs the exact gelu)"
        )
    return relu_epilogue_checker(x, w, b)
