"""A plan's state: buffers the model updates in place (a decoder's KV cache), held by the caller.

torch.export gives a functional graph: ``cache.index_copy_(2, positions, k)`` in the model becomes
``index_copy(cache, 2, positions, k)``, a new tensor, plus a *buffer mutation* output that says
"this value is the cache from now on". Run as written, every step would copy the whole cache. A
plan with state instead takes each mutated buffer as an input (``Graph.state``) and writes it in
place:

* an ``index_copy`` of the buffer that is the buffer's only reader becomes ``state.index_copy_``:
  the rows are written into the caller's tensor, and later nodes read that tensor (no copy);
* any other update is computed as the model computes it and copied into the caller's tensor by a
  ``state.copy_`` node after it (correct, at the cost of one copy of that buffer per call).

Nodes that write state run in Python on the torch tensors (``ir.STATE_OPS``); graph runtimes never
take them, so a partition reads the state as an input (OpenVINO and ONNX Runtime get the caller's
buffer without a copy) and never owns it.

>>> from opcore.graph.ir import Node, ValueInfo, ValueRef
>>> args = (ValueRef("k"), 2, ValueRef("p"), ValueRef("s"))
>>> n = Node("w", "aten.index_copy.default", "aten.index_copy.default", args, ("w",))
>>> [node.op for node in write_state([n], {}, [("k", ValueRef("w"))])]
['state.index_copy_']
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from dataclasses import replace
from typing import Any

from opcore.graph.errors import CaptureError
from opcore.graph.ir import Node, ValueInfo, ValueRef

__all__ = ["IN_PLACE", "new_state", "slot_dims", "state_pairs", "write_state"]

# the functional ops whose in-place form writes rows of the state (ATen argument order: state first)
IN_PLACE = {"aten.index_copy.default": "state.index_copy_"}


def write_state(
    nodes: Sequence[Node], values: MutableMapping[str, ValueInfo], writes: Sequence[tuple[str, Any]]
) -> list[Node]:
    """``nodes`` with each ``(state input, its new value)`` of ``writes`` written in place."""
    found = list(nodes)
    producer = {out: i for i, node in enumerate(found) for out in node.outputs}
    readers: dict[str, int] = {}
    for node in found:
        for name in node.refs():
            readers[name] = readers.get(name, 0) + 1
    tail: list[Node] = []
    for place, value in writes:
        if not isinstance(value, ValueRef) or value.name not in producer:
            raise CaptureError(
                f"the model sets its buffer {place!r} to {value!r}, not to a value the graph computes",
                op="opcore.graph.capture_lm",
            )
        index = producer[value.name]
        node = found[index]
        in_place = IN_PLACE.get(node.op)
        first = node.args[0] if node.args else None
        if in_place is not None and first == ValueRef(place) and readers.get(place, 0) == 1:
            found[index] = Node(node.name, in_place, node.target, node.args, node.outputs, True)
            continue
        name = f"{place}_written"
        tail.append(Node(name, "state.copy_", "aten.copy_.default", (ValueRef(place), value), (name,), True))
        if place in values:
            values[name] = replace(values[place], name=name)
    return found + tail


def state_pairs(graph: Any) -> list[tuple[str, str, str]]:
    """(state input, the node writing it, how) for explain: "in place" or "copied"."""
    pairs = []
    for node in graph.nodes:
        if node.scalar and node.op.startswith("state.") and node.args:
            first = node.args[0]
            how = "rows written in place" if node.op == "state.index_copy_" else "copied after the step"
            pairs.append((first.name if isinstance(first, ValueRef) else str(first), node.name, how))
    return pairs


def new_state(graph: Any, device: str | None = None) -> list[Any]:
    """Zero tensors for every state input of ``graph`` (its shape and dtype; on ``device``, None: the
    one its metas name): one session's cache, or the examples a plan is measured on."""
    import torch

    state = []
    for name in graph.state:
        meta = graph.meta(name)
        place = device if device is not None else str(meta.device)
        state.append(torch.zeros(meta.shape, dtype=meta.dtype.to_torch(), device=place))
    return state


def slot_dims(graph: Any) -> list[int | None]:
    """For each state input of ``graph``, the dim its rows are written along (the cache's slot dim, of
    an ``index_copy_`` written in place), None where the graph copies the whole buffer."""
    found: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "state.index_copy_" and isinstance(node.args[0], ValueRef) and isinstance(node.args[1], int):
            rank = len(graph.meta(node.args[0].name).shape)
            found[node.args[0].name] = node.args[1] % rank
    return [found.get(name) for name in graph.state]
