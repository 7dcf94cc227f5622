"""Attention masks the plan proves full, dropped.

Hugging Face encoders build their attention mask inside ``forward``: called without one (every
position attends), BERT still computes ``arange(seq) >= 0``, expands it and hands it to
``scaled_dot_product_attention``. torch.export folds the ``arange`` (a static size) into a constant,
so the mask is a function of constants alone — but every graph runtime then applies it: ONNX Runtime
ran ``Where`` over the scores and the fully-masked-row rule (``ReduceMax``, ``Equal``, another
``Where``: a row masked everywhere gives zeros, as torch) in each layer, ~3 % of BERT's batch-1 run.

A boolean mask that is True everywhere changes nothing (``Where(True, scores, -inf)`` is the scores,
and no row is fully masked), so the attention is the same op without it. The plan evaluates a mask
only when every value it is computed from is a constant the plan folded itself (a factory such as
``arange``, never a model weight or buffer, which a captured plan follows after capture, and never
an input); with dynamic shapes such factories are not folded, and the mask stays. The nodes that
computed a dropped mask go with it.

>>> graph, dropped = drop_full_masks(graph, constants)   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from opcore.graph.ir import Graph, Node, ValueRef, refs_in, substitute

__all__ = ["drop_full_masks"]

_ATTENTION = "scaled_dot_product_attention"
_MASK = 3  # attn_mask's position in the contract's schema (query, key, value, attn_mask, ...)
_LARGEST = 1 << 24  # elements: a mask computed at plan time is at most this large


def drop_full_masks(graph: Graph, constants: Mapping[str, Any]) -> tuple[Graph, int]:
    """The graph with every attention mask that is computed from folded constants alone and is True
    everywhere replaced by None (and the nodes that computed it removed); how many were dropped.
    ``constants``: the plan's constants by name (the folded factories among them)."""
    folded = {name for name in graph.constants if name not in graph.sources}
    producer = {out: node for node in graph.nodes for out in node.outputs}
    known: dict[str, Any] = {}  # value name -> its tensor, or None: not computable here

    def evaluated(name: str) -> Any:
        if name not in known:
            known[name] = None  # a cycle cannot occur in a graph; this also stops repeated work
            known[name] = _value(name, folded, constants, producer, evaluated)
        return known[name]

    nodes = list(graph.nodes)
    dropped = 0
    for index, node in enumerate(nodes):
        if node.op != _ATTENTION or len(node.args) <= _MASK or not isinstance(node.args[_MASK], ValueRef):
            continue
        mask = evaluated(node.args[_MASK].name)
        if mask is not None and _full(mask):
            nodes[index] = replace(node, args=(*node.args[:_MASK], None, *node.args[_MASK + 1 :]))
            dropped += 1
    if not dropped:
        return graph, 0
    computed = {name for name, value in known.items() if value is not None}
    kept = _without_unread(nodes, graph, computed)
    # a mask folded at lowering (opcore.graph.lowering) is a constant nothing reads now: the plan drops it
    read = graph.output_names() | {name for node in kept for name in node.refs()}
    constants_kept = tuple(name for name in graph.constants if name in read or name in graph.sources)
    return replace(graph, nodes=kept, constants=constants_kept), dropped


def _value(
    name: str, folded: set[str], constants: Mapping[str, Any], producer: Mapping[str, Node], evaluated: Any
) -> Any:
    import torch

    if name in folded:
        value = constants.get(name)
        return value if isinstance(value, torch.Tensor) else None
    node = producer.get(name)
    if node is None or node.scalar or node.op.startswith("aten.") or len(node.outputs) != 1:
        return None
    if any(evaluated(ref.name) is None for ref in refs_in(node.args)):
        return None
    from opcore.dispatch import run
    from opcore.graph.planner import split_call
    from opcore.runtime import runtime

    try:
        contract = runtime().ensure_loaded().registry.contracts[node.op]
        args, kwargs = split_call(contract, substitute(node.args, evaluated))
        result = run(node.op, *args, **kwargs)
    except Exception:  # anything this cannot compute keeps the mask: it is only an optimization
        return None
    return result if isinstance(result, torch.Tensor) and result.numel() <= _LARGEST else None


def _full(mask: Any) -> bool:
    import torch

    return mask.dtype == torch.bool and bool(mask.all())


def _without_unread(nodes: list[Node], graph: Graph, computed: set[str]) -> tuple[Node, ...]:
    """``nodes`` without those computing only values in ``computed`` that nothing reads any more."""
    needed = graph.output_names()
    kept: list[Node] = []
    for node in reversed(nodes):
        unread = not any(out in needed for out in node.outputs)
        if unread and all(out in computed for out in node.outputs):
            continue
        kept.append(node)
        needed.update(node.refs())
    return tuple(reversed(kept))
