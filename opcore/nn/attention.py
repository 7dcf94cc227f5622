"""``Attention``: a LLaMA-style self-attention block -- q/k/v projections, scaled dot-product
attention (causal or not, grouped-query when ``kv_heads < heads``), output projection.

Three resolved ops, all on one backend (the parts follow the module's backend): the q, k and v
projections as *one* linear on their concatenated weights (one GEMM instead of three; prepare
bakes the concatenation in), ``scaled_dot_product_attention`` on (batch, heads, seq, head_dim),
and the output projection. The parameters stay in four children (default ``q_proj``, ``k_proj``,
``v_proj``, ``o_proj``), so the state_dict keeps the keys of the module it replaces.

>>> attention = opcore.nn.Attention(1024, heads=16, causal=True)   # doctest: +SKIP
>>> with torch.no_grad(): y = attention(torch.randn(2, 128, 1024))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from opcore.errors import ArgumentError, ShapeError
from opcore.nn.binding import Bound, Single, Step
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

__all__ = ["Attention"]

Tensor = torch.Tensor
DEFAULT_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj")
_EXAMPLE_SEQUENCE = 8  # the sdpa example's length: its kernels take any length


class Attention(PreparedModule):
    """Self-attention over x of shape (batch, seq, hidden) -> (batch, seq, hidden).

    ``heads`` query heads of ``head_dim`` (default hidden // heads); ``kv_heads`` key/value heads
    (default heads; fewer: grouped-query attention); ``causal``: the upper triangle masked, as
    ``is_causal=True``; ``scale``: None for 1/sqrt(head_dim); ``bias``: projections with bias.

    >>> attention = opcore.nn.Attention(1024, heads=16, causal=True, backend="cpu")   # doctest: +SKIP
    """

    _CALLS = ("_qkv", "_sdpa", "_out")

    def __init__(
        self,
        hidden_features: int,
        heads: int,
        *,
        kv_heads: int | None = None,
        head_dim: int | None = None,
        causal: bool = False,
        scale: float | None = None,
        bias: bool = False,
        names: Sequence[str] = DEFAULT_NAMES,
        backend: str | Sequence[str] | None = None,
        dtype: Any = None,
        device: Any = None,
        grad: str = "autograd",
        example_rows: int = DEFAULT_EXAMPLE_ROWS,
    ) -> None:
        super().__init__(backend, grad, example_rows)
        kv_heads = heads if kv_heads is None else kv_heads
        if heads < 1 or kv_heads < 1 or heads % kv_heads:
            raise ArgumentError(
                op="opcore.nn.Attention",
                arg="kv_heads",
                expected=f"a positive divisor of heads={heads}",
                found=repr(kv_heads),
            )
        if head_dim is None:
            if hidden_features % heads:
                raise ShapeError(
                    op="opcore.nn.Attention",
                    arg="heads",
                    expected=f"a divisor of hidden_features={hidden_features} (or pass head_dim)",
                    found=repr(heads),
                )
            head_dim = hidden_features // heads
        if len(names) != 4 or len(set(names)) != 4 or not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise ArgumentError(
                op="opcore.nn.Attention", arg="names", expected="four distinct identifiers", found=repr(names)
            )
        self.hidden_features = hidden_features
        self.heads = heads
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.causal = causal
        self.scale = scale
        self.names = tuple(names)
        kinds = {"dtype": torch_dtype(dtype), "device": device}
        q, kv = heads * head_dim, kv_heads * head_dim
        shapes = ((hidden_features, q), (hidden_features, kv), (hidden_features, kv), (q, hidden_features))
        for name, (inp, out) in zip(names, shapes):
            self.add_module(name, LinearWeights(inp, out, bias, **kinds))
        self._qkv: Callable[[Tensor], Tensor] = unbound
        self._sdpa: Callable[[Tensor, Tensor, Tensor], Tensor] = unbound
        self._out: Callable[[Tensor], Tensor] = unbound
        self.rebind()

    @classmethod
    def from_linears(
        cls,
        q: LinearLike,
        k: LinearLike,
        v: LinearLike,
        o: LinearLike,
        *,
        heads: int,
        kv_heads: int | None = None,
        causal: bool = False,
        scale: float | None = None,
        names: Sequence[str] = DEFAULT_NAMES,
        backend: str | Sequence[str] | None = None,
        dtype: Any = None,
        grad: str = "autograd",
        example_rows: int = DEFAULT_EXAMPLE_ROWS,
    ) -> Attention:
        """This module on four ``torch.nn.Linear`` projections (parameters shared unless ``dtype`` casts).

        >>> names = ("q", "k", "v", "o")
        >>> opcore.nn.Attention.from_linears(a.q, a.k, a.v, a.o, heads=16, causal=True, names=names)  # doctest: +SKIP
        """
        for arg, layer in zip(("q", "k", "v", "o"), (q, k, v, o)):
            source(
                layer, (torch.nn.Linear, LinearWeights), "opcore.nn.Attention.from_linears", arg, "a torch.nn.Linear"
            )
        biases = {layer.bias is not None for layer in (q, k, v, o)}
        if len(biases) != 1:
            raise ArgumentError(
                op="opcore.nn.Attention.from_linears",
                arg="q/k/v/o",
                expected="projections that all have a bias or all have none (name: has bias)",
                found=", ".join(f"{n}: {x.bias is not None}" for n, x in zip("qkvo", (q, k, v, o))),
            )
        head_dim = q.out_features // heads
        module = cls(
            q.in_features,
            heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
            causal=causal,
            scale=scale,
            bias=biases.pop(),
            names=names,
            backend=backend,
            device="meta",
            grad=grad,
            example_rows=example_rows,
        )
        expected = [tuple(getattr(module, name).weight.shape) for name in module.names]
        found = [tuple(layer.weight.shape) for layer in (q, k, v, o)]
        if expected != found:
            raise ShapeError(
                op="opcore.nn.Attention.from_linears",
                arg="q/k/v/o",
                expected=f"weights of shapes {expected} for heads={heads}, kv_heads={module.kv_heads}",
                found=str(found),
            )
        cast = torch_dtype(dtype)
        for name, layer in zip(module.names, (q, k, v, o)):
            module.add_module(name, LinearWeights.adopt(layer, cast))
        module.rebind()
        return module

    def _projections(self) -> list[LinearWeights]:
        return [self._modules[name] for name in self.names]  # type: ignore[misc]

    def _steps(self, dtype: torch.dtype, device: torch.device) -> list[Step]:
        q, k, v, o = self._projections()
        w_qkv = torch.cat([q.weight.detach(), k.weight.detach(), v.weight.detach()])
        b_qkv = None  # all or none have a bias (the constructor and from_linears see to it)
        if q.bias is not None and k.bias is not None and v.bias is not None:
            b_qkv = torch.cat([q.bias.detach(), k.bias.detach(), v.bias.detach()])
        rows = self.example_rows
        x = torch.zeros(rows, self.hidden_features, dtype=dtype, device=device)
        attended = torch.zeros(rows, self.heads * self.head_dim, dtype=dtype, device=device)
        query = torch.zeros(1, self.heads, _EXAMPLE_SEQUENCE, self.head_dim, dtype=dtype, device=device)
        key = torch.zeros(1, self.kv_heads, _EXAMPLE_SEQUENCE, self.head_dim, dtype=dtype, device=device)
        sdpa = Single(
            "scaled_dot_product_attention",
            (query, key, key, None, 0.0, self.causal),
            (),
            {"scale": self.scale, "enable_gqa": self.kv_heads != self.heads},
        )
        return [linear_step("linear", x, w_qkv, b_qkv), sdpa, linear_step("linear", attended, o.weight, o.bias)]

    def _on_bound(self, bound: Bound) -> None:
        self._qkv, self._sdpa, self._out = bound.calls

    def forward(self, x: Tensor) -> Tensor:
        if self._needs_grad(x):
            return self._gradient_path(x)
        self._fresh()
        if x.dtype is not self._dtype or x.device != self._device:
            self._check_input(x)
        batch, seq = self._batch_and_seq(x)
        heads, kv_heads, head_dim = self.heads, self.kv_heads, self.head_dim
        qkv = self._qkv(x.reshape(batch * seq, self.hidden_features)).view(batch, seq, heads + 2 * kv_heads, head_dim)
        q, k, v = qkv.split([heads, kv_heads, kv_heads], dim=2)
        y = self._sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        out = self._out(y.transpose(1, 2).reshape(batch * seq, heads * head_dim))
        return out.view(x.shape)

    def _batch_and_seq(self, x: Tensor) -> tuple[int, int]:
        if x.ndim == 3 and x.shape[2] == self.hidden_features:
            return x.shape[0], x.shape[1]
        if x.ndim == 2 and x.shape[1] == self.hidden_features:
            return 1, x.shape[0]  # unbatched (seq, hidden), as torch.nn.MultiheadAttention takes it
        raise ShapeError(
            op="opcore.nn.Attention",
            arg="input",
            expected=f"(batch, seq, {self.hidden_features}) or (seq, {self.hidden_features})",
            found=f"shape {tuple(x.shape)}",
        )

    def _autograd(self, x: Tensor) -> Tensor:
        batch, seq = self._batch_and_seq(x)
        q_proj, k_proj, v_proj, o_proj = self._projections()
        q = F.linear(x, q_proj.weight, q_proj.bias).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = F.linear(x, k_proj.weight, k_proj.bias).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        v = F.linear(x, v_proj.weight, v_proj.bias).view(batch, seq, self.kv_heads, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=self.causal, scale=self.scale, enable_gqa=self.kv_heads != self.heads
        )
        return F.linear(y.transpose(1, 2).reshape(*x.shape[:-1], -1), o_proj.weight, o_proj.bias)

    def extra_repr(self) -> str:
        kv = f", kv_heads={self.kv_heads}" if self.kv_heads != self.heads else ""
        return (
            f"hidden_features={self.hidden_features}, heads={self.heads}{kv}, head_dim={self.head_dim}, "
            f"causal={self.causal}, " + self._common_repr()
        )
