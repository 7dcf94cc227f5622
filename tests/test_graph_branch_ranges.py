"""opcore.graph.branch_ranges: a ``where``'s branches taken at the values its condition leaves them.

T5's relative-position buckets as a module: ``log(rel / 8)`` is ``-inf`` at ``rel = 0`` (its cast
to int64 unbounded there), but the ``where`` takes the log-spaced bucket only where ``rel >= 8``.
Captured with a dynamic length (declared up to 64), the plan proves the buckets small and OpenVINO
(int64 computed in int32) takes them; run at the declared extremes, the plan equals torch. Where the
proof would not hold (the unbounded cast read elsewhere, a cone that moves values across positions),
nothing is claimed, and the plan still equals torch at the positions where the cast saw ``-inf``.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

import opcore.graph
from opcore.graph.branch_ranges import outcomes
from opcore.graph.ir import Node, ValueRef
from opcore.graph.ranges import declared_sizes, value_ranges

LONGEST = 64


class Buckets(nn.Module):
    """T5's bidirectional ``_relative_position_bucket`` (16 buckets, max distance 128), as a bias.

    ``escape``: the unbounded log-spaced bucket is an output too (read beyond the ``where``);
    ``transposed``: the ``where`` takes it transposed (a cone that is not elementwise)."""

    def __init__(self, escape: bool = False, transposed: bool = False) -> None:
        super().__init__()
        self.escape, self.transposed = escape, transposed

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        positions = torch.arange(x.shape[1])
        relative = positions[None, :] - positions[:, None]
        buckets = (relative > 0).to(torch.long) * 8
        relative = torch.abs(relative)
        large = 4 + (torch.log(relative.float() / 4) / math.log(128 / 4) * 4).to(torch.long)
        large = torch.min(large, torch.full_like(large, 7))
        picked = torch.where(relative < 4, relative, large.t() if self.transposed else large)
        bucket = buckets + picked
        bias = torch.relu(x[0][None, :] * bucket.float() + x[0][:, None])
        return (bias, bucket, large) if self.escape else (bias, bucket)


def _capture(module: nn.Module) -> tuple[opcore.graph.Plan, nn.Module]:
    x = torch.randn(1, 16, generator=torch.Generator().manual_seed(0))
    shapes = ({1: torch.export.Dim("n", min=2, max=LONGEST)},)
    plan = opcore.graph.capture(module.eval(), (x,), dynamic_shapes=shapes, backends=("openvino", "cpu"), measure=False)
    return plan, module


def _verdicts(plan: opcore.graph.Plan, op: str) -> list[dict[str, str]]:
    nodes = json.loads(plan.explain(format="json"))["nodes"]
    return [c for n in nodes if n["op"] == op for c in n["candidates"] if c["backend"] == "openvino"]


def _ranges(plan: opcore.graph.Plan) -> dict[str, tuple[int, int]]:
    return value_ranges(plan.graph, plan.constants, sizes=declared_sizes(plan.graph))


def _same_as_torch_at_the_extremes(plan: opcore.graph.Plan, module: nn.Module) -> None:
    """At the shortest and the longest declared lengths (and one between), every output equals torch's;
    every value the plan proves a range for lies in it (the rules' soundness, on real values)."""
    for length in (2, 3, 37, LONGEST):
        x = torch.randn(1, length, generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            want = module(x)
        got = plan(x)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            assert torch.equal(g, w) if not w.is_floating_point() else torch.allclose(g, w, rtol=1e-5, atol=1e-5)
    ranges = _ranges(plan)
    outputs = [r.name for r in plan.graph.outputs if isinstance(r, ValueRef)]
    with torch.no_grad():
        values = module(torch.randn(1, LONGEST))
    for name, value in zip(outputs, values):
        if name in ranges and not value.is_floating_point():
            lo, hi = ranges[name]
            assert lo <= int(value.min()) and int(value.max()) <= hi, (name, ranges[name], value.min(), value.max())


def test_buckets_are_proven_small_and_run_on_openvino() -> None:
    plan, module = _capture(Buckets())
    ranges = _ranges(plan)
    casts = [n for n in plan.graph.nodes if n.op == "cast" and n.args[1] == "int64"]
    (bucket_cast,) = [n for n in casts if isinstance(n.args[0], ValueRef) and "mul" in n.args[0].name]
    assert ranges[bucket_cast.outputs[0]] == (-1, 4)  # guarded: at the positions where the where reads it
    (where,) = [n for n in plan.graph.nodes if n.op == "where"]
    assert ranges[where.outputs[0]] == (0, 7)  # [0, 3] where relative < 4, [3, 7] elsewhere
    for op in ("cast", "minimum", "where", "add"):
        assert {v["status"] for v in _verdicts(plan, op)} <= {"partition", "partition only"}, _verdicts(plan, op)
    assert {p.backend for p in plan.partitions} == {"openvino"} and len(plan.partitions) == 1
    _same_as_torch_at_the_extremes(plan, module)


def test_a_cast_read_beyond_the_where_is_not_narrowed() -> None:
    """The log-spaced bucket is an output: at relative 0 it holds torch's cast of -inf (int64's
    minimum + 4); OpenVINO's int32 would give another value there, so it stays unproven and declined."""
    plan, module = _capture(Buckets(escape=True))
    ranges = _ranges(plan)
    (minimum,) = [n for n in plan.graph.nodes if n.op == "minimum"]
    assert ranges[minimum.outputs[0]][0] == -(2**63)  # only bounded above (by the 7 it is compared with)
    assert all(v["status"] == "declined" for v in _verdicts(plan, "minimum")), _verdicts(plan, "minimum")
    _same_as_torch_at_the_extremes(plan, module)
    with torch.no_grad():
        assert int(module(torch.randn(1, 4))[2].min()) < -(2**31)  # the values the proof must not claim


def test_a_cone_that_moves_values_across_positions_is_not_refined() -> None:
    """Transposed, the bucket the where takes at (i, j) comes from relative (j, i): the condition at
    (i, j) says nothing about it. Here relative is symmetric, so the values would agree, but the rule
    must not rely on it: that branch keeps its plain range, and the plan equals torch."""
    plan, module = _capture(Buckets(transposed=True))
    (where,) = [n for n in plan.graph.nodes if n.op == "where"]
    # the compared value is narrowed where it is taken ([0, 3]); the transposed branch is not: its
    # plain range, bounded above by the 7 of the minimum only
    assert _ranges(plan)[where.outputs[0]] == (-(2**63), 7)
    _same_as_torch_at_the_extremes(plan, module)


def _node(name: str, op: str, *args: object) -> Node:
    return Node(name, op, f"aten.{op}.default", tuple(args), (name,))


@pytest.mark.parametrize(
    ("nodes", "truth", "expected"),
    [
        ([_node("c", "lt", ValueRef("x"), 8)], True, [{"x": (0, 7)}]),
        ([_node("c", "lt", ValueRef("x"), 8)], False, [{"x": (8, 63)}]),
        ([_node("c", "le", ValueRef("x"), 16)], False, [{"x": (17, 63)}]),
        ([_node("c", "gt", ValueRef("x"), 2.5)], True, [{"x": (3, 63)}]),
        ([_node("c", "ge", ValueRef("x"), 70)], True, []),  # never true: the branch is never taken
        # DeBERTa's (x < 16) & (x > -16): false where either side is
        (
            [_node("a", "lt", ValueRef("x"), 16), _node("b", "gt", ValueRef("x"), -16),
             _node("c", "logical_and", ValueRef("a"), ValueRef("b"))],
            False,
            [{"x": (16, 63)}],  # x > -16 is always true on [0, 63]: its false way is empty
        ),
        (
            [_node("a", "lt", ValueRef("x"), 16), _node("b", "gt", ValueRef("x"), 4),
             _node("c", "logical_and", ValueRef("a"), ValueRef("b"))],
            True,
            [{"x": (5, 15)}],
        ),
        ([_node("a", "lt", ValueRef("x"), 8), _node("c", "logical_not", ValueRef("a"))], True, [{"x": (8, 63)}]),
        ([_node("c", "lt", ValueRef("f"), 8)], False, None),  # a float nothing bounds may be NaN
        ([_node("c", "eq", ValueRef("x"), 8)], True, None),  # not a comparison the rule narrows by
        ([_node("c", "lt", ValueRef("x"), math.inf)], True, None),  # an infinite bound narrows nothing
    ],
)  # fmt: skip
def test_outcomes_of_conditions(nodes: list[Node], truth: bool, expected: object) -> None:
    producers = {n.outputs[0]: n for n in nodes}

    def interval_of(name: str) -> tuple[tuple[float, float], bool] | None:
        return ((0, 63), True) if name == "x" else None

    assert outcomes(producers, ValueRef("c"), truth, interval_of) == expected
