"""opcore.nn.Linear and the fused LinearReLU / LinearSiLU / LinearGELU on each backend, against torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from machine import needs_backend, onednn_or_aten  # noqa: E402

import opcore  # noqa: E402
import opcore.nn  # noqa: E402

BACKENDS = ["cpu", "onnxruntime", "openvino"]
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}

ACTIVATIONS = {
    opcore.nn.Linear: lambda y: y,
    opcore.nn.LinearReLU: F.relu,
    opcore.nn.LinearSiLU: F.silu,
    opcore.nn.LinearGELU: F.gelu,
}


def close(actual, expected, dtype=torch.float32):
    tolerance = TOLERANCE[dtype]
    torch.testing.assert_close(actual, expected, rtol=tolerance, atol=tolerance)


def test_import_opcore_imports_neither_torch_nor_opcore_nn():
    code = (
        "import sys, opcore; "
        "assert 'torch' not in sys.modules and 'opcore.nn' not in sys.modules, 'imported'; "
        "import opcore.nn; assert 'torch' in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", list(ACTIVATIONS), ids=lambda k: k.__name__)
def test_matches_torch_at_every_rank(backend, kind):
    needs_backend(backend)
    torch.manual_seed(0)
    layer = kind(48, 24, backend=backend)
    assert layer.backend == backend
    activation = ACTIVATIONS[kind]
    with torch.no_grad():
        for shape in [(48,), (5, 48), (1, 48), (300, 48), (2, 3, 48), (2, 1, 2, 48)]:
            x = torch.randn(shape)
            y = layer(x)
            assert y.shape == (*shape[:-1], 24)
            close(y, activation(F.linear(x, layer.weight, layer.bias)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gelu_tanh_and_no_bias(backend):
    needs_backend(backend)
    torch.manual_seed(0)
    layer = opcore.nn.LinearGELU(32, 16, bias=False, approximate="tanh", backend=backend)
    assert layer.bias is None and "approximate='tanh'" in repr(layer)
    x = torch.randn(7, 32)
    with torch.no_grad():
        close(layer(x), F.gelu(F.linear(x, layer.weight), approximate="tanh"))


@pytest.mark.parametrize("kind", list(ACTIVATIONS), ids=lambda k: k.__name__)
def test_bfloat16_on_cpu_is_packed_by_onednn(kind):
    torch.manual_seed(0)
    layer = kind(256, 512, dtype=torch.bfloat16, backend="cpu")
    resolved = layer.bound.resolved[0]
    assert resolved.kernel.title == onednn_or_aten("bfloat16") and resolved.prepared
    x = torch.randn(4, 64, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        y = layer(x)
    assert y.dtype == torch.bfloat16
    close(y, ACTIVATIONS[kind](F.linear(x, layer.weight, layer.bias)), torch.bfloat16)


def test_extra_repr_names_backend_kernel_and_dtype():
    layer = opcore.nn.LinearSiLU(1024, 1024, backend="cpu")
    text = repr(layer)
    assert text.startswith("LinearSiLU(in_features=1024, out_features=1024, bias=True, dtype=float32, backend=cpu (")
    assert "cpu/onednn prepared" in text
    small = opcore.nn.Linear(8, 8, backend="cpu")  # below oneDNN's crossover: ATen's prepared addmm
    assert "backend=cpu (cpu/aten prepared)" in repr(small)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_bfloat16_on_a_numpy_backend_is_refused_at_construction(backend):
    needs_backend(backend)
    with pytest.raises(opcore.NoKernelError) as caught:
        opcore.nn.LinearSiLU(64, 32, backend=backend, dtype=torch.bfloat16)
    message = str(caught.value)
    assert message.startswith(f"opcore.nn.LinearSiLU(): no backend of ['{backend}'] runs it for bfloat16 on cpu")
    assert f"{backend}: linear declined: bfloat16 is not offered" in message
    assert "Fix: " in message


def test_a_list_falls_back_in_order_and_says_what_it_passed_over():
    needs_backend("onnxruntime")
    layer = opcore.nn.LinearSiLU(64, 32, backend=["onnxruntime", "cpu"], dtype=torch.bfloat16)
    assert layer.backend == "cpu"
    assert layer.bound.passed_over[0][0] == "onnxruntime"
    assert "passed over: onnxruntime" in repr(layer)
    float32 = opcore.nn.LinearSiLU(64, 32, backend=["onnxruntime", "cpu"])
    assert float32.backend == "onnxruntime" and "passed over" not in repr(float32)


def test_unknown_backend_names_are_reported_with_the_loaded_ones():
    with pytest.raises(opcore.NoKernelError, match=r"- nosuch: backend= names backend 'nosuch', which is not"):
        opcore.nn.Linear(8, 8, backend="nosuch")
    with pytest.raises(opcore.ArgumentError, match="a list of names in preference order"):
        opcore.nn.Linear(8, 8, backend=["cpu", 3])


def test_ranked_default_follows_prefer():
    needs_backend("openvino")
    assert opcore.nn.Linear(64, 64).backend == "cpu"
    with opcore.prefer("openvino"):
        assert opcore.nn.Linear(64, 64).backend == "openvino"


def test_fresh_module_initialises_like_torch():
    torch.manual_seed(3)
    ours = opcore.nn.Linear(16, 8)
    torch.manual_seed(3)
    theirs = torch.nn.Linear(16, 8)
    torch.testing.assert_close(ours.weight, theirs.weight)
    torch.testing.assert_close(ours.bias, theirs.bias)


def test_from_torch_shares_parameters_and_casts_on_request():
    linear = torch.nn.Linear(32, 16)
    shared = opcore.nn.LinearReLU.from_torch(linear)
    assert shared.weight is linear.weight and shared.bias is linear.bias
    cast = opcore.nn.LinearReLU.from_torch(linear, dtype=torch.bfloat16)
    assert cast.weight.dtype == torch.bfloat16 and linear.weight.dtype == torch.float32
    gelu = opcore.nn.LinearGELU.from_torch(linear, approximate="tanh", backend="cpu")
    assert gelu.approximate == "tanh"
    x = torch.randn(3, 32)
    with torch.no_grad():
        close(gelu(x), F.gelu(linear(x), approximate="tanh"))


def test_input_of_another_dtype_is_a_dtype_error():
    layer = opcore.nn.Linear(8, 4)
    message = r"opcore.nn.Linear\(\): argument 'input' expected float32"
    with torch.no_grad(), pytest.raises(opcore.DTypeError, match=message):
        layer(torch.ones(2, 8, dtype=torch.float64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_batch(backend):
    needs_backend(backend)
    layer = opcore.nn.Linear(8, 4, backend=backend)
    with torch.no_grad():
        assert layer(torch.ones(0, 8)).shape == (0, 4)
        assert layer(torch.ones(2, 0, 8)).shape == (2, 0, 4)


def test_bad_options_are_argument_errors():
    with pytest.raises(opcore.ArgumentError, match="'grad' expected 'autograd' or 'raise'"):
        opcore.nn.Linear(8, 4, grad="maybe")
    with pytest.raises(opcore.ArgumentError, match="'example_rows' expected a positive int"):
        opcore.nn.Linear(8, 4, example_rows=0)


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_linear_with_quantized_weights_runs_linear_wq_close_to_the_float_layer(weights):
    torch.manual_seed(0)
    layer = torch.nn.Linear(256, 64)
    fast = opcore.nn.Linear.from_torch(layer, weights=weights, backend="cpu")
    x = torch.randn(2, 5, 256)
    with torch.no_grad():
        got, want = fast(x), layer(x)
    assert fast.bound.resolved[0].op == "linear_wq" and "weights=" + weights in repr(fast)
    # round to nearest: int8 steps of max|w| / 127 per row, int4 of max|w| / 7 per group of 128
    assert (got - want).abs().max() < (0.02 if weights == "int8" else 0.3)
    assert fast.state_dict().keys() == layer.state_dict().keys()


def test_quantized_weights_are_refused_on_fused_layers_and_unknown_names():
    with pytest.raises(opcore.ArgumentError, match="fused linear"):
        opcore.nn.LinearReLU(8, 8, weights="int8")
    with pytest.raises(opcore.ArgumentError, match="None, 'int8' or 'int4'"):
        opcore.nn.Linear(8, 8, weights="int2")
    with pytest.raises(opcore.ArgumentError, match="'group_size' expected group_size together with weights="):
        opcore.nn.Linear(64, 8, group_size=32)  # it would have been ignored


def test_an_input_of_another_rank_must_end_with_the_features_or_it_is_a_shape_error():
    """Inputs of a rank other than the resolved one are flattened around the call: one whose last size
    is not the features was reshaped into other rows first (a torch reshape error after a call, or
    none where the sizes divided); a 0-D one too."""
    cases = [
        (
            opcore.nn.Linear(4, 3),
            torch.randn(2, 2, 8),
            r"Linear\(\): argument 'input' expected a tensor whose last sizes are \(4,\)",
        ),
        (opcore.nn.Linear(4, 3), torch.tensor(1.0), r"found shape \(\)"),
        (opcore.nn.GatedMLP(8, 16), torch.randn(2, 3, 7), r"GatedMLP.*last sizes are \(8,\)"),
        (opcore.nn.RMSNorm(8), torch.randn(2, 3, 7), r"RMSNorm.*last sizes are \(8,\)"),
        (opcore.nn.LayerNorm((3, 8)), torch.randn(5, 2, 4, 8), r"LayerNorm.*last sizes are \(3, 8\)"),
    ]
    with torch.no_grad():
        for module, x, match in cases:
            with pytest.raises(opcore.ShapeError, match=match):
                module(x)
        assert opcore.nn.Linear(4, 3)(torch.randn(2, 3, 4)).shape == (2, 3, 3)


def test_building_on_what_is_not_a_torch_module_of_the_kind_is_an_argument_error():
    """from_torch / from_linears / convert on the wrong object: an ArgumentError naming the argument
    and what it got (an AttributeError from deep inside, before)."""
    cases = [
        (
            lambda: opcore.nn.Linear.from_torch(torch.nn.ReLU()),
            "Linear.from_torch.*'linear' expected a torch.nn.Linear, found ReLU",
        ),
        (
            lambda: opcore.nn.RMSNorm.from_torch(torch.nn.LayerNorm(8)),
            "'norm' expected a torch.nn.RMSNorm, found LayerNorm",
        ),
        (lambda: opcore.nn.LayerNorm.from_torch(torch.nn.Linear(8, 8)), "'norm' expected a torch.nn.LayerNorm"),
        (
            lambda: opcore.nn.GatedMLP.from_linears(torch.nn.Linear(8, 16), "up", torch.nn.Linear(16, 8)),
            "'up' expected",
        ),
        (lambda: opcore.nn.convert("model"), "convert.*'model' expected a torch.nn.Module, found str"),
    ]
    for build, match in cases:
        with pytest.raises(opcore.ArgumentError, match=match):
            build()
