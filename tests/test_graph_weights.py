"""Weights after capture (opcore.graph.weights): a captured plan never returns results of stale
weights. After an in-place update, load_state_dict (copying or assigning), an assignment or
``p.data = t``, the next call refreshes the plan (partitions holding a changed weight compiled
again, kernels resolved again); a weight of another shape raises WeightsError naming it; a loaded
plan is frozen until its constants are edited and it is refreshed by hand."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from graph_models import LlamaBlock, seeded  # noqa: E402

import opcore  # noqa: E402
import opcore.graph  # noqa: E402
from opcore.graph import WeightsError  # noqa: E402
from opcore.torchkit.watch import TensorWatch  # noqa: E402

# per-node kernels only; onnxruntime partitions (initializers compiled in); the torch route in one step
PLANS: dict[str, dict[str, Any]] = {
    "kernels": {"partitions": False},
    "onnxruntime partitions": {"backends": ("onnxruntime", "cpu")},
    "torch route": {"route": "torch"},
}


def llama(seed: int = 0) -> Any:
    torch.manual_seed(seed)
    return seeded(LlamaBlock(), seed).eval()


def capture(kind: str) -> tuple[Any, Any, Any]:
    options = PLANS[kind]
    if "onnxruntime" in options.get("backends", ()):
        pytest.importorskip("onnxruntime")
    model, x = llama(), torch.randn(2, 8, 32)
    plan = opcore.graph.capture(model, (x,), measure=False, **options)
    if kind == "onnxruntime partitions":
        assert plan.partitions  # the premise: weights compiled into a partition
    return model, x, plan


def matches(plan: Any, model: Any, x: Any) -> None:
    with torch.no_grad():
        torch.testing.assert_close(plan(x), model(x), rtol=1e-4, atol=1e-4)


def refreshed(plan: Any) -> str:
    (note,) = [n for n in plan.notes if n.startswith("weights: ")]
    return note


@pytest.mark.parametrize("kind", PLANS)
def test_an_in_place_update_is_seen_by_the_next_call(kind: str) -> None:
    model, x, plan = capture(kind)
    matches(plan, model, x)
    assert not [n for n in plan.notes if n.startswith("weights: ")]  # nothing changed: nothing refreshed
    with torch.no_grad():
        model.q.weight.mul_(-2)
        model.norm2.weight.add_(0.5)
    matches(plan, model, x)
    note = refreshed(plan)
    assert "refreshed 1 time, last after norm2.weight, q.weight changed (found by a call)" in note or (
        "refreshed 1 time, last after q.weight, norm2.weight changed (found by a call)" in note
    )
    if kind == "onnxruntime partitions":
        assert "compiled again" in note
    matches(plan, model, x)  # no change since: no second refresh
    assert "refreshed 1 time" in refreshed(plan)


@pytest.mark.parametrize("kind", PLANS)
def test_load_state_dict_is_seen_copied_or_assigned(kind: str) -> None:
    model, x, plan = capture(kind)
    other = llama(seed=1)
    model.load_state_dict(other.state_dict())
    matches(plan, other, x)
    third = llama(seed=2)
    model.load_state_dict({k: v.clone() for k, v in third.state_dict().items()}, assign=True)
    matches(plan, third, x)
    assert "refreshed 2 times" in refreshed(plan) and plan.refreshes == 2


def test_an_assigned_parameter_and_swapped_data_are_seen() -> None:
    model, x, plan = capture("kernels")
    model.v.weight = torch.nn.Parameter(torch.randn_like(model.v.weight))
    matches(plan, model, x)
    model.o.weight.data = torch.randn_like(model.o.weight)
    matches(plan, model, x)


def test_a_buffer_updated_in_place_is_seen() -> None:
    model, x, plan = capture("kernels")
    model.cos.mul_(0.5)
    matches(plan, model, x)
    assert "cos" in refreshed(plan)


def test_a_weight_of_another_shape_raises_naming_it() -> None:
    model, x, plan = capture("kernels")
    model.q.weight = torch.nn.Parameter(torch.randn(16, 32))
    with pytest.raises(WeightsError, match=r"q\.weight.*float32\[32, 32\], as at capture.*float32\[16, 32\]") as info:
        plan(x)
    assert "capture the model again" in str(info.value)


def test_plan_refresh_without_a_change_does_nothing_and_names_what_it_took() -> None:
    model, x, plan = capture("kernels")
    assert plan.refresh() == []
    with torch.no_grad():
        model.gate.weight.mul_(3)
    assert plan.refresh() == ["gate.weight"]
    assert "(plan.refresh())" in refreshed(plan)
    matches(plan, model, x)


def test_verify_sees_the_current_weights() -> None:
    model, x, plan = capture("onnxruntime partitions")
    with torch.no_grad():
        model.up.weight.mul_(-1)
    assert plan.verify(x).ok
    matches(plan, model, x)


def test_a_loaded_plan_is_frozen_until_its_constants_are_edited_and_refreshed(tmp_path) -> None:
    model, x, plan = capture("onnxruntime partitions")
    plan.save(tmp_path / "p")
    loaded = opcore.graph.load(tmp_path / "p")
    assert loaded.watch is None
    with torch.no_grad():
        before = model(x)
        model.q.weight.mul_(-2)  # the loaded plan has no model: not seen
        torch.testing.assert_close(loaded(x), before, rtol=1e-4, atol=1e-4)
        name = next(n for n, source in loaded.graph.sources.items() if source == "q.weight")
        loaded.constants[name] = model.q.weight.detach().clone()
    taken = loaded.refresh()
    assert "q.weight" in taken and len(taken) == len(loaded.graph.constants)
    matches(loaded, model, x)


def test_a_frozen_plan_does_not_watch_and_refresh_takes_the_changed_weights() -> None:
    pytest.importorskip("onnxruntime")
    model, x = llama(), torch.randn(2, 8, 32)
    plan = opcore.graph.capture(model, (x,), measure=False, backends=("onnxruntime", "cpu"), freeze=True)
    assert plan.watch is None and plan.partitions
    assert any(n.startswith("frozen weights: ") for n in plan.notes)
    with torch.no_grad():
        before = model(x)
        model.q.weight.mul_(-2)  # not compared per call: the plan keeps what it compiled
        torch.testing.assert_close(plan(x), before, rtol=1e-4, atol=1e-4)
        assert not torch.allclose(model(x)[0], before[0], atol=1e-3)
    taken = plan.refresh()  # its constants are the model's tensors: the in-place change is in them
    assert "q.weight" in taken
    matches(plan, model, x)
    assert any(n.startswith("frozen weights: ") for n in plan.notes)


def test_a_loaded_plan_s_constant_set_to_no_tensor_raises_naming_the_weight(tmp_path) -> None:
    _, _, plan = capture("kernels")
    plan.save(tmp_path / "p")
    loaded = opcore.graph.load(tmp_path / "p")
    name = next(n for n, source in loaded.graph.sources.items() if source == "q.weight")
    loaded.constants[name] = loaded.constants[name].tolist()  # it raised ArgumentError naming 'array'
    with pytest.raises(WeightsError, match=r"'q\.weight' expected a tensor float32\[32, 32\].*found list"):
        loaded.refresh()


def test_a_tensor_watch_sees_each_kind_of_change() -> None:
    layer = torch.nn.Linear(2, 2)
    watch = TensorWatch.of([("w", layer._parameters, "weight"), ("b", layer._parameters, "bias")])
    assert not watch.stale() and watch.changed() == []
    with torch.no_grad():
        layer.bias.zero_()
    assert watch.stale() and watch.changed() == ["b"]
    watch = watch.again()
    assert not watch.stale()
    layer.weight.data = torch.zeros(2, 2)
    assert watch.stale() and watch.changed() == ["w"]
    watch = watch.again()
    layer.weight = torch.nn.Parameter(torch.ones(2, 2))
    assert watch.stale() and watch.current()["w"] is layer.weight
    with torch.inference_mode():
        frozen = torch.ones(2)  # an inference tensor keeps no version counter: watched by identity
    holder = {"t": frozen, "counted": torch.ones(2)}
    watch = TensorWatch.of([("t", holder, "t"), ("c", holder, "counted")])
    assert not watch.stale()
    holder["t"] = torch.ones(2)
    assert watch.stale() and watch.changed() == ["t"]
    holder["t"] = frozen
    assert not watch.stale()
    frozen.data = torch.zeros(2)  # its memory swapped: seen by the data pointer, without a counter
    assert watch.stale() and watch.changed() == ["t"]
