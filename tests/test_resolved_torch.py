"""Resolved ops on torch tensors: torch's tensor guard on the entry's fast branch, and which prepared
kernels watch their constants' version counters (issue 15)."""

from __future__ import annotations

import inspect

import pytest
from test_dispatch import counting_kernels, make_plugin

import opcore
from opcore import _guards

torch = pytest.importorskip("torch", reason="resolved ops on torch tensors")
F = torch.nn.functional

_Marked = type("_Marked", (torch.Tensor,), {})  # a subclass: never served by a plain tensor's guard


def _seen(resolved: opcore.ResolvedOp) -> dict:
    """The signatures the entry's dict path has checked (the guarded fast branch never adds one)."""
    return inspect.getclosurevars(resolved._entry).nonlocals["seen"]


def test_the_guard_serves_exactly_the_examples_signature() -> None:
    calls: list = []
    opcore.register_plugin(make_plugin("torchy", counting_kernels(calls), priority=500))
    x, w, b = torch.ones(2, 3), torch.ones(4, 3), torch.zeros(4)
    linear = opcore.resolve("linear", x, w, b)
    if "G" not in linear._entry.__code__.co_freevars:
        pytest.skip(f"torch {torch.__version__} has no torch._C._dynamo.guards.TensorGuards")
    torch.testing.assert_close(linear(x, w, b), F.linear(x, w, b))  # checked once: the dict path
    seen = len(_seen(linear))
    other = (torch.randn(2, 3), torch.randn(4, 3), torch.randn(4))
    torch.testing.assert_close(linear(*other), F.linear(*other))  # other data: the guard
    assert len(_seen(linear)) == seen
    others = [
        (x, w, b.double()),  # another dtype
        (x, w.t().contiguous().t(), b),  # other strides (a column-major w)
        (x, w, torch.ones(8)[::2]),  # other strides, same shape
        (x, w, torch.ones(4).as_subclass(_Marked)),  # a subclass
        (torch.ones(5, 3), w, b),  # another shape
    ]
    for args in others:
        try:
            result = linear(*args)
        except opcore.OpcoreError:
            continue  # float64 with float32: refused by the contract, as on the first call
        expected = F.linear(*(a.as_subclass(torch.Tensor) for a in args))
        torch.testing.assert_close(result.as_subclass(torch.Tensor), expected, check_dtype=False)
        assert len(_seen(linear)) > seen, args  # the dict path took it, not the guard
        seen = len(_seen(linear))
    bias = torch.ones(4).requires_grad_()  # autograd: the guard misses, the Python key (seen) serves
    torch.testing.assert_close(linear(x, w, bias), F.linear(x, w, bias))
    assert len(_seen(linear)) == seen
    assert calls and all(c == ("linear", False) for c in calls)


def test_without_the_guard_the_python_comparison_serves(monkeypatch) -> None:
    monkeypatch.setattr(_guards, "_TensorGuards", False)  # a torch without its guard
    monkeypatch.setattr(_guards, "_Guard", False)  # and opcore without its own
    opcore.register_plugin(make_plugin("torchy", counting_kernels([]), priority=500))
    x = torch.randn(2, 3)
    relu = opcore.resolve("relu", x)
    assert "G" not in relu._entry.__code__.co_freevars
    for value in (x, -x, x.double(), x[:1]):
        torch.testing.assert_close(relu(value), torch.relu(value))


def _linear_cases() -> list:
    cases = [pytest.param("cpu", 4, 8, id="cpu-aten")]
    cases.append(pytest.param("cpu", 64, 512, id="cpu-onednn"))  # past the fp32 oneDNN crossover: packed
    reason = "no CUDA device here: the cuda kernels (aten and cuBLASLt, both live) are not run"
    cases.append(
        pytest.param("cuda", 4, 8, id="cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason=reason))
    )
    return cases


@pytest.mark.parametrize(("backend", "rows", "size"), _linear_cases())
def test_live_prepared_kernels_skip_the_watch_and_still_see_updates(backend: str, rows: int, size: int) -> None:
    """A torch kernel binding the constants as they are (declared live_constants) is not watched;
    one holding its own form (oneDNN's packed weight) is. Both see an in-place update.
    """
    if backend not in {r.name for r in opcore.backends() if r.ok}:
        pytest.skip(f"backend {backend} is not available here")
    device = "cuda" if backend == "cuda" else "cpu"
    x, w, b = (torch.randn(*s, device=device) for s in ((rows, size), (size, size), (size,)))
    linear = opcore.resolve("linear", x, w, b, constants=("w", "b"), backend=backend)
    kernel = linear.kernel
    assert linear.prepared and kernel is not None
    assert linear.watched is not kernel.live_constants
    if kernel.label in ("aten", "cublaslt"):  # torch kernels binding w.t() and b as they are
        assert kernel.live_constants and not linear.watched
    if kernel.label == "onednn":  # a packed weight: its own copy
        assert not kernel.live_constants and linear.watched
    tolerance = {"rtol": 1e-4, "atol": 1e-4}
    torch.testing.assert_close(linear(x), F.linear(x, w, b), **tolerance)
    w.mul_(-2)
    b.add_(1)
    torch.testing.assert_close(linear(x), F.linear(x, w, b), **tolerance)
    w.copy_(torch.randn_like(w))
    torch.testing.assert_close(linear(x[:1]), F.linear(x[:1], w, b), **tolerance)  # another signature too


def test_live_constants_must_be_a_bool() -> None:
    def relu(x):
        return x

    with pytest.raises(opcore.PluginError, match="live_constants must be True or False"):
        opcore.register_plugin(make_plugin("bad", {"relu": (relu, {"live_constants": "yes"})}))
