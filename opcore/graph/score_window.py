"""The window for attentions written as matmuls: scores, mask, softmax, weights @ values.

``split_attention``'s window (and ``window_prompt``) takes the attentions that reach the graph as
``scaled_dot_product_attention``. Models whose attention is the eager form — GPT-J, CodeGen, BLOOM,
MPT, Gemma 2's soft-capped scores, any transformers model with ``attn_implementation="eager"`` — give
a chain instead: the written cache through its views (``repeat_kv``'s unsqueeze, expand and reshape,
a transpose), ``matmul`` with the query, scalings, the mask (and ALiBi's bias) added or filled in,
``softmax`` over the slots, ``matmul`` with the values. Every op of that chain keeps the cache's
slots as one dim, so each can read the WINDOW input's slots (W of them) instead of ``max_length``:

* the written key and value caches are gathered at the window right after their writes;
* each other operand that spans the slots (the mask, a position bias) is gathered there too, once
  per operand;
* the views' static sizes say -1 where the slots were; each value's dims carry W's symbol.

A latent cache (DeepSeek's and MiniCPM3's multi-head latent attention) reaches an attention through
ops along other dims: the cached latents projected up by a ``linear`` over their features, split,
sliced, expanded and concatenated into each head's keys and values, then
``scaled_dot_product_attention`` with a mask. Those ops keep the slots too, and the attention ends
the chain as the weights' matmul does (its mask gathered at the window; without a mask it is not
taken): the up-projection runs over W slots.

Exact for the same reason as the split's window: the slots after W are masked (the protocol's
causality), so their softmax weights are 0. A chain is taken only where that holds by its form:
every softmax over the slots reads scores that a slot-spanning operand was added, filled or
selected into (the mask) with only ops after that keep a masked score masked (adds, fills and
choices of a masking value, casts, scalings by a positive number), the weights reach their values'
matmul through casts and multiplications alone, and nothing else reads a value that spans the
slots. A chain with any other op, a reduction over the slots, or a value the graph returns stays as
it was. (A model that never masks the slots past its position — a position bias alone — would read
the empty slots in eager's static cache too, and not what transformers' dynamic cache reads.)

>>> graph, windowed = window_scores(graph, constants, max_length=512)   # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any

from opcore.graph.ir import Graph, Node, ValueRef, substitute
from opcore.graph.split_attention import WINDOW, AttentionBuild, NotSplit
from opcore.types import TensorMeta

__all__ = ["window_scores"]

_WRITE = "state.index_copy_"
# ops applied one element at a time: a value spanning the slots keeps them where it was
_ELEMENTWISE = frozenset(
    {"add", "sub", "mul", "div", "where", "masked_fill", "cast", "tanh", "neg", "clamp", "maximum", "minimum"}
)
# a fill or a choice at or below this masks a score (transformers fills the dtype's lowest float, or -inf)
_MASKING = -1e30
# ops over the last dim alone, their input first: a linear (quantized, or with its activation fused)
_ALONG_FEATURES = frozenset({"linear", "linear_wq", "linear_relu", "linear_silu", "linear_gelu"})
# after the softmax: ops that keep a masked slot's weight 0
_KEEPS_ZERO = frozenset({"cast", "mul"})


@dataclass
class _Chain:
    """One group of values spanning the slots, linked from a key and a value write through their
    weights' matmul; ``failed`` once any of its values meets an op outside the rules."""

    seeds: set[str] = field(default_factory=set)
    failed: bool = False
    ends: int = 0  # weights @ values matmuls reached


@dataclass
class _Span:
    """A value spanning the slots: the dim they are, its chain, whether a mask went in (``masked``)
    and whether it is a softmax's weights over masked scores (``weights``)."""

    axis: int
    chain: _Chain
    masked: bool = False
    weights: bool = False


def window_scores(graph: Graph, constants: MutableMapping[str, Any], max_length: int) -> tuple[Graph, int]:
    """The graph with each matmul-form attention over the main cache (4-D caches of ``max_length``
    slots written along dim 2 at the step's ``cache_position`` input, the protocol's third) reading
    the WINDOW input's slots alone, as the module docstring says; how many weights @ values matmuls
    read a window. The WINDOW input is the graph's own where it has one already (a split decode
    step's), else added as ``split_attention`` adds it; ``constants`` is not changed."""
    position = graph.inputs[2] if len(graph.inputs) > 3 else None
    if position is None:
        return graph, 0
    spans = {
        node.outputs[0]: _Span(2, _Chain({node.outputs[0]}))
        for node in graph.nodes
        if node.op == _WRITE and _is_seed(graph, node, position, max_length)
    }
    if not spans:
        return graph, 0
    returned = set(graph.output_names())
    plans: dict[str, _Plan] = {}
    for node in graph.nodes:
        inside = [name for name in _refs(node.args) if name in spans]
        if not inside:
            continue
        chain = _merge(list({id(spans[n].chain): spans[n].chain for n in inside}.values()), spans)
        if node.op == _WRITE:  # a write reading a written cache reads it whole; a value made W long, not
            chain.failed |= any(n not in chain.seeds for n in inside)
            continue
        try:
            plan = _rule(graph, node, spans, max_length)
        except NotSplit:
            chain.failed = True
            continue
        plans[node.name] = plan
        if plan.axis is None:
            chain.ends += 1
        else:
            for output in node.outputs:  # a split's parts each span the slots on the same dim
                spans[output] = _Span(plan.axis, chain, plan.masked, plan.weights)
                chain.failed |= output in returned
    taken = {id(s.chain): s.chain for s in spans.values() if not s.chain.failed and s.chain.ends}
    if not taken:
        return graph, 0
    try:
        return _rewrite(graph, constants, spans, plans, taken, position, max_length)
    except NotSplit:  # a name the graph has, a gather the contracts refuse: the graph as it was
        return graph, 0


@dataclass(frozen=True)
class _Plan:
    """What a node reading values that span the slots becomes: its args as the window needs them,
    the operands to gather (where in the args: an arg's index, or an arg's and its part's; the dim),
    the dim its outputs span the slots on (None: a weights @ values matmul's or an attention's output,
    which does not), and whether that output is masked scores or a masked softmax's weights."""

    args: tuple[Any, ...]
    axis: int | None
    sides: tuple[tuple[tuple[int, ...], int], ...] = ()
    masked: bool = False
    weights: bool = False


def _is_seed(graph: Graph, node: Node, position: str, max_length: int) -> bool:
    cache, dim, at = node.args[0], node.args[1], node.args[2]
    if not isinstance(cache, ValueRef) or dim not in (2, -2) or at != ValueRef(position):
        return False
    meta = graph.values[cache.name].meta
    return meta is not None and meta.ndim == 4 and meta.shape[2] == max_length


def _refs(args: Any) -> list[str]:
    """The names of the values ``args`` read."""
    found: list[str] = []

    def seen(name: str) -> ValueRef:
        found.append(name)
        return ValueRef(name)

    substitute(args, seen)
    return found


def _merge(chains: list[_Chain], spans: dict[str, _Span]) -> _Chain:
    """One chain for values of several (a weights @ values matmul links a key's and a value's)."""
    first = chains[0]
    for other in chains[1:]:
        first.seeds |= other.seeds
        first.failed |= other.failed
        first.ends += other.ends
        for span in spans.values():
            if span.chain is other:
                span.chain = first
    return first


def _meta(graph: Graph, arg: Any) -> TensorMeta:
    meta = graph.values[arg.name].meta
    if meta is None:
        raise NotSplit("a size")
    return meta


def _rule(graph: Graph, node: Node, spans: dict[str, _Span], length: int) -> _Plan:
    """``node``'s plan (it reads values that span the slots); NotSplit outside the rules."""
    out = _meta(graph, ValueRef(node.outputs[0]))
    args, op = node.args, node.op
    if op in ("transpose", "permute", "unsqueeze", "expand", "reshape", "softmax"):
        span = spans.get(args[0].name) if isinstance(args[0], ValueRef) else None
        if span is None or any(name in spans for name in _refs(args[1:])):
            raise NotSplit("the slots in a size")
        return _view(node, span, _meta(graph, args[0]), out, length, graph.values[node.outputs[0]].dims)
    if op in _ALONG_FEATURES or op in ("split_with_sizes", "slice", "cat", "scaled_dot_product_attention"):
        return _along_features(graph, node, spans, out, length)
    if op in ("matmul", "bmm"):
        a, b = (spans.get(x.name) if isinstance(x, ValueRef) else None for x in args[:2])
        if a is None and b is not None and b.axis == _meta(graph, args[1]).ndim - 1:  # query @ keys^T
            return _Plan(args, out.ndim - 1)
        ranks = [_meta(graph, x).ndim for x in args[:2]]
        if a is not None and b is not None and (a.axis, b.axis) == (ranks[0] - 1, ranks[1] - 2):
            if not a.weights:
                raise NotSplit("weights that are not a masked softmax's")
            return _Plan(args, None)  # weights @ values: the slots summed over
        raise NotSplit("a matmul over other dims")
    if op not in _ELEMENTWISE:
        raise NotSplit(op)
    # one element at a time: each tensor operand aligned to the output's dims from the right
    axes = {
        spans[a.name].axis + out.ndim - _meta(graph, a).ndim
        for a in args
        if isinstance(a, ValueRef) and a.name in spans
    }
    if len(axes) != 1:
        raise NotSplit("the slots on two dims")
    axis = axes.pop()
    inside = [spans[a.name] for a in args if isinstance(a, ValueRef) and a.name in spans]
    weights = any(s.weights for s in inside)
    sides: list[tuple[tuple[int, ...], int]] = []
    for i, arg in enumerate(args):
        if not isinstance(arg, ValueRef) or arg.name in spans:
            continue
        meta = _meta(graph, arg)
        at = axis - (out.ndim - meta.ndim)
        if at >= 0 and meta.shape[at] == length:
            sides.append(((i,), at))
        elif at >= 0 and meta.shape[at] != 1:
            raise NotSplit("an operand of another length")
    return _Plan(
        args, axis, tuple(sides), _masked(op, args, spans, {i for (i,), _ in sides}), weights and op in _KEEPS_ZERO
    )


def _along_features(graph: Graph, node: Node, spans: dict[str, _Span], out: TensorMeta, length: int) -> _Plan:
    """The plan of an op that works along other dims than the slots: a linear over the features (the
    up-projection of a latent cache: DeepSeek's and MiniCPM3's multi-head latent attention), a split,
    slice or concatenation of other dims, and ``scaled_dot_product_attention`` reading keys and values
    that span the slots (a chain's end, exact as the matmul form's: its mask spans the slots and goes
    into every score; without one it is not taken)."""
    args, op = node.args, node.op
    if op == "scaled_dot_product_attention":
        query, key, value, mask, dropout, causal = args[:6]
        if isinstance(query, ValueRef) and query.name in spans:
            raise NotSplit("a query spanning the slots")
        kv = [spans.get(x.name) if isinstance(x, ValueRef) else None for x in (key, value)]
        ranks = [_meta(graph, x).ndim for x in (key, value)]
        if any(s is None or s.axis != r - 2 for s, r in zip(kv, ranks, strict=True)):
            raise NotSplit("keys or values whose slots are not the attention's")
        if dropout or causal or not isinstance(mask, ValueRef) or mask.name in spans:
            raise NotSplit("an attention without a mask over the slots")
        meta = _meta(graph, mask)
        if meta.shape[-1] != length:
            raise NotSplit("a mask of another length")
        return _Plan(args, None, (((3,), meta.ndim - 1),))
    if op == "cat":
        parts, dim = args[0], args[1] % out.ndim
        inside = {spans[p.name].axis for p in parts if isinstance(p, ValueRef) and p.name in spans}
        if len(inside) != 1 or dim in inside:
            raise NotSplit("a concatenation along the slots")
        axis = inside.pop()
        sides = []
        for j, part in enumerate(parts):
            if isinstance(part, ValueRef) and part.name not in spans:
                if _meta(graph, part).shape[axis] != length:
                    raise NotSplit("a part of another length")
                sides.append(((0, j), axis))  # a part spanning the slots too (a buffer's): gathered
        return _Plan(args, axis, tuple(sides))
    source = spans.get(args[0].name) if isinstance(args[0], ValueRef) else None
    if source is None or any(name in spans for name in _refs(args[1:])):
        raise NotSplit("the slots in an operand that is not the first")
    ndim = _meta(graph, args[0]).ndim
    along = ndim - 1 if op in _ALONG_FEATURES else args[2 if op == "split_with_sizes" else 1] % ndim
    if along == source.axis:
        raise NotSplit(f"a {op} along the slots")
    return _Plan(args, source.axis)


def _masked(op: str, args: tuple[Any, ...], spans: dict[str, _Span], sides: set[int]) -> bool:
    """Whether an elementwise op's output is masked scores (the masked slots -inf, or the lowest
    floats): its input's masked scores kept so, or a mask spanning the slots (``sides``: the args
    gathered at the window) added, subtracted, filled or selected in. An op that could make a masked
    score finite again (a bounded function, a negative scale, a fill with a finite value) is not."""

    def low(i: int) -> bool:  # masked scores, or a value that masks
        arg: Any = args[i] if i < len(args) else None
        if isinstance(arg, ValueRef):
            return arg.name in spans and spans[arg.name].masked
        return _number(arg) and float(arg) <= _MASKING

    if op in ("add", "sub"):
        if len(args) > 2 and args[2] != 1:  # a scaled second operand
            return False
        if op == "sub" and isinstance(args[1], ValueRef) and args[1].name in spans:
            return False  # scores subtracted: their masked slots made +inf
        return low(0) or low(1) or bool(sides)  # the mask (or a bias spanning the slots) goes in here
    if op == "masked_fill":
        return (low(0) or 1 in sides) and low(2)
    if op == "where":  # both choices masked, or a mask spanning the slots choosing a masking value
        return (low(1) and low(2)) or (0 in sides and (low(1) or low(2)))
    if op == "cast":
        return low(0)
    if op in ("mul", "div"):
        return low(0) and _number(args[1]) and float(args[1]) > 0
    if op == "minimum":
        return low(0) or low(1)
    return False


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _view(
    node: Node, span: _Span, given: TensorMeta, out: TensorMeta, length: int, out_dims: tuple[Any, ...] | None
) -> _Plan:
    """The plan of a view (or a softmax) of a value spanning the slots on ``span.axis``; ``out_dims``
    the output's dims (symbols where dynamic) where the graph has them."""
    args, ndim = node.args, given.ndim
    if node.op == "transpose":
        d0, d1 = args[1] % ndim, args[2] % ndim
        return _Plan(args, {d0: d1, d1: d0}.get(span.axis, span.axis), (), span.masked, span.weights)
    if node.op == "permute":
        return _Plan(args, [d % ndim for d in args[1]].index(span.axis), (), span.masked, span.weights)
    if node.op == "unsqueeze":
        return _Plan(args, span.axis + (args[1] % out.ndim <= span.axis), (), span.masked, span.weights)
    if node.op == "softmax":
        if args[1] % ndim != span.axis or not span.masked:
            raise NotSplit("a softmax over other dims, or over unmasked scores")
        return _Plan(args, span.axis, weights=True)
    sizes = list(args[1])
    if node.op == "expand":
        at = len(sizes) - ndim + span.axis
        if sizes[at] not in (length, -1):
            raise NotSplit("expand")
    else:  # reshape: the dims before the slots (and after them) merged or split among themselves alone
        before = math.prod(given.shape[: span.axis])
        at = next((i for i in range(out.ndim) if math.prod(out.shape[:i]) == before and out.shape[i] == length), -1)
        if at < 0:
            raise NotSplit("a reshape across the slots")
        for i, size in enumerate(sizes):  # another -1 (DeepSeek's heads): its size, where static
            if i != at and size == -1:
                if out_dims is not None and not isinstance(out_dims[i], int):
                    raise NotSplit("a reshape with -1 on a dynamic dim")
                sizes[i] = out.shape[i]
    sizes[at] = -1
    return _Plan((args[0], tuple(sizes), *args[2:]), at, (), span.masked, span.weights)


def _rewrite(
    graph: Graph,
    constants: MutableMapping[str, Any],
    spans: dict[str, _Span],
    plans: dict[str, _Plan],
    taken: dict[int, _Chain],
    position: str,
    length: int,
) -> tuple[Graph, int]:
    """The graph with the taken chains' nodes as their plans say, the written caches and the other
    operands spanning the slots gathered at the window; how many chains' ends."""
    build = AttentionBuild(graph, window_at=position, window_length=length)
    read = build.slots_read(ValueRef(position), length)
    seeds = {seed for chain in taken.values() for seed in chain.seeds}
    gathered: dict[str, ValueRef] = {}
    nodes: list[Node] = []
    dims: dict[str, tuple[int | str, ...]] = {}
    for node in graph.nodes:
        plan = plans.get(node.name)
        if plan is None or not any(id(spans[n].chain) in taken for n in _refs(node.args) if n in spans):
            nodes.append(node)
            if node.outputs[0] in seeds:  # the written cache at the window, right after its write
                mark = len(build.nodes)
                written = ValueRef(node.outputs[0])
                gathered[written.name] = build.gathered(f"{written.name}_window", written, read)
                nodes.extend(build.nodes[mark:])
            continue
        args: list[Any] = list(plan.args)
        mark = len(build.nodes)
        for path, at in plan.sides:  # the mask, a bias, a buffer: gathered once per operand and dim
            side = args[path[0]] if len(path) == 1 else args[path[0]][path[1]]
            key = (side.name, at)
            if key not in build.shared:
                sizes = list(build.dims(side))
                sizes[at] = WINDOW
                index = (*(None,) * at, read)
                build.shared[key] = build.op(f"{side.name}_window{at}", "index", side, index, dims=tuple(sizes))
            if len(path) == 1:
                args[path[0]] = build.shared[key]
            else:
                parts = list(args[path[0]])
                parts[path[1]] = build.shared[key]
                args[path[0]] = tuple(parts)
        nodes.extend(build.nodes[mark:])
        nodes.append(replace(node, args=substitute(tuple(args), lambda n: gathered.get(n, ValueRef(n)))))
        if plan.axis is None:
            continue
        for output in node.outputs:
            info = graph.values[output]
            sizes = list(info.dims or _meta(graph, ValueRef(info.name)).shape)
            sizes[plan.axis] = WINDOW
            dims[info.name] = tuple(sizes)
    rewritten = build.graph_with(nodes, constants)
    values = {name: replace(info, dims=dims[name]) if name in dims else info for name, info in rewritten.values.items()}
    return replace(rewritten, values=values), sum(chain.ends for chain in taken.values())
