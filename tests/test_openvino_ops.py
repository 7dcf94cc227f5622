"""Every built-in op on the OpenVINO backend against the reference, over the sample calls of
runtime_cases: what the backend accepts matches within the dtype's tolerance; what it declines is
exactly what the CPU plugin would compute differently from torch, each with its reason.
"""

from __future__ import annotations

from typing import Any

import numpy
import pytest

pytest.importorskip("openvino", reason="the OpenVINO backend needs openvino")

from runtime_cases import (
    CASES,
    Case,
    arr,
    assert_batch_sizes_share_one_model,
    assert_embedding_indices_out_of_range_are_refused,
    assert_matches_reference_or_declines,
    skip_unless_loaded,
)

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


_loaded = skip_unless_loaded(BACKEND)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_matches_reference_or_declines_with_reason(case):
    assert_matches_reference_or_declines(case, BACKEND, expected_decline(case))


def test_batch_sizes_reuse_one_compiled_model_per_rank():
    from opcore_openvino.cache import MODELS

    assert_batch_sizes_share_one_model(BACKEND, MODELS)


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


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_with_nan_are_ieees(op: str) -> None:
    """OpenVINO's Greater and GreaterEqual say true for a NaN operand on an AVX-512 CPU (the kit caught it
    there): every comparison against numpy's, NaN on either side, at a vector-sized length too."""
    values = numpy.array([numpy.nan, -numpy.inf, -1.0, -0.0, 0.0, 1.0, numpy.inf], numpy.float32)
    x, other = (a.ravel() for a in numpy.meshgrid(values, values))
    for n in (x.size, 4 * x.size):
        got = opcore.run(op, numpy.resize(x, n), numpy.resize(other, n), backend=BACKEND)
        want = {
            "eq": numpy.equal,
            "ne": numpy.not_equal,
            "lt": numpy.less,
            "le": numpy.less_equal,
            "gt": numpy.greater,
            "ge": numpy.greater_equal,
        }[op]
        numpy.testing.assert_array_equal(got, want(numpy.resize(x, n), numpy.resize(other, n)), err_msg=op)


def test_embedding_indices_out_of_range_are_refused_like_torch():
    assert_embedding_indices_out_of_range_are_refused(BACKEND)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "where", "masked_fill", "clamp"])
def test_python_infinities_and_overflowing_floats_keep_their_value(op: str, dtype: str) -> None:
    """A fed float64 number converted inside the graph saturated: add(x, -inf) gave -3.4e38."""
    import torch

    x = arr((3, 4), dtype)
    mask = numpy.arange(12).reshape(3, 4) % 2 == 0
    for value in (float("inf"), float("-inf"), 1e300):
        args = {
            "where": (mask, x, value),
            "masked_fill": (x, mask, value),
            "clamp": (x, value, None) if value < 0 else (x, None, value),
        }.get(op, (x, value))
        torch_args: list[Any] = [torch.from_numpy(a) if isinstance(a, numpy.ndarray) else a for a in args]
        call = torch.Tensor.masked_fill if op == "masked_fill" else getattr(torch, op)
        try:
            want = call(*torch_args)
        except RuntimeError:  # e.g. 1e300 into float32: "value cannot be converted ... without overflow"
            with pytest.raises(opcore.OpcoreError):
                opcore.run(op, *args, backend=BACKEND)
            continue
        got = opcore.run(op, *args, backend=BACKEND)
        numpy.testing.assert_array_equal(got, want.numpy(), err_msg=f"{op}(..., {value})")


@pytest.mark.parametrize(("op", "args"), [("clone", ()), ("transpose", (0, 0)), ("permute", ((0, 1),))])
def test_an_input_returned_unchanged_is_this_calls_input(op, args):
    # the CPU plugin folds a same-type Convert: a Parameter straight to a Result gave back a
    # previous call's input (Graph.result copies it through Select instead)
    for _ in range(3):
        x = numpy.random.rand(2, 3).astype("float32")
        x[0, 0] = -0.0
        got = opcore.run(op, x, *args, backend="openvino")
        numpy.testing.assert_array_equal(got, x)
        assert numpy.signbit(got[0, 0])
