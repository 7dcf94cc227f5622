"""Branch ranges: what a ``where`` takes from each branch, knowing its condition.

``where(x < 8, x, bucket(x))`` takes ``bucket(x)`` only where ``x >= 8``: a relative position's
log-spaced bucket (T5's ``_relative_position_bucket``, DeBERTa's ``make_log_bucket_position``) is
computed from ``log(x / 8)``, which is ``-inf`` at ``x = 0``, and its cast to int64 is unbounded
there; at the positions the ``where`` keeps, ``x`` lies in ``[8, hi]`` and the bucket in a few
integers. The branch is evaluated again (``branch_intervals``) on its cone (the nodes between the
compared value and the branch) with the compared value's interval narrowed by the condition.

Sound only where every position of the result reads the branch at the position where the condition
read the compared value: the cone's ops are all elementwise (``ELEMENTWISE``: broadcasting maps a
position the same way along every path; a view, reduction or gather would not), and so is the
condition. A cone node whose values are proven only where the ``where`` reads them (``guarded``) may
be narrowed too when nothing else reads it: the values it holds elsewhere (torch's and a runtime's
may differ there: the cast of ``-inf``) are never seen.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opcore.graph.ir import Graph, Node, ValueRef

__all__ = ["ELEMENTWISE", "BranchProof", "branch_intervals", "outcomes"]

Bounds = tuple[float, float]  # an integer or a real interval
Refinement = dict[str, Bounds]  # value -> the interval it lies in (all of them hold)

# ops whose result at a position reads their tensor arguments at that position (broadcast)
ELEMENTWISE = frozenset(
    {
        "add", "sub", "mul", "div", "neg", "abs", "log", "ceil", "floor", "sign", "where", "minimum",
        "clamp", "cast", "full_like", "zeros_like", "ones_like", "lt", "le", "gt", "ge", "eq",
        "ne", "logical_and", "logical_or", "logical_not", "masked_fill",
    }
)  # fmt: skip
_COMPARISONS = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}  # each with its negation


@dataclass(frozen=True, slots=True)
class BranchProof:
    """A ``where``'s branches, evaluated again under its condition.

    ``intervals``: per branch argument position (1: taken where the condition holds, 2: where not),
    its interval at the positions the ``where`` takes it; None where nothing narrower is known.
    ``guarded``: per cone value read only on that path, its interval at the positions that matter.
    """

    intervals: dict[int, Bounds | None]
    guarded: dict[str, Bounds]


def _narrowed(interval: Bounds, op: str, bound: float, integral: bool) -> Bounds:
    lo, hi = interval
    if op == "lt":
        hi = min(hi, math.ceil(bound) - 1 if integral else bound)
    elif op == "le":
        hi = min(hi, math.floor(bound) if integral else bound)
    elif op == "gt":
        lo = max(lo, math.floor(bound) + 1 if integral else bound)
    else:  # ge
        lo = max(lo, math.ceil(bound) if integral else bound)
    return (lo, hi)


def outcomes(
    producers: Mapping[str, Node], condition: Any, truth: bool, interval_of: Callable[[str], tuple[Bounds, bool] | None]
) -> list[Refinement] | None:
    """The ways ``condition`` can be ``truth``: any one of the refinements holds (an empty list: it
    never is); None when nothing is known. ``interval_of(name)``: a value's interval and whether it is
    integral, or None (a float nothing bounds may be NaN, for which ``not (x < k)`` is not ``x >= k``)."""
    if not isinstance(condition, ValueRef) or condition.name not in producers:
        return None
    node = producers[condition.name]
    if node.op == "logical_not":
        return outcomes(producers, node.args[0], not truth, interval_of)
    if node.op in ("logical_and", "logical_or"):
        left, right = (outcomes(producers, a, truth, interval_of) for a in node.args[:2])
        if (node.op == "logical_and") == truth:  # both hold: each pair of ways, intersected
            if left is None or right is None:
                return left if right is None else right  # knowing one of the two is still sound
            return [r for a in left for b in right if (r := _both(a, b)) is not None]
        return None if left is None or right is None else left + right  # either holds
    if node.op not in _COMPARISONS or len(node.args) < 2:
        return None
    x, bound = node.args[:2]
    if not isinstance(x, ValueRef) or isinstance(bound, bool) or not isinstance(bound, (int, float)):
        return None
    found = interval_of(x.name)
    if found is None or not math.isfinite(bound):  # NaN compares false both ways; inf has no ceiling
        return None
    interval, integral = found
    narrowed = _narrowed(interval, node.op if truth else _COMPARISONS[node.op], bound, integral)
    return [] if narrowed[0] > narrowed[1] else [{x.name: narrowed}]


def _both(a: Refinement, b: Refinement) -> Refinement | None:
    merged = dict(a)
    for name, (lo, hi) in b.items():
        low, high = (max(lo, merged[name][0]), min(hi, merged[name][1])) if name in merged else (lo, hi)
        if low > high:
            return None
        merged[name] = (low, high)
    return merged


def _cone(graph: Graph, producers: Mapping[str, Node], branch: str, sources: set[str]) -> list[Node] | None:
    """The nodes between ``sources`` and ``branch`` (those that read a source, directly or not, and
    that the branch reads), in graph order; None if one of them is not elementwise."""
    above: dict[int, Node] = {}  # the nodes the branch reads, directly or not, up to the sources
    stack, seen = [branch], set(sources)
    while stack:  # a loop, not a recursion: a graph may be thousands of nodes deep
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        producer = producers.get(name)
        if producer is not None and not producer.scalar:
            above[id(producer)] = producer
            stack.extend(producer.refs())
    reaching, cone = set(sources), []
    for node in graph.nodes:  # graph order: a node's inputs come before it
        if id(node) in above and any(r in reaching for r in node.refs()):
            reaching.update(node.outputs)
            cone.append(node)
    for node in cone:
        # an integer division (a rounding mode) could trap on the values a runtime holds where the
        # ``where`` does not look: not taken
        if node.op not in ELEMENTWISE or (node.op == "div" and node.args[2:3] not in ((), (None,))):
            return None
    return cone


def branch_intervals(
    graph: Graph,
    node: Node,
    producers: Mapping[str, Node],
    users: Mapping[str, list[int]],
    interval_of: Callable[[str], tuple[Bounds, bool] | None],
    evaluate: Callable[[Node, Mapping[str, Bounds]], dict[str, Bounds]],
) -> BranchProof:
    """The branches of ``where`` node ``node`` evaluated under its condition (``evaluate(n, known)``:
    the intervals of ``n``'s results with ``known`` taken before the plan's own ranges)."""
    condition = node.args[0]
    outputs = graph.output_names()
    intervals: dict[int, Bounds | None] = {}
    guarded: dict[str, Bounds] = {}
    for position, truth in ((1, True), (2, False)):
        branch = node.args[position]
        ways = outcomes(producers, condition, truth, interval_of)
        if not isinstance(branch, ValueRef) or ways is None:
            intervals[position] = None
            continue
        sources = {name for way in ways for name in way}
        cone = _cone(graph, producers, branch.name, sources)
        if cone is None or not ways or (not cone and branch.name not in sources):
            intervals[position] = None  # nothing narrower known (a branch never taken: kept as it is)
            continue
        found: dict[str, list[Bounds | None]] = {}
        taken: list[Bounds | None] = []
        for way in ways:
            known: dict[str, Bounds] = dict(way)
            for step in cone:
                known.update(evaluate(step, known))
                for name in step.outputs:
                    found.setdefault(name, []).append(known.get(name))
            own = interval_of(branch.name)  # a way that leaves the branch as the plan has it
            taken.append(known.get(branch.name, None if own is None else own[0]))
        intervals[position] = _hull(taken)
        for name in _read_only_here(graph, node, position, cone, users, outputs):
            interval = _hull(found.get(name, []))
            if interval is not None:
                guarded[name] = interval
    return BranchProof(intervals, guarded)


def _read_only_here(
    graph: Graph, node: Node, position: int, cone: list[Node], users: Mapping[str, list[int]], outputs: set[str]
) -> set[str]:
    """The cone's values read by nothing but other such values and the ``where``'s branch at
    ``position`` (a fixpoint: a reader outside, or the plan's caller for an output, sees a value at
    every position, and so the values it is computed from)."""
    here = {name for step in cone for name in step.outputs} - outputs
    steps = {id(step) for step in cone}
    changed = True
    while changed:
        changed = False
        for name in sorted(here):
            for index in users.get(name, []):
                reader = graph.nodes[index]
                if reader is node:
                    fine = _reads_only(node, name, position)
                else:
                    fine = id(reader) in steps and all(o in here for o in reader.outputs)
                if not fine:
                    here.discard(name)
                    changed = True
                    break
    return here


def _reads_only(node: Node, name: str, position: int) -> bool:
    """Whether ``node`` reads ``name`` at argument ``position`` only."""
    return all(not (isinstance(a, ValueRef) and a.name == name) for i, a in enumerate(node.args) if i != position)


def _hull(intervals: list[Bounds | None]) -> Bounds | None:
    if not intervals or any(i is None for i in intervals):
        return None
    found = [i for i in intervals if i is not None]
    return (min(i[0] for i in found), max(i[1] for i in found))
