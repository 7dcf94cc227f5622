"""``LanguageModel.explain()``: per phase, what runs where, and the state each phase writes.

>>> print(lm.explain())        # doctest: +SKIP
language model: batch 1, max_length 256, KV cache 4 buffers, 1.0 MB (allocated once per session)
...
"""

from __future__ import annotations

import json
import math
from typing import Any

from opcore.errors import ArgumentError

__all__ = ["describe", "render"]


def describe(lm: Any) -> dict[str, Any]:
    """The JSON-able record: sizes, the state, and each phase's plan record (opcore.graph.explain)."""
    from opcore.graph.explain import describe as plan_record
    from opcore.graph.state import state_pairs

    graph = lm.decode_plan.graph
    state = []
    for name in graph.state:
        meta = graph.meta(name)
        state.append({"name": name, "shape": list(meta.shape), "dtype": meta.dtype.value, "bytes": _bytes(meta)})
    phases: dict[str, Any] = {}
    for phase, plan in _phases(lm):
        if plan is None:
            continue
        record = plan_record(plan)
        record["state_writes"] = [
            {"state": state_name, "node": node, "how": how} for state_name, node, how in state_pairs(plan.graph)
        ]
        phases[phase] = record
    if "decode" in phases:
        phases["decode"]["cuda_graph"] = bool(getattr(lm, "cuda_graph", False))
    return {
        "batch_size": lm.batch_size,
        "max_length": lm.max_length,
        "state": state,
        "state_bytes": sum(item["bytes"] for item in state),
        "capture_seconds": lm.capture_seconds,
        "draft_tokens": getattr(lm, "draft_tokens", 0),
        "generation_config_not_applied": list(lm.defaults.not_applied),
        "phases": phases,
    }


def render(lm: Any, format: str = "text") -> str:
    if format not in ("text", "json"):
        raise ArgumentError(op="LanguageModel.explain", arg="format", expected="'text' or 'json'", found=repr(format))
    record = describe(lm)
    if format == "json":
        return json.dumps(record, indent=1, default=str)
    lines = [
        f"language model: batch {record['batch_size']}, max_length {record['max_length']}, KV cache "
        f"{len(record['state'])} buffers, {record['state_bytes'] / 1e6:.1f} MB per session (allocated once)"
    ]
    if record["generation_config_not_applied"]:
        lines.append(
            "generation config: not applied by generate: " + ", ".join(record["generation_config_not_applied"])
        )
    for phase, plan in _phases(lm):
        if plan is None:
            continue
        lines.append("")
        lines.append(f"{phase}: {plan.summary()}")
        if phase == "decode" and record["phases"][phase].get("cuda_graph"):
            lines.append("  replayed: one CUDA graph per session, captured on its first decode step (lm.cuda_graph)")
        for item in record["phases"][phase]["state_writes"]:
            lines.append(f"  state {item['state']}: written by {item['node']} ({item['how']})")
        for note in plan.notes:
            lines.append(f"  note: {note}")
    lines.append("")
    verify = ", lm.verify_plan.explain()" if getattr(lm, "verify_plan", None) is not None else ""
    lines.append(f"per node: lm.decode_plan.explain(), lm.prefill_plan.explain(){verify}")
    return "\n".join(lines)


def _phases(lm: Any) -> tuple[tuple[str, Any], ...]:
    """(phase, plan) of the prefill, the decode step and, captured with draft_tokens, the verify step."""
    return (("prefill", lm.prefill_plan), ("decode", lm.decode_plan), ("verify", getattr(lm, "verify_plan", None)))


def _bytes(meta: Any) -> int:
    return math.prod(meta.shape) * meta.dtype.itemsize
