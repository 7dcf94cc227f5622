"""oneDNN fused convolution: conv2d + relu / silu in one call, with the weight packed once by prepare.

``torch.ops.mkldnn._convolution_pointwise(x, w, b, padding, stride, dilation, groups, attr, [], "")``
(note: padding comes before stride) runs the convolution with the activation as a oneDNN post-op;
``_reorder_convolution_weight(w, padding, stride, dilation, groups, input_size)`` packs the weight
for that input size (other input sizes still work, verified in tests/test_cpu_conv.py).

>>> import torch
>>> conv2d_relu(torch.ones(1, 2, 5, 5), torch.ones(3, 2, 3, 3), None, (1, 1), (0, 0), (1, 1), 1).shape
torch.Size([1, 3, 3, 3])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from opcore.extend import free_positions, with_free_args

__all__ = ["conv2d_relu", "conv2d_silu", "prepare_conv2d_relu", "prepare_conv2d_silu"]

Tensor = torch.Tensor
_pointwise = torch.ops.mkldnn._convolution_pointwise.default
_reorder = torch.ops.mkldnn._reorder_convolution_weight
_NO_SCALARS: list[Any] = []
_NAMES = ("x", "weight", "bias", "stride", "padding", "dilation", "groups")


def _conv(
    attr: str,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
) -> Tensor:
    if x.ndim == 3:  # (C, H, W): oneDNN wants a batch
        return _pointwise(x.unsqueeze(0), weight, bias, padding, stride, dilation, groups, attr, _NO_SCALARS, "")[0]
    return _pointwise(x, weight, bias, padding, stride, dilation, groups, attr, _NO_SCALARS, "")


def conv2d_relu(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
) -> Tensor:
    return _conv("relu", x, weight, bias, stride, padding, dilation, groups)


def conv2d_silu(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
) -> Tensor:
    return _conv("swish", x, weight, bias, stride, padding, dilation, groups)


def _prepare(attr: str) -> Callable[[tuple[Any, ...], frozenset[str]], Callable[..., Any]]:
    def prepare(args: tuple[Any, ...], constants: frozenset[str]) -> Callable[..., Any]:
        x, weight, bias, stride, padding, dilation, groups = args
        if "weight" in constants:
            size = list(x.shape) if x.ndim == 4 else [1, *x.shape]
            weight = _reorder(weight.contiguous(), padding, stride, dilation, groups, size)
        free = free_positions(args, _NAMES, constants)
        if free == [0]:

            def prepared(x: Tensor) -> Tensor:
                return _conv(attr, x, weight, bias, stride, padding, dilation, groups)

            return prepared

        def kernel(*values: Any) -> Tensor:
            return _conv(attr, *values)

        template = [None if i in free else value for i, value in enumerate((x, weight, *args[2:]))]
        return with_free_args(kernel, template, free)

    prepare.__qualname__ = f"prepare_conv2d[{attr}]"
    return prepare


prepare_conv2d_relu = _prepare("relu")
prepare_conv2d_silu = _prepare("swish")
