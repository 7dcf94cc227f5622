"""Normalization contracts (softmax, log_softmax, layer_norm, rms_norm), against PyTorch."""

from __future__ import annotations

import math

import numpy
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from opcase import call, check_error_case, compare, error_id, kit_errors, rand, reseed  # noqa: E402


@pytest.fixture(autouse=True)
def _same_data_every_run():
    reseed()


FLOATS = ["float32", "float16", "float64", "bfloat16"]
SOFTMAX = {"softmax": torch.softmax, "log_softmax": torch.log_softmax}


@pytest.mark.parametrize("op", list(SOFTMAX))
@pytest.mark.parametrize(
    ("shape", "dim"),
    [((), 0), ((), -1), ((0,), 0), ((5,), 0), ((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), -1), ((2, 3, 4), -3),
     ((2, 0, 3), 1), ((2, 0, 3), 2), ((1, 1), 1)],
)  # fmt: skip
def test_softmax_shapes_and_dims(op, shape, dim):
    compare(op, SOFTMAX[op], rand(shape), dim)


@pytest.mark.parametrize("op", list(SOFTMAX))
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["", "transposed", "strided"])
def test_softmax_dtypes_and_layouts(op, dtype, layout):
    compare(op, SOFTMAX[op], rand((3, 7), dtype, layout=layout, low=-10, high=10), -1)
    compare(op, SOFTMAX[op], rand((3, 7), dtype, layout=layout), 0)


@pytest.mark.parametrize("op", list(SOFTMAX))
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_softmax_special_values(op, dtype):
    rows = [
        [1000.0, 0.0, -1000.0, 5.0],
        [-math.inf, 0.0, 1.0, -math.inf],
        [-math.inf, -math.inf, -math.inf, -math.inf],
        [1.0, math.nan, 2.0, 3.0],
        [30.0, 30.0, 30.0, 30.0],
    ]
    compare(op, SOFTMAX[op], torch.tensor(rows, dtype=getattr(torch, dtype)), -1)


def test_softmax_sums_to_one_in_float64():
    x = rand((4, 9), "float64", low=-50, high=50).numpy()
    numpy.testing.assert_allclose(call("softmax", x, 1).sum(axis=1), numpy.ones(4), rtol=1e-14)
    numpy.testing.assert_allclose(numpy.exp(call("log_softmax", x, 1)).sum(axis=1), numpy.ones(4), rtol=1e-14)


# --- layer_norm and rms_norm --------------------------------------------------------------------

NORM_SHAPES = [((2, 3, 8), (8,)), ((2, 3, 8), (3, 8)), ((8,), (8,)), ((0, 8), (8,)), ((2, 0), (0,)), ((4, 1), (1,))]


@pytest.mark.parametrize(("shape", "normalized_shape"), NORM_SHAPES)
@pytest.mark.parametrize("parameters", ["none", "weight", "both"])
def test_layer_norm_shapes(shape, normalized_shape, parameters):
    weight = rand(normalized_shape) if parameters != "none" else None
    bias = rand(normalized_shape) if parameters == "both" else None
    compare("layer_norm", F.layer_norm, rand(shape), normalized_shape, weight, bias)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["", "transposed", "strided"])
@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_layer_norm_dtypes(dtype, layout, eps):
    x = rand((3, 4, 6), dtype, layout=layout, low=-5, high=7)
    compare("layer_norm", F.layer_norm, x, (6,), rand((6,), dtype), rand((6,), dtype, layout=layout), eps)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layer_norm_float32_parameters_for_reduced_precision(dtype):
    compare("layer_norm", F.layer_norm, rand((3, 6), dtype), (6,), rand((6,)), rand((6,)))
    compare("layer_norm", F.layer_norm, rand((3, 6), dtype), (6,), None, rand((6,)))


def test_layer_norm_constant_rows():
    x = torch.full((2, 5), 3.0)
    compare("layer_norm", F.layer_norm, x, (5,))  # zero variance: (x - mean) / sqrt(eps) = 0


def test_normalized_shape_may_be_an_int():
    x = rand((2, 6)).numpy()
    numpy.testing.assert_array_equal(call("layer_norm", x, 6), call("layer_norm", x, [6]))
    numpy.testing.assert_array_equal(call("rms_norm", x, 6), call("rms_norm", x, (6,)))


@pytest.mark.parametrize(("shape", "normalized_shape"), NORM_SHAPES)
@pytest.mark.parametrize("with_weight", [False, True])
def test_rms_norm_shapes(shape, normalized_shape, with_weight):
    weight = rand(normalized_shape) if with_weight else None
    compare("rms_norm", F.rms_norm, rand(shape), normalized_shape, weight)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layout", ["", "transposed", "strided"])
@pytest.mark.parametrize("eps", [None, 1e-6, 0.5])
def test_rms_norm_dtypes(dtype, layout, eps):
    compare("rms_norm", F.rms_norm, rand((3, 4, 6), dtype, layout=layout), (6,), rand((6,), dtype), eps)


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm_default_eps_is_that_of_the_compute_dtype(dtype):
    # values so small that the default eps dominates: float16 computes in float32, so uses its eps
    x = torch.full((2, 4), 1e-3, dtype=getattr(torch, dtype))
    compare("rms_norm", F.rms_norm, x, (4,))
    compare("rms_norm", F.rms_norm, torch.zeros(2, 4, dtype=getattr(torch, dtype)), (4,))


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight:UserWarning")  # torch's, not ours
@pytest.mark.parametrize("weight_dtype", ["float64", "float16"])
def test_rms_norm_weight_of_another_floating_dtype(weight_dtype):
    compare("rms_norm", F.rms_norm, rand((3, 6)), (6,), rand((6,), weight_dtype))


# the error inputs are the conformance kit's (opcore.testing); torch must reject them too where the kit says so
TORCH_FNS = {
    "softmax": torch.softmax,
    "log_softmax": torch.log_softmax,
    "layer_norm": F.layer_norm,
    "rms_norm": F.rms_norm,
}


@pytest.mark.parametrize(("op", "case"), kit_errors(*TORCH_FNS), ids=error_id)
def test_errors(op, case):
    check_error_case(op, case, TORCH_FNS[op])
