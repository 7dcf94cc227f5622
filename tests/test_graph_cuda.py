"""On a GPU only: cuda plans (every node on the cuda backend) and their CUDA graph replay.

Marked ``gpu`` and skipped, with the backend's own reason, where no usable CUDA GPU is present.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from graph_models import LlamaBlock, seeded  # noqa: E402

import opcore  # noqa: E402
import opcore.graph  # noqa: E402
from opcore_cuda import system  # noqa: E402


def no_gpu_reason() -> str | None:
    available = system.is_available()
    if available is not True:
        return str(available)
    return None if torch.cuda.is_available() else "torch.cuda.is_available() is False"


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(no_gpu_reason() is not None, reason=f"needs a usable CUDA GPU: {no_gpu_reason()}"),
]


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    model = seeded(LlamaBlock()).cuda()
    return model, torch.randn(2, 8, 32, device="cuda")


def test_cuda_plan_runs_on_the_cuda_backend_and_replays(llama):
    model, x = llama
    plan = opcore.graph.capture(model, (x,), device="cuda")
    assert plan.options.cuda_graph and plan.partitions == ()
    assert {d.backend for d in plan.decisions} <= {"cuda", "python"}
    with torch.no_grad():
        want = model(x)[0]
    first = plan(x)[0]  # warm-up and capture
    assert plan._replay is not None
    again = plan(x * 1.0)[0]  # replay
    torch.testing.assert_close(first, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(again, want, atol=1e-4, rtol=1e-4)
    other = torch.randn_like(x)
    torch.testing.assert_close(plan(other)[0], model(other)[0].detach(), atol=1e-4, rtol=1e-4)
    # another size of a static plan: refused by the call's check (opcore.graph.signature) before the replay
    with pytest.raises(opcore.ShapeError, match=r"argument 'x' expected size 2 at dim 0.*dynamic_shapes"):
        plan(torch.randn(3, 8, 32, device="cuda"))
    with pytest.raises(opcore.DeviceError, match="argument 'x' expected a tensor on cuda"):
        plan(x.cpu())


def test_dynamic_cuda_plan_does_not_replay(llama):
    model, x = llama
    batch = torch.export.Dim("batch", min=1, max=8)
    plan = opcore.graph.capture(model, (x,), dynamic_shapes=({0: batch},), device="cuda")
    assert not plan.options.cuda_graph
    xb = torch.randn(3, 8, 32, device="cuda")
    torch.testing.assert_close(plan(xb)[0], model(xb)[0].detach(), atol=1e-4, rtol=1e-4)
    assert plan._replay is None


def test_a_cuda_plan_follows_its_weights_and_captures_its_graph_again():
    torch.manual_seed(0)
    model, x = seeded(LlamaBlock()).cuda(), torch.randn(2, 8, 32, device="cuda")
    plan = opcore.graph.capture(model, (x,), device="cuda")
    with torch.no_grad():
        plan(x)
        assert plan._replay is not None
        model.q.weight.mul_(-2)  # a captured CUDA graph holds the old steps: refreshed, captured again
        torch.testing.assert_close(plan(x)[0], model(x)[0], atol=1e-4, rtol=1e-4)
        assert plan._replay is not None
    assert any(note.startswith("weights: refreshed 1 time") for note in plan.notes)


def test_a_cuda_torch_route_runs_the_exported_program_and_replays():
    torch.manual_seed(0)
    model, x = seeded(LlamaBlock()).cuda(), torch.randn(2, 8, 32, device="cuda")
    plan = opcore.graph.capture(model, (x,), device="cuda", route="torch")
    assert plan.exported is not None and len(plan.program.steps) == 1 and plan.options.cuda_graph
    with torch.no_grad():
        want = model(x)[0]
        torch.testing.assert_close(plan(x)[0], want, atol=1e-4, rtol=1e-4)  # warm-up and capture
        assert plan._replay is not None
        torch.testing.assert_close(plan(x * 1.0)[0], want, atol=1e-4, rtol=1e-4)  # replay


def _gpt2() -> Any:
    import transformers

    config = transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=64, use_cache=False)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.mark.parametrize("route", [None, "torch"])
@pytest.mark.parametrize("make", ["llama", "gpt2"])
def test_whole_decoders_plan_on_the_gpu(make, route):
    """Whole transformers models, their buffers on the GPU (a rotary inv_freq, a position table):
    constants the planner measures on the host (a cuda tensor has no numpy view)."""
    pytest.importorskip("transformers")
    from graph_models import small_llama

    model = (small_llama(use_cache=False) if make == "llama" else _gpt2()).cuda()
    ids = torch.randint(0, 256, (2, 16), device="cuda")
    plan = opcore.graph.capture(model, (ids,), device="cuda", route=route)
    assert {d.backend for d in plan.decisions} <= {"cuda", "python"}
    with torch.no_grad():
        want = model(ids).logits
        torch.testing.assert_close(plan(ids).logits, want, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(plan(ids).logits, want, atol=1e-4, rtol=1e-4)  # replayed
