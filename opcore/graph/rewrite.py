"""Rewrites as data: a pattern of ATen ops -> one fused opcore op, applied where it is the same op.

A pattern (``Pat``) names the ATen overloads it matches and, per ATen argument name, a sub-pattern,
a variable (``Var``, bound on first sight, compared after) or a test of a plain value. Patterns
read every node through its ATen arguments (``aten_arguments``), whether the node maps to an opcore
contract or runs as the ATen fallback, so they keep matching when new contracts are mapped.
A ``Rewrite``'s ``build`` sees the bindings and the metas and returns the fused op's arguments, or
None where the fused op would not compute the same thing (another dim, a weight of another shape,
another dtype); then nothing changes. A match replaces its root node; the nodes inside the match
go away, which is allowed only when nothing outside the match reads them.

>>> [r.name for r in REWRITES][:2]
['gated_mlp', 'layer_norm']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from opcore.errors import OpcoreError
from opcore.graph.ir import Graph, Node, ValueRef, refs_in, substitute
from opcore.graph.mapping import RULES
from opcore.runtime import runtime

__all__ = ["REWRITES", "Pat", "Rewrite", "Var", "apply_rewrites", "aten_arguments", "elide_copies", "slices_of_cat"]


@dataclass(frozen=True, slots=True)
class Var:
    """Binds the value at this place (a ValueRef or a plain value); the same name must bind the same value."""

    name: str


@dataclass(frozen=True, slots=True)
class Pat:
    """A node of one of ``targets`` whose ATen arguments match ``args``. ``bind``: name the node's
    output; ``commutative``: also try with ``self`` and ``other`` swapped (add, mul)."""

    targets: tuple[str, ...]
    args: Mapping[str, Any] = field(default_factory=dict)
    bind: str = ""
    commutative: bool = False


@dataclass(frozen=True, slots=True)
class Rewrite:
    """pattern -> op. build(bindings, meta) returns the op's keyword arguments, or None to leave
    the match alone; ``meta(name)`` gives a bound value's TensorMeta (``_Metas``: also its dims)."""

    name: str
    op: str
    pattern: Pat
    build: Callable[[Mapping[str, Any], Any], dict[str, Any] | None]


def _is(value: Any) -> Callable[[Any], bool]:
    return lambda v: v == value


_MUL = ("aten.mul.Tensor",)
_ADD = ("aten.add.Tensor", "aten.add.Scalar")
_LINEAR = ("aten.linear.default",)
_MEAN_LAST = {"dim": Var("dims"), "keepdim": _is(True), "dtype": _is(None)}


def _last_dim(dims: Any, rank: int) -> bool:
    return isinstance(dims, tuple) and len(dims) == 1 and dims[0] in (-1, rank - 1)


def _linear_act(act: str) -> Rewrite:
    targets = (f"aten.{act}.default",)
    args: dict[str, Any] = {"self": Pat(_LINEAR, {"input": Var("x"), "weight": Var("w"), "bias": Var("b")})}
    if act == "gelu":
        args["approximate"] = Var("approximate")

    def build(b: Mapping[str, Any], meta: Callable[[str], Any]) -> dict[str, Any] | None:
        out = {"x": b["x"], "w": b["w"], "b": b["b"]}
        if act == "gelu":
            out["approximate"] = b["approximate"]
        return out

    name = {"relu": "linear_relu", "silu": "linear_silu", "gelu": "linear_gelu"}[act]
    return Rewrite(name, name, Pat(targets, args), build)


def _gated_mlp(b: Mapping[str, Any], meta: Callable[[str], Any]) -> dict[str, Any] | None:
    if b["bg"] is not None or b["bu"] is not None or b["bd"] is not None:
        return None  # gated_mlp has no biases
    return {"x": b["x"], "w_gate": b["wg"], "w_up": b["wu"], "w_down": b["wd"]}


def _rms_norm(b: Mapping[str, Any], meta: Callable[[str], Any]) -> dict[str, Any] | None:
    x = meta("x")
    if not _last_dim(b["dims"], x.ndim) or b["two"] not in (2, 2.0) or not isinstance(b["eps"], float):
        return None
    if b.get("alpha", 1) != 1 or not x.dtype.is_floating:
        return None
    weight = b.get("w")
    if weight is not None:
        w = meta("w")
        if w.shape != (x.shape[-1],) or w.dtype is not x.dtype:
            return None  # a weight that broadcasts otherwise, or promotes: not rms_norm's weight
    return {"x": b["x"], "normalized_shape": (x.shape[-1],), "weight": weight, "eps": b["eps"]}


def _layer_norm(b: Mapping[str, Any], meta: Callable[[str], Any]) -> dict[str, Any] | None:
    x = meta("x")
    if not (_last_dim(b["dims"], x.ndim) and _last_dim(b["dims2"], x.ndim)) or b["two"] not in (2, 2.0):
        return None
    if not isinstance(b["eps"], float) or not x.dtype.is_floating or b.get("alpha", 1) != 1:
        return None
    for name in ("w", "bias"):
        if b.get(name) is not None:
            m = meta(name)
            if m.shape != (x.shape[-1],) or m.dtype is not x.dtype:
                return None
    if b.get("alpha_b", 1) != 1:
        return None
    return {
        "x": b["x"],
        "normalized_shape": (x.shape[-1],),
        "weight": b.get("w"),
        "bias": b.get("bias"),
        "eps": b["eps"],
    }


def _softmax(b: Mapping[str, Any], meta: Callable[[str], Any]) -> dict[str, Any] | None:
    x = meta("x")
    dims, dims2 = b["dims"], b["dims2"]
    if (
        not (isinstance(dims, tuple) and len(dims) == 1 and tuple(dims2 or ()) == tuple(dims))
        or not x.dtype.is_floating
    ):
        return None
    if b.get("alpha", 1) != 1:
        return None
    return {"x": b["x"], "dim": dims[0]}


# rms_norm: weight * (x * rsqrt(mean(x ** 2, -1, keepdim=True) + eps)), either operand order
_RMS_CORE = Pat(
    _MUL,
    {
        "self": Var("x"),
        "other": Pat(
            ("aten.rsqrt.default",),
            {
                "self": Pat(
                    _ADD,
                    {
                        "self": Pat(
                            ("aten.mean.dim",),
                            {
                                "self": Pat(("aten.pow.Tensor_Scalar",), {"self": Var("x"), "exponent": Var("two")}),
                                **_MEAN_LAST,
                            },
                        ),
                        "other": Var("eps"),
                        "alpha": Var("alpha"),
                    },
                )
            },
        ),
    },
    commutative=True,
)

# layer_norm: ((x - mean(x)) * rsqrt(mean((x - mean(x)) ** 2) + eps)) [* w] [+ b], over the last dim
_CENTERED = Pat(
    ("aten.sub.Tensor",),
    {"self": Var("x"), "other": Pat(("aten.mean.dim",), {"self": Var("x"), **_MEAN_LAST}), "alpha": _is(1)},
    bind="centered",
)
_LN_CORE = Pat(
    _MUL,
    {
        "self": Var("centered"),
        "other": Pat(
            ("aten.rsqrt.default",),
            {
                "self": Pat(
                    _ADD,
                    {
                        "self": Pat(
                            ("aten.mean.dim",),
                            {
                                "self": Pat(("aten.pow.Tensor_Scalar",), {"self": _CENTERED, "exponent": Var("two")}),
                                "dim": Var("dims2"),
                                "keepdim": _is(True),
                                "dtype": _is(None),
                            },
                        ),
                        "other": Var("eps"),
                        "alpha": Var("alpha"),
                    },
                )
            },
        ),
    },
    commutative=True,
)

# softmax: exp(x - amax(x, dim, keepdim=True)) / sum(that, dim, keepdim=True) (the stable form only:
# exp(x) / sum(exp(x)) overflows where softmax does not, so it is not the same op)
_SHIFTED_EXP = Pat(
    ("aten.exp.default",),
    {
        "self": Pat(
            ("aten.sub.Tensor",),
            {
                "self": Var("x"),
                "other": Pat(("aten.amax.default",), {"self": Var("x"), "dim": Var("dims"), "keepdim": _is(True)}),
                "alpha": Var("alpha"),
            },
        )
    },
    bind="e",
)

# grouped-query attention's repeat_kv: key/value heads repeated to the query heads before attention,
# x[:, :, None].expand(b, kv, n, L, E).reshape(b, kv * n, L, E), often through a contiguous clone.
# Attention with enable_gqa reads each key/value head for its run of query heads and copies nothing
# (with a KV cache the copy is of the whole cache, every step).
_VIEWS = ("aten._unsafe_view.default", "aten.view.default")


def _repeated(name: str, clone: bool) -> Pat:
    expanded = Pat(
        ("aten.expand.default",),
        {"self": Pat(("aten.unsqueeze.default",), {"self": Var(name), "dim": _is(2)}), "size": Var(f"{name}_expand")},
    )
    inner = Pat(("aten.clone.default",), {"self": expanded}) if clone else expanded
    return Pat(_VIEWS, {"self": inner, "size": Var(f"{name}_size")})


def _gqa_pattern(clone: bool) -> Pat:
    return Pat(
        ("aten.scaled_dot_product_attention.default",),
        {
            "query": Var("q"),
            "key": _repeated("k", clone),
            "value": _repeated("v", clone),
            "attn_mask": Var("mask"),
            "dropout_p": Var("dropout"),
            "is_causal": Var("causal"),
            "scale": Var("scale"),
            "enable_gqa": _is(False),
        },
    )


def _gqa(b: Mapping[str, Any], meta: Any) -> dict[str, Any] | None:
    # sizes compared symbolically: a dynamic batch or length is the same symbol ("s0") in x's dims
    # and in the expand's and view's size arguments (sizes computed at run time)
    q = meta.dims("q")
    for name in ("k", "v"):
        x = meta.dims(name)
        if x is None or len(x) != 4 or q is None or len(q) != 4:
            return None
        batch, heads, length, width = x
        expand = tuple(meta.size(v) for v in b[f"{name}_expand"])
        size = tuple(meta.size(v) for v in b[f"{name}_size"])
        if len(expand) != 5 or expand[:2] != (batch, heads) or expand[3:] != (length, width):
            return None
        if not isinstance(expand[2], int) or not isinstance(heads, int) or len(size) != 4:
            return None
        if size != (batch, heads * expand[2], length, width) or size[1] != q[1]:
            return None
    return {
        "query": b["q"], "key": b["k"], "value": b["v"], "attn_mask": b["mask"], "dropout_p": b["dropout"],
        "is_causal": b["causal"], "scale": b["scale"], "enable_gqa": True,
    }  # fmt: skip


# In order: a layer norm's centred value would also match rms_norm's pattern, so layer_norm goes first;
# gated_mlp before linear_silu, which would take its gate projection.
REWRITES: tuple[Rewrite, ...] = (
    Rewrite(
        "gated_mlp",
        "gated_mlp",
        Pat(
            _LINEAR,
            {
                "input": Pat(
                    _MUL,
                    {
                        "self": Pat(
                            ("aten.silu.default",),
                            {"self": Pat(_LINEAR, {"input": Var("x"), "weight": Var("wg"), "bias": Var("bg")})},
                        ),
                        "other": Pat(_LINEAR, {"input": Var("x"), "weight": Var("wu"), "bias": Var("bu")}),
                    },
                    commutative=True,
                ),
                "weight": Var("wd"),
                "bias": Var("bd"),
            },
        ),
        _gated_mlp,
    ),
    Rewrite(
        "layer_norm",
        "layer_norm",
        Pat(
            _ADD,
            {
                "self": Pat(_MUL, {"self": _LN_CORE, "other": Var("w")}, commutative=True),
                "other": Var("bias"),
                "alpha": Var("alpha_b"),
            },
        ),
        _layer_norm,
    ),
    Rewrite("layer_norm_unweighted", "layer_norm", _LN_CORE, _layer_norm),
    Rewrite("rms_norm", "rms_norm", Pat(_MUL, {"self": Var("w"), "other": _RMS_CORE}, commutative=True), _rms_norm),
    Rewrite("rms_norm_unweighted", "rms_norm", _RMS_CORE, _rms_norm),
    Rewrite(
        "softmax",
        "softmax",
        Pat(
            ("aten.div.Tensor",),
            {
                "self": _SHIFTED_EXP,
                "other": Pat(
                    ("aten.sum.dim_IntList",),
                    {"self": Var("e"), "dim": Var("dims2"), "keepdim": _is(True), "dtype": _is(None)},
                ),
            },
        ),
        _softmax,
    ),
    _linear_act("relu"),
    _linear_act("silu"),
    _linear_act("gelu"),
    Rewrite("grouped_query_attention", "scaled_dot_product_attention", _gqa_pattern(clone=True), _gqa),
    Rewrite("grouped_query_attention_view", "scaled_dot_product_attention", _gqa_pattern(clone=False), _gqa),
)


def aten_arguments(node: Node) -> dict[str, Any] | None:
    """A node's arguments by their ATen names, whether it maps to a contract or is an ATen op."""
    if not node.target.startswith("aten."):
        return None
    registry = runtime().ensure_loaded().registry
    if node.op.startswith("aten."):
        return dict(zip(registry.contract(node.op).schema.names, node.args))
    rule = RULES.get(node.target)
    if rule is None:
        return None
    names = registry.contract(node.op).schema.names
    # what the contract does not carry was at its ATen default (a rule maps a node only then: a sum
    # with a dtype= stays the ATen fallback), so patterns that test those arguments see the default
    carried = {source: node.args[names.index(name)] for name, source in rule.args.items() if isinstance(source, str)}
    return {**_aten_defaults(node.target), **carried}


def _aten_defaults(target: str) -> dict[str, Any]:
    """The default values of an ATen overload's arguments ("aten.mean.dim" -> {"keepdim": False, ...})."""
    import torch

    _, name, overload = target.split(".")
    schema = getattr(getattr(torch.ops.aten, name), overload)._schema
    return {a.name: a.default_value for a in schema.arguments if a.has_default_value()}


class _Match:
    def __init__(self, graph: Graph, producer: Mapping[str, int]) -> None:
        self.graph = graph
        self.producer = producer
        self.bindings: dict[str, Any] = {}
        self.nodes: list[int] = []

    def value(self, pattern: Any, value: Any) -> bool:
        if isinstance(pattern, Pat):
            if not isinstance(value, ValueRef) or value.name not in self.producer:
                return False
            return self.node(pattern, self.producer[value.name])
        if isinstance(pattern, Var):
            if pattern.name in self.bindings:
                return self.bindings[pattern.name] == value
            self.bindings[pattern.name] = value
            return True
        if callable(pattern):
            return bool(pattern(value))
        return pattern == value

    def node(self, pattern: Pat, index: int) -> bool:
        node = self.graph.nodes[index]
        if node.target not in pattern.targets or len(node.outputs) != 1:
            return False
        args = aten_arguments(node)
        if args is None:
            return False
        orders = [args]
        if pattern.commutative:
            orders.append({**args, "self": args.get("other"), "other": args.get("self")})
        for candidate in orders:
            saved = (dict(self.bindings), list(self.nodes))
            if all(name in candidate and self.value(sub, candidate[name]) for name, sub in pattern.args.items()):
                if not pattern.bind or self.value(Var(pattern.bind), ValueRef(node.outputs[0])):
                    if index not in self.nodes:
                        self.nodes.append(index)
                    return True
            self.bindings, self.nodes = saved
        return False


def apply_rewrites(graph: Graph, rewrites: tuple[Rewrite, ...] = REWRITES) -> tuple[Graph, list[str]]:
    """The graph with every rewrite applied where it matches; and one note per rewrite applied.

    Each rewrite in turn takes every match over the whole graph (an earlier rewrite has the first
    claim on the nodes); the sequence repeats while a pass changed something, since one fused node
    can complete another's pattern. The graph's maps (producers, readers) are made once per pass and
    moved by each change (``_Maps.after``), not made per node tried: a 30-layer decoder (1,080 nodes,
    ~150 matches) took 12 minutes here that way, and 1.0 s made again per change (0.15 s moved)."""
    registry = runtime().ensure_loaded().registry
    counts: dict[str, int] = {}
    changed = True
    while changed:
        changed = False
        for rewrite in rewrites:
            if rewrite.op not in registry.contracts:
                continue
            maps = _Maps.of(graph)
            index = 0
            while index < len(graph.nodes):
                replaced = _try(graph, rewrite, index, maps)
                if replaced is None:
                    index += 1
                    continue
                before, (graph, removed) = graph, replaced
                counts[rewrite.name] = counts.get(rewrite.name, 0) + 1
                changed = True
                maps = maps.after(before, graph, index, removed)
                index = index - len(removed) + 1  # the matched nodes all come before their root
    graph, copies = elide_copies(graph)
    if copies:
        counts["elide clone"] = copies
    graph, empty = drop_empty_pieces(graph)
    if empty:
        counts["empty cat piece"] = empty
    graph, picked = slices_of_cat(graph)
    if picked:
        counts["slice of a cat piece"] = picked
    notes = [f"rewrite {name}: {n} match{'es' * (n != 1)}" for name, n in counts.items()]
    return graph, notes


class _Metas:
    """What a rewrite's build reads of its bindings: ``metas(name)`` a bound tensor's TensorMeta (None
    for anything else); ``metas.dims(name)`` its sizes with dynamic ones as their symbols ("s0"), and
    ``metas.size(value)`` a size argument as the same: an int, or a computed size's symbol."""

    __slots__ = ("bindings", "graph")

    def __init__(self, graph: Graph, bindings: Mapping[str, Any]) -> None:
        self.graph, self.bindings = graph, bindings

    def __call__(self, name: str) -> Any:
        value = self.bindings[name]
        if not isinstance(value, ValueRef):
            return None
        return self.graph.values[value.name].meta

    def dims(self, name: str) -> tuple[int | str, ...] | None:
        value = self.bindings[name]
        info = self.graph.values.get(value.name) if isinstance(value, ValueRef) else None
        if info is None or info.meta is None:
            return None
        return info.dims or tuple(info.meta.shape)

    def size(self, value: Any) -> int | str | None:
        if isinstance(value, int):
            return value
        info = self.graph.values.get(value.name) if isinstance(value, ValueRef) else None
        return None if info is None else info.symbol


@dataclass(frozen=True, slots=True)
class _Maps:
    """A graph's producers (value -> node index), readers (value -> the names of the nodes reading
    it, once per read) and outputs."""

    producer: Mapping[str, int]
    users: dict[str, list[str]]
    outputs: frozenset[str]

    @classmethod
    def of(cls, graph: Graph) -> _Maps:
        producer = {o: i for i, node in enumerate(graph.nodes) for o in node.outputs}
        users = {value: [graph.nodes[i].name for i in readers] for value, readers in graph.users().items()}
        return cls(producer, users, frozenset(graph.output_names()))

    def after(self, before: Graph, graph: Graph, root: int, removed: Sequence[int]) -> _Maps:
        """The maps of ``graph``: ``before`` (these maps' graph) with the nodes at ``removed`` dropped
        and the node at ``root`` replaced by one of the same name and outputs (a rewrite's match).
        Only the reads of those nodes change: making every reader list again per match was 80 % of
        the rewrites' time on a 30-layer decoder's dynamic prefill (1.0 s)."""
        users = self.users
        for i in (*removed, root):
            node = before.nodes[i]
            for name in node.refs():
                readers = users.get(name)
                if readers is not None:
                    readers.remove(node.name)
                    if not readers:
                        del users[name]
            if i != root:
                for name in node.outputs:
                    users.pop(name, None)
        fused = graph.nodes[root - len(removed)]
        for name in fused.refs():
            users.setdefault(name, []).append(fused.name)
        producer = {o: i for i, node in enumerate(graph.nodes) for o in node.outputs}
        return _Maps(producer, users, self.outputs)


# copies a functional graph does not need: torch.export keeps eval-mode dropout as a clone, which
# would split a partition (no graph runtime builds it) and cost a copy per node on the torch route
_COPIES = ("aten.clone.default", "aten.alias.default")
# memory formats of a copy whose readers may read its input: the IR's ops take values, not strides
# (a view is a reshape, opcore.graph.mapping), so ``x.transpose(1, 2).contiguous()``'s copy
# (contiguous_format) changes nothing they compute; channels_last and the like stay (a choice of
# layout the model made for speed)
_VALUE_FORMATS = (None, "torch.preserve_format", "torch.contiguous_format")


def elide_copies(graph: Graph) -> tuple[Graph, int]:
    """The graph without clones (of the preserved or the contiguous memory format) and aliases whose
    readers may read their input instead, and how many went. A copy whose result the model returns
    stays when its input is a graph input or a constant (the plan never hands the caller its own
    tensor or a weight), and when it makes the result contiguous (the caller gets the strides eager
    gives, for a ``view`` of its own).

    >>> h = Node("h", "relu", "aten.relu.default", (ValueRef("x"),), ("h",))
    >>> n = Node("c", "aten.clone.default", "aten.clone.default", (ValueRef("h"), None), ("c",))
    >>> g = Graph(("x",), (), (h, n), (ValueRef("c"),), {})
    >>> [node.name for node in elide_copies(g)[0].nodes], elide_copies(g)[0].outputs
    (['h'], (ValueRef(name='h'),))
    """
    kept: list[Node] = []
    renamed: dict[str, ValueRef] = {}
    returned = graph.output_names()
    held = set(graph.inputs) | set(graph.constants)

    def read(name: str) -> ValueRef:
        return renamed.get(name, ValueRef(name))

    for original in graph.nodes:
        node = replace(original, args=substitute(original.args, read))
        source = node.args[0] if node.args else None
        layout = None if len(node.args) < 2 or node.args[1] is None else str(node.args[1])
        copy = node.target in _COPIES and layout in _VALUE_FORMATS and len(node.outputs) == 1
        if copy and isinstance(source, ValueRef):
            if node.outputs[0] not in returned or (source.name not in held and layout != "torch.contiguous_format"):
                renamed[node.outputs[0]] = source
                continue
        kept.append(node)
    if not renamed:
        return graph, 0
    outputs = substitute(graph.outputs, read)
    values = {name: info for name, info in graph.values.items() if name not in renamed}
    return replace(graph, nodes=tuple(kept), outputs=outputs, values=values), len(renamed)


def _empty(graph: Graph, value: Any) -> bool:
    """A value empty at every call: one of its dims is a static 0 (the others may be dynamic)."""
    return any(isinstance(d, int) and d == 0 for d in _dims_of(graph, value))


def drop_empty_pieces(graph: Graph) -> tuple[Graph, int]:
    """The graph without the empty pieces of a ``cat`` (a partial rotary over the whole head: the
    pass-through slice ``x[..., d:]`` is empty) and the nodes that made only them; a cat left with
    one piece reads it. OpenVINO refuses empty static shapes in a partition, so one empty slice split
    Phi-3's plan in three. How many pieces went."""
    dropped = 0
    renamed: dict[str, ValueRef] = {}
    returned = graph.output_names()
    nodes: list[Node] = []
    for original in graph.nodes:
        node = replace(original, args=substitute(original.args, lambda n: renamed.get(n, ValueRef(n))))
        pieces = node.args[0] if node.op == "cat" and node.args else None
        if isinstance(pieces, tuple) and any(_empty(graph, p) for p in pieces):
            kept = tuple(p for p in pieces if not _empty(graph, p))
            if kept:
                dropped += len(pieces) - len(kept)
                if len(kept) == 1 and node.outputs[0] not in returned and isinstance(kept[0], ValueRef):
                    renamed[node.outputs[0]] = kept[0]
                    continue
                node = replace(node, args=(kept, *node.args[1:]))
        nodes.append(node)
    if not dropped:
        return graph, 0
    # the nodes whose empty results nothing reads now (the slices), last first
    needed = {ref.name for ref in refs_in(substitute(graph.outputs, lambda n: renamed.get(n, ValueRef(n))))}
    kept_nodes: list[Node] = []
    for node in reversed(nodes):
        unread = all(o not in needed and _empty(graph, ValueRef(o)) for o in node.outputs)
        if unread and not node.op.startswith("state."):
            continue
        kept_nodes.append(node)
        needed.update(node.refs())
    outputs = substitute(graph.outputs, lambda n: renamed.get(n, ValueRef(n)))
    return replace(graph, nodes=tuple(reversed(kept_nodes)), outputs=outputs), dropped


def _static_size(graph: Graph, value: Any, dim: int) -> int | None:
    dims = _dims_of(graph, value)
    size = dims[dim] if -len(dims) <= dim < len(dims) else None
    return size if isinstance(size, int) else None


def slices_of_cat(graph: Graph) -> tuple[Graph, int]:
    """The graph with each ``slice`` that takes exactly one piece of a ``cat`` (along the cat's dim,
    step 1, static sizes) reading that piece, and the nodes nothing reads then (the cat, what made
    only its other pieces) gone; how many slices went. A tensor written piece by piece into a new
    buffer, as transformers' DeepSeek attention builds its keys (``new_empty``, then ``copy_`` into
    ``[..., :d]`` and ``[..., d:]``), exports as cats of slices of a zeros tensor the size of the
    cache: this reads the pieces themselves, and the zeros are not made at all.

    >>> from opcore.graph.ir import ValueInfo
    >>> from opcore.types import DType, TensorMeta
    >>> x = ValueInfo("x", TensorMeta((2, 3), DType.FLOAT32))
    >>> z = ValueInfo("z", TensorMeta((2, 5), DType.FLOAT32))
    >>> c = ValueInfo("c", TensorMeta((2, 8), DType.FLOAT32))
    >>> s = ValueInfo("s", TensorMeta((2, 3), DType.FLOAT32))
    >>> cat = Node("c", "cat", "aten.cat.default", ((ValueRef("x"), ValueRef("z")), 1), ("c",))
    >>> r = ValueInfo("r", TensorMeta((2, 3), DType.FLOAT32))
    >>> cut = Node("s", "slice", "aten.slice.Tensor", (ValueRef("c"), 1, 0, 3, 1), ("s",))
    >>> relu = Node("r", "relu", "aten.relu.default", (ValueRef("s"),), ("r",))
    >>> g = Graph(("x", "z"), (), (cat, cut, relu), (ValueRef("r"),), {v.name: v for v in (x, z, c, s, r)})
    >>> picked, n = slices_of_cat(g)
    >>> n, [(node.name, node.args) for node in picked.nodes]
    (1, [('r', (ValueRef(name='x'),))])
    """
    producer = {out: node for node in graph.nodes for out in node.outputs}
    returned = graph.output_names()
    renamed: dict[str, ValueRef] = {}
    for node in graph.nodes:
        if node.op != "slice" or len(node.args) < 4 or not isinstance(node.args[0], ValueRef):
            continue
        if node.outputs[0] in returned:  # the caller gets a tensor of its own, never a piece's
            continue
        cat = producer.get(node.args[0].name)
        step = node.args[4] if len(node.args) > 4 else 1
        if cat is None or cat.op != "cat" or step not in (1, None) or not isinstance(cat.args[0], tuple):
            continue
        rank = len(_dims_of(graph, node.args[0]))
        dim, start, end = node.args[1], node.args[2], node.args[3]
        if not rank or not all(isinstance(v, int) or v is None for v in (dim, start, end)):
            continue
        cat_dim = cat.args[1] if len(cat.args) > 1 else 0
        if not isinstance(dim, int) or not isinstance(cat_dim, int) or dim % rank != cat_dim % rank:
            continue
        sizes = [_static_size(graph, piece, dim % rank) for piece in cat.args[0]]
        if any(size is None for size in sizes):
            continue
        offsets = [sum(cast(list[int], sizes)[:i]) for i in range(len(sizes) + 1)]
        begin, stop = start or 0, min(end if end is not None else offsets[-1], offsets[-1])
        if begin < 0 or stop < 0:
            continue
        for i, piece in enumerate(cat.args[0]):
            if (offsets[i], offsets[i + 1]) == (begin, stop) and isinstance(piece, ValueRef):
                renamed[node.outputs[0]] = renamed.get(piece.name, piece)
    if not renamed:
        return graph, 0

    def read(name: str) -> ValueRef:
        return renamed.get(name, ValueRef(name))

    # the nodes read only by what went (the cat, the slices of a zeros tensor, the zeros), last first;
    # a node nothing read before stays as it was
    nodes = [replace(node, args=substitute(node.args, read)) for node in graph.nodes]
    readers: dict[str, set[str]] = {}
    for node in nodes:
        for name in node.refs():
            readers.setdefault(name, set()).add(node.name)
    gone = {node.name for node in graph.nodes if node.outputs[0] in renamed}
    for node in reversed(graph.nodes):
        read_by = set().union(*(readers.get(out, set()) for out in node.outputs))
        if read_by and read_by <= gone and returned.isdisjoint(node.outputs) and not node.op.startswith("state."):
            gone.add(node.name)
    kept = tuple(node for node in nodes if node.name not in gone)
    dropped = {out for node in graph.nodes if node.name in gone for out in node.outputs}
    values = {name: info for name, info in graph.values.items() if name not in dropped}
    return replace(graph, nodes=kept, outputs=substitute(graph.outputs, read), values=values), len(renamed)


def _dims_of(graph: Graph, value: Any) -> tuple[Any, ...]:
    """A value's dims (sizes, or symbols where dynamic); () where it is not a value with a meta."""
    info = graph.values.get(value.name) if isinstance(value, ValueRef) else None
    return () if info is None or info.meta is None else tuple(info.dims or info.meta.shape)


def _try(graph: Graph, rewrite: Rewrite, index: int, maps: _Maps) -> tuple[Graph, list[int]] | None:
    """The graph with ``rewrite`` applied at node ``index`` and the indices of the nodes that went
    (ascending, all before ``index``), or None."""
    if graph.nodes[index].target not in rewrite.pattern.targets:
        return None
    match = _Match(graph, maps.producer)
    if not match.node(rewrite.pattern, index):
        return None
    root = graph.nodes[index]
    inside = set(match.nodes)
    users, outputs = maps.users, maps.outputs
    names = {graph.nodes[i].name for i in inside}
    for i in inside - {index}:
        name = graph.nodes[i].outputs[0]
        if name in outputs or any(u not in names for u in users.get(name, ())):
            return None  # something outside the match reads an inner value: keep the nodes
    bindings = match.bindings

    built = rewrite.build(bindings, _Metas(graph, bindings))
    if built is None:
        return None
    contract = runtime().registry.contract(rewrite.op)
    try:
        metas = {k: substitute(v, lambda n: graph.values[n].meta) for k, v in built.items()}
        bound_metas = contract.schema.bind((), metas, metas=True)
        out = contract.meta(*bound_metas)
    except OpcoreError:
        return None
    out_meta = out if not isinstance(out, tuple) else out[0]
    want = graph.meta(root.outputs[0])
    if out_meta.shape != want.shape or out_meta.dtype is not want.dtype:
        return None
    args = tuple(built[name] if name in built else value for name, value in zip(contract.schema.names, bound_metas))
    fused = Node(root.name, rewrite.op, f"rewrite:{rewrite.name}", args, root.outputs)
    nodes = [fused if i == index else node for i, node in enumerate(graph.nodes) if i == index or i not in inside]
    gone = {graph.nodes[i].outputs[0] for i in inside - {index}}
    values = {name: info for name, info in graph.values.items() if name not in gone}
    return replace(graph, nodes=tuple(nodes), values=values), sorted(inside - {index})
