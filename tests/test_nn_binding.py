"""opcore.nn.binding: fused modules fall back by parts on a backend without the fused kernel, every
part on that backend (PACE's rule); lists and the ranked default choose the backend.

The "parts" backend registered here has the shared torch kernels of linear (with its prepare),
the activations and mul, and no fused kernel at all.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import opcore  # noqa: E402
import opcore.nn  # noqa: E402
from opcore.nn.binding import Single, bind, parse_backend  # noqa: E402

DTYPES = ["float32", "bfloat16"]


class PartsOnly:
    """A backend with the unfused parts only."""

    @opcore.hookimpl
    def opcore_backend(self):
        return opcore.BackendSpec(name="parts", version="1", priority=1, device_types=(opcore.DeviceType.CPU,))

    @opcore.hookimpl
    def opcore_register_kernels(self, registrar):
        registrar.add_kernel(
            "linear",
            "opcore.torchkit.torch_kernels:linear",
            dtypes=DTYPES,
            array_kind="torch",
            prepare="opcore.torchkit.prepared:prepare_linear",
        )
        for op in ("relu", "silu", "gelu", "mul"):
            registrar.add_kernel(op, f"opcore.torchkit.torch_kernels:{op}", dtypes=DTYPES, array_kind="torch")


@pytest.fixture
def parts():
    opcore.register_plugin(PartsOnly())
    yield "parts"
    opcore.unregister_plugin("parts")


@pytest.mark.parametrize(
    ("kind", "activation", "note"),
    [
        (opcore.nn.LinearReLU, F.relu, "linear+relu by parts"),
        (opcore.nn.LinearSiLU, F.silu, "linear+silu by parts"),
        (opcore.nn.LinearGELU, F.gelu, "linear+gelu by parts"),
    ],
)
def test_fused_linear_by_parts_on_the_pinned_backend(parts, kind, activation, note):
    torch.manual_seed(0)
    layer = kind(64, 32, backend=parts)
    bound = layer.bound
    assert bound.backend == "parts" and bound.by_parts and bound.notes == (note,)
    assert [r.kernel.backend for r in bound.resolved] == ["parts", "parts"]
    assert [r.op for r in bound.resolved] == ["linear", activation.__name__]
    assert bound.resolved[0].prepared  # the linear part still prepares its weight
    assert f"backend=parts ({note})" in repr(layer)
    x = torch.randn(3, 5, 64)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), activation(F.linear(x, layer.weight, layer.bias)))


def test_gated_mlp_by_parts_nests(parts):
    torch.manual_seed(0)
    mlp = opcore.nn.GatedMLP(32, 64, backend=parts)
    bound = mlp.bound
    assert bound.notes == ("linear+silu by parts", "linear_silu+linear+mul+linear by parts")
    assert {r.kernel.backend for r in bound.resolved} == {"parts"}
    x = torch.randn(2, 4, 32)
    with torch.no_grad():
        torch.testing.assert_close(mlp(x), mlp._autograd(x))


def test_a_backend_with_the_fused_kernel_runs_it_whole():
    layer = opcore.nn.LinearSiLU(1024, 1024, backend="cpu")
    assert not layer.bound.by_parts and [r.op for r in layer.bound.resolved] == ["linear_silu"]


def test_a_list_skips_a_backend_that_lacks_a_part(parts):
    # "parts" has no rms_norm: the list moves on to cpu and says why
    norm = opcore.nn.RMSNorm(16, backend=[parts, "cpu"])
    assert norm.backend == "cpu"
    (name, reason), *_ = norm.bound.passed_over
    assert name == "parts" and reason.startswith("rms_norm")


def test_ranked_default_keeps_parts_on_the_first_parts_backend_where_possible(parts):
    # prefer("parts"): the q/k/v linear resolves there; parts has no sdpa, so that step alone takes
    # the ranked default, and the note says where it went
    with opcore.prefer(parts):
        attention = opcore.nn.Attention(32, 4)
    bound = attention.bound
    assert bound.backend == "parts"
    assert [r.kernel.backend for r in bound.resolved] == ["parts", "cpu", "parts"]
    assert "scaled_dot_product_attention on cpu" in bound.notes
    x = torch.randn(2, 3, 32)
    with torch.no_grad():
        torch.testing.assert_close(attention(x), attention._autograd(x))


def test_nothing_runs_it_lists_every_name():
    x = torch.zeros(2, 4, dtype=torch.bfloat16)
    with pytest.raises(opcore.NoKernelError) as caught:
        bind([Single("relu", (x,))], ("onnxruntime", "openvino"), "demo", "bfloat16 on cpu")
    text = str(caught.value)
    assert "no backend of ['onnxruntime', 'openvino'] runs it for bfloat16 on cpu" in text
    loaded = {report.name for report in opcore.backends() if report.ok}
    for name in ("onnxruntime", "openvino"):
        if name in loaded:
            assert f"- {name}: relu declined: bfloat16 is not offered" in text
        else:  # not loaded here (e.g. opcore-openvino installed without openvino): the loader says why
            assert f"- {name}: backend= names backend '{name}', which is " in text
    assert "add another backend to the list" in text


def test_parse_backend():
    assert parse_backend(None, "m") is None
    assert parse_backend("cpu", "m") == ("cpu",)
    assert parse_backend(["openvino", "cpu"], "m") == ("openvino", "cpu")
    for bad in ([], [1], 3):
        with pytest.raises(opcore.ArgumentError, match=r"m\(\): argument 'backend'"):
            parse_backend(bad, "m")
