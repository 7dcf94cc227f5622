"""Quantized weights in a plan: ``capture(..., weights="int8" | "int4")`` turns each ``linear`` whose
weight is a constant into ``linear_wq`` over that weight's codes (opcore.quantize, docs/quantized.md).

The pass runs on the captured graph before rewrites (so a gated MLP's three linears stay three
quantized nodes, each runtime fusing what it can). The float weight leaves the plan where nothing
else reads it: the plan's constants, the partitions' models (an ONNX MatMulNBits initializer, an
OpenVINO u8/u4 Constant) and a saved plan's safetensors hold the packed codes, scales and zero
points. A weight another node reads too (tied embeddings: the lm_head's weight is the token table)
stays for that node, its linear reads a quantized copy.

Defaults as NNCF's and ONNX Runtime GenAI's: int4 weights in groups of 128 (64 or 32 where 128 does
not divide the inputs; per output channel where none does), the lm_head (a linear producing the
graph's output logits, the last linear of a decoder) at int8 per channel; ``exclude``: fnmatch
patterns of the weights' names in the model's state_dict ("lm_head.weight", "*.mlp.*") left float.

>>> spec = WeightSpec.parse("int4", 64, ())
>>> spec.bits, spec.group_size
(4, 64)
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from opcore.errors import ArgumentError
from opcore.graph.ir import Graph, Node, ValueInfo, ValueRef
from opcore.types import TensorMeta

__all__ = ["WeightSpec", "quantize_linears"]

_ARG = "weights"
_OP = "opcore.graph.capture"
_FORMS = {"int8": 8, "int4": 4}


@dataclass(frozen=True, slots=True)
class WeightSpec:
    """What ``weights=`` asks for: ``bits`` (8 or 4), ``group_size`` (None: the default per bits),
    ``exclude`` (fnmatch patterns of state_dict names kept float), ``symmetric`` codes."""

    bits: int
    group_size: int | None = None
    exclude: tuple[str, ...] = ()
    symmetric: bool = True

    @classmethod
    def parse(
        cls, weights: str | None, group_size: int | None, exclude: Sequence[str] | None, op: str = _OP
    ) -> WeightSpec | None:
        if weights is None:
            return None
        bits = _FORMS.get(str(weights).lower()) if isinstance(weights, str) else None
        if bits is None:
            raise ArgumentError(
                op=op,
                arg=_ARG,
                expected="None, 'int8' or 'int4'",
                found=repr(weights),
                fix="weights='int8' (per output channel) or weights='int4' (groups of 128)",
            )
        if group_size is not None and (not isinstance(group_size, int) or (group_size <= 0 and group_size != -1)):
            raise ArgumentError(
                op=op,
                arg="group_size",
                expected="None, -1 (per output channel) or a positive group size (32, 64, 128)",
                found=repr(group_size),
            )
        return cls(bits, group_size, tuple(exclude or ()))

    def describe(self) -> str:
        group = "per output channel" if self.group_size == -1 else f"groups of {self.group_size or 'the default'}"
        return f"int{self.bits} ({group})"


def quantize_linears(
    graph: Graph, constants: dict[str, Any], spec: WeightSpec, cache: dict[str, Any] | None = None
) -> tuple[Graph, list[str]]:
    """``graph`` with its constant-weight linears as ``linear_wq`` nodes (``constants`` updated in place:
    codes added, float weights no longer read removed); and the notes for explain. ``cache``: weight
    name -> its quantized tensors, shared by plans of the same model (capture_lm's prefill and decode)."""
    from opcore.quantize import quantize_weight

    cache = {} if cache is None else cache
    readers = graph.users()
    outputs = graph.output_names()
    logits = _logits_linears(graph, outputs)
    values = dict(graph.values)
    added: list[str] = []
    nodes: list[Node] = []
    counts = {"int8": 0, "int4": 0}
    kept: list[str] = []
    for node in graph.nodes:
        weight = node.args[1] if node.op == "linear" and len(node.args) >= 2 else None
        if not isinstance(weight, ValueRef) or weight.name not in constants:
            nodes.append(node)
            continue
        tensor = constants[weight.name]
        source = graph.sources.get(weight.name, weight.name)
        if tensor.ndim != 2 or not tensor.is_floating_point() or _excluded(source, spec.exclude):
            kept.append(source)
            nodes.append(node)
            continue
        bits = 8 if node.name in logits else spec.bits
        group = -1 if bits == 8 and spec.group_size is None else _group(spec.group_size, tensor.shape[1], bits)
        key = f"{weight.name}:{bits}:{group}"
        made = cache.get(key)
        if made is None:
            qw = quantize_weight(tensor.detach().float().cpu(), bits=bits, group_size=group, symmetric=spec.symmetric)
            made = cache[key] = qw
        device = tensor.device
        names: list[ValueRef | None] = []
        for suffix, array in (("qweight", made.qweight), ("scale", made.scale.to(tensor.dtype)), ("zero", made.zero)):
            if array is None:
                names.append(None)
                continue
            name = f"{weight.name}_{suffix}{bits}"
            if name not in constants:
                constants[name] = array.to(device)
                meta = TensorMeta.of(constants[name])
                values[name] = ValueInfo(name, meta, tuple(meta.shape))
                added.append(name)
            names.append(ValueRef(name))
        bias = node.args[2] if len(node.args) > 2 else None
        args = (node.args[0], names[0], names[1], names[2], bias, bits, made.group_size)
        nodes.append(Node(node.name, "linear_wq", f"quantize:{node.target}", args, node.outputs))
        counts[f"int{bits}"] += 1
        readers_left = [i for i in readers.get(weight.name, ()) if graph.nodes[i].name != node.name]
        readers[weight.name] = readers_left
    gone = [name for name in graph.constants if name in readers and not readers[name] and name not in outputs]
    for name in gone:
        constants.pop(name, None)
        values.pop(name, None)
    sources = {**graph.sources, **{a: graph.sources.get(a.rsplit("_", 1)[0], a) for a in added}}
    quantized = replace(
        graph,
        nodes=tuple(nodes),
        constants=tuple(n for n in (*graph.constants, *added) if n not in gone),
        values=values,
        sources={k: v for k, v in sources.items() if k not in gone},
    )
    notes = [
        f"weights {spec.describe()}: {counts['int4']} linear(s) int4, {counts['int8']} int8"
        + (" (the logits' linear kept at int8, as NNCF does)" if logits and spec.bits == 4 else "")
        + (f"; {len(kept)} kept float (exclude={list(spec.exclude)} or not a 2-D float weight)" if kept else "")
    ]
    return quantized, notes


def _excluded(source: str, patterns: Sequence[str]) -> bool:
    module = source.rsplit(".", 1)[0] if source.endswith(".weight") else source
    return any(fnmatch.fnmatchcase(source, p) or fnmatch.fnmatchcase(module, p) for p in patterns)


def _group(asked: int | None, inputs: int, bits: int) -> int:
    """The group size for a weight of ``inputs`` columns: the one asked for, else 128, 64 or 32,
    whichever divides first, else per output channel (-1)."""
    if asked is not None:
        return asked
    if bits == 8:
        return -1
    return next((g for g in (128, 64, 32) if inputs % g == 0 and (g % 2 == 0)), -1)


def _logits_linears(graph: Graph, outputs: set[str]) -> set[str]:
    """The linears whose result is a graph output, or reaches one through views alone (a decoder's
    lm_head, sliced to the last position first or not): kept at int8 where int4 is asked."""
    producer = {o: node for node in graph.nodes for o in node.outputs}
    found = set()
    views = {"reshape", "slice", "select", "unsqueeze", "squeeze", "contiguous", "clone", "cast"}
    for name in outputs:
        node = producer.get(name)
        while node is not None and node.op in views and node.args and isinstance(node.args[0], ValueRef):
            node = producer.get(node.args[0].name)
        if node is not None and node.op == "linear":
            found.add(node.name)
    return found
