"""``plan.explain()``: collect a record of what runs where and why, then render it as text or JSON.

>>> print(plan.explain())        # doctest: +SKIP
openvino 170/183 nodes in 2 partitions; cpu 13 nodes (aten.diff, aten.cumsum, ...)
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from opcore.errors import ArgumentError

__all__ = ["describe", "render", "summary"]

_SHOWN_OPS = 4
# statuses explain's text does not repeat per node: accepted ones, and backends that did not load
# (said once, in the last line); the JSON keeps every verdict
_NOT_REJECTED = ("chosen", "fallback", "partition")
_NOT_LOADED = ("unavailable", "failed", "disabled")
# the notes that say how fast the plan measured at capture (opcore.graph.assembly's guard), shown second
_SPEED_NOTES = ("guard: ", "not measured")


def summary(plan: Any) -> str:
    """One line: per backend, how many nodes it runs and in how many partitions (graph runtimes) or
    which ops (per-node kernels), the busiest backend first; for a plan running the exported program
    as one step (the torch route), that first."""
    decisions = [d for d in plan.decisions if d.backend != "python"]
    total = len(decisions)
    by_backend: dict[str, list[Any]] = {}
    for decision in decisions:
        by_backend.setdefault(decision.backend, []).append(decision)
    parts = []
    for backend, chosen in sorted(by_backend.items(), key=lambda item: (-len(item[1]), item[0])):
        partitions = sorted({d.partition for d in chosen if d.partition is not None})
        per_node = [d for d in chosen if d.partition is None]
        text = f"{backend} {len(chosen)}/{total} nodes"
        if partitions:
            text += f" in {len(partitions)} partition{'s' * (len(partitions) != 1)}"
            if per_node:
                text += f" (+{len(per_node)} on kernels)"
        ops = [op for op, _ in Counter(d.op for d in per_node).most_common()]
        if ops and not partitions:
            text += " (" + ", ".join(ops[:_SHOWN_OPS]) + (", ..." if len(ops) > _SHOWN_OPS else "") + ")"
        parts.append(text)
    writes = sum(1 for d in plan.decisions if d.backend == "python" and d.op.startswith("state."))
    sizes = len(plan.decisions) - total - writes
    tail = f"; {sizes} size computation{'s' * (sizes != 1)}" if sizes else ""
    if writes:  # opcore.graph.state: the KV cache written in place
        tail += f"; {writes} state write{'s' * (writes != 1)}"
    text = ("; ".join(parts) or "no nodes") + tail
    if getattr(plan, "exported", None) is not None:  # the torch route of a captured plan
        return f"torch route: the exported program as one step (node by node it is {text})"
    return text


def describe(plan: Any) -> dict[str, Any]:
    """The JSON-able record behind explain: summary, options, the route, partitions, nodes with every
    verdict."""
    values = plan.graph.values
    nodes = []
    pinned = set(plan.options.backends) if plan.options.backends is not None else None
    for node, decision in zip(plan.graph.nodes, plan.decisions):
        # a plan pinned to backends=: the verdicts of those (and of what runs the node), not of the rest
        shown = [v for v in decision.verdicts if pinned is None or v.backend in pinned or v.backend == decision.backend]
        nodes.append(
            {
                "name": node.name,
                "op": node.op,
                "target": node.target,
                "backend": decision.backend,
                "kernel": decision.kernel,
                "source": decision.source,
                "partition": decision.partition,
                "outputs": {o: _meta_text(values[o]) for o in node.outputs},
                "note": decision.note,
                "candidates": [
                    {"backend": v.backend, "kernel": v.kernel, "status": v.status, "reason": v.reason} for v in shown
                ],
            }
        )
    return {
        "summary": summary(plan),
        "device": plan.options.device,
        "backends": list(plan.options.backends) if plan.options.backends is not None else None,
        "fallback": plan.options.fallback,
        # "torch": the torch route runs (in one step where "exported_program", else node by node)
        "route": plan.options.route,
        "exported_program": getattr(plan, "exported", None) is not None,
        "notes": [*_compiler_failures(plan.decisions), *plan.notes],
        "partitions": [p.describe() for p in plan.partitions],
        "nodes": nodes,
    }


def render(plan: Any, format: str = "text") -> str:
    """explain()'s text, or ``format="json"`` for the record as JSON."""
    record = describe(plan)
    if format == "json":
        return json.dumps(record, indent=2)
    if format != "text":
        raise ArgumentError(op="Plan.explain", arg="format", expected="'text' or 'json'", found=repr(format))
    # what runs where, then the speed measured at capture (the guard's notes), then the rest; the
    # backends that did not load are one line at the end, not the first lines
    lines = [record["summary"]]
    speed = [note for note in record["notes"] if note.startswith(_SPEED_NOTES)]
    for note in speed:
        lines.append(f"  speed at capture: {note.removeprefix('guard: ')}")
    for note in record["notes"]:
        if note not in speed:
            lines.append(f"  note: {note}")
    for partition in record["partitions"]:
        lines.append(
            f"  partition {partition['name']} on {partition['backend']}: {partition['nodes']} nodes, "
            f"{len(partition['inputs'])} inputs, {len(partition['outputs'])} outputs"
            + (f" ({partition['note']})" if partition.get("note") else "")
        )
    width = max((len(n["name"]) for n in record["nodes"]), default=0)
    for node in record["nodes"]:
        where = node["kernel"] or node["backend"] or "?"
        if node["partition"]:
            where = f"{node['backend']} partition {node['partition']}"
        shapes = ", ".join(node["outputs"].values())
        lines.append(f"  {node['name']:<{width}}  {node['op']} -> {where}  [{shapes}]")
        if node["note"]:
            lines.append(f"  {'':<{width}}    note: {node['note']}")
        for candidate in node["candidates"]:
            if candidate["status"] in _NOT_REJECTED or candidate["status"] in _NOT_LOADED:
                continue
            title = candidate["kernel"] or candidate["backend"]
            reason = f": {candidate['reason']}" if candidate["reason"] else ""
            lines.append(f"  {'':<{width}}    {title}: {candidate['status']}{reason}")
    absent = {
        c["backend"]: f"{c['status']}: {c['reason']}" if c["reason"] else c["status"]
        for node in record["nodes"]
        for c in node["candidates"]
        if c["status"] in _NOT_LOADED
    }
    if absent:
        lines.append("not loaded: " + "; ".join(f"{backend} ({why})" for backend, why in sorted(absent.items())))
    return "\n".join(lines)


def _compiler_failures(decisions: Any) -> list[str]:
    """Per graph backend whose partition compiler failed for the whole graph, its reason, once: every
    node it would have taken carries it (opcore.graph.partitioning.COMPILER_FAILED), and a plan all
    on kernels says why on its first lines, not only deep in the per-node listing."""
    from opcore.graph.partitioning import COMPILER_FAILED

    found: dict[str, str] = {}
    for decision in decisions:
        for verdict in decision.verdicts:
            if verdict.reason.startswith(COMPILER_FAILED.format(backend=verdict.backend, why="")):
                found.setdefault(verdict.backend, verdict.reason)
    return list(found.values())


def _meta_text(info: Any) -> str:
    if info.meta is None:
        return "int"
    dims = ", ".join(str(d) for d in info.dims) if info.dims else ", ".join(map(str, info.meta.shape))
    return f"{info.meta.dtype.value}[{dims}]"
