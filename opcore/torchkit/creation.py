"""Torch kernels of the creation family (re-exported by ``opcore.torchkit.torch_kernels``, whose
``OPS`` the registration reads): the ``*_like`` ops take x's shape and device, zeros, ones,
full and arange their ``device`` attribute. The dtype is always passed explicitly, resolved by
the contract's rule, so that ``torch.set_default_dtype`` cannot make a kernel disagree with the
meta function.

>>> zeros((2, 3), "int8", "cpu").dtype
torch.int8
"""

from __future__ import annotations

from typing import Any

import torch

from opcore.opset.creation import DEFAULT_FLOAT, arange_dtype, fill_dtype
from opcore.types import DType

__all__ = ["arange", "full", "full_like", "ones", "ones_like", "zeros", "zeros_like"]

Tensor = torch.Tensor


def _torch_dtype(dtype: str | None) -> Any:
    return None if dtype is None else DType.parse(dtype).to_torch()


def zeros_like(x: Tensor, dtype: str | None, device: str | None = None) -> Tensor:
    """torch.zeros_like, contiguous (torch keeps x's strides; the contract says nothing of them)."""
    return torch.zeros(x.shape, dtype=_torch_dtype(dtype) or x.dtype, device=x.device)


def ones_like(x: Tensor, dtype: str | None, device: str | None = None) -> Tensor:
    return torch.ones(x.shape, dtype=_torch_dtype(dtype) or x.dtype, device=x.device)


def full_like(x: Tensor, fill_value: Any, dtype: str | None, device: str | None = None) -> Tensor:
    return torch.full(x.shape, fill_value, dtype=_torch_dtype(dtype) or x.dtype, device=x.device)


def zeros(size: tuple[int, ...], dtype: str | None, device: str) -> Tensor:
    return torch.zeros(size, dtype=(DType.parse(dtype) if dtype else DEFAULT_FLOAT).to_torch(), device=device)


def ones(size: tuple[int, ...], dtype: str | None, device: str) -> Tensor:
    return torch.ones(size, dtype=(DType.parse(dtype) if dtype else DEFAULT_FLOAT).to_torch(), device=device)


def full(size: tuple[int, ...], fill_value: Any, dtype: str | None, device: str) -> Tensor:
    target = fill_dtype(fill_value, dtype)
    return torch.full(size, fill_value, dtype=target.to_torch(), device=device)


def arange(start: Any, end: Any, step: Any, dtype: str | None, device: str) -> Tensor:
    if end is None:
        start, end = 0, start
    target = arange_dtype(start, end, step, dtype)
    return torch.arange(start, end, step, dtype=target.to_torch(), device=device)
