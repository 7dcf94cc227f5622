"""The torch route as one step (opcore.graph.exported): where a plan runs the torch route, a captured
plan runs the torch.export program's own graph, with the plan's constants, in one step; a loaded
plan (no exported program) runs the same route node by node. Routes are forced with
``capture(route="torch")`` or an injected timer: what the machine measures is not under test."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from graph_models import MLP, LlamaBlock, seeded  # noqa: E402
from torch import nn  # noqa: E402

import opcore  # noqa: E402
import opcore.graph  # noqa: E402


def llama(batch: int = 2) -> tuple[Any, Any]:
    torch.manual_seed(0)
    return seeded(LlamaBlock()).eval(), torch.randn(batch, 8, 32)


def slower_plan(cases: Mapping[str, Callable[[], Any]]) -> dict[str, float]:
    """A timer under which every plan loses to the torch route (and no partition beats its nodes)."""
    for call in cases.values():
        call()
    return {label: 1e-3 if label == "the torch route" else 2e-3 for label in cases}


def assert_same(got: Any, want: Any) -> None:
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_route_torch_runs_the_exported_program_as_one_step() -> None:
    model, x = llama()
    plan = opcore.graph.capture(model, (x,), route="torch")
    assert plan.options.route == "torch" and not plan.partitions
    assert plan.exported is not None and len(plan.program.steps) == 1
    assert len(plan.graph.nodes) > 20  # one step instead of a step per node
    assert plan.summary().startswith("torch route: the exported program as one step (node by node it is cpu ")
    with torch.no_grad():
        want = model(x)
        got = plan(x)
        assert isinstance(got, tuple) and len(got) == 2  # the model's structure
        assert_same(got, want)
        other = torch.randn_like(x)
        assert_same(plan(other), model(other))
    assert any("capture(route='torch')" in note for note in plan.notes)
    record = json.loads(plan.explain(format="json"))
    assert record["route"] == "torch" and record["exported_program"] is True


def test_the_guard_choosing_the_torch_route_runs_the_exported_program() -> None:
    model, x = llama()
    plan = opcore.graph.capture(model, (x,), backends=("onnxruntime", "cpu"), measure=slower_plan)
    assert plan.options.route == "torch" and plan.exported is not None and len(plan.program.steps) == 1
    (guard,) = [note for note in plan.notes if note.startswith("guard:")]
    assert "runs the torch route (the exported program, run by torch as one step)" in guard
    with torch.no_grad():
        assert_same(plan(x), model(x))


def test_verify_compares_the_exported_program_with_the_graph_node_by_node() -> None:
    model, x = llama()
    plan = opcore.graph.capture(model, (x,), route="torch")
    report = plan.verify(x)
    assert report.ok and [c.unit for c in report.checks] == ["the exported program (torch, one step)"]
    assert report.max_abs_diff < 1e-5
    with torch.no_grad():
        plan.constants[plan.graph.constants[0]].mul_(-3)  # the plan's own weight, behind the model's back
        # the exported program reads the plan's constants, as does the reference: still the same graph
        assert plan.verify(x).ok


def test_a_dynamic_batch_runs_through_the_exported_program() -> None:
    model, x = llama()
    batch = torch.export.Dim("batch", min=1, max=16)
    plan = opcore.graph.capture(model, (x,), dynamic_shapes=({0: batch},), route="torch")
    assert plan.exported is not None
    with torch.no_grad():
        for size in (1, 3, 7):
            other = torch.randn(size, 8, 32)
            assert_same(plan(other), model(other))


def test_keyword_and_fixed_inputs_reach_the_exported_program() -> None:
    class Flagged(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x: Any, y: Any, flag: bool = True, scale: float = 2.0) -> dict[str, Any]:
            h = self.fc(x) * scale if flag else x
            return {"h": h, "sum": h + y}

    torch.manual_seed(0)
    model, x, y = Flagged().eval(), torch.randn(3, 4), torch.randn(3, 4)
    plan = opcore.graph.capture(model, (x,), {"y": y, "flag": True, "scale": 3.0}, route="torch")
    with torch.no_grad():
        got, want = plan(x, y=y, flag=True, scale=3.0), model(x, y=y, flag=True, scale=3.0)
    assert set(got) == {"h", "sum"}
    assert_same(got, want)
    with pytest.raises(opcore.ArgumentError, match="baked into the plan"):
        plan(x, y=y, flag=True, scale=4.0)


def test_a_loaded_torch_route_plan_runs_node_by_node_and_says_so(tmp_path) -> None:
    model, x = llama()
    plan = opcore.graph.capture(model, (x,), route="torch")
    plan.save(tmp_path / "p")
    loaded = opcore.graph.load(tmp_path / "p")
    assert loaded.options.route == "torch" and loaded.exported is None
    assert len(loaded.program.steps) == len(loaded.graph.nodes)
    assert any("the torch route runs node by node" in note for note in loaded.notes)
    assert not loaded.summary().startswith("torch route")
    record = json.loads(loaded.explain(format="json"))
    assert record["route"] == "torch" and record["exported_program"] is False
    with torch.no_grad():
        assert_same(loaded(x), model(x))
    assert loaded.verify(x).ok


def test_a_plan_that_keeps_its_decisions_does_not_run_the_exported_program() -> None:
    model, x = seeded(MLP()).eval(), torch.randn(3, 16)
    plan = opcore.graph.capture(model, (x,), measure=False)
    assert plan.exported is None and plan.options.route == "planned"


def test_an_unknown_route_is_refused() -> None:
    model, x = seeded(MLP()).eval(), torch.randn(3, 16)
    with pytest.raises(opcore.ArgumentError, match="route"):
        opcore.graph.capture(model, (x,), route="fast")


def test_route_other_than_none_or_torch_is_an_argument_error_with_the_fix() -> None:
    model, x = llama()
    with pytest.raises(opcore.ArgumentError) as raised:
        opcore.graph.capture(model, (x,), route="eager")
    text = str(raised.value)
    assert "'route'" in text and "'eager'" in text and "route='torch'" in text, text
