"""Llama 4's text model, exported in a form opcore can plan.

**Every expert on every token.** ``Llama4TextMoe`` multiplies every token by every expert (a token's
input scaled by its routing score, 0 for an expert it did not choose) and adds the blocks up with
``reshape(experts, -1, hidden).sum(0)``, which torch.export cannot prove for a dynamic number of
tokens (a guard ``s * min(h, h * s) == h * s`` it does not reduce). Within ``exportable_llama4``
each token's row, scaled by its score, is multiplied by the k experts it chose alone
(``opcore::gather_mm``, as opcore.graph.experts) and their k outputs summed: the unchosen experts'
exact zeros are left out of the sum, so the values are eager's, at k / experts of its arithmetic and
weight reads. Given back after the block. (Its rotary embedding, written with complex numbers, is
``opcore.graph.complex_rotary``'s.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opcore.graph.module_patches import modules_of, patched

__all__ = ["exportable_llama4"]

_LLAMA4 = "transformers.models.llama4.modeling_llama4"


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
    """Within the block, a Llama 4 text model's experts run on the tokens that chose them alone (the
    module doc); restored after. Yields how many modules were changed (0: not a Llama 4)."""
    changes = [(m, "forward", _moe_forward(m)) for m in modules_of(model, _LLAMA4, "Llama4TextMoe")]
    with patched(changes) as count:
        yield count
