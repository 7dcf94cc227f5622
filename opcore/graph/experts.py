"""Mixture-of-experts layers of transformers models, exported in a form a plan can run.

transformers (5.x) runs a MoE layer's experts through ``config._experts_implementation``:
``grouped_mm`` (its default) multiplies each expert's tokens with ``torch._grouped_mm``, but while
torch.export traces a float32 model it calls its own ``transformers::grouped_mm_fallback`` custom
op (a loop over data-dependent row ranges) instead, which no plan can run (and the meta function
of ``aten._grouped_mm`` takes bfloat16 only); ``eager`` loops over the experts that received
tokens, a loop whose length is data. So ``export`` asks for one of two implementations that
compute the same sum of the same experts with the same routing weights, without data-dependent
shapes:

* ``GATHERED`` (``opcore_gather_mm``, registered here in transformers' ``ExpertsInterface``), for a
  prompt (capture_lm's prefill), ``capture``'s forward and the host's decode step: each (token,
  chosen expert) pair's row multiplied by its expert's matrix through ``opcore::gather_mm``, a
  torch custom op defined here that plans run as opcore's ``gather_mm`` (on a torch backend: the
  rows grouped by expert, one matrix product per expert chosen, no weight copied). The arithmetic
  is eager's (``grouped_mm``), and so is the sum over a token's k experts (its k rows summed in
  order). No graph runtime has a kernel for it, so each expert product is a step of its own
  between partitions;
* ``ONE_TOKEN`` (transformers' ``batched_mm``), for a step of one token a row (capture_lm's decode
  on a GPU, and on the host where it measures faster: small experts): the chosen experts' weights
  gathered and multiplied in a batch (gather + bmm, which a graph runtime takes into its
  partition): only the k chosen experts are read, but each is copied once per (row, expert) pair,
  so it is never used for a prompt (128 tokens x k experts would copy 128 k expert matrices).

A model without experts, or a transformers without these names, is exported as it is.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["GATHERED", "ONE_TOKEN", "exportable_experts", "gathered_experts_forward"]

GATHERED = "opcore_gather_mm"
ONE_TOKEN = "batched_mm"
_GATHER_MM = "opcore::gather_mm"


def gathered_experts_forward(self: Any, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
    """transformers' experts forward (``use_experts_implementation``'s signature and attributes:
    has_gate, has_bias, is_transposed, has_post_expert_norm, ``_apply_gate``, ``act_fn``) with each
    (token, chosen expert) pair's row multiplied by that expert's weights alone
    (``opcore::gather_mm``): hidden_states (tokens, hidden), top_k_index / top_k_weights (tokens, k)
    -> (tokens, hidden)."""
    import torch

    if getattr(self, "_is_expert_parallel", False):
        raise NotImplementedError("opcore's gathered experts run every expert of one process (no expert parallelism)")
    define_gather_mm()
    tokens, k = top_k_index.shape
    experts = top_k_index.reshape(-1)  # (tokens * k,): the pairs, a token's k experts side by side
    rows = hidden_states.unsqueeze(1).expand(-1, k, -1).reshape(tokens * k, hidden_states.shape[-1])

    def linear(inputs: Any, weight: Any, bias: Any) -> Any:
        # gather_mm takes (experts, in, out); transformers stores (experts, out, in) unless is_transposed
        out = torch.ops.opcore.gather_mm(inputs, weight if self.is_transposed else weight.transpose(1, 2), experts)
        return out + bias[experts] if bias is not None else out

    if self.has_gate:
        projected = linear(rows, self.gate_up_proj, self.gate_up_proj_bias if self.has_bias else None)
        projected = self._apply_gate(projected)
    else:
        projected = self.act_fn(linear(rows, self.up_proj, self.up_proj_bias if self.has_bias else None))
    out = linear(projected, self.down_proj, self.down_proj_bias if self.has_bias else None)
    if self.has_post_expert_norm:
        out = self.post_expert_norm(out)
    # as transformers' grouped_mm and batched_mm: the routing weights in their own dtype (float32
    # weights lift a bfloat16 model's products to float32 before the sum)
    weighted = out * top_k_weights.reshape(tokens * k, 1)
    return weighted.view(tokens, k, -1).sum(dim=1).to(hidden_states.dtype)


def define_gather_mm() -> None:
    """``torch.ops.opcore.gather_mm(x, w, index)``: opcore's ``gather_mm`` contract as a torch custom
    op (the cpu and cuda backends' kernel, a shape-only fake for torch.export), defined once."""
    import torch

    if hasattr(torch.ops.opcore, "gather_mm"):
        return
    from opcore.torchkit.torch_kernels import gather_mm

    def fake(x: Any, w: Any, index: Any) -> Any:
        return x.new_empty((x.shape[0], w.shape[2]))

    torch.library.custom_op(
        _GATHER_MM, gather_mm, mutates_args=(), schema="(Tensor x, Tensor w, Tensor index) -> Tensor"
    )
    torch.library.register_fake(_GATHER_MM, fake)


def _registered() -> bool:
    """Whether transformers has the experts interface (GATHERED registered in it on the first call);
    False where transformers was never imported (then no model here is one of its)."""
    if "transformers" not in sys.modules:
        return False
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
    except ImportError:
        return False
    if GATHERED not in ALL_EXPERTS_FUNCTIONS:
        ALL_EXPERTS_FUNCTIONS.register(GATHERED, gathered_experts_forward)
    return True


def _settable(model: Any) -> list[Any]:
    """The outermost transformers models under ``model`` whose experts implementation can be set and
    that have experts (a module with a 3-D ``down_proj`` parameter: transformers' fused experts)."""
    found: list[Any] = []
    inside: set[int] = set()  # the modules of those found (their experts are switched with them)
    for module in model.modules():
        if id(module) in inside:
            continue
        setter = getattr(module, "set_experts_implementation", None)
        if not callable(setter) or getattr(getattr(module, "config", None), "_experts_implementation", None) is None:
            continue
        can = getattr(type(module), "_can_set_experts_implementation", None)
        if callable(can) and not can():
            continue
        if any(getattr(getattr(m, "down_proj", None), "ndim", 0) == 3 for m in module.modules()):
            found.append(module)
            inside.update(id(m) for m in module.modules())
    return found


@contextlib.contextmanager
def exportable_experts(model: Any, implementation: str) -> Iterator[bool]:
    """Within the block, ``model``'s transformers MoE layers run ``implementation`` (``GATHERED``
    or ``ONE_TOKEN``); restored after. Yields whether any model was switched."""
    models = _settable(model) if _registered() else []
    saved = [m.get_experts_implementation() for m in models]
    try:
        for m in models:
            m.set_experts_implementation(implementation)
        yield bool(models)
    finally:
        for m, before in zip(models, saved, strict=True):
            m.set_experts_implementation(before)
