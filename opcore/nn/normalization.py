"""``RMSNorm`` and ``LayerNorm``: torch.nn's modules with the norm resolved once.

Ranks: resolved for ``(example_rows, *normalized_shape)`` and called on the input flattened to
that rank, so one resolved op serves every rank. Without parameters (``elementwise_affine=False``)
a module binds for its input's dtype and device at the first forward, and again when they change.

>>> norm = opcore.nn.RMSNorm(1024, eps=1e-6, backend="openvino")   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from opcore.nn.binding import Bound, Single, Step
from opcore.nn.state import DEFAULT_EXAMPLE_ROWS, PreparedModule, share, source, torch_dtype, unbound

__all__ = ["LayerNorm", "RMSNorm"]

Tensor = torch.Tensor


def _shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


class _Norm(PreparedModule):
    """What RMSNorm and LayerNorm share: the flattening forward and the parameterless case."""

    normalized_shape: tuple[int, ...]
    _call: Callable[[Tensor], Tensor]

    def _on_bound(self, bound: Bound) -> None:
        self._call = bound.calls[0]

    def _example(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        return torch.zeros(self.example_rows, *self.normalized_shape, dtype=dtype, device=device)

    def forward(self, x: Tensor) -> Tensor:
        if self._needs_grad(x):
            return self._gradient_path(x)
        if self.weight is None:
            self._follow_input(x)
        else:
            self._fresh()
            if x.dtype is not self._dtype or x.device != self._device:
                self._check_input(x)
        shape = self.normalized_shape
        if x.ndim == len(shape) + 1:
            return self._call(x)
        self._check_trailing(x, tuple(shape))
        return self._call(x.reshape(-1, *shape)).reshape(x.shape)


class RMSNorm(_Norm):
    """``torch.nn.RMSNorm`` (eps None: the dtype's machine epsilon, as torch) on the ``rms_norm`` op.

    >>> norm = opcore.nn.RMSNorm(1024, eps=1e-6)   # doctest: +SKIP
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float | None = None,
        elementwise_affine: bool = True,
        *,
        backend: str | Sequence[str] | None = None,
        dtype: Any = None,
        device: Any = None,
        grad: str = "autograd",
        example_rows: int = DEFAULT_EXAMPLE_ROWS,
    ) -> None:
        super().__init__(backend, grad, example_rows)
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        kinds = {"dtype": torch_dtype(dtype), "device": device}
        self.weight = nn.Parameter(torch.ones(self.normalized_shape, **kinds)) if elementwise_affine else None
        self._dtype = kinds["dtype"]
        self._call = unbound
        if self.weight is not None:
            self.rebind()

    @classmethod
    def from_torch(
        cls,
        norm: nn.RMSNorm,
        *,
        backend: str | Sequence[str] | None = None,
        dtype: Any = None,
        grad: str = "autograd",
        example_rows: int = DEFAULT_EXAMPLE_ROWS,
    ) -> RMSNorm:
        """This module on the weight of ``norm`` (shared unless ``dtype`` casts it)."""
        source(norm, (nn.RMSNorm, RMSNorm), "opcore.nn.RMSNorm.from_torch", "norm", "a torch.nn.RMSNorm")
        module = cls(
            norm.normalized_shape,
            norm.eps,
            norm.weight is not None,
            backend=backend,
            device="meta",
            grad=grad,
            example_rows=example_rows,
        )
        if norm.weight is not None:
            module.weight = share(norm.weight, torch_dtype(dtype))
            module.rebind()
        else:
            module._dtype = torch_dtype(dtype)
        return module

    def _steps(self, dtype: torch.dtype, device: torch.device) -> list[Step]:
        weight = None if self.weight is None else self.weight.detach()
        x = self._example(dtype, device)
        constants = ("weight",) if weight is not None else ()
        return [Single("rms_norm", (x, self.normalized_shape, weight, self.eps), constants)]

    def _autograd(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
            + self._common_repr()
        )


class LayerNorm(_Norm):
    """``torch.nn.LayerNorm`` on the ``layer_norm`` op.

    >>> norm = opcore.nn.LayerNorm(1024, backend=["onnxruntime", "cpu"])   # doctest: +SKIP
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        *,
        backend: str | Sequence[str] | None = None,
        dtype: Any = None,
        device: Any = None,
        grad: str = "autograd",
        example_rows: int = DEFAULT_EXAMPLE_ROWS,
    ) -> None:
        super().__init__(backend, grad, example_rows)
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        kinds = {"dtype": torch_dtype(dtype), "device": device}
        affine = elementwise_affine
        self.weight = nn.Parameter(torch.ones(self.normalized_shape, **kinds)) if affine else None
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape, **kinds)) if affine and bias else None
        self._dtype = kinds["dtype"]
        self._call = unbound
        if self.weight is not None:
            self.rebind()

    @classmethod
    def from_torch(
        cls,
        norm: nn.LayerNorm,
        *,
        backend: str | Sequence[str] | None = None,
        dtype: Any = None,
        grad: str = "autograd",
        example_rows: int = DEFAULT_EXAMPLE_ROWS,
    ) -> LayerNorm:
        """This module on the parameters of ``norm`` (shared unless ``dtype`` casts them)."""
        source(norm, (nn.LayerNorm, LayerNorm), "opcore.nn.LayerNorm.from_torch", "norm", "a torch.nn.LayerNorm")
        module = cls(
            norm.normalized_shape,
            norm.eps,
            norm.elementwise_affine,
            norm.bias is not None,
            backend=backend,
            device="meta",
            grad=grad,
            example_rows=example_rows,
        )
        cast = torch_dtype(dtype)
        if norm.weight is not None:
            module.weight = share(norm.weight, cast)
            module.bias = share(norm.bias, cast) if norm.bias is not None else None
            module.rebind()
        else:
            module._dtype = cast
        return module

    def _steps(self, dtype: torch.dtype, device: torch.device) -> list[Step]:
        weight = None if self.weight is None else self.weight.detach()
        bias = None if self.bias is None else self.bias.detach()
        constants = tuple(name for name, value in (("weight", weight), ("bias", bias)) if value is not None)
        x = self._example(dtype, device)
        return [Single("layer_norm", (x, self.normalized_shape, weight, bias, self.eps), constants)]

    def _autograd(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
            + self._common_repr()
        )
