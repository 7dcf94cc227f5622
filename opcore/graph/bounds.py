"""Index bounds in a plan: the data-dependent preconditions eager PyTorch checks inside a kernel.

``embedding``, ``gather`` and ``index`` read rows at indices that are data: no meta function sees
them, so every single-op kernel checks the smallest and largest index it is given
(``opcore.opset.indexing.check_index_range``) and eager PyTorch raises IndexError. A graph runtime
running the node inside a partition checks nothing: OpenVINO's Gather wraps a negative index and
clamps or zero-fills one past the end, ONNX Runtime's checks some. A plan therefore holds each index
of these nodes to one of three, decided once per plan (``index_bounds``):

* **proven** by the plan's value ranges (``opcore.graph.ranges.value_ranges``, with the declared
  ranges of the dynamic sizes): positions from a folded ``arange``, a buffer's ids, a running sum of a
  mask; nothing to do per call;
* **checked at the plan's entry**: a graph input that reaches the index through views alone
  (``input_ids`` into the word embedding) must lie in the index's range; once the inputs are assumed
  there, the value ranges prove every index computed from them too. Per call: one ``aminmax`` over
  each such input (``EntryBound``);
* **checked by its kernel**: anything else (an index computed from a graph input through arithmetic,
  a gather along a dynamic dim the ranges cannot bound) is kept out of partitions, so the node runs on
  its ranked kernel, which checks as a single op does. Its verdict says why (``unchecked``).

>>> proof = index_bounds(graph, constants)                 # doctest: +SKIP
>>> proof.entry, sorted(proof.unchecked)                   # doctest: +SKIP
((EntryBound(position=0, low=0, high=98, ...),), [])
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from opcore.graph.ir import Graph, Node, ValueRef
from opcore.graph.ranges import declared_sizes, dtype_range, value_ranges

__all__ = ["EntryBound", "IndexProof", "index_bounds", "index_uses"]

# ops whose result holds exactly the values of their first argument (every one of them): an input
# reaching an index through these alone must itself lie in the index's range
_VIEWS = frozenset(
    {"reshape", "flatten", "unsqueeze", "squeeze", "expand", "permute", "transpose", "clone", "contiguous", "cast"}
)


@dataclass(frozen=True, slots=True)
class EntryBound:
    """Graph input number ``position`` must hold values in ``[low, high]`` (``reason``: which index
    needs it, for the error)."""

    position: int
    low: int
    high: int
    reason: str


@dataclass(frozen=True, slots=True)
class IndexProof:
    """How a plan holds its indices in range: ``entry`` checks per call; ``unchecked``: node name ->
    why no range proves its index (the node must run on its own kernel, which checks it)."""

    entry: tuple[EntryBound, ...] = ()
    unchecked: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Use:
    node: Node
    index: str  # the value holding the indices
    low: int
    high: int
    what: str  # "the index of embedding (p_embeddings_weight, 99 rows)"
    symbol: str | None = None  # the indexed dim's symbolic size ("s0") where it is dynamic


def index_uses(graph: Graph) -> Iterator[_Use]:
    """Every index tensor an ``embedding`` (``embedding_wq``), ``gather`` or ``index`` node reads, with the range its
    values must lie in; an index into a dynamic dim counts on the dim's smallest size (``sizes``)."""
    for node in graph.nodes:
        if node.scalar:
            continue
        if node.op in ("embedding", "embedding_wq") and isinstance(node.args[0], ValueRef):
            rows = _smallest_size(graph, node.args[1], 0)
            if rows is not None:
                what = f"the index of {node.name} (embedding table {node.args[1].name}, {rows} rows)"
                yield _Use(node, node.args[0].name, 0, rows - 1, what)
        elif node.op == "gather" and isinstance(node.args[2], ValueRef):
            x, dim = node.args[0], node.args[1]
            size = _smallest_size(graph, x, dim)
            what = f"the index of {node.name} (gather along dim {dim} of {x.name}"
            yield _Use(node, node.args[2].name, 0, -1 if size is None else size - 1, what + f", size {size})")
        elif node.op == "index":
            x = node.args[0]
            for d, ref in enumerate(node.args[1]):
                if isinstance(ref, ValueRef):
                    size = _smallest_size(graph, x, d)
                    what = f"indices[{d}] of {node.name} (dim {d} of {x.name}, size {size})"
                    low, high = (0, -1) if size is None else (-size, size - 1)
                    yield _Use(node, ref.name, low, high, what, _dim_symbol(graph, x, d))


def _smallest_size(graph: Graph, ref: Any, dim: int) -> int | None:
    """The size of ``ref``'s dim ``dim``: a static size, a dynamic one's smallest declared size (the
    entry check holds every call to it), None where nothing bounds it."""
    info = graph.values.get(ref.name) if isinstance(ref, ValueRef) else None
    if info is None or info.meta is None or not -info.meta.ndim <= dim < max(info.meta.ndim, 1):
        return None
    size = info.dims[dim] if info.dims else info.meta.shape[dim]
    if isinstance(size, int):
        return size
    declared = graph.signature.ranges.get(size) if graph.signature is not None else None
    return None if declared is None else declared[0]


def index_bounds(graph: Graph, constants: Mapping[str, Any]) -> IndexProof:
    """Which inputs to check at the entry and which index nodes no range proves (see the module)."""
    uses = list(index_uses(graph))
    if not uses:
        return IndexProof()
    sizes = declared_sizes(graph)
    producer = {o: node for node in graph.nodes for o in node.outputs}
    position = {name: i for i, name in enumerate(graph.inputs)}
    wanted: dict[str, list[_Use]] = {}  # graph input -> the uses it reaches through views
    for use in uses:
        source = _viewed_input(graph, use.index, producer, position)
        if source is not None and use.low <= use.high:
            wanted.setdefault(source, []).append(use)
    bounds = {name: (max(u.low for u in found), min(u.high for u in found)) for name, found in wanted.items()}
    ranges = value_ranges(graph, constants, inputs=bounds, sizes=sizes)
    unchecked: dict[str, str] = {}
    for use in uses:
        found = ranges.get(use.index)
        if use.symbol is not None and _below(graph, use.index, producer) == use.symbol:
            continue  # positions 0 .. s0 - 1 into a dim of size s0: in range whatever s0 is
        if use.high < use.low:
            unchecked[use.node.name] = f"{use.what}: the size is only known at run time"
        elif found is None:
            unchecked[use.node.name] = f"{use.what}: no value range is known for {use.index}"
        elif not (use.low <= found[0] and found[1] <= use.high):
            unchecked[use.node.name] = (
                f"{use.what}: its values are only known to lie in [{found[0]}, {found[1]}], not [{use.low}, {use.high}]"
            )
    entry = tuple(
        EntryBound(position[name], low, high, "; ".join(u.what for u in wanted[name]))
        for name, (low, high) in bounds.items()
    )
    return IndexProof(entry, unchecked)


def _dim_symbol(graph: Graph, ref: Any, dim: int) -> str | None:
    info = graph.values.get(ref.name) if isinstance(ref, ValueRef) else None
    if info is None or info.meta is None or not info.dims or not -len(info.dims) <= dim < len(info.dims):
        return None
    size = info.dims[dim]
    return size if isinstance(size, str) else None


# ops whose result holds some of the values of their first argument (and no others): a gather
# (``index``) picks its elements, wherever the indices point
_SUBSETS = _VIEWS | {"slice", "select", "index"}


def _below(graph: Graph, name: str, producer: Mapping[str, Node]) -> str | None:
    """The symbol ``s`` of a size computed at run time such that ``name`` holds positions 0 .. s - 1
    (an ``arange(s)``, an ``argmax`` along a dim of size s, through views, slices, gathers and an added 0),
    else None: what an index into a dim of size ``s`` needs, which intervals alone cannot show when
    ``s`` varies per call."""
    while True:
        node = producer.get(name)
        if node is None or not node.args:
            return None
        first = node.args[0]
        if node.op == "arange":
            start, end, step = (*node.args[:3], None, None)[:3]
            if end is None and step in (None, 1):
                return _scalar_symbol(graph, start)
            if start == 0 and step in (None, 1):
                return _scalar_symbol(graph, end)
            return None
        if (
            node.op == "argmax"
            and len(node.args) >= 2
            and isinstance(first, ValueRef)
            and isinstance(node.args[1], int)
        ):
            return _dim_symbol(graph, first, node.args[1])  # positions along that dim: 0 .. its size - 1
        if node.op == "add" and len(node.args) >= 2 and node.args[1] == 0 and node.args[2:] in ((), (1,)):
            pass  # x + 0
        elif node.op not in _SUBSETS:
            return None
        if not isinstance(first, ValueRef):
            return None
        name = first.name


def _scalar_symbol(graph: Graph, value: Any) -> str | None:
    info = graph.values.get(value.name) if isinstance(value, ValueRef) else None
    return None if info is None else info.symbol


def _viewed_input(graph: Graph, name: str, producer: Mapping[str, Node], position: Mapping[str, int]) -> str | None:
    """The graph input whose values ``name`` holds (through views, and casts that keep every value), or None."""
    while name not in position:
        node = producer.get(name)
        if node is None or node.op not in _VIEWS or not node.args or not isinstance(node.args[0], ValueRef):
            return None
        if node.op == "cast" and not _widens(graph, node.args[0].name, name):
            return None
        name = node.args[0].name
    return name


def _widens(graph: Graph, source: str, result: str) -> bool:
    """Whether a cast from ``source`` to ``result`` keeps every integer value (int32 to int64, ...)."""
    a, b = graph.values[source].meta, graph.values[result].meta
    if a is None or b is None:
        return False
    inner, outer = dtype_range(a.dtype), dtype_range(b.dtype)
    return inner is not None and outer is not None and outer[0] <= inner[0] and inner[1] <= outer[1]
