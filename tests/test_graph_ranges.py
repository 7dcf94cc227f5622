"""opcore.graph.ranges: the value-range analysis per op, the proof OpenVINO's checker asks for before
it takes int64 nodes (its CPU plugin computes int64 in int32), plans on the real OpenVINO, and the
ATen ops capture decomposes (diff, new_ones)."""

from __future__ import annotations

import json

import pytest
import torch
from opcore_openvino.checks import INT64_REASON, checker_for
from torch import nn

import opcore.graph
from opcore.graph.ranges import dtype_range, known, narrowing_refused, result_range, shown, value_ranges
from opcore.types import DType, TensorMeta

I64, I32, BOOL, F32 = DType.INT64, DType.INT32, DType.BOOL, DType.FLOAT32
INT32_MAX = 2**31 - 1


def meta(shape: tuple[int, ...], dtype: DType = I64, bounds: tuple[int, int] | None = None) -> TensorMeta:
    return TensorMeta(shape, dtype, bounds=bounds)


# --- the rules, op by op -------------------------------------------------------------------------


def test_sources_dtypes_python_ints_and_unknowns() -> None:
    assert known(meta((2,), BOOL)) == (0, 1)
    assert known(meta((2,), DType.UINT8)) == (0, 255)
    assert known(meta((2,), I64, (3, 9))) == (3, 9)
    assert known(meta((2,), I64)) == dtype_range(I64)  # no bounds: all of int64
    assert known(7) == (7, 7) and known(True) == (1, 1)
    assert known(2.5) is None and known(meta((2,), F32)) is None


@pytest.mark.parametrize(
    ("op", "args", "expected"),
    [
        ("add", (meta((4,), bounds=(0, 63)), 1, 1), (1, 64)),
        ("add", (meta((4,), bounds=(0, 63)), meta((4,), bounds=(-5, 5)), 2), (-10, 73)),
        ("sub", (meta((4,), bounds=(0, 63)), meta((4,), bounds=(-5, 5)), 1), (-5, 68)),
        ("mul", (meta((4,), bounds=(-2, 3)), meta((4,), bounds=(-4, 5))), (-12, 15)),
        ("neg", (meta((4,), bounds=(-2, 3)),), (-3, 2)),
        ("abs", (meta((4,), bounds=(-7, 3)),), (0, 7)),
        ("abs", (meta((4,), bounds=(2, 3)),), (2, 3)),
        ("unsqueeze", (meta((4,), bounds=(0, 9)), 0), (0, 9)),
        ("expand", (meta((1, 4), bounds=(0, 9)), (3, -1)), (0, 9)),
        ("slice", (meta((4,), bounds=(0, 9)), 0, 1, 3, 1), (0, 9)),
        ("index", (meta((4, 4), bounds=(2, 9)), (meta((3,)),)), (2, 9)),
        ("gather", (meta((4, 4), bounds=(2, 9)), 1, meta((4, 4))), (2, 9)),
        ("cat", ((meta((4,), bounds=(0, 3)), meta((2,), bounds=(-1, 1))), 0), (-1, 3)),
        ("eq", (meta((4,)), 3), (0, 1)),
        ("logical_not", (meta((4,), BOOL),), (0, 1)),
        ("cumsum", (meta((1, 64), BOOL), -1, None), (0, 64)),
        ("cumsum", (meta((3, 5), bounds=(-2, 3)), 1, None), (-10, 15)),
        ("sum", (meta((3, 5), bounds=(1, 2)), None, False), (0, 30)),
        ("sum", (meta((3, 5), bounds=(1, 2)), (0,), False), (0, 6)),
        ("argmax", (meta((3, 5), F32), 1, False), (0, 4)),
        # (values, indices) ATen ops: a MoE router's chosen experts; integer values join the indices'
        ("aten.topk.default", (meta((1, 8), F32), 2, -1, True, True), (0, 7)),
        ("aten.topk.default", (meta((3, 8), F32), 2), (0, 7)),  # dim left at its default
        ("aten.topk.default", (meta((6, 8), F32), 2, 0), (0, 5)),
        ("aten.topk.default", (meta((3, 8), bounds=(-4, 3)), 2), (-4, 7)),
        ("aten.max.dim", (meta((3, 5), F32), 1, False), (0, 4)),
        ("aten.sort.default", (meta((3, 5), bounds=(10, 20)), -1, False), (0, 20)),
        ("aten.topk.default", (meta((3, 8)), 2), (-(2**63), 2**63 - 1)),  # int64 values nothing bounds
        ("cast", (meta((4,), bounds=(0, 300)), "float32"), (0, 300)),
        ("cast", (meta((4,), bounds=(0, 300)), "int32"), (0, 300)),
        ("cast", (meta((4,), bounds=(0, 300)), "bool"), (0, 1)),
        ("where", (meta((4,), BOOL), meta((4,), bounds=(0, 3)), -1), (-1, 3)),
        ("masked_fill", (meta((4,), bounds=(0, 3)), meta((4,), BOOL), 9), (0, 9)),
        ("clamp", (meta((4,), bounds=(-50, 50)), 0, 10), (0, 10)),
        ("clamp", (meta((4,), bounds=(-50, 50)), None, meta((4,), bounds=(-5, 5))), (-50, 5)),
        ("full_like", (meta((4,), F32), 3, "int64"), (3, 3)),
        ("ones_like", (meta((4,)), None), (1, 1)),
        ("minimum", (meta((4,), bounds=(-50, 50)), meta((4,), bounds=(-5, 7))), (-50, 7)),
        ("sign", (meta((4,), bounds=(-50, 50)),), (-1, 1)),
        ("sign", (meta((4,), bounds=(0, 50)),), (0, 1)),
        ("ceil", (meta((4,), bounds=(-3, 9)),), (-3, 9)),  # an integer is its own ceiling
        # as the IR records them: dtype and device given (T5's full_like(x, 15), zeros_like(x))
        ("full_like", (meta((4,)), 15, None, None), (15, 15)),
        ("zeros_like", (meta((4,)), None, None), (0, 0)),
        # an operand nothing bounds is all of int64: the other side still bounds the result
        ("clamp", (meta((4,)), 0, 63), (0, 63)),
        ("minimum", (meta((4,)), meta((4,), bounds=(-5, 7))), (-(2**63), 7)),
    ],
)
def test_rules(op: str, args: tuple[object, ...], expected: tuple[int, int]) -> None:
    assert result_range(op, args) == expected


@pytest.mark.parametrize(
    ("op", "args"),
    [
        ("add", (meta((4,), bounds=(0, 3)), meta((4,), F32), 1)),  # a float operand: nothing proven
        ("add", (meta((4,), bounds=(0, 3)), 1, 0.5)),
        ("cast", (meta((4,), bounds=(0, 300)), "int8")),  # torch wraps 300 in int8
        ("masked_fill", (meta((4,), bounds=(0, 3)), meta((4,), BOOL), 1.5)),
        ("clamp", (meta((4,), bounds=(0, 3)), 0.5, None)),
        ("matmul", (meta((2, 2), bounds=(0, 3)), meta((2, 2), bounds=(0, 3)))),  # no rule
        ("aten.diff.default", (meta((4,), bounds=(0, 3)), 1, -1, None, None)),
        ("cumsum", (meta((4,), bounds=(0, 3)), None, None)),  # a dim known only at run time
        ("minimum", (meta((4,), bounds=(0, 3)), meta((4,), F32))),  # floats are not tracked
        ("sign", (meta((4,), F32),)),
        ("ceil", (meta((4,), F32),)),
        ("aten.topk.default", (meta((3, -1), F32), 2)),  # a size known only at run time
        ("aten.max.dim", (meta((), F32), 0)),
    ],
)
def test_conservative_on_unknowns(op: str, args: tuple[object, ...]) -> None:
    assert result_range(op, args) is None


def test_unbounded_int64_stays_unbounded() -> None:
    """Without bounds, an int64 input is all of int64, and what add makes of it is no narrower."""
    assert result_range("add", (meta((4,)), 1, 1)) == (-(2**63) + 1, 2**63)


# --- the proof the OpenVINO checker asks for -----------------------------------------------------


def test_narrowing_refused_names_what_is_not_proven() -> None:
    assert narrowing_refused("add", (meta((4,), bounds=(0, 63)), 1, 1), I32) is None
    assert "not bounded" in (narrowing_refused("add", (meta((4,)), 1, 1), I32) or "")
    big = narrowing_refused("unsqueeze", (meta((4,), bounds=(0, 2**40)), 0), I32)
    assert big == "argument 0's values are only known to lie in [0, 1099511627776], beyond int32"
    over = narrowing_refused("add", (meta((4,), bounds=(0, INT32_MAX)), 1, 1), I32)
    assert over is not None and "result" in over
    assert "no value range" in (narrowing_refused("matmul", (meta((2, 2), bounds=(0, 1)),) * 2, I32) or "")
    # indices (skipped, as the checker skips them) may be unbounded
    assert narrowing_refused("index", (meta((4,), bounds=(0, 9)), (meta((2,)),)), I32, skip=1) is None


def test_openvino_checker_takes_int64_only_with_a_proof() -> None:
    """A plan shows OpenVINO a proven int64 tensor as int32 with its bounds (ranges.shown); an integer
    result (int64 in torch) is then accepted only where the bounds prove it fits int32."""
    add, cumsum, total = checker_for("add"), checker_for("cumsum"), checker_for("sum")
    assert add(meta((4,)), 1, 1) == INT64_REASON  # a single call: no bounds, declined as before
    assert add(meta((4,), bounds=(0, 63)), 1, 1) == INT64_REASON  # int64 itself is never taken
    assert add(meta((4,), I32, bounds=(0, 63)), 1, 1) is True
    assert isinstance(cumsum(meta((1, 64), BOOL), -1, None), str)  # the running sum would be int64
    assert cumsum(meta((1, 64), BOOL, bounds=(0, 1)), -1, None) is True
    assert isinstance(cumsum(meta((1, 2**31), BOOL, bounds=(0, 1)), -1, None), str)  # could pass int32
    assert total(meta((8,), I32, bounds=(0, 2**20)), None, False) is True
    assert isinstance(total(meta((8,), I32, bounds=(0, 2**30)), None, False), str)
    # a float64 result is declined whatever the bounds (the proof is about int64 only)
    assert isinstance(checker_for("cast")(meta((4,), I32, bounds=(0, 3)), "float64"), str)


def test_shown_narrows_only_what_fits() -> None:
    assert shown(meta((4,)), (0, 9), I32) == meta((4,), I32, (0, 9))
    assert shown(meta((4,)), (0, 2**40), I32) == meta((4,), I64, (0, 2**40))
    assert shown(meta((4,), BOOL), (0, 1), I32) == meta((4,), BOOL, (0, 1))
    assert shown(meta((4,), F32), None, I32) == meta((4,), F32)


# --- plans on the real OpenVINO ------------------------------------------------------------------


class Positions(nn.Module):
    """transformers' position arithmetic: int64 from a buffer, shifted, summed, compared, cast."""

    positions: torch.Tensor

    def __init__(self, values: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("positions", values)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shifted = (self.positions + 1).unsqueeze(0)
        mask = shifted.ne(2).cumsum(-1)
        picked = (mask * 3 - shifted).clamp(-(2**20), 2**20)
        return torch.relu(x * picked.float() + x) + (picked > 1).float(), picked


def _plan(values: torch.Tensor) -> tuple[opcore.graph.Plan, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    model = Positions(values).eval()
    x = torch.randn(4, values.numel(), generator=torch.Generator().manual_seed(3))
    plan = opcore.graph.capture(model, (x,), backends=("openvino", "cpu"), measure=False)
    with torch.no_grad():
        return plan, plan(x), model(x)


def _openvino_verdicts(plan: opcore.graph.Plan) -> dict[str, dict[str, str]]:
    nodes = json.loads(plan.explain(format="json"))["nodes"]
    return {
        n["name"]: c for n in nodes for c in n["candidates"] if c["backend"] == "openvino" and n["backend"] != "python"
    }


def test_bounded_int64_nodes_run_in_an_openvino_partition_and_match_eager() -> None:
    plan, got, expected = _plan(torch.arange(16))
    verdicts = _openvino_verdicts(plan)
    assert {v["status"] for v in verdicts.values()} == {"partition"}, verdicts
    assert {p.backend for p in plan.partitions} == {"openvino"}
    assert got[1].dtype == torch.int64  # the int64 result comes back as torch computes it
    assert torch.equal(got[1], expected[1])
    torch.testing.assert_close(got[0], expected[0], rtol=1e-6, atol=1e-6)


def test_int64_beyond_int32_stays_declined_with_the_reason() -> None:
    plan, got, expected = _plan(torch.tensor([2**40, -(2**35), 5, 7]))
    verdicts = _openvino_verdicts(plan)
    add = verdicts["add"]
    assert add["status"] == "declined"
    assert add["reason"].startswith(INT64_REASON) and "beyond int32" in add["reason"], add
    assert torch.equal(got[1], expected[1])  # the int64 arithmetic ran where it is exact
    torch.testing.assert_close(got[0], expected[0], rtol=1e-6, atol=1e-6)


class Picks(nn.Module):
    """BERT's token types: int64 values picked by an int64 index (which gather's contract keeps int64)."""

    table: torch.Tensor
    index: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(8) * 3)
        self.register_buffer("index", torch.tensor([[1, 3, 5, 7]]))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        picked = torch.gather(self.table.unsqueeze(0).expand(1, -1), 1, self.index) + 1
        return torch.relu(x * picked.float()), picked


def test_gather_of_bounded_int64_keeps_its_index_int64_and_runs_on_openvino() -> None:
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(4))
    plan = opcore.graph.capture(Picks().eval(), (x,), backends=("openvino", "cpu"), measure=False)
    verdicts = _openvino_verdicts(plan)
    assert verdicts["gather"]["status"] == "partition", verdicts["gather"]
    got, expected = plan(x), Picks()(x)
    assert torch.equal(got[1], expected[1]) and got[1].dtype == torch.int64
    torch.testing.assert_close(got[0], expected[0], rtol=1e-6, atol=1e-6)


def test_value_ranges_of_a_captured_graph() -> None:
    plan, _, _ = _plan(torch.arange(16))
    ranges = value_ranges(plan.graph, plan.constants)
    assert ranges["add"] == (1, 16)
    assert ranges["cumsum"] == (0, 16)
    assert "x" not in ranges  # an input: unknown


def test_a_graph_input_of_int64_is_not_bounded() -> None:
    class Shift(nn.Module):
        def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return x * (ids + 1).float()

    ids, x = torch.arange(8).reshape(1, 8), torch.randn(1, 8)
    plan = opcore.graph.capture(Shift().eval(), (ids, x), backends=("openvino", "cpu"), measure=False)
    verdicts = _openvino_verdicts(plan)
    add = verdicts["add"]
    assert add["status"] == "declined" and add["reason"].startswith(INT64_REASON) and "not bounded" in add["reason"]
    assert torch.equal(plan(ids, x), Shift()(ids, x))


class RunningCount(nn.Module):
    """A mask's running sum (int64) over the last dim, used as a float."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (x > 0).cumsum(-1).float()


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_running_sum_over_a_dim_that_changes_size_is_not_bounded(dynamic: bool) -> None:
    """The bound of a running sum reads the dim's size: with the dim dynamic, the example's size
    bounds nothing, so openvino keeps declining the int64 result."""
    x = torch.randn(2, 16, generator=torch.Generator().manual_seed(5))
    shapes = ({1: torch.export.Dim("n", min=2, max=2**40)},) if dynamic else None
    plan = opcore.graph.capture(RunningCount().eval(), (x,), dynamic_shapes=shapes, measure=False)
    cumsum = _openvino_verdicts(plan)["cumsum"]
    if dynamic:
        assert cumsum["status"] == "declined" and "running sum would be int64" in cumsum["reason"]
    else:  # proven: taken, or a group the cost rule did not keep (not a narrowing decline)
        assert cumsum["status"] in ("partition", "partition only") or "estimated cost" in cumsum["reason"], cumsum
    longer = torch.randn(2, 40, generator=torch.Generator().manual_seed(6)) if dynamic else x
    torch.testing.assert_close(plan(longer), RunningCount()(longer), rtol=0, atol=0)


# --- ATen ops decomposed at capture --------------------------------------------------------------


class DiffOnes(nn.Module):
    def forward(self, x: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, ...]:
        d = torch.diff(x, dim=1, prepend=p)
        return d, x.new_ones((), dtype=torch.bool), x.new_ones(2, 3) * 2, torch.diff(x.float(), dim=-1)


def test_diff_and_new_ones_are_decomposed_and_equal_eager() -> None:
    x = torch.tensor([[1, 4, 9, 16], [-3, 0, 2**40, 5]])
    p = torch.tensor([[0], [7]])
    plan = opcore.graph.capture(DiffOnes().eval(), (x, p), measure=False)
    targets = {n.target for n in plan.graph.nodes}
    assert not targets & {"aten.diff.default", "aten.new_ones.default"}, targets
    for got, expected in zip(plan(x, p), DiffOnes()(x, p)):
        assert got.dtype == expected.dtype
        assert torch.equal(got, expected)


def test_creation_ops_have_their_fill_or_bounds_as_range() -> None:
    from opcore.graph.ranges import result_range

    assert result_range("zeros", ((2, 3),)) == (0, 0)
    assert result_range("ones", ((4,),)) == (1, 1)
    assert result_range("full", ((2,), 7)) == (7, 7)
    assert result_range("full", ((2,), 2.5)) is None  # a float fill bounds no integer
    assert result_range("arange", (64,)) == (0, 64)
    assert result_range("arange", (-3, 5, 2)) == (-3, 4)  # a positive step never reaches the end
    assert result_range("arange", (10, -4, -3)) == (-4, 10)
    assert result_range("arange", (object(), 5)) is None  # a bound known only at run time
