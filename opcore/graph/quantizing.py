"""Quantized weights in a plan: ``capture(..., weights="int8" | "int4")`` turns each ``linear`` whose
weight is a constant into ``linear_wq`` over that weight's codes (opcore.quantize, docs/quantized.md),
and each ``embedding`` whose table is a constant into ``embedding_wq`` over the table's int8 codes
(one scale a row, as NNCF and ONNX Runtime GenAI keep embeddings). A product that is a linear written
otherwise is one too: ``x @ W.T`` (``matmul`` of a transposed constant: Falcon's projections), and
``x @ W`` or ``addmm(b, x, W)`` of a constant stored (in, out) (GPT-2's ``Conv1D``), quantized as the
(out, in) weight they multiply by.

The pass runs on the captured graph before rewrites (so a gated MLP's three linears stay three
quantized nodes, each runtime fusing what it can). The float weight leaves the plan where nothing
else reads it: the plan's constants, the partitions' models (an ONNX MatMulNBits initializer, an
OpenVINO u8/u4 Constant) and a saved plan's safetensors hold the packed codes, scales and zero
points. Tied weights (a decoder's lm_head and token table: one tensor under two names) share one set
of codes: the table's int8 rows are the lm_head's int8 output channels. A weight another node reads
too (not a linear or an embedding) stays float for that node.

Defaults as NNCF's and ONNX Runtime GenAI's: int4 weights in groups of 128 (64 or 32 where 128 does
not divide the inputs; per output channel where none does), the lm_head (a linear producing the
graph's output logits, the last linear of a decoder, also where the logits are scaled or soft-capped
after it) at int8 per channel; ``exclude``: fnmatch
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
from opcore.quantize import no_options_without_weights
from opcore.types import TensorMeta

__all__ = ["WeightSpec", "quantize_weights"]

_ARG = "weights"
_OP = "opcore.graph.capture"
_FORMS = {"int8": 8, "int4": 4}
_QUANTIZED = ("linear", "embedding")  # the ops whose constant weight becomes codes


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
            no_options_without_weights(op, group_size=group_size, exclude=exclude)
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
        patterns = (exclude,) if isinstance(exclude, str) else exclude
        if patterns is not None and (
            not isinstance(patterns, (list, tuple)) or not all(isinstance(p, str) for p in patterns)
        ):
            raise ArgumentError(
                op=op,
                arg="exclude",
                expected="a pattern of state_dict names or a list of them ('lm_head.weight', '*.mlp.*')",
                found=repr(exclude)[:120],
            )
        return cls(bits, group_size, tuple(patterns or ()))

    def describe(self) -> str:
        """The format asked, as the notes say it.

        >>> WeightSpec(8).describe(), WeightSpec(4, 64).describe()
        ('int8 (per output channel)', 'int4 (groups of 64)')
        >>> WeightSpec(4).describe()
        'int4 (groups of 128, or 64 or 32 where 128 does not divide)'
        """
        if self.group_size == -1 or (self.group_size is None and self.bits == 8):
            group = "per output channel"
        elif self.group_size is None:
            group = "groups of 128, or 64 or 32 where 128 does not divide"
        else:
            group = f"groups of {self.group_size}"
        return f"int{self.bits} ({group})"


def quantize_weights(
    graph: Graph, constants: dict[str, Any], spec: WeightSpec, cache: dict[Any, Any] | None = None
) -> tuple[Graph, list[str]]:
    """``graph`` with its constant weights quantized: each linear of a constant weight as a
    ``linear_wq`` node, each embedding of a constant table as an ``embedding_wq`` node (but weights
    ``spec`` excludes, and those not 2-D floating point); ``constants`` updated in place (codes added,
    float weights no longer read removed); and the notes for explain. ``cache``: (the weight's memory,
    bits, group) -> its quantized tensors, shared by plans of the same model (capture_lm's prefill and
    decode)."""
    from opcore.quantize import quantize_weight

    cache = {} if cache is None else cache
    readers = graph.users()
    outputs = graph.output_names()
    producer = {o: node for node in graph.nodes for o in node.outputs}
    logits = _logits_linears(graph, outputs, constants, producer)
    views_read: dict[str, Node] = {}  # a transposing view a quantized product read its weight through
    values = dict(graph.values)
    added: list[str] = []
    nodes: list[Node] = []
    counts = {"int8": 0, "int4": 0, "embedding": 0}
    kept: list[str] = []
    made_names: dict[tuple[Any, ...], list[ValueRef | None]] = {}
    for node in graph.nodes:
        form = _linear_form(graph, node, producer, constants)
        if form is None:
            nodes.append(node)
            continue
        x, weight, transposed, bias, view = form
        tensor = constants[weight.name]
        source = graph.sources.get(weight.name, weight.name)
        if tensor.ndim != 2 or not tensor.is_floating_point() or _excluded(source, spec.exclude):
            kept.append(source)
            nodes.append(node)
            continue
        if transposed:  # stored (in, out): the codes are of the (out, in) weight it multiplies by
            tensor = tensor.t()
        bits = 8 if node.name in logits or node.op == "embedding" else spec.bits
        group = -1 if bits == 8 and spec.group_size is None else _group(spec.group_size, tensor.shape[1], bits)
        if node.op == "embedding" or (bits != spec.bits):
            # one scale a row: the rows a token reads, and the logits' output channels kept at int8
            # where int4 is asked (per channel, as NNCF keeps them, whatever group the int4 ones take)
            group = -1
        key = (*_storage(tensor), bits, group)
        made = cache.get(key)
        if made is None:
            qw = quantize_weight(tensor.detach().float().cpu(), bits=bits, group_size=group, symmetric=spec.symmetric)
            made = cache[key] = qw
        names = made_names.get(key)
        if names is None:
            named = f"{weight.name}_t" if transposed else weight.name
            if f"{named}_qweight{bits}" in added:  # the same weight at these bits in another layout
                named = f"{named}_g{made.group_size}"
            names = made_names[key] = _constants(named, bits, made, tensor, constants, values, added)
        if node.op == "embedding":
            args: tuple[Any, ...] = (x, names[0], names[1], names[2], bits, made.group_size)
            nodes.append(Node(node.name, "embedding_wq", f"quantize:{node.target}", args, node.outputs))
            counts["embedding"] += 1
        else:
            args = (x, names[0], names[1], names[2], bias, bits, made.group_size)
            nodes.append(Node(node.name, "linear_wq", f"quantize:{node.target}", args, node.outputs))
            counts[f"int{bits}"] += 1
        read = view.outputs[0] if view is not None else weight.name
        readers[read] = [i for i in readers.get(read, ()) if graph.nodes[i].name != node.name]
        if view is not None:
            views_read[view.name] = view
    # a transposing view no node reads any more goes, and with it its read of the float weight
    dropped = {name for name, view in views_read.items() if not readers.get(view.outputs[0])}
    for name in dropped:
        weight_name = views_read[name].args[0].name
        readers[weight_name] = [i for i in readers.get(weight_name, ()) if graph.nodes[i].name != name]
        values.pop(views_read[name].outputs[0], None)
    nodes = [node for node in nodes if node.name not in dropped]
    gone = [name for name in graph.constants if not readers.get(name) and name not in outputs]
    for name in gone:
        values.pop(name, None)
    # the float tensors left in ``constants`` under names the graph no longer holds (a tied weight's
    # other name) would keep the float table resident: only what the quantized graph reads stays
    held = {*graph.inputs, *graph.constants, *added} - set(gone)
    for name in [name for name in constants if name not in held]:
        del constants[name]
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
        + (f"; {counts['embedding']} embedding table(s) int8 per row" if counts["embedding"] else "")
        + (f"; {len(kept)} kept float (exclude={list(spec.exclude)} or not a 2-D float weight)" if kept else "")
        + _unquantized(graph, constants, readers, set(added))
    ]
    return quantized, notes


_VIEWS = ("transpose", "permute", "reshape", "expand", "unsqueeze")


def _reading_ops(graph: Graph, readers: dict[str, list[int]], name: str) -> set[str]:
    """The ops that read ``name``, through the views taken of it (a transposed expert stack is read
    by gather_mm)."""
    found: set[str] = set()
    for i in readers.get(name, ()):
        node = graph.nodes[i]
        if node.op in _VIEWS:
            for output in node.outputs:
                found |= _reading_ops(graph, readers, output)
        else:
            found.add(node.op)
    return found


def _unquantized(graph: Graph, constants: dict[str, Any], readers: dict[str, list[int]], added: set[str]) -> str:
    """The float weights of 2 or more dims that ops without a quantized form read (a MoE layer's
    experts through gather_mm or a gather), said with their bytes: they stay float."""
    names, ops, size = 0, set(), 0
    for name in graph.constants:
        tensor = constants.get(name)
        if name in added or tensor is None or tensor.ndim < 2 or not tensor.is_floating_point():
            continue
        reading = _reading_ops(graph, readers, name) - set(_QUANTIZED)
        if reading:
            names, size = names + 1, size + tensor.numel() * tensor.element_size()
            ops |= reading
    if not names:
        return ""
    return (
        f"; {names} other float weight(s) not quantized ({size / 1e6:.1f} MB, read by {', '.join(sorted(ops))}:"
        " no quantized form)"
    )


def _storage(tensor: Any) -> tuple[Any, ...]:
    """What makes two constants the same weight: their memory and view (tied weights are one tensor
    exported under two names)."""
    return (
        tensor.device,
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        *tensor.shape,
        *tensor.stride(),
    )


def _constants(
    name: str,
    bits: int,
    made: Any,
    tensor: Any,
    constants: dict[str, Any],
    values: dict[str, ValueInfo],
    added: list[str],
) -> list[ValueRef | None]:
    """The plan constants of ``made``'s codes, scale and zero point (named after the first weight
    quantized into them), added to ``constants`` and ``values``."""
    names: list[ValueRef | None] = []
    for suffix, array in (("qweight", made.qweight), ("scale", made.scale.to(tensor.dtype)), ("zero", made.zero)):
        if array is None:
            names.append(None)
            continue
        constant = f"{name}_{suffix}{bits}"
        if constant not in constants:
            constants[constant] = array.to(tensor.device)
            meta = TensorMeta.of(constants[constant])
            values[constant] = ValueInfo(constant, meta, tuple(meta.shape))
            added.append(constant)
        names.append(ValueRef(constant))
    return names


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


# a linear's weight read through one of these is still its weight (x @ W.T)
_SWAPS = ("transpose", "permute")
# what a decoder may do to its logits after the lm_head: views, and scalings by numbers (Cohere's
# logit_scale, Granite's logits_scaling, Gemma 2's soft-capping: divide, tanh, multiply)
_AFTER_LOGITS = frozenset(
    {"reshape", "slice", "select", "unsqueeze", "squeeze", "contiguous", "clone", "cast", "mul", "div", "tanh"}
)


def _linear_form(
    graph: Graph, node: Node, producer: dict[str, Node], constants: dict[str, Any]
) -> tuple[Any, ValueRef, bool, Any, Node | None] | None:
    """What makes ``node`` a quantizable product: (x, the constant weight, whether it is stored (in,
    out), the bias, the transposing view it is read through), or None. ``linear`` and ``embedding``
    read their weight as arg 1; ``matmul(x, W.T)`` / ``matmul(x, W)`` and ``addmm(b, x, W)`` (beta
    and alpha 1, a bias of one value per output) of a 2-D constant are linears too."""
    args = node.args
    if node.op in _QUANTIZED:
        weight = args[1] if len(args) >= 2 else None
        if not isinstance(weight, ValueRef) or weight.name not in constants:
            return None
        bias = args[2] if node.op == "linear" and len(args) > 2 else None
        return args[0], weight, False, bias, None
    if node.op == "matmul" and len(args) >= 2:
        x, other, bias = args[0], args[1], None
    elif node.op == "addmm" and len(args) >= 3 and tuple(args[3:5]) in ((), (1,), (1, 1)):
        bias, x, other = args[0], args[1], args[2]
    else:
        return None
    if not isinstance(x, ValueRef) or not isinstance(other, ValueRef) or x.name in constants:
        return None
    if other.name in constants:
        weight, transposed, view = other, True, None
    else:
        view = producer.get(other.name)
        if view is None or view.op not in _SWAPS or not _swaps_two_dims(view):
            return None
        weight, transposed = view.args[0], False
        if not isinstance(weight, ValueRef) or weight.name not in constants:
            return None
    if constants[weight.name].ndim != 2:
        return None
    if bias is not None:
        rows = constants[weight.name].shape[1 if transposed else 0]
        if not isinstance(bias, ValueRef) or tuple(graph.meta(bias.name).shape) != (rows,):
            return None
    return x, weight, transposed, bias, view


def _swaps_two_dims(view: Node) -> bool:
    """Whether a transpose / permute node swaps the two dims of a 2-D value."""
    if view.op == "permute":
        return len(view.args) > 1 and tuple(view.args[1]) == (1, 0)
    return len(view.args) > 2 and {view.args[1] % 2, view.args[2] % 2} == {0, 1}


def _logits_linears(graph: Graph, outputs: set[str], constants: dict[str, Any], producer: dict[str, Node]) -> set[str]:
    """The linears whose result is a graph output, or reaches one through views and scalings by
    numbers alone (a decoder's lm_head, sliced to the last position first or not, its logits scaled
    or soft-capped or not): kept at int8 where int4 is asked. ``producer``: each value's node."""
    found = set()
    for name in outputs:
        node = producer.get(name)
        while node is not None and node.op in _AFTER_LOGITS:
            tensors = [a for a in node.args if isinstance(a, ValueRef) and a.name not in constants]
            if len(tensors) != 1 or any(isinstance(a, (tuple, list)) for a in node.args):
                break
            node = producer.get(tensors[0].name)
        if node is not None and _linear_form(graph, node, producer, constants) is not None and node.op != "embedding":
            found.add(node.name)
    return found
