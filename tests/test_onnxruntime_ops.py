"""Every built-in op on the ONNX Runtime backend against the reference, over the sample calls of
runtime_cases: what the backend accepts matches within the dtype's tolerance; what it declines is
exactly the documented list, each with its reason.
"""

from __future__ import annotations

import numpy
import pytest

pytest.importorskip("onnxruntime", reason="the ONNX Runtime backend needs onnxruntime")
pytest.importorskip("onnx", reason="the ONNX Runtime backend needs onnx")

from runtime_cases import (
    CASES,
    arr,
    assert_batch_sizes_share_one_model,
    assert_embedding_indices_out_of_range_are_refused,
    assert_matches_reference_or_declines,
    skip_unless_loaded,
)

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


_loaded = skip_unless_loaded(BACKEND)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_matches_reference_or_declines_with_reason(case):
    assert_matches_reference_or_declines(case, BACKEND, EXPECTED_DECLINES.get(case.id))


def test_batch_sizes_reuse_one_session_per_rank():
    from opcore_onnxruntime.cache import SESSIONS

    assert_batch_sizes_share_one_model(BACKEND, SESSIONS)


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
    assert_embedding_indices_out_of_range_are_refused(BACKEND)
