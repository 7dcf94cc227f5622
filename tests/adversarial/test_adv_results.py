"""A kernel's result is checked against its contract: wrong kind, dtype, shape or count never
reaches the caller (issue 14, item 2); the caches key what checkers look at (item 8); a cache
cleared under a failing call does not leak KeyError (item 9)."""

from __future__ import annotations

import warnings

import numpy
import pytest
from adversarial_support import fresh_warnings, make_plugin  # noqa: F401 (an autouse fixture)

import opcore
from opcore import dispatch

torch = pytest.importorskip("torch", reason="one bad result is a torch tensor handed to a numpy caller")

pytestmark = pytest.mark.usefixtures("only_reference", "run_path")

X = numpy.array([[-1.0, 2.0], [3.0, -4.0]], dtype=numpy.float32)
RELU = numpy.maximum(X, 0)

BAD_RESULTS = {
    "wrong shape": lambda x: numpy.maximum(x, 0).ravel(),
    "float64 for float32": lambda x: numpy.maximum(x, 0).astype(numpy.float64),
    "a list": lambda x: numpy.maximum(x, 0).tolist(),
    "None": lambda x: None,
    "a torch tensor to a numpy caller": lambda x: torch.from_numpy(numpy.maximum(x, 0)),
    "a masked array": lambda x: numpy.ma.masked_less(x, 0).filled(0).view(numpy.ma.MaskedArray),
    "a tuple for one output": lambda x: (numpy.maximum(x, 0),),
}


@pytest.mark.parametrize("bad", BAD_RESULTS, ids=list(BAD_RESULTS))
def test_a_wrong_result_falls_back_with_one_warning(bad: str) -> None:
    opcore.register_plugin(make_plugin("liar", {"relu": (BAD_RESULTS[bad], {})}))
    with pytest.warns(opcore.FallbackWarning, match="kernel .*liar"):
        numpy.testing.assert_array_equal(opcore.run("relu", X), RELU)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):  # the cached path never runs the liar again for this signature
            numpy.testing.assert_array_equal(opcore.run("relu", X), RELU)
    assert "returned" in str(opcore.explain("relu", X)) or opcore.explain("relu", X).chosen == "liar"


@pytest.mark.parametrize("bad", BAD_RESULTS, ids=list(BAD_RESULTS))
def test_a_wrong_result_is_an_error_naming_the_kernel_when_pinned_or_strict(bad: str) -> None:
    opcore.register_plugin(make_plugin("liar", {"relu": (BAD_RESULTS[bad], {})}))
    with pytest.raises(opcore.KernelResultError, match=r"^relu\(\): kernel liar \(.*\) returned .*the contract says"):
        opcore.run("relu", X, backend="liar")
    with opcore.strict(), pytest.raises(opcore.KernelResultError, match="kernel liar"):
        opcore.run("relu", X)
    resolved = opcore.resolve("relu", X, backend="liar")
    with pytest.raises(opcore.KernelResultError, match="kernel liar"):
        resolved(X)


def test_resolved_and_prepared_results_are_checked_and_fall_back() -> None:
    def prepare(args, constants):
        w = args[1]
        return lambda x: (x @ w.T).astype(numpy.float64)  # wrong dtype, only in the prepared form

    def linear(x, w, b):
        return x @ w.T

    w = numpy.ones((3, 2), numpy.float32)
    opcore.register_plugin(make_plugin("packer", {"linear": (linear, {"prepare": prepare})}))
    resolved = opcore.resolve("linear", X, w, constants=("w",))
    assert resolved.prepared
    with pytest.warns(opcore.FallbackWarning, match="packer"):
        out = resolved(X)
    assert out.dtype == numpy.float32
    numpy.testing.assert_allclose(out, X @ w.T)
    numpy.testing.assert_allclose(resolved(X), X @ w.T)


def test_check_mode_checks_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def sometimes(x):  # right on the first call, wrong afterwards: only OPCORE_CHECK=1 sees it
        calls.append(1)
        return numpy.maximum(x, 0) if len(calls) == 1 else numpy.maximum(x, 0).astype(numpy.float64)

    monkeypatch.setenv("OPCORE_CHECK", "1")
    opcore.reload_plugins()
    opcore.register_plugin(make_plugin("sometimes", {"relu": (sometimes, {})}))
    assert opcore.run("relu", X).dtype == numpy.float32
    with pytest.warns(opcore.FallbackWarning, match="sometimes"):
        assert opcore.run("relu", X).dtype == numpy.float32  # fell back to the reference
    resolved = opcore.resolve("relu", X, backend="sometimes")
    with pytest.raises(opcore.KernelResultError):
        resolved(X)


def test_the_cache_keys_layout_so_a_contiguous_only_checker_is_asked_again() -> None:
    def contiguous_only(x):
        return True if x.is_contiguous else "needs a contiguous x"

    def first_row_major(x):  # wrong for anything but row-major memory, as a real packed kernel would be
        flat = numpy.frombuffer(x.data if x.flags.c_contiguous else x.copy(order="K").data, x.dtype)
        return numpy.maximum(flat, 0).reshape(x.shape)

    opcore.register_plugin(make_plugin("rowmajor", {"relu": (first_row_major, {"checker": contiguous_only})}))
    a = numpy.arange(12, dtype=numpy.float32).reshape(3, 4) - 6
    b = numpy.ascontiguousarray((numpy.arange(12, dtype=numpy.float32).reshape(4, 3) - 6).T)
    opcore.run("relu", b)
    t = (numpy.arange(12, dtype=numpy.float32).reshape(4, 3) - 6).T  # same dtype and shape, transposed
    assert opcore.explain("relu", t).chosen == "reference"
    numpy.testing.assert_array_equal(opcore.run("relu", t), numpy.maximum(t, 0))
    numpy.testing.assert_array_equal(opcore.run("relu", a), numpy.maximum(a, 0))
    resolved = opcore.resolve("relu", b)
    assert resolved.backend == "rowmajor"
    numpy.testing.assert_array_equal(resolved(t), numpy.maximum(t, 0))  # re-resolved for the new layout


def test_a_cache_cleared_while_a_kernel_fails_does_not_leak_key_error() -> None:
    calls = []

    def hands_over(x):
        calls.append(1)
        if len(calls) > 1:
            dispatch.clear_caches()  # what configure() in another thread does
            raise opcore.Unsupported("not today")
        return numpy.maximum(x, 0)

    opcore.register_plugin(make_plugin("flaky", {"relu": (hands_over, {})}))
    opcore.run("relu", X)
    for _ in range(3):
        numpy.testing.assert_array_equal(opcore.run("relu", X), RELU)
