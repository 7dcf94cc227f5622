"""Value ranges: a conservative ``[lo, hi]`` for the values of a graph's integer tensors.

A plan proves what a single call cannot: that an int64 tensor holds small values (positions from an
``arange``, a mask's running sum, a comparison's 0/1). Sources are constants (their min and max,
computed once at planning), bool and narrow integer dtypes (their own range) and Python ints; each
op's rule (``RULES``, interval arithmetic after ``torch.utils._sympy.value_ranges``) carries the
intervals through the graph. Anything a rule does not cover is unknown (None): graph inputs
(``input_ids``), sizes computed at run time, ATen fallback ops. Unknown never widens into a guess.
Float tensors get real intervals (opcore.graph.real_ranges) so that a float cast back to an integer
dtype is proven, and a ``where`` takes each branch only where its condition leaves it
(opcore.graph.branch_ranges: T5's and DeBERTa's relative-position buckets, ``-inf`` at 0 but kept
only elsewhere).

A graph backend whose runtime computes int64 in a narrower dtype (its partition compiler's
``int64_as``: OpenVINO's CPU plugin, int32) declines int64 in single calls. For a node whose int64
results the ranges prove to fit (``node_narrowing``), the planner asks that backend's checkers again
with the node's metas as the runtime gets them (``shown``: proven int64 inputs as the narrow dtype,
bounded tensors with ``TensorMeta.bounds``); a checker may check an integer result with
``narrowing_refused``. The runtime's own narrowing then keeps every value.

>>> from opcore.types import DType, TensorMeta
>>> x = TensorMeta((64,), DType.INT64, bounds=(0, 63))
>>> result_range("add", (x, 1, 1)), result_range("cumsum", (TensorMeta((64,), DType.BOOL), -1, None))
((1, 64), (0, 64))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy

from opcore.graph.branch_ranges import branch_intervals
from opcore.graph.intervals import hull, magnitude, negated, smaller, summed
from opcore.graph.ir import Graph, Node, ValueRef, refs_in, substitute
from opcore.graph.real_ranges import REAL_DTYPES, REAL_RULES, RealInterval, Reals, measured, real_range, to_integers
from opcore.graph.size_ranges import declared_sizes, expression_range, largest_size
from opcore.types import DType, TensorMeta

__all__ = [
    "NO_INT64", "RULES", "Interval", "ValueProof", "bounded", "declared_sizes", "dtype_range", "known",
    "expression_range", "narrowing_refused", "node_narrowing", "result_range", "shown", "value_ranges",
]  # fmt: skip

Interval = tuple[int, int]
Rule = Callable[..., "Interval | None"]


class _Unknown:
    """A value only known at run time, as rules get it: never an interval, and never taken for an absent
    argument (``arange(0, s0)`` is not ``arange(0)``: ``None`` would read so)."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()


def dtype_range(dtype: DType) -> Interval | None:
    """The values a bool or integer dtype can hold; None for floating dtypes.

    >>> dtype_range(DType.BOOL), dtype_range(DType.INT8), dtype_range(DType.FLOAT32)
    ((0, 1), (-128, 127), None)
    """
    if dtype is DType.BOOL:
        return (0, 1)
    if dtype.is_integer:
        info = numpy.iinfo(dtype.to_numpy())
        return (int(info.min), int(info.max))
    return None


def known(value: Any) -> Interval | None:
    """The interval of an argument: a tensor's proven bounds (else its dtype's, if bool or integer),
    a Python int or bool itself; None for anything else (floats, sizes not known at planning)."""
    if isinstance(value, TensorMeta):
        return value.bounds if value.bounds is not None else dtype_range(value.dtype)
    if isinstance(value, (bool, int, numpy.integer)):
        return (int(value), int(value))
    return None


def _within(inner: Interval, outer: Interval | None) -> bool:
    return outer is not None and outer[0] <= inner[0] and inner[1] <= outer[1]


def _scaled(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None or b is None:
        return None
    corners = [x * y for x in a for y in b]
    return (min(corners), max(corners))


def _add(x: Any, other: Any, alpha: Any = 1) -> Interval | None:
    a, b = known(x), _scaled(known(other), known(alpha))
    return None if a is None or b is None else (a[0] + b[0], a[1] + b[1])


def _sub(x: Any, other: Any, alpha: Any = 1) -> Interval | None:
    a, b = known(x), _scaled(known(other), known(alpha))
    return None if a is None or b is None else (a[0] - b[1], a[1] - b[0])


def _mul(x: Any, other: Any) -> Interval | None:
    return _scaled(known(x), known(other))


def _minimum(x: Any, other: Any) -> Interval | None:
    return smaller(known(x), known(other))


def _sign(x: Any) -> Interval | None:
    a = known(x)
    return None if a is None else (int(numpy.sign(a[0])), int(numpy.sign(a[1])))


def _same(x: Any, *rest: Any) -> Interval | None:
    """Views, copies and selections of x: no new values."""
    return known(x)


def _cat(tensors: Any, *rest: Any) -> Interval | None:
    return hull(*(known(t) for t in tensors))


def _boolean(*args: Any) -> Interval:
    return (0, 1)


def _sum_of(x: Any, count: int) -> Interval | None:
    """Any sum of up to ``count`` values of x (a running sum's prefixes too), and the empty sum 0.
    A negative count is a dim whose size changes at run time (see ``value_ranges``): unknown."""
    return summed(known(x), count)


def _cumsum(x: TensorMeta, dim: int, dtype: str | None = None) -> Interval | None:
    return _sum_of(x, x.shape[dim] if x.ndim else 1)


def _sum(x: TensorMeta, dim: Any = None, keepdim: bool = False) -> Interval | None:
    dims = range(x.ndim) if not dim else dim
    counts = [x.shape[d] for d in dims]
    return _sum_of(x, -1 if any(c < 0 for c in counts) else math.prod(counts) if x.ndim else 1)


def _argmax(x: TensorMeta, dim: int | None = None, keepdim: bool = False) -> Interval | None:
    if any(size < 0 for size in x.shape):  # an unknown size: so is the count (two -1 would multiply to 1)
        return None
    n = x.numel if dim is None else x.shape[dim] if x.ndim else 1
    return (0, max(n - 1, 0))


def _indices_and_values(dim_at: int, default_dim: int | None = -1) -> Callable[..., Interval | None]:
    """The rule of an ATen op returning (values, indices) along a dim (topk, max.dim, sort): the
    indices lie in [0, size - 1]; one interval covers every result, so for integer x it is joined
    with x's own (a float x's values are not integers: only the indices take it)."""

    def rule(x: TensorMeta, *args: Any) -> Interval | None:
        dim = args[dim_at] if len(args) > dim_at else default_dim
        if not isinstance(dim, int) or isinstance(dim, bool) or not x.ndim:
            return None
        size = x.shape[dim]
        if size < 0:
            return None
        indices = (0, max(size - 1, 0))
        if dtype_range(x.dtype) is None:  # floating values: no interval of theirs is claimed
            return indices
        own = known(x)
        return None if own is None else (min(own[0], indices[0]), max(own[1], indices[1]))

    return rule


def _cast(x: Any, dtype: str) -> Interval | None:
    a, target = known(x), DType.parse(dtype)
    if target is DType.BOOL:
        return (0, 1)
    if a is None or target.is_floating or _within(a, dtype_range(target)):
        return a
    return None  # torch wraps integers that do not fit the target: nothing proven


def _where(condition: Any, x: Any, other: Any) -> Interval | None:
    return hull(known(x), known(other))


def _masked_fill(x: Any, mask: Any, value: Any) -> Interval | None:
    return hull(known(x), known(value))


def _clamp(x: Any, low: Any = None, high: Any = None) -> Interval | None:
    """min(max(x, low), high), each bound a number or a tensor with its own interval."""
    a = known(x)
    if a is None:
        return None
    lo, hi = a
    if low is not None:
        m = known(low)
        if m is None:
            return None
        lo, hi = max(lo, m[0]), max(hi, m[1])
    if high is not None:
        m = known(high)
        if m is None:
            return None
        lo, hi = min(lo, m[0]), min(hi, m[1])
    return (lo, hi)


def _full_like(x: Any, fill_value: Any, *rest: Any) -> Interval | None:
    return known(fill_value)


def _full(size: Any, fill_value: Any, dtype: str | None = None, device: str = "cpu") -> Interval | None:
    return known(fill_value)


def _arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None, device: str = "cpu") -> Interval | None:
    # every value lies between start and end; with a positive integer step the end is excluded
    # (start + k*step < end), else the hull is conservative by one step; arange(n) counts from 0; a
    # bound known only at run time leaves the result unknown
    if end is None:
        return hull((0, 0), known(start))
    a, b, s = known(start), known(end), known(step)
    if a is not None and b is not None and s is not None and s[0] >= 1:
        return (a[0], max(a[0], b[1] - 1))
    return hull(a, b)


# op -> its rule, called with the node's arguments in schema order (tensors as TensorMeta with bounds)
RULES: Mapping[str, Rule] = {
    "add": _add,
    "sub": _sub,
    "mul": _mul,
    "neg": lambda x: negated(known(x)),
    "abs": lambda x: magnitude(known(x)),
    "minimum": _minimum,
    "sign": _sign,
    **dict.fromkeys(
        (
            "unsqueeze", "squeeze", "reshape", "flatten", "expand", "slice", "select", "permute", "transpose",
            "clone", "amax", "amin", "index", "split", "split_with_sizes", "chunk", "ceil",
        ),
        _same,
    ),
    "gather": _same,  # x's values, picked by index
    "cat": _cat,
    **dict.fromkeys(("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not"), _boolean),
    "cumsum": _cumsum,
    "sum": _sum,
    "argmax": _argmax,
    # ATen ops without a contract (the ATen fallback) that return indices: MoE routers pick experts so
    "aten.topk.default": _indices_and_values(1),  # (self, k, dim=-1, ...)
    "aten.max.dim": _indices_and_values(0, None),  # (self, dim, keepdim=False)
    "aten.min.dim": _indices_and_values(0, None),
    "aten.sort.default": _indices_and_values(0),  # (self, dim=-1, descending=False)
    "cast": _cast,
    "where": _where,
    "masked_fill": _masked_fill,
    "clamp": _clamp,
    "full_like": _full_like,
    "zeros_like": lambda x, *rest: (0, 0),
    "ones_like": lambda x, *rest: (1, 1),
    "full": _full,
    "zeros": lambda size, dtype=None, device="cpu": (0, 0),
    "ones": lambda size, dtype=None, device="cpu": (1, 1),
    "arange": _arange,
}  # fmt: skip


def result_range(op: str, args: tuple[Any, ...]) -> Interval | None:
    """The interval of ``op``'s result(s) for these arguments (schema order, tensors as TensorMeta
    whose ``bounds`` say what is known); None when the op has no rule or an argument is unknown.
    A result torch would compute in a narrower dtype than the interval's may wrap: the caller fits
    the interval to the result's dtype (``value_ranges`` does)."""
    rule = RULES.get(op)
    if rule is None:
        return None
    try:
        return rule(*args)
    except (TypeError, ValueError, IndexError, KeyError):  # an argument only known at run time
        return None


def _fit(interval: Interval | None, dtype: DType) -> Interval | None:
    """What is proven about a result of ``dtype``: the interval where the dtype holds it, else the
    dtype's own range (torch wraps integers); None for floating results."""
    own = dtype_range(dtype)
    if own is None:
        return None
    return interval if interval is not None and _within(interval, own) else own


# float constants up to this many values are measured for the real ranges
_MEASURED_FLOATS = 4096


def value_ranges(
    graph: Graph,
    constants: Mapping[str, Any],
    *,
    inputs: Mapping[str, Interval] | None = None,
    sizes: Mapping[str, Interval] | None = None,
) -> dict[str, Interval]:
    """For each bool or integer tensor of ``graph`` whose values are bounded more tightly than int64's
    range: the interval proven for them. Constants are measured (min and max); inputs are unknown
    unless the graph declares their bounds (``Graph.bounds``).

    ``inputs``: intervals assumed for graph inputs (what a check at the plan's entry makes true);
    ``sizes``: the range of each symbolic size (``s0``), which size computations (``sym_size`` and
    the arithmetic on it) then carry to the tensors built from them (an ``arange(s0)``): a size's
    declared range (``declared_sizes``) is a promise of the caller's that opcore.graph.signature
    checks on every call.

    >>> value_ranges(graph, constants)["cumsum"]  # doctest: +SKIP
    (0, 64)
    """
    # what the plan's caller guarantees of its inputs (Graph.bounds), and what an entry check assumes
    found: dict[str, Interval] = {**graph.bounds, **(inputs or {})}
    reals: dict[str, RealInterval] = {}  # float tensors' intervals: the steps to a float's cast to int
    scalars: dict[str, Interval] = {}  # size computations' results (with ``sizes`` only)
    for name in graph.constants:
        meta = graph.values[name].meta
        value = constants.get(name)
        if meta is None or value is None or meta.numel == 0:
            continue
        if meta.dtype in REAL_DTYPES:
            # small ones only (a bucket's log(max / mid), a norm's scale): a weight is never cast to int
            interval = measured(value) if meta.numel <= _MEASURED_FLOATS else None
            if interval is not None:
                reals[name] = interval
        elif dtype_range(meta.dtype) is not None:
            found[name] = (int(value.min()), int(value.max()))

    def meta_of(name: str, given: Mapping[str, Any]) -> Any:
        info = graph.values[name]
        if info.meta is None:  # a size computed at run time: unknown, unless its range is known
            interval = scalars.get(name)
            return UNKNOWN if interval is None else TensorMeta((), DType.INT64, bounds=interval)
        meta = bounded(info.meta, given[name] if name in given else found.get(name))
        if info.dynamic_axes:  # sizes that change per call: their declared largest, else -1 (refused)
            meta = replace(meta, shape=tuple(largest_size(d, sizes) for d in info.dims))
        return meta

    def real_of(name: str, given: Mapping[str, Any]) -> Any:
        meta = graph.values[name].meta
        if meta is not None and meta.dtype in REAL_DTYPES:
            interval = given[name] if name in given else reals.get(name)
            if interval is None:
                return meta
            return Reals(interval[0], interval[1], meta_of(name, given).shape)  # a dynamic size's largest
        return meta_of(name, given)

    def evaluate(node: Node, given: Mapping[str, Any]) -> dict[str, Any]:
        """The intervals of the node's results (integer or real), with ``given`` before the plan's."""
        interval = result_range(node.op, substitute(node.args, lambda n: meta_of(n, given)))
        results: dict[str, Any] = {}
        for output in node.outputs:
            meta = graph.values[output].meta
            if meta is None:
                continue
            if node.op in REAL_RULES and (meta.dtype in REAL_DTYPES or (interval is None and node.op == "cast")):
                in_reals = real_range(node.op, substitute(node.args, lambda n: real_of(n, given)))
                if meta.dtype in REAL_DTYPES:
                    if in_reals is not None:
                        results[output] = in_reals
                    continue
                interval = to_integers(in_reals, dtype_range(meta.dtype))  # a float cast to integers
            fitted = _fit(interval, meta.dtype)
            if fitted is not None and fitted != dtype_range(DType.INT64):
                results[output] = fitted
        return results

    def interval_of(name: str) -> tuple[tuple[float, float], bool] | None:
        meta = graph.values[name].meta
        if meta is None:
            return None
        if meta.dtype in REAL_DTYPES:
            return (reals[name], False) if name in reals else None
        own = found.get(name, dtype_range(meta.dtype))
        return None if own is None else (own, True)

    producers = {output: node for node in graph.nodes for output in node.outputs}
    users = graph.users()
    for node in graph.nodes:
        if node.scalar:
            if sizes is not None:
                interval = _size_range(graph, node, sizes, lambda n: meta_of(n, {}))
                if interval is not None:
                    scalars.update(dict.fromkeys(node.outputs, interval))
            continue
        results = evaluate(node, {})
        if node.op == "where" and not _proven_all(graph, node, results):
            results = _where_by_branch(graph, node, results, producers, users, interval_of, evaluate, found)
        for output, interval in results.items():
            if graph.values[output].meta.dtype in REAL_DTYPES:  # type: ignore[union-attr]
                reals[output] = interval
            else:
                found[output] = interval
    return found


def _proven_all(graph: Graph, node: Node, results: Mapping[str, Any]) -> bool:
    """Whether each result of ``node`` has an interval (an integer one within int32)."""
    for output in node.outputs:
        meta = graph.values[output].meta
        if meta is None:
            continue
        interval = results.get(output)
        if interval is None or (meta.dtype is DType.INT64 and not _within(interval, dtype_range(DType.INT32))):
            return False
    return True


def _where_by_branch(
    graph: Graph,
    node: Node,
    results: dict[str, Any],
    producers: Mapping[str, Node],
    users: Mapping[str, list[int]],
    interval_of: Callable[[str], Any],
    evaluate: Callable[[Node, Mapping[str, Any]], dict[str, Any]],
    found: dict[str, Interval],
) -> dict[str, Any]:
    """A ``where``'s results with each branch taken at the values its condition leaves it
    (opcore.graph.branch_ranges); the cone values proven only there (``guarded``) go into ``found``
    where they are narrower than what it holds."""
    proof = branch_intervals(graph, node, producers, users, interval_of, evaluate)
    given = {
        node.args[position].name: interval
        for position, interval in proof.intervals.items()
        if interval is not None and isinstance(node.args[position], ValueRef)
    }
    if len(given) < sum(1 for i in proof.intervals.values() if i is not None):  # both branches one value
        return results
    for name, interval in proof.guarded.items():
        meta = graph.values[name].meta
        if meta is None or meta.dtype in REAL_DTYPES or dtype_range(meta.dtype) is None:
            continue
        fitted = _fit((math.floor(interval[0]), math.ceil(interval[1])), meta.dtype)
        own = found.get(name)
        if fitted is not None and (own is None or (_within(fitted, own) and fitted != own)):
            found[name] = fitted
    return {**results, **evaluate(node, given)} if given else results


def _size_range(
    graph: Graph, node: Node, sizes: Mapping[str, Interval], lookup: Callable[[str], Any]
) -> Interval | None:
    """The range of a size computation's result: the range of the symbolic size the exporter recorded
    for it (``s0 - 1``), a symbolic size's declared range, a static size itself, the arithmetic rules
    (add, sub, mul, neg) on those; None for anything else."""
    recorded = graph.values[node.outputs[0]].dims if node.outputs and node.outputs[0] in graph.values else ()
    if recorded and isinstance(recorded[0], str):
        interval = expression_range(recorded[0], sizes)
        if interval is not None:
            return interval
    if node.op == "sym_size":
        x, dim = node.args
        dims = graph.values[x.name].dims if isinstance(x, ValueRef) else ()
        size = dims[dim] if isinstance(dim, int) and -len(dims) <= dim < len(dims) else None
        if isinstance(size, int):
            return (size, size)
        return expression_range(size, sizes) if isinstance(size, str) else None
    if node.op in ("add", "sub", "mul", "neg"):
        return result_range(node.op, substitute(node.args, lookup))
    return None


def bounded(meta: TensorMeta, interval: Interval | None) -> TensorMeta:
    """``meta`` with ``bounds`` set to ``interval`` (bool and integer tensors; others as they are)."""
    if interval is None or dtype_range(meta.dtype) is None:
        return meta
    return replace(meta, bounds=interval)


def narrowing_refused(op: str, args: tuple[Any, ...], narrow: DType, skip: int | None = None) -> str | None:
    """None when every int64 tensor among ``args`` (but the one at ``skip``, e.g. indices) and the
    op's result provably fit ``narrow``: computing them in it gives torch's values. Else why not.

    >>> x = TensorMeta((4,), DType.INT64, bounds=(0, 2**40))
    >>> narrowing_refused("unsqueeze", (x, 0), DType.INT32)
    "argument 0's values are only known to lie in [0, 1099511627776], beyond int32"
    """
    limit = dtype_range(narrow)
    for position, value in enumerate(args):
        if position == skip:
            continue
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, TensorMeta) and item.dtype is DType.INT64:
                if item.bounds is None:
                    return f"argument {position}'s values are not bounded by the plan"
                if not _within(item.bounds, limit):
                    lo, hi = item.bounds
                    return f"argument {position}'s values are only known to lie in [{lo}, {hi}], beyond {narrow}"
    result = result_range(op, args)
    if result is None:
        return f"no value range is known for the result of {op}"
    if not _within(result, limit):
        return f"the result's values are only known to lie in [{result[0]}, {result[1]}], beyond {narrow}"
    return None


NO_INT64 = "the node has no int64 values"


@dataclass(frozen=True, slots=True)
class ValueProof:
    """What a plan proves about its integer values, and who uses it: ``ranges`` (``value_ranges``),
    ``int64_as`` (graph backend -> the dtype it computes int64 in: its partition compiler's
    ``int64_as``; backends without one are never shown narrowed values); ``bfloat16_as`` (graph
    backend -> the dtype it computes bfloat16 in inside a partition: its compiler's ``bfloat16_as``;
    its checkers are asked about bfloat16 nodes as that dtype)."""

    ranges: Mapping[str, Interval]
    int64_as: Mapping[str, DType]
    bfloat16_as: Mapping[str, DType] = field(default_factory=dict)


def node_narrowing(graph: Graph, node: Node, ranges: Mapping[str, Interval], narrow: DType) -> str | None:
    """None when the plan may show ``node`` to a runtime that computes int64 in ``narrow`` (its int64
    inputs in ``narrow``'s range shown as ``narrow``, ``shown``): every int64 result of the node is
    proven to fit ``narrow``; else why not. A node without int64 values is not narrowed.

    >>> node_narrowing(graph, graph.nodes[0], value_ranges(graph, constants), DType.INT32)  # doctest: +SKIP
    "the values of add are only known to lie in [-34359738367, 1099511627777], beyond int32"
    """
    limit = dtype_range(narrow)
    outputs = [o for o in node.outputs if (m := graph.values[o].meta) is not None and m.dtype is DType.INT64]
    inputs = [
        r.name for r in refs_in(node.args) if (m := graph.values[r.name].meta) is not None and m.dtype is DType.INT64
    ]
    if not outputs and not inputs:
        return NO_INT64
    for name in outputs:
        found = ranges.get(name)
        if found is None:
            return f"the values of {name} are not bounded by the plan"
        if not _within(found, limit):
            return f"the values of {name} are only known to lie in [{found[0]}, {found[1]}], beyond {narrow}"
    if outputs or any(_within(ranges[n], limit) for n in inputs if n in ranges):
        return None
    return "none of its int64 inputs is proven to fit " + str(narrow)


def shown(meta: TensorMeta, interval: Interval | None, narrow: DType) -> TensorMeta:
    """A tensor's meta as a plan shows it to a runtime that computes int64 in ``narrow``: an int64
    tensor proven to fit ``narrow`` as ``narrow``, with its bounds; other bounded tensors with theirs."""
    if meta.dtype is DType.INT64 and interval is not None and _within(interval, dtype_range(narrow)):
        return replace(meta, dtype=narrow, bounds=interval)
    return bounded(meta, interval)
