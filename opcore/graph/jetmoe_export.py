"""JetMoE, exported in a form opcore can plan.

JetMoE routes both its feed-forward (``JetMoeMoE``) and its attention projections (``JetMoeMoA``)
through experts: its gating sorts the (token, expert) pairs by expert and counts each expert's
pairs into a Python list (``expert_size.tolist()``), and each ``JetMoeParallelExperts`` splits its
sorted rows by those counts, one ``F.linear`` an expert. A list made from data is what a plan
cannot hold (torch.export stops at the ``.tolist()``). Within ``exportable_jetmoe`` the gating
returns, in the list's place, each sorted row's expert (a tensor), and each ``JetMoeParallelExperts``
multiplies its rows by their experts' weights through ``opcore::gather_mm`` (opcore.graph.experts):
the same rows, the same products, in the same order; everything around them (the sort, the gathers,
the ``index_add`` back to the tokens) is the model's own code. Given back after the block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opcore.graph.module_patches import modules_of, patched

__all__ = ["exportable_jetmoe"]

_JETMOE = "transformers.models.jetmoe.modeling_jetmoe"


def _gating_forward(module: Any) -> Any:
    import torch

    def forward(hidden_states: Any) -> tuple[Any, Any, Any, Any, Any]:
        # as JetMoeTopKGating.forward, each sorted row's expert in place of the experts' row counts
        logits = module.layer(hidden_states).float()
        top_k_logits, top_k_indices = logits.topk(module.top_k, dim=1)
        top_k_gates = torch.softmax(top_k_logits, dim=1).type_as(hidden_states)
        top_k_experts = top_k_indices.flatten()
        sorted_experts, index_sorted_experts = top_k_experts.sort(0)
        batch_index = index_sorted_experts.div(module.top_k, rounding_mode="trunc")
        batch_gates = top_k_gates.flatten()[index_sorted_experts]
        return index_sorted_experts, batch_index, batch_gates, sorted_experts, logits

    return forward


def _experts_forward(module: Any) -> Any:
    import torch

    from opcore.graph.experts import define_gather_mm

    define_gather_mm()

    def forward(inputs: Any, row_experts: Any) -> Any:
        # as JetMoeParallelExperts.forward: weight (experts, out, in), each row by its expert's
        return torch.ops.opcore.gather_mm(inputs, module.weight.transpose(1, 2), row_experts)

    return forward


@contextlib.contextmanager
def exportable_jetmoe(model: Any) -> Iterator[int]:
    """Within the block, a JetMoE model's gating and parallel experts without a list made from data
    (the module doc); restored after. Yields how many modules were changed (0: not a JetMoE)."""
    changes = [(m, "forward", _gating_forward(m)) for m in modules_of(model, _JETMOE, "JetMoeTopKGating")]
    changes += [(m, "forward", _experts_forward(m)) for m in modules_of(model, _JETMOE, "JetMoeParallelExperts")]
    with patched(changes) as count:
        yield count
