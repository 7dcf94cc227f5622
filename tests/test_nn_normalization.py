"""opcore.nn.RMSNorm and opcore.nn.LayerNorm on each backend, against torch.nn's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from machine import needs_backend  # noqa: E402

import opcore  # noqa: E402
import opcore.nn  # noqa: E402

BACKENDS = ["cpu", "onnxruntime", "openvino"]


def randomised(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p))
    return module


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.nn.RMSNorm(32, eps=1e-6),
        lambda: torch.nn.RMSNorm(32),  # eps None: the dtype's epsilon
        lambda: torch.nn.RMSNorm((4, 8), eps=1e-5),
        lambda: torch.nn.LayerNorm(32),
        lambda: torch.nn.LayerNorm(32, bias=False),
        lambda: torch.nn.LayerNorm((4, 8), eps=1e-3),
    ],
    ids=["rms", "rms-eps-none", "rms-2d", "layer", "layer-no-bias", "layer-2d"],
)
def test_matches_torch_at_every_rank(backend, make):
    needs_backend(backend)
    torch.manual_seed(0)
    original = randomised(make())
    kind = opcore.nn.RMSNorm if isinstance(original, torch.nn.RMSNorm) else opcore.nn.LayerNorm
    ours = kind.from_torch(original, backend=backend)
    assert ours.backend == backend and f"backend={backend}" in repr(ours)
    assert list(ours.state_dict()) == list(original.state_dict())
    normalized = tuple(original.normalized_shape)
    with torch.no_grad():
        for lead in [(), (3,), (2, 5), (1, 1, 2)]:
            x = torch.randn(*lead, *normalized) * 3 + 1
            torch.testing.assert_close(ours(x), original(x), rtol=1e-5, atol=1e-5)


def test_bfloat16_on_cpu_and_refused_by_openvino():
    torch.manual_seed(0)
    original = randomised(torch.nn.RMSNorm(64, eps=1e-6)).to(torch.bfloat16)
    ours = opcore.nn.RMSNorm.from_torch(original, backend="cpu")
    x = torch.randn(2, 7, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), original(x), rtol=2e-2, atol=2e-2)
    needs_backend("openvino")
    with pytest.raises(opcore.NoKernelError, match="openvino: rms_norm declined: bfloat16"):
        opcore.nn.RMSNorm.from_torch(original, backend="openvino")


def test_without_parameters_matches_torch_on_every_backend():
    for backend in BACKENDS:
        needs_backend(backend)
        norm = opcore.nn.LayerNorm(16, elementwise_affine=False, backend=backend)
        assert list(norm.state_dict()) == [] and "backend=unbound" in repr(norm)
        x = torch.randn(3, 4, 16)
        with torch.no_grad():
            torch.testing.assert_close(norm(x), torch.nn.functional.layer_norm(x, (16,)), rtol=1e-5, atol=1e-5)
        assert f"backend={backend}" in repr(norm)


def test_gradients_through_the_norm():
    norm = opcore.nn.RMSNorm(8, eps=1e-6)
    x = torch.randn(2, 8, requires_grad=True)
    norm(x).sum().backward()
    assert x.grad is not None and norm.weight.grad is not None
