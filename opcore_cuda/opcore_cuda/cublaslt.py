"""linear + relu / gelu with the activation fused into the GEMM as a cuBLASLt epilogue.

``torch._addmm_activation(b, x2d, w.t(), use_gelu=...)`` is ``act(b + x2d @ w.t())``. On CUDA torch
sends it through cuBLASLt with a RELU_BIAS or GELU_BIAS epilogue when the inputs allow (see
``opcore_cuda.choice``): one kernel instead of a GEMM, a bias add and an activation pass. Its gelu
is the tanh approximation on CUDA, so ``linear_gelu`` only comes here for ``approximate="tanh"``
(the checker sends "none" to cuda/aten). The same call exists on CPU, where it computes the exact
gelu: the tests here check shapes and relu numerics on CPU, the GPU tests the rest.

A batched x is flattened to (M, K) for the call (a view when it is contiguous) and the result,
fresh and contiguous, is viewed back.

>>> import torch
>>> linear_relu(torch.ones(2, 5, 3), torch.ones(4, 3), torch.zeros(4)).shape
torch.Size([2, 5, 4])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from opcore.extend import free_positions, with_free_args

__all__ = ["linear_gelu", "linear_relu", "prepare_linear_gelu", "prepare_linear_relu"]

Tensor = torch.Tensor
_addmm_activation = torch._addmm_activation
_LINEAR_NAMES = ("x", "w", "b", "approximate")


def _fused(x: Tensor, wt: Tensor, b: Tensor, use_gelu: bool) -> Tensor:
    if x.ndim == 2:
        return _addmm_activation(b, x, wt, use_gelu=use_gelu)
    out = _addmm_activation(b, x.reshape(-1, x.shape[-1]), wt, use_gelu=use_gelu)
    return out.view(*x.shape[:-1], wt.shape[1])


def linear_relu(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """relu(x @ w.T + b), the relu a cuBLASLt epilogue."""
    return _fused(x, w.t(), b, False)


def linear_gelu(x: Tensor, w: Tensor, b: Tensor, approximate: str) -> Tensor:
    """gelu(x @ w.T + b, approximate="tanh"), the gelu a cuBLASLt epilogue (the checker admits "tanh" only)."""
    return _fused(x, w.t(), b, True)


def _prepare(use_gelu: bool) -> Callable[[tuple[Any, ...], frozenset[str]], Callable[..., Any]]:
    kernel = linear_gelu if use_gelu else linear_relu

    def prepare(args: tuple[Any, ...], constants: frozenset[str]) -> Callable[..., Any]:
        """Constant w and b: keep w.t() (a view) and call torch._addmm_activation with one frame on top."""
        free = free_positions(args, _LINEAR_NAMES, constants)
        if free != [0]:
            template = [None if i in free else value for i, value in enumerate(args)]
            return with_free_args(kernel, template, free)
        wt, b = args[1].t(), args[2]

        def prepared(x: Tensor) -> Tensor:
            return _fused(x, wt, b, use_gelu)

        return prepared

    return prepare


prepare_linear_relu = _prepare(use_gelu=False)
prepare_linear_gelu = _prepare(use_gelu=True)
