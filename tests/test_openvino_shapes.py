"""opcore_openvino.shapes: a dynamic partition compiles a static model for a shape called twice (its
size inputs as constants), runs every other shape on the dynamic model, and gives the same results."""

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


def test_a_shape_called_twice_gets_its_static_model_and_the_same_results():
    model, plan, part = dynamic_plan()
    shapes = part._shapes
    assert shapes is not None
    x, once = torch.randn(3, 20, 16), torch.randn(1, 7, 16)
    for call in range(3):
        assert torch.allclose(plan(x), model(x), atol=1e-5)
        assert len(shapes._compiled) == (0 if call == 0 else 1)
    assert torch.allclose(plan(once), model(once), atol=1e-5)  # a one-off shape: the dynamic model
    assert len(shapes._compiled) == 1
    (key,) = shapes._compiled
    assert ("<f4", (3, 20, 16)) in key and ("<i8", 20) in key, key  # the length is a constant of it


def test_specializing_turns_off_with_the_variable(monkeypatch):
    monkeypatch.setenv("OPCORE_OPENVINO_SHAPES", "0")
    model, plan, part = dynamic_plan()
    assert part._shapes is None
    x = torch.randn(3, 20, 16)
    for _ in range(2):
        assert torch.allclose(plan(x), model(x), atol=1e-5)
