"""Constants given to resolve mean the same on every backend (issue 14, item 14):

* a torch constant is live: an in-place update (``w.mul_``, an optimizer step, ``load_state_dict``)
  is seen by the next call, on every backend, prepared or not (a kernel reading it in place sees it
  as is; for one holding its own form of it, its version counter is compared on each call and the
  kernel is prepared again after a change: tests/test_resolved_torch.py tells the two apart);
* a numpy constant is a snapshot taken at resolve: a later change is never seen, on any backend.
"""

from __future__ import annotations

import numpy
import pytest
from adversarial_support import fresh_warnings  # noqa: F401 (an autouse fixture)

import opcore
import opcore.nn

# every test here on both paths of opcore.run: pure Python and compiled (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("run_path")

torch = pytest.importorskip("torch", reason="torch constants and opcore.nn modules")

BACKENDS = [r.name for r in opcore.backends() if r.ok and r.name in ("reference", "cpu", "onnxruntime", "openvino")]


def _close(actual, expected) -> None:
    torch.testing.assert_close(torch.as_tensor(actual), torch.as_tensor(expected), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_in_place_update_of_a_torch_constant_is_seen(backend: str) -> None:
    x, w, b = torch.randn(3, 8), torch.randn(4, 8), torch.randn(4)
    linear = opcore.resolve("linear", x, w, b, constants=("w", "b"), backend=backend)
    _close(linear(x), torch.nn.functional.linear(x, w, b))
    with torch.no_grad():
        w.mul_(2)
    _close(linear(x), torch.nn.functional.linear(x, w, b))
    b.add_(1)
    _close(linear(x[:1]), torch.nn.functional.linear(x[:1], w, b))  # another signature too
    _close(linear(x), torch.nn.functional.linear(x, w, b))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_numpy_constant_is_a_snapshot(backend: str) -> None:
    rng = numpy.random.default_rng(0)
    x, w = rng.standard_normal((3, 8), numpy.float32), rng.standard_normal((4, 8), numpy.float32)
    expected = x @ w.T
    linear = opcore.resolve("linear", x, w, constants=("w",), backend=backend)
    w *= 3  # after resolve: not seen, on any backend
    _close(linear(x), expected)
    w[:] = 0
    _close(linear(x), expected)
    other = numpy.zeros_like(x)
    add = opcore.resolve("add", x, other, constants=("other",), backend=backend)
    other[:] = 1
    _close(add(x), x)  # other was 0 at resolve


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_nn_module_sees_optimizer_steps_and_in_place_updates(backend: str) -> None:
    layer = opcore.nn.Linear(8, 4, backend=backend)
    x = torch.randn(2, 8)
    with torch.no_grad():  # opcore's path (autograd's otherwise)
        first = layer(x)
        layer.weight.mul_(-1)
        _close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    loss = torch.nn.functional.linear(x, layer.weight, layer.bias).sum()  # a gradient from eager torch
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        stepped = layer(x)
        _close(stepped, torch.nn.functional.linear(x, layer.weight, layer.bias))
        assert not torch.allclose(stepped, first)
