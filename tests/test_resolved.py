"""resolve(): decided once, constants prepared by the kernel, fallbacks still honest."""

from __future__ import annotations

import numpy
import pytest
from test_dispatch import make_plugin

import opcore

pytestmark = pytest.mark.usefixtures("only_reference")

X = numpy.array([[-1.0, 2.0], [3.0, -4.0]], dtype=numpy.float32)
W = numpy.arange(6, dtype=numpy.float32).reshape(3, 2)
B = numpy.array([0.5, -0.5, 1.0], dtype=numpy.float32)


def test_resolved_without_constants_takes_every_tensor() -> None:
    linear = opcore.resolve("linear", X, W, B)
    assert linear.free == ("x", "w", "b")
    assert linear.backend == "reference" and not linear.prepared
    numpy.testing.assert_allclose(linear(X, W, B), X @ W.T + B)
    assert "ResolvedOp(linear on reference" in repr(linear)


def test_constants_are_bound_and_other_batch_sizes_work() -> None:
    linear = opcore.resolve("linear", X, W, B, constants=("w", "b"))
    assert linear.free == ("x",)
    bigger = numpy.ones((5, 2), numpy.float32)
    numpy.testing.assert_allclose(linear(bigger), bigger @ W.T + B)


def test_attributes_are_fixed_at_resolve_time() -> None:
    softmax = opcore.resolve("softmax", X, dim=0)
    expected = numpy.exp(X) / numpy.exp(X).sum(axis=0)
    numpy.testing.assert_allclose(softmax(X), expected, rtol=1e-6)


def test_prepare_is_called_once_with_the_constants() -> None:
    prepared: list = []

    def prepare(args, constants):
        x, w, _ = args
        prepared.append((x.shape, w.shape, sorted(constants)))
        packed = numpy.ascontiguousarray(w.T)  # "pack" once

        def run(x):
            return x @ packed

        return run

    def linear(x, w, b):
        return x @ w.T

    opcore.register_plugin(make_plugin("packer", {"linear": (linear, {"prepare": prepare})}))
    resolved = opcore.resolve("linear", X, W, constants=("w",))
    assert resolved.prepared and resolved.backend == "packer"
    numpy.testing.assert_allclose(resolved(X), X @ W.T)
    numpy.testing.assert_allclose(resolved(X[:1]), X[:1] @ W.T)
    assert prepared == [((2, 2), (3, 2), ["w"])]


def test_prepared_kernel_handing_over_falls_back_to_the_next() -> None:
    def prepare(args, constants):
        def run(x):
            raise opcore.Unsupported("the packed layout does not take this batch")

        return run

    opcore.register_plugin(make_plugin("flaky", {"linear": (lambda x, w, b: x @ w.T, {"prepare": prepare})}))
    resolved = opcore.resolve("linear", X, W, B, constants=("w", "b"))
    assert resolved.backend == "flaky"
    numpy.testing.assert_allclose(resolved(X), X @ W.T + B)  # from reference


def test_resolved_plain_kernel_recovers_like_run(fixture_plugins) -> None:
    resolved = opcore.resolve("tanh", X)  # fixture_good hands over at run time
    assert resolved.backend == "fixture_good"
    numpy.testing.assert_allclose(resolved(X), numpy.tanh(X), rtol=1e-6)


def test_resolve_checks_its_inputs_and_constants() -> None:
    with pytest.raises(opcore.ShapeError, match=r"^linear\(\)"):
        opcore.resolve("linear", X, numpy.ones((3, 7), numpy.float32))
    with pytest.raises(opcore.ArgumentError, match="argument 'constants' expected names of tensor arguments"):
        opcore.resolve("linear", X, W, constants=("weight",))
    with pytest.raises(opcore.ArgumentError, match="constants"):
        opcore.resolve("linear", X, W, constants=("b",))  # b was not passed


def test_resolve_respects_the_pin() -> None:
    resolved = opcore.resolve("relu", X, backend="reference")
    assert resolved.explanation.pin == "reference"


def test_resolved_decomposition() -> None:
    opcore.configure(disable=[*opcore.runtime.runtime().settings.disable, "reference"])
    opcore.register_plugin(
        make_plugin("parts", {"linear": (lambda x, w, b: x @ w.T, {}), "relu": (lambda x: numpy.maximum(x, 0), {})})
    )
    fused = opcore.resolve("linear_relu", X, W, constants=("w",))
    assert fused.kernel is None and fused.backend == "decomposition"
    numpy.testing.assert_allclose(fused(X), numpy.maximum(X @ W.T, 0))
