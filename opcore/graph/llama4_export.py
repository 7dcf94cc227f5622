"""Llama 4's text model, exported in forms opcore can plan.

* **Rotary embeddings written with complex numbers.** Llama 4 makes its rotary frequencies with
  ``torch.polar`` (complex64) and turns q and k into complex pairs (``view_as_complex``) to multiply
  them: opcore represents no complex dtype (nor do ONNX Runtime's and OpenVINO's kernels take one).
  Within ``exportable_llama4`` its rotary module returns the same frequencies as a real tensor of
  (cos, sin) pairs, and the module's ``apply_rotary_emb`` multiplies the pairs out:
  ``(a + ib)(c + is) = (ac - bs) + i(as + bc)``, in float32 as the complex product is.
* **Every expert on every token.** ``Llama4TextMoe`` multiplies every token by every expert (a
  token's input scaled by its routing score, 0 for an expert it did not choose) and adds the
  blocks up with ``reshape(experts, -1, hidden).sum(0)``, which torch.export cannot prove for a
  dynamic number of tokens (a guard ``s * min(h, h * s) == h * s`` it does not reduce). Within the
  block each token's row, scaled by its score, is multiplied by the k experts it chose alone
  (``opcore::gather_mm``, as opcore.graph.experts) and their k outputs summed: the unchosen
  experts' exact zeros are left out of the sum, so the values are eager's, at k / experts of its
  arithmetic and weight reads.

Everything is given back after the block.

>>> import torch
>>> q = torch.tensor([[[[1.0, 2.0]]]]); f = torch.tensor([[[[0.0, 1.0]]]])  # e^(i pi/2): a quarter turn
>>> real_product(q, f).tolist()
[[[[-2.0, 1.0]]]]
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from opcore.graph.module_patches import modules_of, patched

__all__ = ["exportable_llama4", "real_product"]

_LLAMA4 = "transformers.models.llama4.modeling_llama4"


def real_product(x: Any, freqs: Any) -> Any:
    """x (..., 2k) as k complex pairs times ``freqs`` (..., k, 2: cos and sin pairs, broadcast), as
    x's pairs again (..., 2k) in float32."""
    import torch

    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    c, s = freqs[..., 0], freqs[..., 1]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)


def _pairs_forward(module: Any) -> Any:
    import torch

    def forward(x: Any, position_ids: Any) -> Any:
        # as Llama4TextRotaryEmbedding.forward, the polar form as (cos, sin)
        freqs = position_ids[..., None].float() * module.inv_freq.to(device=x.device, dtype=torch.float)
        return torch.stack([freqs.cos(), freqs.sin()], dim=-1) * module.attention_scaling

    return forward


def _apply_pairs(xq: Any, xk: Any, freqs: Any) -> tuple[Any, Any]:
    # as modeling_llama4.apply_rotary_emb: freqs (batch, seq, k, 2) broadcast over the heads
    wide = freqs[:, :, None, :, :]
    return real_product(xq, wide).type_as(xq), real_product(xk, wide).type_as(xk)


def _moe_forward(module: Any) -> Any:
    import torch

    from opcore.graph.experts import define_gather_mm

    define_gather_mm()
    experts = module.experts

    def forward(hidden_states: Any) -> tuple[Any, Any]:
        # as Llama4TextMoe.forward, each token through the experts its router chose alone
        hidden_states = hidden_states.reshape(-1, module.hidden_dim)
        tokens = hidden_states.shape[0]
        router_scores, router_logits = module.router(hidden_states)
        k = module.router.top_k
        chosen = torch.topk(router_logits, k, dim=1).indices  # the router's own top-k
        scores = router_scores.gather(1, chosen)  # (tokens, k): the sigmoid the router gave them
        rows = (hidden_states.unsqueeze(1) * scores.unsqueeze(-1)).reshape(tokens * k, module.hidden_dim)
        index = chosen.reshape(-1)
        gate, up = torch.ops.opcore.gather_mm(rows, experts.gate_up_proj, index).chunk(2, dim=-1)
        routed = torch.ops.opcore.gather_mm(up * experts.act_fn(gate), experts.down_proj, index)
        out = module.shared_expert(hidden_states)
        out.add_(routed.view(tokens, k, module.hidden_dim).sum(dim=1))
        return out, router_logits

    return forward


@contextlib.contextmanager
def exportable_llama4(model: Any) -> Iterator[int]:
    """Within the block, a Llama 4 text model's rotary embedding in real arithmetic and its experts
    run on the tokens that chose them alone (the module doc); restored after. Yields how many
    modules were changed (0: not a Llama 4)."""
    rotary = modules_of(model, _LLAMA4, "Llama4TextRotaryEmbedding")
    changes = [(m, "forward", _pairs_forward(m)) for m in rotary]
    changes += [(m, "forward", _moe_forward(m)) for m in modules_of(model, _LLAMA4, "Llama4TextMoe")]
    count = len(changes)
    if rotary:  # the modeling module's function its attention calls by name
        changes.append((sys.modules[_LLAMA4], "apply_rotary_emb", _apply_pairs))
    with patched(changes):
        yield count
