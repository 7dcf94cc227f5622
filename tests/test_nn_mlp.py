"""opcore.nn.GatedMLP: down(silu(gate(x)) * up(x)) on each backend, and from_linears."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from machine import needs_backend, onednn_reason  # noqa: E402

import opcore  # noqa: E402
import opcore.nn  # noqa: E402

BACKENDS = ["cpu", "onnxruntime", "openvino"]


def linears(hidden=64, intermediate=128, out=None):
    torch.manual_seed(0)
    return (
        torch.nn.Linear(hidden, intermediate, bias=False),
        torch.nn.Linear(hidden, intermediate, bias=False),
        torch.nn.Linear(intermediate, out or hidden, bias=False),
    )


def eager(gate, up, down, x):
    return down(F.silu(gate(x)) * up(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_torch(backend):
    needs_backend(backend)
    gate, up, down = linears(out=48)
    mlp = opcore.nn.GatedMLP.from_linears(gate, up, down, names=("w1", "w3", "w2"), backend=backend)
    assert mlp.backend == backend and [r.op for r in mlp.bound.resolved] == ["gated_mlp"]
    assert list(mlp.state_dict()) == ["w1.weight", "w3.weight", "w2.weight"]
    with torch.no_grad():
        for shape in [(64,), (5, 64), (2, 3, 64)]:
            x = torch.randn(shape)
            torch.testing.assert_close(mlp(x), eager(gate, up, down, x), rtol=1e-5, atol=1e-5)


def test_bfloat16_on_cpu_packs_all_three_weights():
    gate, up, down = (layer.to(torch.bfloat16) for layer in linears(1024, 2816))
    mlp = opcore.nn.GatedMLP.from_linears(gate, up, down, backend="cpu")
    # ATen's gated_mlp is three calls with nothing to pack
    kernel = "cpu/onednn prepared" if onednn_reason("bfloat16") is None else "cpu/aten"
    assert f"backend=cpu ({kernel})" in repr(mlp)
    x = torch.randn(2, 16, 1024, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(mlp(x), eager(gate, up, down, x), rtol=3e-2, atol=3e-2)


def test_from_linears_refuses_biases_and_mismatched_shapes():
    gate, up, down = linears()
    with pytest.raises(opcore.ArgumentError, match="'gate' expected a Linear without bias"):
        opcore.nn.GatedMLP.from_linears(torch.nn.Linear(64, 128), up, down)
    with pytest.raises(opcore.ShapeError, match="up of gate's shape"):
        opcore.nn.GatedMLP.from_linears(gate, torch.nn.Linear(64, 96, bias=False), down)
    with pytest.raises(opcore.ArgumentError, match="three distinct identifiers"):
        opcore.nn.GatedMLP(8, 16, names=("a", "a", "b"))


def test_fresh_module_and_its_gradients():
    mlp = opcore.nn.GatedMLP(16, 32)
    assert list(mlp.state_dict()) == ["gate_proj.weight", "up_proj.weight", "down_proj.weight"]
    x = torch.randn(3, 16, requires_grad=True)
    mlp(x).sum().backward()
    assert mlp.up_proj.weight.grad is not None and x.grad is not None
    with pytest.raises(opcore.OpcoreError, match="holds a projection's parameters"):
        mlp.up_proj(x)
