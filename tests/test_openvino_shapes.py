"""opcore_openvino.shapes: a dynamic partition compiles a static model for a shape called a third time
(its size inputs as constants), keeps it where it runs faster than the dynamic model, runs every
other shape on the dynamic model, and gives the same results."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("openvino", reason="the openvino partition compiler needs openvino")

from torch import nn  # noqa: E402

import opcore.graph  # noqa: E402


class Positions(nn.Module):
    """Positions from the sequence length (a size input of the partition) reading a table, then layers."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.table = nn.Parameter(torch.randn(64, 16))
        self.layers = nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 16))

    def forward(self, x):
        return self.layers(x + self.table[torch.arange(x.shape[1])])


def dynamic_plan():
    model, x = Positions().eval(), torch.randn(2, 12, 16)
    seq = torch.export.Dim("seq", min=2, max=64)
    plan = opcore.graph.capture(
        model, (x,), backends=("openvino", "cpu"), measure=False, dynamic_shapes=({0: torch.export.Dim("b"), 1: seq},)
    )
    assert len(plan.partitions) == 1, plan.explain()
    return model, plan, plan.partitions[0].compiled


def test_a_shape_called_three_times_gets_its_static_model_and_the_same_results():
    model, plan, part = dynamic_plan()
    shapes = part._shapes
    assert shapes is not None
    x, once = torch.randn(3, 20, 16), torch.randn(1, 7, 16)
    for call in range(4):
        assert torch.allclose(plan(x), model(x), atol=1e-5)
        assert len(shapes._compiled) == (0 if call < 2 else 1)
    # its runs timed: two on the dynamic model, then the static one's (kept or not, as it measured)
    dynamic, static = shapes._times[next(iter(shapes._compiled))]
    assert len(dynamic) == 2 and len(static) == 2
    assert torch.allclose(plan(once), model(once), atol=1e-5)  # a one-off shape: the dynamic model
    assert len(shapes._compiled) == 1
    (key,) = shapes._compiled
    assert ("<f4", (3, 20, 16)) in key and ("<i8", 20) in key, key  # the length is a constant of it


def test_a_plan_that_asks_for_no_shape_compiles_gets_none():
    # capture_lm's prefill (PlanOptions.shape_compiles False, tests/test_graph_generation.py end to end)
    from opcore_openvino.shapes import Specializations

    from opcore.shape_compiles import shape_compiles

    _, _, part = dynamic_plan()
    with shape_compiles(False):
        assert Specializations.of(part.model) is None
    assert Specializations.of(part.model) is not None


def test_specializing_turns_off_with_the_variable(monkeypatch):
    monkeypatch.setenv("OPCORE_OPENVINO_SHAPES", "0")
    model, plan, part = dynamic_plan()
    assert part._shapes is None
    x = torch.randn(3, 20, 16)
    for _ in range(2):
        assert torch.allclose(plan(x), model(x), atol=1e-5)


def _judged(monkeypatch, dynamic_s, static_s):
    """The partition's Specializations after one shape's four calls, its infers timed as given (two
    on the dynamic model, then two on its static model, compiled for real), and a second shape's three."""
    from opcore_openvino.shapes import Specializations

    scripted = {False: list(dynamic_s), True: list(static_s)}
    timed = Specializations.timed
    monkeypatch.setattr(
        Specializations,
        "timed",
        lambda self, key, seconds, static: timed(
            self, key, scripted[static].pop(0) if scripted[static] else seconds, static
        ),
    )
    model, plan, part = dynamic_plan()
    x, other = torch.randn(3, 20, 16), torch.randn(2, 9, 16)
    for _ in range(4):
        assert torch.allclose(plan(x), model(x), atol=1e-5)
    assert scripted == {False: [], True: []}
    (key,) = part._shapes._compiled
    for _ in range(3):
        assert torch.allclose(plan(other), model(other), atol=1e-5)
    return part._shapes, key


def test_a_static_model_that_runs_no_faster_is_dropped_and_no_other_shape_compiles(monkeypatch):
    # the first dynamic run of a new shape is slow (10 ms), the steady one 5 ms: static 4.5 ms is not 20 % faster
    shapes, key = _judged(monkeypatch, (0.010, 0.005), (0.0045, 0.0046))
    assert shapes._compiled[key] is None and shapes.limit == 0 and len(shapes._compiled) == 1
    assert "dynamic model runs every shape" in shapes.verdict


def test_a_static_model_that_runs_faster_stays_and_others_compile(monkeypatch):
    shapes, key = _judged(monkeypatch, (0.010, 0.005), (0.0030, 0.0029))
    assert shapes._compiled[key] is not None and shapes.limit == 4 and len(shapes._compiled) == 2
    assert shapes.verdict == ""
