"""The few ops where torch on CUDA needs more than the shared kernels (``opcore.torchkit.torch_kernels``).

Each function wraps the shared kernel (never a copy of it) and is registered in its place, with
the same "aten" label, through ``register_torch_kernels(..., overrides=plugin.CUDA_OVERRIDES)``:

- ``div``: CUDA's integer division by zero does not raise, it returns garbage (-1); the contract
  says it is the caller's error, so an integer division with a rounding mode checks the divisor
  first (one reduction and a host sync, only in that case).
- ``embedding``: an index out of range is a device-side assert on CUDA, which leaves the process's
  CUDA context unusable; the indices are checked first (one aminmax and a host sync per call).
- ``layer_norm``: CUDA's kernel reads the weight and bias in x's dtype and refuses float32
  parameters beside a float16/bfloat16 x, which the contract allows (torch's CPU kernel computes
  that mix in float32): such a call is computed in float32 and cast back.

>>> import torch
>>> div(torch.tensor([4, 5]), 2, "floor").tolist()
[2, 2]
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from opcore.extend import ArgumentError
from opcore.extend import torch_kernels as shared

__all__ = ["div", "embedding", "layer_norm"]

Tensor = torch.Tensor


def div(x: Tensor, other: Any, rounding_mode: str | None) -> Tensor:
    """x / other; an integer division (trunc or floor) by zero raises, as on CPU and in the reference."""
    if rounding_mode is not None and not torch.result_type(x, other).is_floating_point:
        zero = bool((other == 0).any()) if isinstance(other, Tensor) else other == 0
        if zero:
            raise ArgumentError(
                arg="other",
                expected=f"no zero divisor for an integer division with rounding_mode={rounding_mode!r}",
                found="a zero",
                fix="divide floating tensors to get inf/nan instead",
            )
    return shared.div(x, other, rounding_mode)


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None) -> Tensor:
    """The rows of weight; indices are checked on the way in (CUDA would assert on the device)."""
    rows = weight.shape[0]
    if input.numel():
        low, high = torch.stack(torch.aminmax(input)).tolist()
        if low < 0 or high >= rows:
            raise ArgumentError(
                arg="input",
                expected=f"indices in [0, {rows - 1}] (the weight has {rows} rows)",
                found=f"index {low if low < 0 else high} (index out of range)",
                fix="indices must be non-negative and below num_embeddings",
            )
    return shared.embedding(input, weight, padding_idx)


def layer_norm(
    x: Tensor, normalized_shape: tuple[int, ...], weight: Tensor | None, bias: Tensor | None, eps: float
) -> Tensor:
    """F.layer_norm; float32 parameters beside a float16/bfloat16 x are computed in float32."""
    if (weight is not None and weight.dtype != x.dtype) or (bias is not None and bias.dtype != x.dtype):
        wide = F.layer_norm(
            x.float(),
            normalized_shape,
            None if weight is None else weight.float(),
            None if bias is None else bias.float(),
            eps,
        )
        return wide.to(x.dtype)
    return shared.layer_norm(x, normalized_shape, weight, bias, eps)
