"""Every built-in op on the ONNX Runtime backend against the reference, over the sample calls of
runtime_cases: what the backend accepts matches within the dtype's tolerance; what it declines is
exactly the documented list, each with its reason.
"""

from __future__ import annotations

import numpy
import pytest

pytest.importorskip("onnxruntime", reason="the ONNX Runtime backend needs onnxruntime")
pytest.importorskip("onnx", reason="the ONNX Runtime backend needs onnx")

from runtime_cases import CASES, arr, assert_matches_reference, outcome

import opcore

BACKEND = "onnxruntime"

# case id -> a phrase of the reason explain shows (docs/backends/onnxruntime.md lists these)
EXPECTED_DECLINES = {
    "gelu-none-float64": "no float64 Gelu or Erf kernel",
    "gelu-special-float64": "no float64 Gelu or Erf kernel",
    "linear_gelu-none-float64": "no float64 Gelu or Erf kernel",
    "conv2d-float64": "float32 and float16 kernels only",
    "conv2d-int32": "float32 and float16 kernels only",
    "scaled_dot_product_attention-empty-embedding": "empty embedding dimension",
}


@pytest.fixture(autouse=True)
def _loaded():
    if not any(r.name == BACKEND and r.ok for r in opcore.backends()):
        pytest.skip("the onnxruntime plugin is not installed (pip install -e plugins/onnxruntime)")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_matches_reference_or_declines_with_reason(case):
    chosen, reason = outcome(case, BACKEND)
    if case.id in EXPECTED_DECLINES:
        assert chosen is None, f"{case.id} was expected to be declined"
        assert EXPECTED_DECLINES[case.id] in reason
        return
    assert chosen == BACKEND, f"declined: {reason}"
    assert_matches_reference(case, BACKEND)


def test_batch_sizes_reuse_one_session_per_rank():
    from opcore_onnxruntime import cache_stats

    w, b = arr((6, 10)), arr((6,))
    opcore.run("linear", arr((1, 10)), w, b, backend=BACKEND)
    before = cache_stats().misses
    for batch in (2, 7, 64, 0):
        x = arr((batch, 10))
        numpy.testing.assert_allclose(opcore.run("linear", x, w, b, backend=BACKEND), x @ w.T + b, rtol=2e-5, atol=2e-5)
    assert cache_stats().misses == before
    opcore.run("linear", arr((3, 4, 10)), w, b, backend=BACKEND)  # another rank: another session
    assert cache_stats().misses == before + 1
    for value in (0.5, 2.0, -3.0):  # Python numbers are fed, not baked in
        opcore.run("add", arr((3, 4)), value, backend=BACKEND)
    assert cache_stats().misses == before + 2


def test_scalar_operands_of_any_value_share_a_session_and_stay_exact():
    x = arr((4,), "int64")
    for value in (3, -(2**40), 2**62):
        assert numpy.array_equal(opcore.run("add", x, value, backend=BACKEND), x + value)
    big = arr((3,), "float16")
    with numpy.errstate(over="ignore"):
        expected = (big.astype(numpy.float64) + 1e10).astype(numpy.float16)
    assert numpy.array_equal(opcore.run("add", big, 1e10, backend=BACKEND), expected)  # inf, no warning


def test_integer_division_by_zero_is_an_error_not_a_crash():
    with pytest.raises(opcore.ArgumentError, match="no zero divisor"):
        opcore.run(
            "div", arr((3,), "int32"), numpy.array([1, 0, 2], numpy.int32), rounding_mode="floor", backend=BACKEND
        )
    with pytest.raises(opcore.ArgumentError, match="no zero divisor"):
        opcore.run("div", arr((3,), "int64"), 0, rounding_mode="trunc", backend=BACKEND)
    # INT64_MIN // -1 overflows in native code: the backend hands the call over
    smallest = numpy.array([numpy.iinfo(numpy.int64).min, 4], numpy.int64)
    with pytest.raises(opcore.NoKernelError, match="INT64_MIN"):
        opcore.run("div", smallest, -1, rounding_mode="trunc", backend=BACKEND)


def test_embedding_indices_out_of_range_are_refused_like_torch():
    weight = arr((5, 3))
    for bad in (numpy.array([0, 5]), numpy.array([-1, 2])):
        with pytest.raises(opcore.ArgumentError, match=r"indices in \[0, 4\]"):
            opcore.run("embedding", bad, weight, backend=BACKEND)
