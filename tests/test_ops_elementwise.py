"""Elementwise contracts and their reference kernels, against PyTorch."""

from __future__ import annotations

import math

import numpy
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from opcase import call, check_error_case, compare, error_id, kit_errors, rand, reseed, z  # noqa: E402

from opcore.errors import ArgumentError, DTypeError  # noqa: E402


@pytest.fixture(autouse=True)
def _same_data_every_run():
    reseed()


BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}
SHAPES = [
    ((2, 3), (2, 3)),
    ((2, 3), (3,)),
    ((4, 1, 3), (2, 1)),
    ((), ()),
    ((5,), ()),
    ((), (2, 2)),
    ((2, 0, 3), (3,)),
    ((0,), (1,)),
]
DTYPE_PAIRS = [
    ("float32", "float32"),
    ("float16", "float16"),
    ("float64", "float64"),
    ("bfloat16", "bfloat16"),
    ("int64", "int64"),
    ("int32", "int32"),
    ("uint8", "int8"),
    ("int32", "float16"),
    ("bfloat16", "float16"),
    ("float32", "float64"),
    ("bool", "int16"),
]


def _divisor(shape, dtype):
    """Non-zero values, so that integer rounding divisions are defined."""
    tensor = rand(shape, dtype, low=1, high=4)
    if dtype.startswith("int") or dtype.startswith("float") or dtype == "bfloat16":
        tensor = tensor * torch.where(rand(shape, "bool"), 1, -1).to(tensor.dtype)
    return tensor


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize(("x_shape", "y_shape"), SHAPES)
def test_binary_shapes(op, x_shape, y_shape):
    compare(op, BINARY[op], rand(x_shape), rand(y_shape))


@pytest.mark.parametrize(
    ("op", "x_dtype", "y_dtype"),
    [(op, x, y) for op in BINARY for x, y in DTYPE_PAIRS if not (op == "sub" and "bool" in (x, y))],
)
def test_binary_dtypes(op, x_dtype, y_dtype):
    y = _divisor((2, 3), y_dtype) if op == "div" else rand((2, 3), y_dtype)
    compare(op, BINARY[op], rand((4, 2, 3), x_dtype), y)


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_binary_non_contiguous(op, layout):
    compare(op, BINARY[op], rand((3, 4), layout=layout), rand((3, 4), layout=layout))
    compare(op, BINARY[op], rand((3, 4), "int64", layout=layout), rand((4,), "float64"))


@pytest.mark.parametrize(
    ("op", "dtype", "scalar"),
    [
        (op, dtype, scalar)
        for op in BINARY
        for dtype in ("float16", "float32", "int32", "uint8", "bool")
        for scalar in (2, -3, 2.5, True)
        if not (op == "sub" and (dtype == "bool" or scalar is True))  # sub rejects bool
    ],
)
def test_binary_python_scalars(op, dtype, scalar):
    compare(op, BINARY[op], rand((2, 3), dtype), scalar)


@pytest.mark.parametrize("x_dtype", ["float16", "int32", "bfloat16"])
@pytest.mark.parametrize("zero_dim_dtype", ["float64", "int64", "bool"])
def test_zero_dim_tensors_promote_like_torch(x_dtype, zero_dim_dtype):
    for op in ("add", "mul", "div"):
        compare(op, BINARY[op], rand((3,), x_dtype), rand((), zero_dim_dtype, low=1, high=2))
    compare("add", torch.add, rand((), x_dtype), rand((), zero_dim_dtype))


@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize(
    ("dtype", "alpha"),
    [("float32", 2), ("float32", -0.5), ("float16", 3.0), ("int64", 3), ("uint8", -1), ("uint8", -255), ("int8", -127)],
)
def test_alpha(op, dtype, alpha):
    compare(op, BINARY[op], rand((2, 3), dtype, high=9), rand((2, 3), dtype, high=9), alpha=alpha)


@pytest.mark.parametrize("alpha", [0, 2, True, False])
def test_add_bool_is_logical_or(alpha):
    compare("add", torch.add, rand((8,), "bool"), rand((8,), "bool"), alpha=alpha)
    compare("mul", torch.mul, rand((8,), "bool"), rand((8,), "bool"))


def test_integer_overflow_wraps_like_torch():
    x = torch.tensor([250, 3], dtype=torch.uint8)
    compare("add", torch.add, x, 300)
    compare("add", torch.add, x, -1)
    compare("mul", torch.mul, x, -1)
    compare("add", torch.add, torch.tensor([2**31 - 1], dtype=torch.int32), 1, exact=True)
    compare("add", torch.add, torch.tensor([1, 2], dtype=torch.int32), 2**40, exact=True)
    compare("mul", torch.mul, torch.tensor([2**62], dtype=torch.int64), 4, exact=True)


def test_large_int64_values_stay_exact():
    big = torch.tensor([2**62 + 1, -(2**62) - 3], dtype=torch.int64)
    compare("add", torch.add, big, big, alpha=1, exact=True)
    compare("sub", torch.sub, big, 7, alpha=3, exact=True)
    compare("div", torch.div, big, 3, rounding_mode="floor", exact=True)


@pytest.mark.parametrize("rounding_mode", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int8", "uint8"])
def test_div_rounding_modes(rounding_mode, dtype):
    x = rand((3, 4), dtype, low=-20 if dtype != "uint8" else 0, high=20)
    y = _divisor((4,), dtype) if dtype != "uint8" else rand((4,), dtype, low=1, high=7)
    if dtype == "bfloat16":
        # bfloat16 reaches numpy as float32, so the quotient is rounded to float32 before 'trunc'
        # where torch rounds it to bfloat16; whole numbers over powers of two avoid the difference
        x, y = x.round(), torch.tensor([1.0, -2.0, 4.0, -0.5], dtype=torch.bfloat16)
    compare("div", torch.div, x, y, rounding_mode=rounding_mode)
    compare("div", torch.div, x, 3, rounding_mode=rounding_mode)
    compare("div", torch.div, x, -2.5 if dtype != "bfloat16" else -0.25, rounding_mode=rounding_mode)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_div_trunc_rounds_the_quotient_to_the_result_dtype(dtype):
    values = torch.linspace(-20, 20, 4001, dtype=torch.float64)
    x, y = values.to(getattr(torch, dtype)), (values.flip(0) / 7 + 0.01).to(getattr(torch, dtype))
    compare("div", torch.div, x, y, rounding_mode="trunc", exact=True)
    compare("div", torch.div, x, y, rounding_mode="floor", exact=True)


def test_div_exact_integer_rounding():
    x = torch.tensor([-7, 7, -6, 6, 0, -128, 127], dtype=torch.int8)
    for rounding_mode in ("trunc", "floor"):
        for divisor in (2, -2, 3, -1):
            compare("div", torch.div, x, divisor, rounding_mode=rounding_mode, exact=True)
    compare("div", torch.div, torch.tensor([True, False]), torch.tensor([3, 1]), rounding_mode="floor")


def test_div_special_values():
    x = torch.tensor([-7.0, 7.0, 0.0, math.inf, math.nan])
    for rounding_mode in (None, "trunc", "floor"):
        compare("div", torch.div, x, 0.0, rounding_mode=rounding_mode)
        compare("div", torch.div, x, torch.tensor([2.0, -2.0, 0.0, 1.0, 1.0]), rounding_mode=rounding_mode)
    compare("div", torch.div, torch.tensor([1, 0, -1]), 0)  # integer true division by zero: inf and nan


UNARY = {
    "relu": torch.relu,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "exp": torch.exp,
    "gelu": F.gelu,
}
FLOAT_ONLY = {"silu", "gelu"}


@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("shape", [(), (0,), (7,), (2, 3, 4), (3, 0, 2)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "bfloat16"])
def test_unary_floating(op, shape, dtype):
    compare(op, UNARY[op], rand(shape, dtype))


@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_unary_non_contiguous(op, layout):
    compare(op, UNARY[op], rand((4, 5), layout=layout))


@pytest.mark.parametrize(
    ("op", "dtype"),
    [
        (op, dtype)
        for op in sorted(set(UNARY) - FLOAT_ONLY)
        for dtype in ("int64", "int32", "int8", "uint8", "bool")
        if (op, dtype) != ("relu", "bool")  # relu rejects bool
    ],
)
def test_unary_integral(op, dtype):
    compare(op, UNARY[op], rand((3, 4), dtype, low=-5, high=5 if dtype != "uint8" else 9))


@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_unary_special_values(op, dtype):
    values = [-math.inf, -1000.0, -30.0, -1.0, -0.0, 0.0, 1e-8, 1.0, 30.0, 1000.0, math.inf, math.nan]
    if op == "gelu":
        # torch's gelu(inf) depends on its version and vector path (nan from float32's AVX2 kernel,
        # from float16's on torch 2.11); the right answer, inf, is tested on its own below
        values.remove(math.inf)
    compare(op, UNARY[op], torch.tensor(values, dtype=getattr(torch, dtype)))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_gelu_of_infinity_is_infinity(dtype):
    result = call("gelu", numpy.array([math.inf, -math.inf], dtype=dtype))
    assert result[0] == math.inf and math.isnan(result[1])  # -inf * 0, as torch


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_gelu_approximate(approximate, dtype):
    compare("gelu", F.gelu, rand((5, 6), dtype, low=-6, high=6), approximate=approximate)


def test_relu_keeps_integer_dtypes_and_returns_arrays_for_scalars():
    result = call("relu", numpy.array(-3, dtype="int16"))
    assert isinstance(result, numpy.ndarray) and result.dtype == numpy.int16 and result.shape == ()
    assert call("exp", numpy.array(0, dtype="int64")).dtype == numpy.float32


def test_float16_overflow_gives_inf_without_warnings():
    x = torch.tensor([60000.0, -60000.0], dtype=torch.float16)
    compare("add", torch.add, x, x)
    compare("mul", torch.mul, x, 1e10)
    compare("exp", torch.exp, x)


# the error inputs are the conformance kit's (opcore.testing); torch must reject them too where the kit says so
TORCH_FNS = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "relu": torch.relu,
    "gelu": F.gelu,
    "silu": F.silu,
}


@pytest.mark.parametrize(("op", "case"), kit_errors(*TORCH_FNS), ids=error_id)
def test_errors(op, case):
    check_error_case(op, case, TORCH_FNS[op])


def test_error_messages_say_what_and_how():
    with pytest.raises(DTypeError) as caught:
        call("sub", z(2, dtype="bool"), z(2, dtype="bool"))
    message = str(caught.value)
    assert message.startswith("sub(): argument 'other' expected a non-bool operand")
    assert "logical_xor" in message
    with pytest.raises(ArgumentError, match=r"alpha' expected an int for integral inputs \(the result is int32\)"):
        call("add", z(2, dtype="int32"), 1, alpha=0.5)
