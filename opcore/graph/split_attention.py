"""A decode step's attention split into the cache as it was and the new row: one partition a step.

In the decode graph (one query row) each layer writes its new key and value into the cache
(``state.index_copy_``, opcore.graph.state) and hands the written cache to
``scaled_dot_product_attention``. A write runs on torch, so a graph runtime's partition ends before
it and the next starts after it: one partition per layer, each paying its runtime's call and
boundary (at the 0.5B shape with int8 weights on ONNX Runtime, 24 layer partitions took 1.85 ms each
against 1.22 ms for their weights at the measured bandwidth; docs/generate.md).

For one query row the attention over the written cache is the same as this, which reads no write:

* scores over the cache as it was, with the slot being written masked out (whatever it holds);
* the new key's own score, with the mask's value at that slot;
* one softmax over both; ``P_cache @ V_cache + p_new * v_new``.

So each such attention is rewritten into those ops (matmul, softmax, ...: every graph runtime has
them) reading the cache input itself; the writes then depend on nothing a partition needs, run after
it, and a decode step is one partition. The result does not depend on whether a write ran before
the read (the slot is masked either way), and nothing copies the cache. Grouped-query attention
(``enable_gqa``) groups the query heads over each key head, as the runtimes' own lowerings do; a
row that every key masks gives zeros, as torch's attention does.

Applied only where it is exactly that attention: a one-row float32 query (bfloat16 too where a
graph runtime computes it in float32: ``wide``), key and value each the sole read of a write at the
same position of one slot, no dropout, not ``is_causal``, a mask (bool or float, or none) shared by
the heads or one per head. Anything else keeps its attention,
and ``read_written`` then gives its readers the written cache as a value instead (``where(slot,
new row, cache as it was)``: a temporary the size of the cache, which the split does not need).

**The window** (``window=max_length``, and ``window_prompt`` for the attentions the split does not
take: a prompt's, the torch route's decode step): an attention over the main cache reads its first W
slots alone, W given by an input (``WINDOW``) the session sets past the last slot written, so that a
step costs what the conversation holds, not ``max_length`` (docs/generate.md, "Steps read the slots
they hold"); opcore.graph.score_window gives an attention written as matmuls the same window.

>>> graph, split = split_attention(graph, constants)     # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any

from opcore.errors import OpcoreError
from opcore.graph.ir import Graph, Node, ValueInfo, ValueRef, substitute
from opcore.runtime import runtime
from opcore.types import DType, TensorMeta

__all__ = [
    "SLOTS",
    "WINDOW",
    "WINDOW_STEP",
    "AttentionBuild",
    "NotSplit",
    "read_written",
    "split_attention",
    "window_length",
    "window_prompt",
]

SLOTS = "decode_slots"  # + "_<length>": the constant arange(length) the written slot is compared with
# a windowed step's input (a decode step's or a prompt's): the slot numbers 0 .. W - 1 its attentions
# read (W dynamic); also the name of W's symbol
WINDOW = "decode_window"
# a windowed step's W is its position + 1 rounded up to a multiple of this: a runtime sees one new
# size per WINDOW_STEP tokens, and a step reads at most WINDOW_STEP - 1 slots more than it holds
WINDOW_STEP = 32
_ATTENTION = "scaled_dot_product_attention"
_WRITE = "state.index_copy_"
_INF = float("inf")
_END = 2**63 - 1  # a slice's end past any size (torch.export writes the same)


def split_attention(
    graph: Graph, constants: MutableMapping[str, Any], wide: frozenset[DType] = frozenset(), window: int | None = None
) -> tuple[Graph, int]:
    """The decode graph with each attention over a just-written cache split as above (``constants``
    gains the slot numbers the rewrite compares with); how many were split. ``wide``: dtypes besides
    float32 whose attention is split too, for a runtime that computes them in float32 (OpenVINO does
    bfloat16): the cache is read in its own dtype (a cast would convert all of it every step), the
    scores a bool mask makes float32 and the weights cast back to it before they meet the values.

    ``window`` (the step's ``max_length``): each split attention over a cache of that many slots,
    written at the step's ``cache_position`` input (the protocol's third, opcore.graph.decoder), reads
    the cache's first W slots alone, W a dynamic size given by a new input (``WINDOW``, int64 (W,):
    the slot numbers 0 .. W - 1, placed before the state inputs; 1 <= W <= max_length): keys, values
    and mask gathered at those slots, so that a step reads the part of the cache that holds tokens.
    The caller passes W > the slot written; the slots after it are masked (the protocol's causality),
    so any such W gives the same logits. An attention without a mask (it reads every slot, the empty
    ones too) and a cache of another length or written elsewhere (a ring) are read whole. Without a
    windowed attention the graph takes no such input."""
    users = graph.users()
    producer = {out: node for node in graph.nodes for out in node.outputs}
    position = graph.inputs[2] if window is not None and len(graph.inputs) > 3 else None
    build = AttentionBuild(graph, window_at=position, window_length=window)
    nodes: list[Node] = []
    split = 0
    for node in graph.nodes:
        found = _match(graph, node, producer, users, wide) if node.op == _ATTENTION else None
        if found is None:
            nodes.append(node)
            continue
        mark = build.mark()
        try:
            build.attention(node, *found)
        except NotSplit:  # this attention stays as it was, and nothing built for it is kept
            build.undo(mark)
            nodes.append(node)
            continue
        nodes.extend(build.nodes[mark[0] :])
        split += 1
    if not split:
        return graph, 0
    return build.graph_with(nodes, constants), split


def window_prompt(graph: Graph, constants: MutableMapping[str, Any], max_length: int) -> tuple[Graph, int]:
    """A prompt's graph whose attentions over the main cache read its first W slots, as the decode
    step's split attention does (``split_attention``'s ``window``; the same WINDOW input, W > the last
    slot the prompt writes): an attention whose key and value are each written (``state.index_copy_``,
    along dim 2) into a cache of ``max_length`` slots at the step's ``cache_position`` input, with a
    mask whose last dim is those slots and not ``is_causal``, reads the key, value and mask gathered at
    the window's slots. The prompt's scores and softmax then span W slots, not ``max_length`` (the
    slots after the prompt are masked: the protocol's causality). How many attentions read a window;
    ``constants`` is not changed (the window is an input)."""
    producer = {out: node for node in graph.nodes for out in node.outputs}
    position = graph.inputs[2] if len(graph.inputs) > 3 else None
    build = AttentionBuild(graph, window_at=position, window_length=max_length)
    nodes: list[Node] = []
    windowed = 0
    for node in graph.nodes:
        if node.op != _ATTENTION or len(node.args) != 8 or position is None:
            nodes.append(node)
            continue
        query, key, value, mask, dropout, causal, scale, gqa = node.args
        writes = [producer.get(ref.name) if isinstance(ref, ValueRef) else None for ref in (key, value)]
        if (
            dropout
            or causal
            or not isinstance(mask, ValueRef)
            or any(w is None or w.op != _WRITE or w.args[1] not in (2, -2) for w in writes)
            or any(not isinstance(w.args[2], ValueRef) or w.args[2].name != position for w in writes)  # type: ignore[union-attr]
        ):
            nodes.append(node)
            continue
        mark = build.mark()
        try:
            keys, values, masked = build.meta(key), build.meta(value), build.meta(mask)
            if keys.ndim != 4 or values.ndim != 4 or keys.shape[2] != max_length or masked.shape[-1] != max_length:
                raise NotSplit("not the main cache")
            read = build.slots_read(writes[0].args[2], max_length)  # type: ignore[union-attr,arg-type]
            k = build.gathered(f"{node.name}_window_k", key, read)
            v = build.gathered(f"{node.name}_window_v", value, read)
            m = build.mask_window(mask, read)
        except NotSplit:
            build.undo(mark)
            nodes.append(node)
            continue
        nodes.extend(build.nodes[mark[0] :])
        nodes.append(replace(node, args=(query, k, v, m, dropout, causal, scale, gqa)))
        windowed += 1
    if not windowed:
        return graph, 0
    return build.graph_with(nodes, constants), windowed


def window_length(at: int, length: int) -> int:
    """W of a windowed step writing slot ``at`` of a cache of ``length`` slots: ``at`` + 1 rounded up
    to WINDOW_STEP, at most ``length``."""
    return min(length, -(-(at + 1) // WINDOW_STEP) * WINDOW_STEP)


def read_written(graph: Graph, constants: MutableMapping[str, Any]) -> tuple[Graph, int, int]:
    """The graph with every other read of a just-written cache (in a decode step, attention the split
    does not match: matmuls of the model's own, ALiBi's baddbmm, soft-capped scores; in a prompt's
    step, every read) reading ``where(slot, new row, cache as it was)`` instead: the written cache as
    a value, so no partition waits for the write. The same rows as the write gives, whether the write
    ran before or not; the cost is a temporary the size of the cache, per layer and step, inside the
    runtime (the state itself is still written in place, once). A write of several rows (a prompt's,
    a dynamic number of them, at any slots) reads each slot's row through ``AttentionBuild.rows_at``: the
    slots compared with the cache's numbers once per step, each cache's rows gathered. Applied to
    rows written along any dim of a cache (a 4-D cache's dim 2; a sparse attention's 3-D indexer
    keys' dim 1). Where every reader of a write gathers it at a window (``window_prompt``), the value
    is made at the window's slots alone: the slot tests gathered there, the cache gathered there,
    ``where`` over W slots, no cache-sized temporary. How many writes' readers were moved, and how
    many of those at a window."""
    users = graph.users()
    producer = {out: node for node in graph.nodes for out in node.outputs}
    returned = graph.output_names()
    build = AttentionBuild(graph)
    renamed: dict[str, ValueRef] = {}
    added: dict[str, list[Node]] = {}  # per write, the nodes made for its readers (inputs first)
    dropped: set[str] = set()  # readers made again among a write's nodes (its window's gathers)
    for node in graph.nodes:
        if node.op != _WRITE or node.outputs[0] in returned or not users.get(node.outputs[0]):
            continue
        cache, dim, at, new = node.args
        if not all(isinstance(v, ValueRef) for v in (cache, at, new)) or not isinstance(dim, int):
            continue
        mark = build.mark()
        try:
            cached, row, where = build.meta(cache), build.meta(new), build.meta(at)
            if cached.ndim < 2 or row.ndim != cached.ndim or where.ndim != 1 or not -cached.ndim <= dim < cached.ndim:
                raise NotSplit("not rows of a cache")
            if row.dtype is not cached.dtype:
                raise NotSplit("dtype")
            if cache.name in producer:  # the cache as the step received it, not a value made here
                raise NotSplit("cache")
            axis = dim % cached.ndim
            length, after = cached.shape[axis], (1,) * (cached.ndim - 1 - axis)  # a slot's dims after it
            one = row.shape[axis] == 1 and where.shape == (1,)
            readers = [graph.nodes[i] for i in users[node.outputs[0]]]
            if all(_window_gather(reader, node.outputs[0], axis) for reader in readers):
                # rows whose every reader gathers the written cache at the window (a prompt's, a
                # decode step's attention as matmuls: opcore.graph.score_window): the value is made
                # at the window's slots alone (a W-slot temporary, not a cache-sized one; the split's
                # window reads no write)
                try:
                    for reader in readers:
                        build.written_window(reader, cache, at, new, axis, length)
                except NotSplit:  # the whole cache's value, below
                    build.undo(mark)
                else:
                    dropped.update(reader.outputs[0] for reader in readers)
                    added[node.outputs[0]] = build.nodes[mark[0] :]
                    continue
            if one:
                written, rows = build.slot(at, length), new
            else:  # a prompt's rows: each slot's row of ``new`` gathered (any row where none is written)
                written, order = build.rows_at(at, length)
                rows = build.op(f"{node.outputs[0]}_rows", "index", new, (*(None,) * axis, order))
            read = build.op(f"{node.outputs[0]}_read", "where", build.column(written, length, after), rows, cache)
            if build.meta(read).shape != cached.shape:
                raise NotSplit("shape")
        except NotSplit:
            build.undo(mark)
            continue
        renamed[node.outputs[0]] = read
        added[node.outputs[0]] = build.nodes[mark[0] :]
    if not added:
        return graph, 0, 0
    placed: list[Node] = []
    for node in graph.nodes:
        if node.outputs[0] in dropped:
            continue
        # what a write's readers now read comes right after the write: its inputs (the position, the
        # new row, the cache input; a window's slots, a step input) are all made before it
        placed.append(replace(node, args=substitute(node.args, lambda n: renamed.get(n, ValueRef(n)))))
        placed.extend(added.get(node.outputs[0], ()))
    return build.graph_with(placed, constants), len(added), len(added) - len(renamed)


def _window_gather(node: Node, cache: str, axis: int) -> bool:
    """Whether ``node`` reads the value ``cache`` as a window's gather (``window_prompt``'s, the
    split's: ``cache[..., WINDOW]`` along ``axis``) alone."""
    if node.op != "index" or len(node.args) != 2 or node.args[0] != ValueRef(cache):
        return False
    index = node.args[1]
    return (
        isinstance(index, tuple)
        and len(index) == axis + 1
        and all(i is None for i in index[:axis])
        and index[axis] == ValueRef(WINDOW)
    )


class NotSplit(Exception):
    """A matched attention the ops cannot express exactly (a shape the contracts refuse): it stays as
    it was (opcore.graph.score_window raises it for a chain outside its rules too)."""


def _match(
    graph: Graph, node: Node, producer: dict[str, Node], users: dict[str, list[int]], wide: frozenset[DType]
) -> tuple[Any, ...] | None:
    """(cache key, cache value, new key, new value, position) where ``node`` is a one-row attention
    over key and value each written by a ``state.index_copy_`` at the same position and read by
    ``node`` alone; else None."""
    if len(node.args) != 8:
        return None
    query, key, value, mask, dropout, causal, _, _ = node.args
    if dropout or causal or not all(isinstance(v, ValueRef) for v in (query, key, value)):
        return None
    writes = [producer.get(ref.name) for ref in (key, value)]
    if any(w is None or w.op != _WRITE or len(users.get(w.outputs[0], ())) != 1 for w in writes):
        return None
    (k_cache, k_dim, k_at, k_new), (v_cache, v_dim, v_at, v_new) = (w.args for w in writes)  # type: ignore[union-attr]
    if k_at != v_at or not isinstance(k_at, ValueRef) or graph.meta(k_at.name).shape != (1,):
        return None
    q = graph.meta(query.name)
    metas = [graph.meta(ref.name) for ref in (k_cache, v_cache, k_new, v_new)]
    if q.ndim != 4 or q.shape[2] != 1 or any(m.ndim != 4 for m in metas) or k_dim not in (2, -2) or v_dim != k_dim:
        return None
    if (q.dtype is not DType.FLOAT32 and q.dtype not in wide) or any(m.dtype is not q.dtype for m in metas):
        return None
    if isinstance(mask, ValueRef):
        meta = graph.meta(mask.name)
        kinds = (DType.BOOL, DType.FLOAT32, q.dtype)
        if meta.dtype not in kinds or meta.ndim > 4 or meta.shape[-1] != metas[0].shape[2]:
            return None
    elif mask is not None:
        return None
    return k_cache, v_cache, k_new, v_new, k_at


# what AttentionBuild.mark keeps: the nodes' count, the shared values, the values' infos, the slot constants
# and the window's length
_Mark = tuple[int, dict[tuple[Any, ...], ValueRef], dict[str, ValueInfo], list[str], int | None]


@dataclass
class AttentionBuild:
    """Appends contract nodes (their metas from the contracts' own meta functions) and shares what
    every layer's split computes alike: the slot test, and the mask as scores to add (the split's,
    the window's and opcore.graph.score_window's rewrites build with it)."""

    graph: Graph
    nodes: list[Node] = field(default_factory=list)
    values: dict[str, ValueInfo] = field(default_factory=dict)
    slots: list[str] = field(default_factory=list)  # the slot-number constants made, one per cache length
    shared: dict[tuple[Any, ...], ValueRef] = field(default_factory=dict)
    # the position input and cache length whose split attentions read the WINDOW input's slots alone
    window_at: str | None = None
    window_length: int | None = None
    window: int | None = None  # the cache length the WINDOW input was made for, once made

    def mark(self) -> _Mark:
        """Where the build stands now, for ``undo``."""
        return len(self.nodes), dict(self.shared), dict(self.values), list(self.slots), self.window

    def undo(self, mark: _Mark) -> None:
        """Forget everything built since ``mark`` (a match the contracts refused)."""
        count, self.shared, self.values, self.slots, self.window = mark
        del self.nodes[count:]

    def graph_with(self, nodes: list[Node], constants: MutableMapping[str, Any]) -> Graph:
        """The graph with ``nodes`` and the values built; ``constants`` gains the slot numbers made;
        the WINDOW input (where made) placed before the state inputs, its W ranging over 1 .. the
        cache's length, its values bounded by the slots."""
        import torch

        for name in self.slots:
            meta = self.meta(ValueRef(name))
            constants[name] = torch.arange(meta.shape[0], dtype=torch.long, device=str(meta.device))
        values = {**self.graph.values, **self.values}
        graph = replace(self.graph, nodes=tuple(nodes), values=values, constants=(*self.graph.constants, *self.slots))
        if self.window is None:
            return graph
        inputs = list(graph.inputs)
        at = min((inputs.index(name) for name in graph.state), default=len(inputs))
        inputs.insert(at, WINDOW)
        signature = graph.signature
        if signature is not None:
            labels = list(signature.labels)
            labels.insert(at, WINDOW)
            ranges = {**signature.ranges, WINDOW: (1, self.window)}
            signature = replace(signature, labels=tuple(labels), ranges=ranges)
        bounds = {**graph.bounds, WINDOW: (0, self.window - 1)}
        return replace(graph, inputs=tuple(inputs), signature=signature, bounds=bounds)

    def slots_read(self, at: ValueRef, length: int) -> ValueRef:
        """The WINDOW input (int64 (W,)), made for a cache of ``length`` slots on ``at``'s device; every
        windowed attention of the graph reads caches of one length (the graph's own WINDOW input where
        it has one: a split decode step's, which opcore.graph.score_window's attentions read too)."""
        if self.window is None:
            if WINDOW in self.graph.inputs and self.meta(ValueRef(WINDOW)).shape == (length,):
                return ValueRef(WINDOW)
            if WINDOW in self.graph.values:
                raise NotSplit(f"the graph has a value named {WINDOW}")
            self.window = length
            meta = TensorMeta((length,), DType.INT64, self.meta(at).device)
            self.values[WINDOW] = ValueInfo(WINDOW, meta, (WINDOW,))
        return ValueRef(WINDOW)

    def dims(self, ref: ValueRef) -> tuple[Any, ...]:
        """A value's sizes, a symbol where one is dynamic."""
        info = self.values.get(ref.name) or self.graph.values[ref.name]
        return info.dims or tuple(self.meta(ref).shape)

    def meta(self, ref: ValueRef) -> TensorMeta:
        info = self.values.get(ref.name) or self.graph.values[ref.name]
        if info.meta is None:  # a size computed at run time: not an attention this takes
            raise NotSplit(f"{ref.name} is a scalar")
        return info.meta

    def op(self, name: str, op: str, *args: Any, replaces: bool = False, dims: tuple[Any, ...] = ()) -> ValueRef:
        """A node ``op(*args)`` whose output is ``name`` (``replaces``: the attention's own output);
        ``dims``: its sizes with a symbol where one is dynamic (default: the example's sizes)."""
        if not replaces and (name in self.graph.values or name in self.values):
            raise NotSplit(f"the graph has a value named {name}")
        contract = runtime().ensure_loaded().registry.contract(op)
        try:
            bound = contract.schema.bind(substitute(args, lambda n: self.meta(ValueRef(n))), {}, metas=True)
            out = contract.meta(*bound)
        except OpcoreError as error:  # a contract that refuses the shapes: this attention stays whole
            raise NotSplit(str(error)) from error
        if not isinstance(out, TensorMeta):  # every op the split uses has one result
            raise NotSplit(f"{op} gives {len(out)} results")
        full = (*args, *bound[len(args) :])  # the defaults the contract filled in
        self.nodes.append(Node(name, op, f"rewrite:split_attention:{op}", full, (name,)))
        self.values[name] = ValueInfo(name, out, dims or tuple(out.shape))
        return ValueRef(name)

    def attention(
        self, node: Node, k_cache: ValueRef, v_cache: ValueRef, k_new: ValueRef, v_new: ValueRef, at: ValueRef
    ) -> None:
        query, _, _, mask, _, _, scale, gqa = node.args
        q, keys, values = self.meta(query), self.meta(k_cache), self.meta(v_cache)
        batch, heads, _, dim = q.shape
        kv_heads, length = keys.shape[1], keys.shape[2]
        if heads % kv_heads or (heads != kv_heads and not gqa):
            raise NotSplit("heads")
        group = heads // kv_heads
        name = f"{node.name}_split"
        # W: the cache's length, or the WINDOW input's dynamic size (the sizes below that hold it)
        w: int | str = length
        # without a mask the attention reads every slot, the empty ones too: no window
        windowed = mask is not None and at.name == self.window_at and length == self.window_length
        if windowed:
            read = self.slots_read(at, length)
            w = WINDOW
            k_cache = self.gathered(f"{name}_kw", k_cache, read)
            v_cache = self.gathered(f"{name}_vw", v_cache, read)
            mask = self.mask_window(mask, read)
        grouped = self.op(f"{name}_q", "reshape", query, (batch, kv_heads, group, dim))
        scaled = self.op(f"{name}_qs", "mul", grouped, scale if scale is not None else 1.0 / math.sqrt(dim))
        k_t = self.op(f"{name}_kt", "transpose", k_cache, 2, 3, dims=(batch, kv_heads, dim, w))
        old = self.op(f"{name}_old", "matmul", scaled, k_t, dims=(batch, kv_heads, group, w))
        new = self.op(f"{name}_new", "matmul", scaled, self.op(f"{name}_knt", "transpose", k_new, 2, 3))
        slot = self.slot(at, length, windowed)
        if mask is None:
            old = self.op(f"{name}_old_masked", "where", slot, -_INF, old, dims=(batch, kv_heads, group, w))
        else:
            old_add, new_add, seen = self.mask_scores(mask, slot, heads, kv_heads, group, windowed)
            old = self.op(f"{name}_old_masked", "add", old, old_add, dims=(batch, kv_heads, group, w))
            new = self.op(f"{name}_new_masked", "add", new, new_add)
        wide_dims = (batch, kv_heads, group, length + 1 if isinstance(w, int) else f"{w} + 1")
        scores = self.op(f"{name}_scores", "cat", (old, new), -1, dims=wide_dims)
        weights = self.op(f"{name}_p", "softmax", scores, -1, dims=wide_dims)
        if mask is not None:  # a row every key masks: zeros, as torch's attention (softmax would give NaN)
            weights = self.op(f"{name}_p0", "where", seen, weights, 0.0, dims=wide_dims)
        # the cache's weights, then the new key's: counted from the end where W is dynamic
        old_dims = (batch, kv_heads, group, w)
        p_old = self.op(f"{name}_p_old", "slice", weights, 3, 0, -1, 1, dims=old_dims)
        p_new = self.op(f"{name}_p_new", "slice", weights, 3, -1, _END, 1)
        if self.meta(p_old).dtype is not q.dtype:  # a bool mask's scores are float32: back to the cache's dtype
            p_old = self.op(f"{name}_p_old_cast", "cast", p_old, q.dtype, dims=old_dims)
            p_new = self.op(f"{name}_p_new_cast", "cast", p_new, q.dtype)
        mixed = self.op(
            f"{name}_sum",
            "add",
            self.op(f"{name}_pv_old", "matmul", p_old, v_cache),
            self.op(f"{name}_pv_new", "mul", p_new, v_new),
        )
        out = node.outputs[0]
        want = self.graph.meta(out)
        got = self.meta(self.op(out, "reshape", mixed, (batch, heads, 1, values.shape[3]), replaces=True))
        if got.shape != want.shape or got.dtype is not want.dtype:
            raise NotSplit("shape")

    def slot(self, at: ValueRef, length: int, windowed: bool = False) -> ValueRef:
        """Bool (length,): True at the slot this step writes (one per position input and cache length);
        (W,) over the WINDOW input's slots where ``windowed``."""
        key = ("slot", at.name, length, windowed)
        if windowed and key not in self.shared:
            read = self.slots_read(at, length)
            self.shared[key] = self.op(f"{WINDOW}_at_{at.name}", "eq", read, at, dims=(WINDOW,))
        if key not in self.shared:
            numbers = self.numbers(length, at)
            made = f"{numbers.name}_at_{at.name}"
            if numbers.name in self.graph.constants:
                # the numbers split_attention made: read_written compares with them again, right after
                # its write (split_attention's comparison may come later in the graph's order)
                made = f"{made}_again"
            self.shared[key] = self.op(made, "eq", numbers, at)
        return self.shared[key]

    def numbers(self, length: int, at: ValueRef) -> ValueRef:
        """The constant 0 .. length - 1 (int64, on ``at``'s device) the slots are compared with."""
        numbers = f"{SLOTS}_{length}"
        if numbers not in self.graph.constants and numbers not in self.slots:
            if numbers in self.graph.values:
                raise NotSplit(f"the graph has a value named {numbers}")
            self.slots.append(numbers)
            meta = TensorMeta((length,), DType.INT64, self.meta(at).device)
            self.values[numbers] = ValueInfo(numbers, meta, (length,))
        return ValueRef(numbers)

    def rows_at(self, at: ValueRef, length: int) -> tuple[ValueRef, ValueRef]:
        """For a write of several rows at the slots ``at`` (n,): bool (length,), True at each slot
        written, and int64 (length,), the row of the write each slot takes (0 where none: an argmax
        along the n rows, proven below n: opcore.graph.bounds). Exact for any slots, in any order (of
        a slot written twice, the first row). Made once per ``at`` and cache length."""
        key = ("rows", at.name, length)
        if key not in self.shared:
            numbers = self.numbers(length, at)
            n = self.dims(at)[0]
            name = f"{numbers.name}_rows_{at.name}"
            grid = self.op(f"{name}_grid", "reshape", numbers, (length, 1))
            hits = self.op(f"{name}_hits", "eq", grid, at, dims=(length, n))
            counted = self.op(f"{name}_counted", "cast", hits, DType.INT32, dims=(length, n))
            index = self.op(f"{name}_index", "argmax", counted, 1, False)
            found = self.op(f"{name}_found", "index", at, (index,))
            self.shared[key] = self.op(f"{name}_hit", "eq", found, numbers)
            self.shared[(*key, "index")] = index
        return self.shared[key], self.shared[(*key, "index")]

    def gathered(self, name: str, cache: ValueRef, read: ValueRef, axis: int = 2) -> ValueRef:
        """``cache`` at the WINDOW input's slots along ``axis`` (a 4-D cache's slots by default:
        (batch, heads, W, dim))."""
        dims = self.dims(cache)
        return self.op(name, "index", cache, (*(None,) * axis, read), dims=(*dims[:axis], WINDOW, *dims[axis + 1 :]))

    def mask_window(self, mask: ValueRef, read: ValueRef) -> ValueRef:
        """The attention's mask at the WINDOW input's slots (its last dim gathered), once per mask."""
        key = ("window", mask.name)
        if key not in self.shared:
            meta = self.meta(mask)
            dims = (*self.dims(mask)[:-1], WINDOW)
            index = (*(None,) * (meta.ndim - 1), read)
            self.shared[key] = self.op(f"{mask.name}_window", "index", mask, index, dims=dims)
        return self.shared[key]

    def written_window(
        self, reader: Node, cache: ValueRef, at: ValueRef, new: ValueRef, axis: int, length: int
    ) -> None:
        """``reader`` (the cache rows ``new`` were written into at slots ``at``, gathered at the WINDOW
        input's slots along ``axis``) made as the written cache's value at those slots: ``where(written
        there, the row written there, the cache there)``, every operand W slots long (a prompt's slot
        tests and row numbers, over all ``length`` slots, made once per step and gathered at the
        window once; one row's slot test made at the window)."""
        read, dims = ValueRef(WINDOW), self.dims(ValueRef(reader.outputs[0]))
        if self.meta(read).shape != (length,):
            raise NotSplit("a window of another cache's length")
        name, after = reader.outputs[0], (1,) * (len(dims) - 1 - axis)
        if self.meta(at).shape == (1,) and self.meta(new).shape[axis] == 1:
            # one row (a decode step's): the window's slots compared with the one written, the row
            # broadcast over them
            key: tuple[Any, ...] = ("window written one", at.name, after)
            if key not in self.shared:
                here = self.slot(at, length, windowed=True)
                self.shared[key] = self.op(f"{here.name}_column", "reshape", here, (-1, *after), dims=(WINDOW, *after))
            rows = new
        else:
            written, order = self.rows_at(at, length)
            key = ("window written", written.name)
            if key not in self.shared:
                here = self.gathered(f"{written.name}_window", written, read, 0)
                self.shared[key] = self.op(f"{here.name}_column", "reshape", here, (-1, *after), dims=(WINDOW, *after))
                self.shared[(*key, "order")] = self.gathered(f"{order.name}_window", order, read, 0)
            order = self.shared[(*key, "order")]
            rows = self.op(f"{name}_rows", "index", new, (*(None,) * axis, order), dims=dims)
        old = self.gathered(f"{name}_cache", cache, read, axis)
        made = self.op(name, "where", self.shared[key], rows, old, replaces=True, dims=dims)
        if self.meta(made).shape != self.graph.meta(name).shape:
            raise NotSplit("shape")

    def column(self, written: ValueRef, length: int, after: tuple[int, ...]) -> ValueRef:
        """``written`` (length,) as (length, *after), broadcast over a cache's dims after the written
        one (``after``: ones); made once per value and shape."""
        key = ("column", written.name, after)
        if key not in self.shared:
            self.shared[key] = self.op(f"{written.name}_column{len(after)}", "reshape", written, (length, *after))
        return self.shared[key]

    def mask_scores(
        self, mask: ValueRef, slot: ValueRef, heads: int, kv_heads: int, group: int, windowed: bool = False
    ) -> tuple[ValueRef, ValueRef, ValueRef]:
        """The mask as scores to add to the cache's (the written slot -inf) and to the new key's (the
        mask at that slot), grouped as the query heads are, and whether a row sees any key at all;
        computed once per mask and grouping (``windowed``: the mask and slot are the WINDOW's). No
        maximum is taken over -inf (OpenVINO's ReduceMax gives the lowest finite float there, which
        would let a masked new key be seen)."""
        key = ("mask", mask.name, slot.name, kv_heads, group)
        if key not in self.shared:
            meta = self.meta(mask)
            shape = (1,) * (4 - meta.ndim) + tuple(meta.shape)
            rows, mask_heads, length = shape[0], shape[1], shape[3]
            if shape[2] != 1 or mask_heads not in (1, heads):
                raise NotSplit("mask")
            grouped = (rows, kv_heads, group, length) if mask_heads == heads else (rows, 1, 1, length)
            name = f"{mask.name}_split{kv_heads}x{group}"
            # where windowed, the length is W (reshaped as -1) and the scores' sizes carry its symbol
            w: int | str = WINDOW if windowed else length
            sized = (*grouped[:3], w)
            shape = (*grouped[:3], -1) if windowed else grouped
            shaped = self.op(f"{name}_grouped", "reshape", mask, shape, dims=sized)
            if meta.dtype is DType.BOOL:
                shaped = self.op(f"{name}_scores", "where", shaped, 0.0, -_INF, dims=sized)
            old = self.op(f"{name}_old", "where", slot, -_INF, shaped, dims=sized)
            at_slot = self.op(f"{name}_at", "where", slot, shaped, 0.0, dims=sized)
            new = self.op(f"{name}_new", "sum", at_slot, (-1,), True)
            finite = self.op(f"{name}_finite", "ne", old, -_INF, dims=sized)
            open_old = self.op(f"{name}_open", "cast", finite, DType.FLOAT32, dims=sized)
            seen = self.op(
                f"{name}_seen",
                "logical_or",
                self.op(f"{name}_seen_old", "gt", self.op(f"{name}_any", "amax", open_old, (-1,), True), 0.5),
                self.op(f"{name}_seen_new", "ne", new, -_INF),
            )
            self.shared[key], self.shared[(*key, "new")], self.shared[(*key, "seen")] = old, new, seen
        return self.shared[key], self.shared[(*key, "new")], self.shared[(*key, "seen")]
