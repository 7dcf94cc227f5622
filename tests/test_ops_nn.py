"""embedding, conv2d and scaled_dot_product_attention, against PyTorch."""

from __future__ import annotations

import math

import numpy
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from opcase import call, check_error_case, compare, error_id, kit_errors, rand, reseed, z  # noqa: E402

from opcore.errors import ArgumentError  # noqa: E402
from opcore.testing.ops.nn import CONV1D_CASES, CONV_CASES  # noqa: E402


@pytest.fixture(autouse=True)
def _same_data_every_run():
    reseed()


FLOATS = ["float32", "float16", "float64", "bfloat16"]
sdpa = F.scaled_dot_product_attention

# --- embedding ---------------------------------------------------------------------------------


@pytest.mark.parametrize("index_shape", [(), (5,), (2, 3), (0,), (2, 0)])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_embedding_shapes(index_shape, index_dtype):
    compare("embedding", F.embedding, rand(index_shape, index_dtype, low=0, high=6), rand((7, 4)))


@pytest.mark.parametrize("dtype", [*FLOATS, "int64", "uint8", "bool"])
def test_embedding_weight_dtypes(dtype):
    compare("embedding", F.embedding, rand((3, 2), "int64", low=0, high=4), rand((5, 3), dtype), exact=True)


@pytest.mark.parametrize("padding_idx", [None, 0, -1, 2])
def test_embedding_padding_idx_does_not_change_the_forward(padding_idx):
    compare("embedding", F.embedding, rand((4,), "int64", low=0, high=4), rand((5, 3)), padding_idx)


@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_embedding_non_contiguous(layout):
    compare("embedding", F.embedding, rand((3, 4), "int64", low=0, high=5, layout=layout), rand((6, 5), layout=layout))


def test_embedding_returns_a_copy():
    weight = numpy.arange(6.0).reshape(3, 2)
    rows = call("embedding", numpy.array(1), weight)
    assert not numpy.shares_memory(rows, weight)
    compare("embedding", F.embedding, torch.zeros(0, dtype=torch.int64), torch.zeros(0, 4))


# --- conv2d ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("x_shape", "w_shape", "stride", "padding", "dilation", "groups"), CONV_CASES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv2d_attributes(x_shape, w_shape, stride, padding, dilation, groups, with_bias):
    bias = rand((w_shape[0],)) if with_bias else None
    compare("conv2d", F.conv2d, rand(x_shape), rand(w_shape), bias, stride, padding, dilation, groups)


@pytest.mark.parametrize("dtype", [*FLOATS, "int64", "int32", "int8", "uint8"])
def test_conv2d_dtypes(dtype):
    options = {"low": 0, "high": 2} if dtype in ("int8", "uint8") else {}
    x, w, b = rand((2, 4, 6, 6), dtype, **options), rand((4, 2, 3, 3), dtype, **options), rand((4,), dtype, **options)
    compare("conv2d", F.conv2d, x, w, b, 1, 1, 1, 2)


@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_conv2d_non_contiguous(layout):
    compare("conv2d", F.conv2d, rand((2, 3, 6, 7), layout=layout), rand((4, 3, 3, 2), layout=layout), None, 1, 1)


# even kernels with "same": torch pads the odd one on the right/bottom (and warns about the copy)
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize(
    ("x_shape", "w_shape", "dilation", "groups"),
    [((2, 4, 9, 8), (6, 2, 2, 4), 1, 2), ((1, 4, 7, 9), (4, 4, 2, 3), (2, 1), 1), ((4, 12, 9), (4, 4, 4, 2), 3, 1)],
)
@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv2d_string_padding(x_shape, w_shape, dilation, groups, padding):
    compare("conv2d", F.conv2d, rand(x_shape), rand(w_shape), rand((w_shape[0],)), 1, padding, dilation, groups)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize(("x_shape", "w_shape", "stride", "padding", "dilation", "groups"), CONV1D_CASES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv1d_attributes(x_shape, w_shape, stride, padding, dilation, groups, with_bias):
    bias = rand((w_shape[0],)) if with_bias else None
    compare("conv1d", F.conv1d, rand(x_shape), rand(w_shape), bias, stride, padding, dilation, groups)


def test_conv2d_channels_last_input():
    x = rand((2, 3, 5, 6)).to(memory_format=torch.channels_last)
    compare("conv2d", F.conv2d, x, rand((4, 3, 3, 3)), rand((4,)), 2, 1)


# --- scaled_dot_product_attention ---------------------------------------------------------------

SDPA_SHAPES = [
    ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)),
    ((3, 4, 8), (3, 5, 8), (3, 5, 6)),
    ((4, 8), (5, 8), (5, 6)),
    ((1, 2, 3, 4, 8), (1, 2, 3, 5, 8), (1, 2, 3, 5, 6)),
    ((1, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)),
    ((2, 3, 4, 8), (3, 5, 8), (1, 3, 5, 6)),
    ((2, 3, 0, 8), (2, 3, 5, 8), (2, 3, 5, 6)),
    ((2, 3, 4, 8), (2, 3, 0, 8), (2, 3, 0, 6)),
    ((0, 3, 4, 8), (0, 3, 5, 8), (0, 3, 5, 6)),
    ((2, 3, 4, 0), (2, 3, 5, 0), (2, 3, 5, 6)),
    ((1, 1, 1, 8), (1, 1, 1, 8), (1, 1, 1, 1)),
]


@pytest.mark.parametrize(("q_shape", "k_shape", "v_shape"), SDPA_SHAPES)
def test_sdpa_shapes(q_shape, k_shape, v_shape):
    compare("scaled_dot_product_attention", sdpa, rand(q_shape), rand(k_shape), rand(v_shape))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_dtypes(dtype, is_causal):
    q, k, v = rand((2, 2, 5, 8), dtype), rand((2, 2, 7, 8), dtype), rand((2, 2, 7, 4), dtype)
    compare("scaled_dot_product_attention", sdpa, q, k, v, is_causal=is_causal)


@pytest.mark.parametrize(("length", "source"), [(4, 4), (3, 6), (6, 3), (1, 5)])
def test_sdpa_causal_is_top_left_aligned(length, source):
    q, k, v = rand((2, length, 8)), rand((2, source, 8)), rand((2, source, 3))
    compare("scaled_dot_product_attention", sdpa, q, k, v, None, 0.0, True)


@pytest.mark.parametrize("mask_shape", [(4, 5), (2, 1, 4, 5), (1, 5), (4, 1), (3, 4, 5), (2, 3, 4, 5)])
@pytest.mark.parametrize("mask_dtype", ["bool", "float32"])
def test_sdpa_masks(mask_shape, mask_dtype):
    q, k, v = rand((2, 3, 4, 8)), rand((2, 3, 5, 8)), rand((2, 3, 5, 6))
    mask = rand(mask_shape, mask_dtype)
    if mask_dtype == "bool":
        mask[..., 0] = True  # keep at least one key per row: fully masked rows have their own test
    compare("scaled_dot_product_attention", sdpa, q, k, v, attn_mask=mask)


@pytest.mark.parametrize("dtype", ["float16", "float64", "bfloat16"])
def test_sdpa_additive_mask_in_the_query_dtype(dtype):
    q, k, v = rand((2, 4, 8), dtype), rand((2, 5, 8), dtype), rand((2, 5, 6), dtype)
    compare("scaled_dot_product_attention", sdpa, q, k, v, rand((4, 5), dtype))


@pytest.mark.parametrize("mask_dtype", ["bool", "float32"])
def test_sdpa_fully_masked_rows_give_zeros(mask_dtype):
    q, k, v = rand((1, 2, 3, 4)), rand((1, 2, 5, 4)), rand((1, 2, 5, 2))
    keep = torch.ones(3, 5, dtype=torch.bool)
    keep[1] = False
    mask = keep if mask_dtype == "bool" else torch.zeros(3, 5).masked_fill(~keep, -math.inf)
    result = compare("scaled_dot_product_attention", sdpa, q, k, v, attn_mask=mask)
    assert not result[:, :, 1].any()


@pytest.mark.parametrize("scale", [None, 0.0, -1.0, 0.3])
def test_sdpa_scale(scale):
    q, k, v = rand((2, 3, 4, 8)), rand((2, 3, 5, 8)), rand((2, 3, 5, 6))
    compare("scaled_dot_product_attention", sdpa, q, k, v, scale=scale)


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "v_shape"),
    [
        ((2, 6, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)),
        ((2, 6, 4, 8), (2, 3, 5, 8), (2, 2, 5, 6)),
        ((1, 6, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)),
        ((6, 4, 8), (3, 5, 8), (3, 5, 6)),
        ((2, 4, 4, 8), (2, 4, 5, 8), (2, 4, 5, 6)),
    ],
)
def test_sdpa_grouped_query_attention(q_shape, k_shape, v_shape):
    q, k, v = rand(q_shape), rand(k_shape), rand(v_shape)
    compare("scaled_dot_product_attention", sdpa, q, k, v, enable_gqa=True)
    compare("scaled_dot_product_attention", sdpa, q, k, v, is_causal=True, enable_gqa=True)


@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_sdpa_non_contiguous(layout):
    q, k, v = rand((2, 3, 4, 8), layout=layout), rand((2, 3, 5, 8), layout=layout), rand((2, 3, 5, 6), layout=layout)
    compare("scaled_dot_product_attention", sdpa, q, k, v, rand((4, 5), layout=layout))


def test_sdpa_large_scores_stay_finite():
    q, k, v = rand((1, 3, 8), low=-100, high=100), rand((1, 4, 8), low=-100, high=100), rand((1, 4, 2))
    compare("scaled_dot_product_attention", sdpa, q, k, v)


# --- errors ------------------------------------------------------------------------------------

# the error inputs are the conformance kit's (opcore.testing); torch must reject them too where the kit says so
TORCH_FNS = {"embedding": F.embedding, "conv1d": F.conv1d, "conv2d": F.conv2d, "scaled_dot_product_attention": sdpa}


@pytest.mark.parametrize(("op", "case"), kit_errors(*TORCH_FNS), ids=error_id)
def test_errors(op, case):
    check_error_case(op, case, TORCH_FNS[op])


def test_dropout_error_says_inference_only():
    q, k, v = z(2, 3, 4, 8), z(2, 3, 5, 8), z(2, 3, 5, 6)
    with pytest.raises(ArgumentError, match="opcore is inference-only"):
        call("scaled_dot_product_attention", q, k, v, None, 0.5)
