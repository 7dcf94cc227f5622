"""Building example inputs from --shapes / --dtype / --attr (in process)."""

from __future__ import annotations

import importlib.util

import numpy
import pytest

from opcore.cli.inputs import INT_HIGH, TensorSpec, build_inputs, plan_call, with_array_options
from opcore.errors import ArgumentError
from opcore.opset import BUILTIN_CONTRACTS
from opcore.types import DType

CONTRACTS = {c.name: c for c in BUILTIN_CONTRACTS}


def test_shapes_go_to_tensor_arguments_in_schema_order() -> None:
    call = plan_call(CONTRACTS["linear"], "2x8,4x8", "float32", [])
    assert call.tensors == (("x", TensorSpec((2, 8), DType.FLOAT32)), ("w", TensorSpec((4, 8), DType.FLOAT32)))
    kwargs = build_inputs(call)
    assert set(kwargs) == {"x", "w"}
    assert kwargs["x"].shape == (2, 8) and kwargs["x"].dtype == numpy.float32


def test_skips_lists_scalars_and_per_tensor_dtypes() -> None:
    call = plan_call(CONTRACTS["layer_norm"], "2x8,-,8:float64", "float32", ["normalized_shape=[8]"])
    assert call.tensors == (
        ("x", TensorSpec((2, 8), DType.FLOAT32)),
        ("weight", None),
        ("bias", TensorSpec((8,), DType.FLOAT64)),
    )
    assert call.attrs == (("normalized_shape", (8,)),)
    kwargs = build_inputs(call)
    assert kwargs["weight"] is None and kwargs["bias"].dtype == numpy.float64
    cat = build_inputs(plan_call(CONTRACTS["cat"], "2x3+2x5", "int32", ["dim=1"]))
    assert [t.shape for t in cat["tensors"]] == [(2, 3), (2, 5)] and cat["dim"] == 1
    assert all(t.dtype == numpy.int32 and 0 <= t.min() and t.max() < INT_HIGH for t in cat["tensors"])
    assert build_inputs(plan_call(CONTRACTS["relu"], "scalar", "float32", []))["x"].shape == ()
    assert build_inputs(plan_call(CONTRACTS["relu"], "0x4", "bool", []))["x"].dtype == numpy.bool_


def test_an_attribute_for_a_tensor_argument_is_a_scalar() -> None:
    call = plan_call(CONTRACTS["add"], "4x4", "float32", ["other=2.0"])
    assert [name for name, _ in call.tensors] == ["x"]
    assert build_inputs(call)["other"] == 2.0


def test_inputs_are_reproducible() -> None:
    call = plan_call(CONTRACTS["relu"], "16", "float32", [])
    numpy.testing.assert_array_equal(build_inputs(call)["x"], build_inputs(call)["x"])


@pytest.mark.parametrize(
    ("op", "shapes", "attrs", "message"),
    [
        ("relu", "2,3", [], "expected at most 1 shape(s), for x, found 2"),
        ("linear", "2x8", [], "found none for w"),
        ("linear", "-,8x8", [], "argument 'x' expected a shape (it is required)"),
        ("relu", "2+3", [], "argument 'x' expected one shape (it is not a list)"),
        ("relu", "2x-3", [], "expected sizes joined by 'x'"),
        ("relu", "", [], "found none for x"),
        ("relu", "2", ["dim=1", "dim=2"], "expected each name once, found dim given twice"),
        ("relu", "2:fp8", [], "argument '--shapes' expected one of bool"),
    ],
)
def test_errors_name_the_option(op: str, shapes: str, attrs: list[str], message: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        plan_call(CONTRACTS[op], shapes, "float32", attrs)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"{op}(): ")


def test_numpy_unless_torch_is_needed() -> None:
    plain = with_array_options(plan_call(CONTRACTS["relu"], "2", "float32", []), use_torch=False, device="cpu")
    assert not plain.use_torch and plain.array_kind == "numpy"
    bf16 = with_array_options(plan_call(CONTRACTS["relu"], "2", "bfloat16", []), use_torch=False, device="cpu")
    assert bf16.use_torch


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch tensors need torch")
def test_torch_tensors() -> None:
    import torch

    call = with_array_options(plan_call(CONTRACTS["linear"], "2x8,4x8", "bfloat16", []), use_torch=False, device="cpu")
    kwargs = build_inputs(call)
    assert isinstance(kwargs["x"], torch.Tensor) and kwargs["x"].dtype == torch.bfloat16
    forced = with_array_options(plan_call(CONTRACTS["relu"], "3", "float32", []), use_torch=True, device="cpu")
    assert build_inputs(forced)["x"].dtype == torch.float32


def test_creation_ops_take_size_dtype_and_device_as_attributes() -> None:
    zeros = plan_call(CONTRACTS["zeros"], "2x3", "int8", [])
    assert zeros.tensors == () and dict(zeros.attrs) == {"size": (2, 3), "dtype": "int8"}
    assert build_inputs(zeros) == {"size": (2, 3), "dtype": "int8"}
    # no --dtype: the op's own default (full infers it from fill_value, as torch)
    full = plan_call(CONTRACTS["full"], "scalar", None, ["fill_value=7"])
    assert dict(full.attrs) == {"fill_value": 7, "size": ()}
    arange = plan_call(CONTRACTS["arange"], "", None, ["start=0", "end=10", "step=3"])
    assert dict(arange.attrs) == {"start": 0, "end": 10, "step": 3}
    on_cuda = with_array_options(zeros, use_torch=False, device="cuda")
    assert dict(on_cuda.attrs)["device"] == "cuda"


@pytest.mark.parametrize(
    ("op", "shapes", "attrs", "message"),
    [
        ("arange", "4", ["start=4"], "expected no shapes (arange takes no tensor"),
        ("zeros", "2,3", [], "expected one shape, its size"),
        ("zeros", "2", ["size=[3]"], "or size from --attr, not both"),
    ],
)
def test_creation_op_errors_name_the_option(op: str, shapes: str, attrs: list[str], message: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        plan_call(CONTRACTS[op], shapes, None, attrs)
    assert message in str(caught.value) and "argument '--shapes'" in str(caught.value)
