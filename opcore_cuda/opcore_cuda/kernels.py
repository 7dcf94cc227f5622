"""The few ops where torch on CUDA needs more than the shared kernels (``opcore.torchkit.torch_kernels``).

Each function wraps the shared kernel (never a copy of it) and is registered in its place, with
the same "aten" label, through ``register_torch_kernels(..., overrides=plugin.CUDA_OVERRIDES)``:

- ``addmm`` is not here: CUDA has no integer GEMM, so ``opcore_cuda.dtypes`` declares it floating.
- ``clamp``: CUDA's scalar clamp ignores a NaN bound (CPU and the reference give NaN everywhere).
- ``div``: CUDA's integer division by zero does not raise, it returns garbage (-1); the contract
  says it is the caller's error, so an integer division with a rounding mode checks the divisor
  first (one reduction and a host sync, only in that case).
- ``embedding``, ``embedding_wq``, ``gather``, ``index``: an index out of range is a device-side
  assert on CUDA, which leaves the process's CUDA context unusable; the indices are checked first
  (one aminmax and a host sync per call).
- ``layer_norm``, ``group_norm``: CUDA's kernels read the weight and bias in x's dtype and refuse
  float32 parameters beside a float16/bfloat16 x, which the contract allows (torch's CPU kernels
  compute that mix in float32): such a call is computed in float32 and cast back.

The checks that read data on the host (div's, the indices') need a host sync, which a CUDA graph
cannot hold: while the current stream is being captured (``opcore.graph``'s replay of a cuda plan
captures its steps after two checked warm-up runs) they are left out, so a replayed plan does what
torch's own kernels do with such data.

>>> import torch
>>> div(torch.tensor([4, 5]), 2, "floor").tolist()
[2, 2]
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from opcore.extend import ArgumentError, check_embedding_range, check_index_range
from opcore.extend import torch_kernels as shared

__all__ = ["clamp", "div", "embedding", "embedding_wq", "gather", "group_norm", "index", "layer_norm"]

Tensor = torch.Tensor


def _may_sync(t: Tensor) -> bool:
    """False while a CUDA graph captures the current stream (a host read of t cannot be captured)."""
    return not (t.is_cuda and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


def _index_bounds(index: Tensor) -> tuple[int, int] | None:
    """The smallest and largest index (one aminmax and a host sync); None for no indices, or while
    a CUDA graph captures the stream (the check is left out there)."""
    if not index.numel() or not _may_sync(index):
        return None
    low, high = torch.stack(torch.aminmax(index)).tolist()
    return low, high


def _check_indices(arg: str, index: Tensor, size: int, *, negative: bool) -> None:
    """The contract's index-range error before a kernel that would assert on the device."""
    bounds = _index_bounds(index)
    if bounds is not None:
        check_index_range(arg, *bounds, size, negative=negative)


def clamp(x: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """torch.clamp; a NaN scalar bound makes every element NaN, as on CPU."""
    out = torch.clamp(x, min, max)
    if any(isinstance(b, float) and math.isnan(b) for b in (min, max)) and out.is_floating_point():
        out.fill_(math.nan)
    return out


def div(x: Tensor, other: Any, rounding_mode: str | None) -> Tensor:
    """x / other; an integer division (trunc or floor) by zero raises, as on CPU and in the reference."""
    if rounding_mode is not None and not torch.result_type(x, other).is_floating_point and _may_sync(x):
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
    bounds = _index_bounds(input)
    if bounds is not None:
        check_embedding_range(*bounds, weight.shape[0])
    return shared.embedding(input, weight, padding_idx)


def embedding_wq(
    input: Tensor, qweight: Tensor, scale: Tensor, zero: Tensor | None, bits: int, group_size: int
) -> Tensor:
    """The dequantized rows at the indices; indices are checked on the way in (the table: the codes)."""
    bounds = _index_bounds(input)
    if bounds is not None:
        check_embedding_range(*bounds, qweight.shape[0], noun="table")
    return shared.embedding_wq(input, qweight, scale, zero, bits, group_size)


def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """x's values at index along dim; the index is checked on the way in."""
    _check_indices("index", index, x.shape[dim] if x.dim() else 1, negative=False)
    return shared.gather(x, dim, index)


def index(x: Tensor, indices: tuple[Tensor | None, ...]) -> Tensor:
    """x[i0, :, i2, ...]; each index tensor is checked on the way in (boolean masks are not indices)."""
    for i, idx in enumerate(indices):
        if idx is not None and idx.dtype != torch.bool:
            _check_indices(f"indices[{i}]", idx, x.shape[i], negative=True)
    return shared.index(x, indices)


def _mixed(x: Tensor, *parameters: Tensor | None) -> bool:
    return any(p is not None and p.dtype != x.dtype for p in parameters)


def _wide(p: Tensor | None) -> Tensor | None:
    return None if p is None else p.float()


def layer_norm(
    x: Tensor, normalized_shape: tuple[int, ...], weight: Tensor | None, bias: Tensor | None, eps: float
) -> Tensor:
    """F.layer_norm; float32 parameters beside a float16/bfloat16 x are computed in float32."""
    if _mixed(x, weight, bias):
        return F.layer_norm(x.float(), normalized_shape, _wide(weight), _wide(bias), eps).to(x.dtype)
    return shared.layer_norm(x, normalized_shape, weight, bias, eps)


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None, bias: Tensor | None, eps: float) -> Tensor:
    """torch.group_norm; float32 parameters beside a float16/bfloat16 x are computed in float32."""
    if _mixed(x, weight, bias):
        return torch.group_norm(x.float(), num_groups, _wide(weight), _wide(bias), eps).to(x.dtype)
    return shared.group_norm(x, num_groups, weight, bias, eps)
