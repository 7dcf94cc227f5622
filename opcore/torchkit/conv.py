"""Torch kernels of the convolutions (re-exported by ``opcore.torchkit.torch_kernels``, whose ``OPS``
the registration reads): conv1d and conv2d with explicit padding sizes or "same"/"valid".

A string padding is turned into sizes here, as torch's own ``padding="same"`` does: symmetric
sizes go to the convolution; uneven ones (an even kernel) pad the input first, the odd one on the
right and bottom. Doing it here keeps torch's UserWarning about that copy out of every call.

>>> import torch
>>> conv1d(torch.ones(1, 2, 5), torch.ones(3, 2, 2), None, (1,), "same", (1,), 1).shape
torch.Size([1, 3, 5])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from opcore.opset.nn import Padding, conv_pads

__all__ = ["conv1d", "conv2d"]

Tensor = torch.Tensor
_NARROW_INTS = frozenset({torch.int32, torch.int16, torch.int8, torch.uint8})


def _convolve(
    fn: Callable[..., Tensor],
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: tuple[int, ...],
    padding: Padding,
    dilation: tuple[int, ...],
    groups: int,
) -> Tensor:
    """torch's dilated convolution has no int8/16/32 kernel: those run in int64 and are cast back,
    which gives the same result (integer sums wrap modulo 2**bits either way)."""
    sizes: Any = padding
    if isinstance(padding, str):
        before, after = conv_pads(padding, tuple(weight.shape[2:]), dilation)
        sizes = before
        if before != after:  # F.pad takes the last dim first: (left, right, top, bottom)
            x = F.pad(x, [p for b, a in zip(reversed(before), reversed(after)) for p in (b, a)])
            sizes = (0,) * len(before)
    if x.dtype in _NARROW_INTS and any(d != 1 for d in dilation):
        wide = fn(x.long(), weight.long(), None if bias is None else bias.long(), stride, sizes, dilation, groups)
        return wide.to(x.dtype)
    return fn(x, weight, bias, stride, sizes, dilation, groups)


def conv1d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: tuple[int, ...],
    padding: Padding,
    dilation: tuple[int, ...],
    groups: int,
) -> Tensor:
    return _convolve(F.conv1d, x, weight, bias, stride, padding, dilation, groups)


def conv2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: tuple[int, ...],
    padding: Padding,
    dilation: tuple[int, ...],
    groups: int,
) -> Tensor:
    return _convolve(F.conv2d, x, weight, bias, stride, padding, dilation, groups)
