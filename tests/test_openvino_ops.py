"""Every built-in op on the OpenVINO backend against the reference, over the sample calls of
runtime_cases: what the backend accepts matches within the dtype's tolerance; what it declines is
exactly what the CPU plugin would compute differently from torch, each with its reason.
"""

from __future__ import annotations

import numpy
import pytest

pytest.importorskip("openvino", reason="the OpenVINO backend needs openvino")

from runtime_cases import CASES, Case, arr, assert_matches_reference, outcome

import opcore

BACKEND = "openvino"
_PRODUCTS = ("linear", "linear_relu", "matmul", "bmm")


def _dtypes(case: Case) -> list[str]:
    values = case.args[1:] if case.op == "embedding" else case.args  # int64 indices are fine
    found = []
    for value in (*values, *case.kwargs.values()):
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, numpy.ndarray):
                found.append(str(item.dtype))
    return found


def expected_decline(case: Case) -> str | None:
    """The phrase of the reason the backend must give, or None when it must run the case."""
    dtypes = _dtypes(case)
    if "float64" in dtypes:
        return "computes float64 in float32"
    if "int64" in dtypes:
        return "narrows int64 to int32"
    first = dtypes[0]
    if case.op in _PRODUCTS and first not in ("float32", "float16"):
        return "matrix products in float32"
    if case.op == "conv2d" and first not in ("float32", "float16"):
        return "convolutions in float32"
    if case.op == "scaled_dot_product_attention" and (case.args[1].shape[-2] == 0 or case.args[0].shape[-1] == 0):
        return "empty key sequence or embedding"
    mode = case.kwargs.get("rounding_mode")
    if case.op == "div" and mode is not None:
        other = case.args[1]
        integral = first not in ("float32", "float16") and not isinstance(other, float)
        integral = integral and not (isinstance(other, numpy.ndarray) and other.dtype.kind == "f")
        if integral:
            return "divides integers in float32"
        if first == "float16":
            return "rounds the quotient in float32"
        if mode == "floor":
            return "floor division could be off by one"
    return None


@pytest.fixture(autouse=True)
def _loaded():
    if not any(r.name == BACKEND and r.ok for r in opcore.backends()):
        pytest.skip("the openvino plugin is not installed (pip install -e plugins/openvino)")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_matches_reference_or_declines_with_reason(case):
    chosen, reason = outcome(case, BACKEND)
    phrase = expected_decline(case)
    if phrase is not None:
        assert chosen is None, f"{case.id} was expected to be declined ({phrase})"
        assert phrase in reason, reason
        return
    assert chosen == BACKEND, f"declined: {reason}"
    assert_matches_reference(case, BACKEND)


def test_batch_sizes_reuse_one_compiled_model_per_rank():
    from opcore_openvino import cache_stats

    w, b = arr((6, 10)), arr((6,))
    opcore.run("linear", arr((1, 10)), w, b, backend=BACKEND)
    before = cache_stats().misses
    for batch in (2, 7, 64, 0):
        x = arr((batch, 10))
        numpy.testing.assert_allclose(opcore.run("linear", x, w, b, backend=BACKEND), x @ w.T + b, rtol=2e-5, atol=2e-5)
    assert cache_stats().misses == before
    opcore.run("linear", arr((3, 4, 10)), w, b, backend=BACKEND)  # another rank: another model
    assert cache_stats().misses == before + 1
    for value in (0.5, 2.0, -3.0):  # Python numbers are fed, not baked in
        opcore.run("add", arr((3, 4)), value, backend=BACKEND)
    assert cache_stats().misses == before + 2


def test_python_ints_beyond_int32_are_declined():
    x = arr((4,), "int32")
    assert numpy.array_equal(opcore.run("add", x, 7, backend=BACKEND), x + 7)
    explanation = opcore.explain("add", x, 2**40, backend=BACKEND)
    assert explanation.chosen is None and "does not fit in int32" in str(explanation)


def test_float32_keeps_float32_precision_at_a_large_shape():
    """The CPU plugin's default bf16 hint would give errors around 1e-2 here."""
    rng = numpy.random.default_rng(0)
    x = rng.standard_normal((8, 1024), dtype=numpy.float32)
    w = rng.standard_normal((256, 1024), dtype=numpy.float32)
    expected = x.astype(numpy.float64) @ w.T.astype(numpy.float64)
    numpy.testing.assert_allclose(opcore.run("linear", x, w, backend=BACKEND), expected, rtol=1e-4, atol=1e-3)


def test_embedding_indices_out_of_range_are_refused_like_torch():
    weight = arr((5, 3))
    for bad in (numpy.array([0, 5]), numpy.array([-1, 2])):
        with pytest.raises(opcore.ArgumentError, match=r"indices in \[0, 4\]"):
            opcore.run("embedding", bad, weight, backend=BACKEND)
