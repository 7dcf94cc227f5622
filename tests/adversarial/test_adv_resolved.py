"""Resolved and prepared calls check a new signature as run() does (issue 14, items 3 and 12)."""

from __future__ import annotations

import numpy
import pytest
from adversarial_support import fresh_warnings, make_plugin  # noqa: F401 (an autouse fixture)

import opcore
import opcore.nn

# every test here on both paths of opcore.run: pure Python and compiled (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("run_path")

torch = pytest.importorskip("torch", reason="opcore.nn modules are torch modules")

BACKENDS = [r.name for r in opcore.backends() if r.ok and r.name in ("reference", "cpu", "onnxruntime", "openvino")]

X = numpy.random.default_rng(0).standard_normal((2, 8)).astype(numpy.float32)
W = numpy.random.default_rng(1).standard_normal((4, 8)).astype(numpy.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_input_the_constants_do_not_fit_is_a_shape_error(backend: str) -> None:
    linear = opcore.resolve("linear", X, W, constants=("w",), backend=backend)
    numpy.testing.assert_allclose(linear(X), X @ W.T, rtol=1e-5, atol=1e-5)
    bad = numpy.ones((2, 3), numpy.float32)
    for _ in range(2):  # also once the good signature is cached
        with pytest.raises(opcore.ShapeError, match=r"^linear\(\): .*'w'|^linear\(\): .*'x'"):
            linear(bad)
    numpy.testing.assert_allclose(linear(X[:1]), X[:1] @ W.T, rtol=1e-5, atol=1e-5)  # other batch sizes work


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_nn_linear_given_the_wrong_width_is_a_shape_error(backend: str) -> None:
    layer = opcore.nn.Linear(1024, 16, backend=backend).eval()
    with torch.no_grad(), pytest.raises(opcore.ShapeError, match="linear"):  # no_grad: opcore's path, not autograd's
        layer(torch.randn(2, 512))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_dtype_or_kind_is_checked_not_run_blindly(backend: str) -> None:
    relu = opcore.resolve("relu", X, backend=backend)
    numpy.testing.assert_array_equal(relu(X), numpy.maximum(X, 0))
    with pytest.raises(opcore.OpcoreError, match="relu"):
        relu([1.0, 2.0])  # not a tensor
    try:  # another dtype: dispatched as run would, or the error run would give
        y = relu(X.astype(numpy.float64))
    except opcore.NoKernelError as error:
        assert "float64" in str(error) and backend == "openvino"
    else:
        numpy.testing.assert_allclose(y, numpy.maximum(X, 0))
        assert y.dtype == numpy.float64


def test_a_pinned_resolved_op_hands_over_within_its_backend_as_run_does() -> None:
    def picky(x):
        raise opcore.Unsupported("not these values")

    plugin = make_plugin(
        "twokernels", {"relu": [(picky, {"label": "fast", "priority": 10}), (lambda x: numpy.maximum(x, 0), {})]}
    )
    opcore.register_plugin(plugin)
    numpy.testing.assert_array_equal(opcore.run("relu", X, backend="twokernels"), numpy.maximum(X, 0))
    resolved = opcore.resolve("relu", X, backend="twokernels")
    assert resolved.kernel is not None and resolved.kernel.label == "fast"
    numpy.testing.assert_array_equal(resolved(X), numpy.maximum(X, 0))


def test_a_pinned_prepared_op_hands_over_within_its_backend() -> None:
    def prepare(args, constants):
        def run(x):
            raise opcore.Unsupported("the packed layout does not take this batch")

        return run

    plugin = make_plugin(
        "packs",
        {"linear": [(lambda x, w, b: x @ w.T, {"prepare": prepare, "label": "packed", "priority": 10}),
                    (lambda x, w, b: x @ w.T, {})]},
    )  # fmt: skip
    opcore.register_plugin(plugin)
    resolved = opcore.resolve("linear", X, W, constants=("w",), backend="packs")
    assert resolved.prepared
    numpy.testing.assert_allclose(resolved(X), X @ W.T, rtol=1e-6)


def test_a_kernel_that_crashes_pinned_names_itself_in_both_paths() -> None:
    def crashes(x):
        raise ZeroDivisionError("boom")

    opcore.register_plugin(make_plugin("crashy", {"relu": (crashes, {})}))
    resolved = opcore.resolve("relu", X, backend="crashy")
    for call in (lambda: opcore.run("relu", X, backend="crashy"), lambda: resolved(X)):
        with pytest.raises(ZeroDivisionError) as info:
            call()
        assert any("raised by kernel crashy" in note for note in getattr(info.value, "__notes__", []))
