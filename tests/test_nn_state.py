"""opcore.nn.state: the original weights are the state; changing them re-prepares the kernels;
gradients take the autograd path (or raise), never a prepared result without grad_fn.
"""

from __future__ import annotations

import copy
import io

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from machine import needs_backend, onednn_or_aten  # noqa: E402

import opcore  # noqa: E402
import opcore.nn  # noqa: E402

BACKENDS = ["cpu", "onnxruntime", "openvino"]


def expected(layer, x):
    return F.silu(F.linear(x, layer.weight, layer.bias))


def run(layer, x):
    with torch.no_grad():
        return layer(x)


# --- state_dict ---------------------------------------------------------------------------------


def test_state_dict_has_torch_keys_and_the_unpacked_values():
    torch.manual_seed(0)
    linear = torch.nn.Linear(1024, 512)
    fused = opcore.nn.LinearSiLU.from_torch(linear, backend="cpu")
    assert fused.bound.resolved[0].prepared  # packed by oneDNN...
    state = fused.state_dict()
    assert list(state) == list(linear.state_dict()) == ["weight", "bias"]
    for key, value in linear.state_dict().items():
        assert not state[key].is_mkldnn
        torch.testing.assert_close(state[key], value)  # ...and still saved as the original


@pytest.mark.parametrize("backend", BACKENDS)
def test_load_state_dict_re_prepares(backend):
    needs_backend(backend)
    torch.manual_seed(0)
    layer = opcore.nn.LinearSiLU(64, 32, backend=backend)
    x = torch.randn(4, 64)
    before = run(layer, x)
    other = torch.nn.Linear(64, 32)
    layer.load_state_dict(other.state_dict())
    after = run(layer, x)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, F.silu(other(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_weight_change_is_seen_at_the_next_forward(backend):
    needs_backend(backend)
    torch.manual_seed(0)
    layer = opcore.nn.LinearSiLU(64, 32, backend=backend)
    x = torch.randn(4, 64)
    first = layer.bound
    with torch.no_grad():
        layer.weight.mul_(-2)  # what an optimizer step does
    torch.testing.assert_close(run(layer, x), expected(layer, x), rtol=1e-5, atol=1e-5)
    assert layer.bound is not first
    same = layer.bound
    run(layer, x)
    assert layer.bound is same  # nothing changed: no new binding


def test_replaced_parameter_and_data_assignment_are_seen():
    torch.manual_seed(0)
    layer = opcore.nn.LinearSiLU(1024, 64, backend="cpu")
    x = torch.randn(4, 1024)
    layer.weight = torch.nn.Parameter(torch.randn(64, 1024) / 32)
    torch.testing.assert_close(run(layer, x), expected(layer, x), rtol=1e-5, atol=1e-5)
    layer.bias.data = torch.randn(64)
    torch.testing.assert_close(run(layer, x), expected(layer, x), rtol=1e-5, atol=1e-5)


def test_to_dtype_re_prepares_at_once():
    torch.manual_seed(0)
    layer = opcore.nn.LinearSiLU(256, 512, backend="cpu")
    assert "dtype=float32" in repr(layer)
    layer.to(torch.bfloat16)
    assert "dtype=bfloat16" in repr(layer) and layer.bound.resolved[0].kernel.title == onednn_or_aten("bfloat16")
    x = torch.randn(3, 256, dtype=torch.bfloat16)
    y = run(layer, x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y, expected(layer, x), rtol=2e-2, atol=2e-2)
    layer.float()
    assert "dtype=float32" in repr(layer)


def test_to_a_dtype_the_backend_refuses_raises_there():
    needs_backend("onnxruntime")
    layer = opcore.nn.Linear(8, 4, backend="onnxruntime")
    with pytest.raises(opcore.NoKernelError, match="runs it for bfloat16 on cpu"):
        layer.to(torch.bfloat16)


def test_meta_device_binds_once_weights_are_loaded():
    layer = opcore.nn.Linear(16, 8, device="meta")
    assert "backend=unbound (ranked default)" in repr(layer)
    with torch.no_grad(), pytest.raises(opcore.DeviceError, match="parameters on the meta device"):
        layer(torch.ones(2, 16))
    source = torch.nn.Linear(16, 8)
    layer.load_state_dict(source.state_dict(), assign=True)
    x = torch.randn(2, 16)
    torch.testing.assert_close(run(layer, x), source(x).detach())


@pytest.mark.parametrize("backend", ["cpu", "onnxruntime"])
def test_deepcopy_and_pickle_bind_again(backend):
    needs_backend(backend)
    torch.manual_seed(0)
    layer = opcore.nn.LinearSiLU(1024, 64, backend=backend)  # packed oneDNN weights / an ORT session
    x = torch.randn(2, 1024)
    copied = copy.deepcopy(layer)
    torch.testing.assert_close(run(copied, x), run(layer, x))
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    torch.testing.assert_close(run(loaded, x), run(layer, x))
    assert loaded.backend == backend


def test_a_copy_holds_unbound_calls_until_its_first_forward():
    needs_backend("cpu")
    from opcore.nn.state import unbound

    layer = opcore.nn.Linear(16, 4, backend="cpu")
    copied = copy.deepcopy(layer)  # the resolved call stays behind (see PreparedModule.__getstate__)
    assert copied._call is unbound
    with pytest.raises(opcore.OpcoreError, match="before the module bound its kernels"):
        copied._call(torch.randn(2, 16))
    x = torch.randn(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(copied(x), F.linear(x, layer.weight, layer.bias))
    assert copied._call is not unbound


def test_inference_tensors_as_parameters():
    with torch.inference_mode():
        layer = opcore.nn.Linear(1024, 64, backend="cpu")
        x = torch.randn(2, 1024)
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


def test_parameterless_norm_follows_its_input():
    norm = opcore.nn.RMSNorm(16, elementwise_affine=False)
    for dtype in (torch.float32, torch.bfloat16, torch.float32):
        x = torch.randn(3, 16, dtype=dtype)
        y = run(norm, x)
        assert y.dtype == dtype
        torch.testing.assert_close(y, F.rms_norm(x, (16,)))


# --- gradients ----------------------------------------------------------------------------------


def test_gradients_take_the_autograd_path_and_match_torch():
    torch.manual_seed(0)
    linear = torch.nn.Linear(1024, 64)
    fused = opcore.nn.LinearSiLU.from_torch(copy.deepcopy(linear), backend="cpu")
    x = torch.randn(3, 1024, requires_grad=True)
    y = fused(x)
    assert y.grad_fn is not None
    y.sum().backward()
    x_ours, w_ours = x.grad.clone(), fused.weight.grad.clone()
    x.grad = None
    F.silu(linear(x)).sum().backward()
    torch.testing.assert_close(x_ours, x.grad)
    torch.testing.assert_close(w_ours, linear.weight.grad)


def test_input_requiring_grad_with_frozen_weights_still_gets_a_graph():
    layer = opcore.nn.Linear(8, 4).requires_grad_(False)
    x = torch.randn(2, 8, requires_grad=True)
    y = layer(x)
    assert y.requires_grad and y.grad_fn is not None


def test_grad_raise_refuses_and_no_grad_runs_prepared():
    layer = opcore.nn.LinearReLU(8, 4, grad="raise")
    assert "grad=raise" in repr(layer)
    with pytest.raises(opcore.nn.GradientError, match=r"opcore.nn.LinearReLU\(\): called with gradients required"):
        layer(torch.randn(2, 8))
    x = torch.randn(2, 8)
    with torch.no_grad():
        y = layer(x)
    with torch.inference_mode():
        z = layer(x)
    assert y.grad_fn is None and z.grad_fn is None
    layer.requires_grad_(False)  # frozen: grad mode on, but nothing wants a gradient
    assert layer(x).grad_fn is None
