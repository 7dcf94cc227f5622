"""``GatedMLP``: LLaMA's feed-forward block, ``down(silu(gate(x)) * up(x))``, as the ``gated_mlp`` op.

On the cpu backend that is three oneDNN calls on packed weights (silu fused into the gate GEMM,
the product with the gate into the up GEMM). A backend without a gated_mlp kernel builds it from
its parts on that backend: linear_silu (itself by parts where needed), linear, mul, linear.

>>> mlp = opcore.nn.GatedMLP(1024, 2816, dtype=torch.bfloat16)   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from opcore.errors import ArgumentError, ShapeError
from opcore.nn.binding import Bound, Fused, Single, Step
from opcore.nn.linear import linear_step
from opcore.nn.state import (
    DEFAULT_EXAMPLE_ROWS,
    LinearLike,
    LinearWeights,
    PreparedModule,
    source,
    torch_dtype,
    unbound,
)

__all__ = ["GatedMLP"]

Tensor = torch.Tensor
DEFAULT_NAMES = ("gate_proj", "up_proj", "down_proj")


def _gated(
    gate: Callable[[Tensor], Tensor],
    up: Callable[[Tensor], Tensor],
    mul: Callable[[Tensor, Tensor], Tensor],
    down: Callable[[Tensor], Tensor],
) -> Callable[[Tensor], Tensor]:
    return lambda x: down(mul(gate(x), up(x)))


class GatedMLP(PreparedModule):
    """``down(silu(gate(x)) * up(x))`` with bias-free projections (the gated_mlp contract has none).

    The three projections' parameters live in children named by ``names`` (default
    ``gate_proj``, ``up_proj``, ``down_proj``), so a converted model keeps its state_dict keys:
    pass the names of the module it replaces.

    >>> mlp = opcore.nn.GatedMLP(1024, 2816, backend="cpu")   # doctest: +SKIP
    >>> mlp.gate_proj.weight.shape                            # doctest: +SKIP
    torch.Size([2816, 1024])
    """

    def __init__(
        self,
        hidden_features: int,
        intermediate_features: int,
        out_features: int | None = None,
        *,
        names: Sequence[str] = DEFAULT_NAMES,
        backend: str | Sequence[str] | None = None,
        dtype: Any = None,
        device: Any = None,
        grad: str = "autograd",
        example_rows: int = DEFAULT_EXAMPLE_ROWS,
    ) -> None:
        super().__init__(backend, grad, example_rows)
        if len(names) != 3 or len(set(names)) != 3 or not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise ArgumentError(
                op="opcore.nn.GatedMLP", arg="names", expected="three distinct identifiers", found=repr(names)
            )
        out = hidden_features if out_features is None else out_features
        kinds = {"dtype": torch_dtype(dtype), "device": device}
        self.hidden_features = hidden_features
        self.intermediate_features = intermediate_features
        self.out_features = out
        self.names = tuple(names)
        self.add_module(names[0], LinearWeights(hidden_features, intermediate_features, False, **kinds))
        self.add_module(names[1], LinearWeights(hidden_features, intermediate_features, False, **kinds))
        self.add_module(names[2], LinearWeights(intermediate_features, out, False, **kinds))
        self._call: Callable[[Tensor], Tensor] = unbound
        self.rebind()

    @classmethod
    def from_linears(
        cls,
        gate: LinearLike,
        up: LinearLike,
        down: LinearLike,
        *,
        names: Sequence[str] = DEFAULT_NAMES,
        backend: str | Sequence[str] | None = None,
        dtype: Any = None,
        grad: str = "autograd",
        example_rows: int = DEFAULT_EXAMPLE_ROWS,
    ) -> GatedMLP:
        """This module on three bias-free ``torch.nn.Linear`` (their parameters shared unless ``dtype`` casts).

        >>> mlp = opcore.nn.GatedMLP.from_linears(m.gate, m.up, m.down, names=("gate", "up", "down"))  # doctest: +SKIP
        """
        for arg, layer in zip(("gate", "up", "down"), (gate, up, down)):
            source(layer, (torch.nn.Linear, LinearWeights), "opcore.nn.GatedMLP.from_linears", arg, "a torch.nn.Linear")
        for name, layer in zip(("gate", "up", "down"), (gate, up, down)):
            if layer.bias is not None:
                raise ArgumentError(
                    op="opcore.nn.GatedMLP.from_linears",
                    arg=name,
                    expected="a Linear without bias (the gated_mlp op has none)",
                    found="a Linear with a bias",
                    fix="keep this MLP in torch, or convert its Linear layers one by one (opcore.nn.Linear.from_torch)",
                )
        if up.weight.shape != gate.weight.shape or down.in_features != gate.out_features:
            raise ShapeError(
                op="opcore.nn.GatedMLP.from_linears",
                arg="up/down",
                expected=f"up of gate's shape {tuple(gate.weight.shape)} and down taking {gate.out_features} features",
                found=f"up {tuple(up.weight.shape)}, down {tuple(down.weight.shape)}",
            )
        module = cls(
            gate.in_features,
            gate.out_features,
            down.out_features,
            names=names,
            backend=backend,
            device="meta",
            grad=grad,
            example_rows=example_rows,
        )
        cast = torch_dtype(dtype)
        for name, layer in zip(module.names, (gate, up, down)):
            module.add_module(name, LinearWeights.adopt(layer, cast))
        module.rebind()
        return module

    def _projections(self) -> tuple[LinearWeights, LinearWeights, LinearWeights]:
        gate, up, down = (self._modules[name] for name in self.names)
        return gate, up, down  # type: ignore[return-value]

    def _steps(self, dtype: torch.dtype, device: torch.device) -> list[Step]:
        gate, up, down = self._projections()
        weights = tuple(p.weight.detach() for p in (gate, up, down))
        x = torch.zeros(self.example_rows, self.hidden_features, dtype=dtype, device=device)
        hidden = torch.zeros(self.example_rows, self.intermediate_features, dtype=dtype, device=device)
        whole = Single("gated_mlp", (x, *weights), ("w_gate", "w_up", "w_down"))
        parts = (
            linear_step("linear_silu", x, weights[0], None, "silu"),
            linear_step("linear", x, weights[1], None),
            Single("mul", (hidden, hidden)),
            linear_step("linear", hidden, weights[2], None),
        )
        return [Fused(whole, parts, _gated)]

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
        self._check_trailing(x, (self.hidden_features,))
        return self._call(x.reshape(-1, self.hidden_features)).reshape(*x.shape[:-1], self.out_features)

    def _autograd(self, x: Tensor) -> Tensor:
        gate, up, down = self._projections()
        return F.linear(F.silu(F.linear(x, gate.weight)) * F.linear(x, up.weight), down.weight)

    def extra_repr(self) -> str:
        return (
            f"hidden_features={self.hidden_features}, intermediate_features={self.intermediate_features}, "
            f"out_features={self.out_features}, " + self._common_repr()
        )
