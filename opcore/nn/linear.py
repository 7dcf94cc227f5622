"""``Linear`` and the fused ``LinearReLU``, ``LinearSiLU``, ``LinearGELU``.

Ranks: the ops are resolved for 2-D inputs (``example_rows`` x in_features) and the forward
flattens every leading dimension around the call (``x.reshape(-1, in_features)``), so one resolved
op -- one packed weight, one ONNX Runtime session, one compiled OpenVINO model -- serves inputs of
every rank, as ``torch.nn.Linear`` takes them.

>>> layer = opcore.nn.LinearSiLU(1024, 2816, backend=["openvino", "cpu"])   # doctest: +SKIP
>>> layer                                                                    # doctest: +SKIP
LinearSiLU(in_features=1024, out_features=2816, bias=True, dtype=float32, backend=openvino (openvino prepared))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from opcore.errors import ArgumentError
from opcore.nn.binding import Bound, Fused, Single, Step
from opcore.nn.state import (
    DEFAULT_EXAMPLE_ROWS,
    LinearWeights,
    PreparedModule,
    init_linear,
    share,
    source,
    torch_dtype,
    unbound,
)
from opcore.quantize import no_options_without_weights

__all__ = ["WEIGHTS", "Linear", "LinearGELU", "LinearReLU", "LinearSiLU", "linear_step", "quantized_step"]

# Linear(weights=...): the code width of each option (opcore.quantize, op linear_wq)
WEIGHTS: dict[str | None, int] = {None: 0, "int8": 8, "int4": 4}

Tensor = torch.Tensor


def linear_step(
    op: str, x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None = None, **attrs: Any
) -> Step:
    """The step resolving ``op`` (linear, linear_relu/silu/gelu) with the weights as constants; a fused
    op carries its parts, linear then the activation, for a backend without the fused kernel.
    """
    constants = ("w", "b") if bias is not None else ("w",)
    single = Single(op, (x, weight.detach(), None if bias is None else bias.detach()), constants, attrs)
    if activation is None:
        return single
    rows, out = x.shape[0], weight.shape[0]
    after = Single(activation, (x.new_zeros(rows, out),), (), attrs)
    return Fused(single, (Single("linear", single.args, constants), after), _chain)


def quantized_step(x: Tensor, weight: Tensor, bias: Tensor | None, bits: int, group_size: int | None) -> Step:
    """The step resolving ``linear_wq`` with the weight quantized (round to nearest, symmetric) as constants."""
    from opcore.quantize import quantize_weight

    qw = quantize_weight(weight.detach(), bits=bits, group_size=group_size)
    q, scale = qw.qweight.to(weight.device), qw.scale.to(weight.device)
    constants = ("qweight", "scale") + (("b",) if bias is not None else ())
    args = (x, q, scale, None, None if bias is None else bias.detach())
    return Single("linear_wq", args, constants, qw.attrs)


def _chain(first: Callable[[Tensor], Tensor], then: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    return lambda x: then(first(x))


class Linear(PreparedModule):
    """``torch.nn.Linear`` with its kernel resolved once and its weight prepared by that kernel.

    Parameters are torch.nn.Linear's (``weight``, ``bias``; same state_dict keys, same initial
    values for the same seed). ``backend``: None (ranked default), a name, or names in preference
    order. ``grad``: "autograd" (the torch.nn.functional path when a gradient is needed) or "raise".
    ``example_rows``: the rows of the example input the kernel is chosen and packed for.
    ``weights``: None, or "int8" / "int4": the forward runs ``linear_wq`` on the weight quantized
    at bind (opcore.quantize, symmetric; ``group_size`` None: per channel for int8, 128 for int4);
    the float parameter stays the module's state (state_dict, gradients through F.linear).

    >>> layer = opcore.nn.Linear(1024, 1024, backend="cpu", dtype=torch.bfloat16)   # doctest: +SKIP
    >>> with torch.no_grad(): y = layer(torch.randn(4, 128, 1024, dtype=torch.bfloat16))   # doctest: +SKIP
    """

    # the fused op and the activation of its parts; None for plain linear
    op = "linear"
    activation: str | None = None

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        backend: str | Sequence[str] | None = None,
        dtype: Any = None,
        device: Any = None,
        grad: str = "autograd",
        example_rows: int = DEFAULT_EXAMPLE_ROWS,
        weights: str | None = None,
        group_size: int | None = None,
    ) -> None:
        super().__init__(backend, grad, example_rows)
        what = f"opcore.nn.{type(self).__name__}"
        if weights not in WEIGHTS:
            raise ArgumentError(op=what, arg="weights", expected="None, 'int8' or 'int4'", found=repr(weights))
        if weights is not None and self.activation is not None:
            raise ArgumentError(
                op=what,
                arg="weights",
                expected="None: the fused linear + activation ops have no quantized kernel",
                found=repr(weights),
                fix="use opcore.nn.Linear(weights=...) followed by the activation",
            )
        if weights is None:
            no_options_without_weights(what, group_size=group_size)
        self.weights, self.group_size = weights, group_size
        kinds = {"dtype": torch_dtype(dtype), "device": device}
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features, **kinds))
        self.bias = nn.Parameter(torch.empty(out_features, **kinds)) if bias else None
        if not self.weight.is_meta:
            init_linear(self.weight, self.bias)
        self._call: Callable[[Tensor], Tensor] = unbound
        self.rebind()

    @classmethod
    def from_torch(
        cls,
        linear: nn.Linear,
        *,
        backend: str | Sequence[str] | None = None,
        dtype: Any = None,
        grad: str = "autograd",
        example_rows: int = DEFAULT_EXAMPLE_ROWS,
        **attrs: Any,
    ) -> Linear:
        """This module on the parameters of ``linear`` (shared, not copied, unless ``dtype`` casts them).

        >>> fast = opcore.nn.Linear.from_torch(torch.nn.Linear(64, 32))   # doctest: +SKIP
        """
        source(
            linear, (nn.Linear, LinearWeights), f"opcore.nn.{cls.__name__}.from_torch", "linear", "a torch.nn.Linear"
        )
        module = cls(
            linear.in_features,
            linear.out_features,
            linear.bias is not None,
            backend=backend,
            device="meta",
            grad=grad,
            example_rows=example_rows,
            **attrs,
        )
        cast = torch_dtype(dtype)
        module.weight = share(linear.weight, cast)
        module.bias = share(linear.bias, cast) if linear.bias is not None else None
        module.rebind()
        return module

    def _steps(self, dtype: torch.dtype, device: torch.device) -> list[Step]:
        x = torch.zeros(self.example_rows, self.in_features, dtype=dtype, device=device)
        if self.weights is not None:
            return [quantized_step(x, self.weight, self.bias, WEIGHTS[self.weights], self.group_size)]
        return [linear_step(self.op, x, self.weight, self.bias, self.activation, **self._attrs())]

    def _attrs(self) -> dict[str, Any]:
        return {}

    def _on_bound(self, bound: Bound) -> None:
        self._call = bound.calls[0]

    def forward(self, x: Tensor) -> Tensor:
        if self._needs_grad(x):
            return self._gradient_path(x)
        self._fresh()
        if x.dtype is not self._dtype or x.device != self._device:
            self._check_input(x)
        if x.ndim == 2:
            return self._call(x)
        self._check_trailing(x, (self.in_features,))
        return self._call(x.reshape(-1, self.in_features)).reshape(*x.shape[:-1], self.out_features)

    def _autograd(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        quantized = "" if self.weights is None else f"weights={self.weights}, "
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            + quantized
            + self._common_repr()
        )


class LinearReLU(Linear):
    """``relu(linear(x))`` as one fused op (oneDNN post-op on cpu); built from linear + relu on a
    backend without the fused kernel (``extra_repr`` says "linear+relu by parts").
    """

    op = "linear_relu"
    activation = "relu"

    def _autograd(self, x: Tensor) -> Tensor:
        return F.relu(F.linear(x, self.weight, self.bias))


class LinearSiLU(Linear):
    """``silu(linear(x))`` as one fused op; by parts where the backend has no fused kernel."""

    op = "linear_silu"
    activation = "silu"

    def _autograd(self, x: Tensor) -> Tensor:
        return F.silu(F.linear(x, self.weight, self.bias))


class LinearGELU(Linear):
    """``gelu(linear(x), approximate)`` as one fused op; by parts where the backend has no fused kernel."""

    op = "linear_gelu"
    activation = "gelu"

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        approximate: str = "none",
        backend: str | Sequence[str] | None = None,
        dtype: Any = None,
        device: Any = None,
        grad: str = "autograd",
        example_rows: int = DEFAULT_EXAMPLE_ROWS,
    ) -> None:
        self.approximate = approximate  # before super().__init__ binds (_attrs reads it); a str needs no Module state
        super().__init__(
            in_features,
            out_features,
            bias,
            backend=backend,
            dtype=dtype,
            device=device,
            grad=grad,
            example_rows=example_rows,
        )

    def _attrs(self) -> dict[str, Any]:
        return {"approximate": self.approximate}

    def _autograd(self, x: Tensor) -> Tensor:
        return F.gelu(F.linear(x, self.weight, self.bias), approximate=self.approximate)

    def extra_repr(self) -> str:
        return super().extra_repr().replace(", dtype=", f", approximate={self.approximate!r}, dtype=", 1)
