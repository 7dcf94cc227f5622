"""opcore.graph.signature and opcore.graph.bounds: the call signature a capture records, the checks a
plan makes before it runs (sizes derived from one symbol, the exporter's guards, a tampered
plan.json's guards read and never executed), the fast guard, and which indices are proven, checked
at the entry or left to their kernels. tests/adversarial/test_adv_plans.py has the plans end to end.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import opcore.graph
from opcore.errors import ArgumentError, ShapeError
from opcore.graph.bounds import index_bounds
from opcore.graph.ranges import value_ranges
from opcore.graph.signature import InputCheck, _evaluate, _parse, _Unreadable


class Halves(nn.Module):
    """x's rows are twice y's, plus one; the sizes must keep that relation."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, 2, 3).sum(1)[: y.shape[0] - 1] + y[1:]


class Guarded(nn.Module):
    """A branch on a size: torch.export keeps the branch taken and a guard that it is taken (an even size)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.shape[0] % 2 == 0 else x


def _capture(model: nn.Module, args: tuple, shapes: object) -> opcore.graph.Plan:
    return opcore.graph.capture(model.eval(), args, dynamic_shapes=shapes, partitions=False, measure=False)


def test_sizes_derived_from_one_symbol_must_keep_their_relation() -> None:
    d = torch.export.Dim("d", min=2, max=32)
    plan = _capture(Halves(), (torch.randn(8, 3), torch.randn(5, 3)), ({0: 2 * d}, {0: d + 1}))
    signature = plan.graph.signature
    assert signature is not None and signature.labels == ("x", "y")
    assert any(low == 2 and high == 32 for low, high in signature.ranges.values())
    x, y = torch.randn(12, 3), torch.randn(7, 3)
    torch.testing.assert_close(plan(x, y), Halves()(x, y))
    with pytest.raises(ShapeError, match=r"argument 'y' expected size 7 at dim 0"):
        plan(x, torch.randn(6, 3))
    with pytest.raises(ShapeError, match=r"\(s\d+\) in \[2, 32\].* found s\d+ = 35"):
        plan(torch.randn(70, 3), torch.randn(36, 3))


def test_the_exporters_guards_are_checked() -> None:
    plan = _capture(Guarded(), (torch.randn(6),), ({0: torch.export.Dim.AUTO},))
    assert plan.graph.signature is not None and plan.graph.signature.guards
    torch.testing.assert_close(plan(torch.ones(10)), torch.ones(10) * 2)
    with pytest.raises(ShapeError, match=r"\(x.shape\[0\] % 2\) == 0") as info:
        plan(torch.ones(9))
    assert "Fix: " in str(info.value) and "'x'" in str(info.value)


def test_the_signature_is_saved_and_a_tampered_guard_is_never_executed(tmp_path, monkeypatch) -> None:
    plan = _capture(Guarded(), (torch.randn(6),), ({0: torch.export.Dim.AUTO},))
    plan.save(tmp_path / "p")
    loaded = opcore.graph.load(tmp_path / "p")
    assert loaded.graph.signature == plan.graph.signature
    with pytest.raises(ShapeError, match=r"\(x.shape\[0\] % 2\) == 0"):
        loaded(torch.ones(9))
    document = json.loads((tmp_path / "p" / "plan.json").read_text())
    document["graph"]["size_guards"] = ["__import__('os').system('exit 3') == 0", "(L['x'].size()[0] % 2) == 0"]
    (tmp_path / "p" / "plan.json").write_text(json.dumps(document))
    called: list[tuple] = []

    def system(*args: object) -> int:
        called.append(args)
        return 0

    monkeypatch.setattr("os.system", system)
    tampered = opcore.graph.load(tmp_path / "p")
    torch.testing.assert_close(tampered(torch.ones(10)), torch.ones(10) * 2)
    assert not called
    with pytest.raises(ShapeError):
        tampered(torch.ones(9))  # the readable guard still holds
    check = tampered._inputs
    assert check is not None and check.skipped == ("__import__('os').system('exit 3') == 0",)


def test_a_plan_saved_without_a_signature_still_checks_metas(tmp_path) -> None:
    plan = _capture(Guarded(), (torch.randn(6),), None)
    plan.save(tmp_path / "p")
    document = json.loads((tmp_path / "p" / "plan.json").read_text())
    for key in ("input_labels", "size_ranges", "size_guards"):
        document["graph"].pop(key)
    (tmp_path / "p" / "plan.json").write_text(json.dumps(document))
    loaded = opcore.graph.load(tmp_path / "p")
    assert loaded.graph.signature is None
    with pytest.raises(ShapeError, match="argument 'x' expected size 6 at dim 0"):
        loaded(torch.ones(5))


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("2*s0 + 1", {"s0": 4}, 9),
        ("Mod(s0, 3) == 1 and s0 // 2 >= 2", {"s0": 4}, True),
        ("Max(s0, 7) - Min(s0, 2)", {"s0": 4}, 5),
        ("not (s0 != 4)", {"s0": 4}, True),
    ],
)
def test_the_interpreter_reads_size_arithmetic(text: str, env: dict, expected: object) -> None:
    assert _evaluate(_parse(text), env, None) == expected


@pytest.mark.parametrize(
    "text",
    ["__import__('os')", "s0.__class__", "open('x')", "[s0 for s0 in (1,)]", "lambda: 1", "s1 + 1", "(1).real"],
)
def test_the_interpreter_refuses_anything_else(text: str) -> None:
    with pytest.raises(_Unreadable):
        _evaluate(_parse(text), {"s0": 1}, lambda path: torch.ones(1))


class Double(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_the_fast_guard_skips_the_full_check_only_for_the_same_signature(monkeypatch) -> None:
    plan = _capture(Double(), (torch.randn(6),), ({0: torch.export.Dim("n", min=5, max=64)},))
    x = torch.randn(6)
    plan(x)
    check = plan._inputs
    assert check is not None
    full: list[int] = []
    original = InputCheck.full

    def counted(self: InputCheck, flat: list) -> list:
        full.append(1)
        return original(self, flat)

    monkeypatch.setattr(InputCheck, "full", counted)
    plan(torch.randn(6))
    assert full == [] or check._guard is None  # no compiled or torch guard here: every call runs the full check
    plan(torch.randn(7))
    assert full  # new sizes: the full check, then the guard is armed for them
    with pytest.raises(ShapeError):
        plan(torch.randn(4))


# --- which indices are proven, checked at the entry, left to their kernels ----------------------


class Positions(nn.Module):
    """Word ids from the input; positions from arange(seq) (proven by the sequence's declared range);
    a shifted copy of the ids (computed: left to its kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.words, self.places = nn.Embedding(50, 4), nn.Embedding(16, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        places = torch.arange(ids.shape[1]).unsqueeze(0)
        return self.words(ids.reshape(ids.shape)) + self.places(places) + self.words(ids + 1)


@pytest.mark.parametrize("longest", [16, 17])
def test_index_bounds_prove_check_or_leave_each_index_to_its_kernel(longest: int) -> None:
    seq = torch.export.Dim("seq", min=2, max=longest)
    ids = torch.randint(0, 49, (1, 8))
    model = Positions().eval()
    plan = opcore.graph.capture(model, (ids,), dynamic_shapes=({1: seq},), measure=False)
    proof = index_bounds(plan.graph, plan.constants)
    assert [(b.position, b.low, b.high) for b in proof.entry] == [(0, 0, 49)]
    lookups = [n.name for n in plan.graph.nodes if n.op == "embedding"]
    # positions arange(seq) fit the 16 rows for a sequence of up to 16, not 17: then that lookup is left
    # to its kernel too, as is the one of ids + 1 (computed from an input)
    assert sorted(proof.unchecked) == (lookups[2:] if longest == 16 else lookups[1:])
    with pytest.raises(ArgumentError, match=r"argument 'ids' expected indices in \[0, 49\]"):
        plan(torch.full((1, 5), 50))
    if longest == 17:
        with pytest.raises(IndexError):
            model(torch.ones(1, 17, dtype=torch.long))
        with pytest.raises(opcore.OpcoreError, match="out of range"):
            plan(torch.ones(1, 17, dtype=torch.long))


def test_value_ranges_take_assumed_inputs_and_declared_sizes() -> None:
    seq = torch.export.Dim("seq", min=2, max=15)
    ids = torch.randint(0, 49, (1, 8))
    plan = opcore.graph.capture(Positions().eval(), (ids,), dynamic_shapes=({1: seq},), measure=False)
    graph = plan.graph
    assert graph.signature is not None
    (symbol,) = [s for s in graph.signature.ranges if s.isidentifier()]
    arange = next(n for n in graph.nodes if "arange" in n.op).outputs[0]
    assert arange not in value_ranges(graph, plan.constants)  # planning's ranges: sizes unknown
    ranges = value_ranges(graph, plan.constants, inputs={"ids": (0, 49)}, sizes={symbol: (2, 15)})
    assert ranges[arange] == (0, 14) and ranges["ids"] == (0, 49)
    assert not [name for name, why in index_bounds(graph, plan.constants).unchecked.items() if "places" in why]


class Reordered(nn.Module):
    """Rows of a dynamic-length sequence read at positions gathered from arange(seq): still 0 .. seq - 1,
    whatever the sequence's length (a prompt's rows read at a window's slots are such an index)."""

    def __init__(self) -> None:
        super().__init__()
        self.words = nn.Embedding(50, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        places = torch.arange(ids.shape[1])
        return self.words(ids)[:, places[places]]


def test_an_index_gathered_from_positions_is_proven_in_range() -> None:
    seq = torch.export.Dim("seq", min=2, max=64)
    ids = torch.randint(0, 49, (1, 8))
    model = Reordered().eval()
    plan = opcore.graph.capture(model, (ids,), dynamic_shapes=({1: seq},), measure=False)
    indexing = [n.name for n in plan.graph.nodes if n.op == "index"]
    assert len(indexing) == 2, [n.op for n in plan.graph.nodes]
    assert index_bounds(plan.graph, plan.constants).unchecked == {}
    for length in (2, 9, 64):
        ids = torch.randint(0, 49, (1, length))
        torch.testing.assert_close(plan(ids), model(ids))


class Shifted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(10, 8)
        self.layers = nn.Sequential(*(nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(4)))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.layers(self.table(ids + 1))


def test_a_saved_partition_holding_an_unproven_index_is_said_on_load(tmp_path, monkeypatch) -> None:
    if "openvino" not in {r.name for r in opcore.backends() if r.ok}:
        pytest.skip("openvino is not loaded here")
    from opcore.graph import bounds

    ids = torch.randint(0, 8, (2, 4))
    monkeypatch.setattr(bounds, "index_bounds", lambda graph, constants: bounds.IndexProof())  # as before issue 31
    old = opcore.graph.capture(Shifted().eval(), (ids,), backends=("openvino",), measure=False)
    monkeypatch.undo()
    assert any(d.op == "embedding" and d.partition for d in old.decisions), old.explain()
    old.save(tmp_path / "p")
    loaded = opcore.graph.load(tmp_path / "p")
    assert any(note.startswith("indices not checked: embedding") for note in loaded.notes), loaded.notes
    fresh = opcore.graph.capture(Shifted().eval(), (ids,), backends=("openvino",), measure=False)
    assert not any(d.op == "embedding" and d.partition for d in fresh.decisions), fresh.explain()
    assert not any(note.startswith("indices not checked") for note in fresh.notes)
