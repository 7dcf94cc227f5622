"""embedding, conv2d and scaled_dot_product_attention, against PyTorch."""

from __future__ import annotations

import math

import numpy
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from opcase import ErrorCase, call, check_error_case, compare, rand, reseed, z  # noqa: E402

from opcore.errors import ArgumentError, DTypeError, ShapeError  # noqa: E402


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

CONV_CASES = [
    # x shape, weight shape, stride, padding, dilation, groups
    ((2, 4, 9, 8), (6, 4, 3, 3), 1, 0, 1, 1),
    ((2, 4, 9, 8), (6, 2, 3, 2), 2, 1, 1, 2),
    ((2, 4, 9, 8), (6, 4, 3, 3), (2, 1), (2, 0), (1, 2), 1),
    ((1, 4, 9, 8), (8, 1, 3, 3), 1, 1, 2, 4),
    ((1, 3, 5, 5), (2, 3, 1, 1), 1, 0, 1, 1),
    ((1, 3, 3, 3), (2, 3, 5, 5), 1, 1, 1, 1),
    ((1, 2, 7, 7), (4, 2, 3, 3), 3, 0, 3, 1),
    ((2, 6, 4, 6), (6, 2, 2, 3), (1, 3), (1, 2), 1, 3),
    ((0, 4, 5, 5), (6, 4, 3, 3), 1, 0, 1, 1),
    ((4, 5, 5), (6, 4, 3, 3), 1, 1, 1, 1),
    ((4, 6, 5), (6, 2, 3, 3), 2, 0, 1, 2),
]


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

f64, i64 = "float64", "int64"
idx = numpy.zeros(2, dtype=i64)
q4, k4, v4 = z(2, 3, 4, 8), z(2, 3, 5, 8), z(2, 3, 5, 6)
S = "scaled_dot_product_attention"
ERRORS = [
    ErrorCase("embedding-float-indices", "embedding", (z(2), z(3, 4)), DTypeError, "input", {}, F.embedding),
    ErrorCase("embedding-int16-indices", "embedding", (z(2, dtype="int16"), z(3, 4)), DTypeError, "input", {},
              F.embedding),
    ErrorCase("embedding-weight-1d", "embedding", (idx, z(3)), ShapeError, "weight", {}, F.embedding),
    ErrorCase("embedding-weight-3d", "embedding", (idx, z(3, 4, 5)), ShapeError, "weight", {}, F.embedding),
    ErrorCase("embedding-padding-idx", "embedding", (idx, z(3, 4), 3), ArgumentError, "padding_idx", {}, F.embedding),
    ErrorCase("embedding-padding-idx-neg", "embedding", (idx, z(3, 4), -4), ArgumentError, "padding_idx", {},
              F.embedding),
    # data-dependent: raised by the kernel
    ErrorCase("embedding-index-high", "embedding", (numpy.array([0, 3]), z(3, 4)), ArgumentError, "input", {},
              F.embedding),
    ErrorCase("embedding-index-negative", "embedding", (numpy.array([[-1]], dtype="int32"), z(3, 4)), ArgumentError,
              "input", {}, F.embedding),
    ErrorCase("conv2d-x-2d", "conv2d", (z(5, 5), z(6, 4, 3, 3)), ShapeError, "x", {}, F.conv2d),
    ErrorCase("conv2d-x-5d", "conv2d", (z(1, 1, 4, 5, 5), z(6, 4, 3, 3)), ShapeError, "x", {}, F.conv2d),
    ErrorCase("conv2d-weight-3d", "conv2d", (z(1, 4, 5, 5), z(6, 4, 3)), ShapeError, "weight", {}, F.conv2d),
    ErrorCase("conv2d-bool", "conv2d", (z(1, 4, 5, 5, dtype="bool"), z(6, 4, 3, 3, dtype="bool")), DTypeError, "x",
              {}, F.conv2d),
    ErrorCase("conv2d-weight-dtype", "conv2d", (z(1, 4, 5, 5), z(6, 4, 3, 3, dtype=f64)), DTypeError, "weight", {},
              F.conv2d),
    ErrorCase("conv2d-bias-dtype", "conv2d", (z(1, 4, 5, 5), z(6, 4, 3, 3), z(6, dtype=f64)), DTypeError, "bias", {},
              F.conv2d),
    ErrorCase("conv2d-stride-0", "conv2d", (z(1, 4, 5, 5), z(6, 4, 3, 3)), ArgumentError, "stride", {"stride": 0},
              F.conv2d),
    ErrorCase("conv2d-stride-negative", "conv2d", (z(1, 4, 5, 5), z(6, 4, 3, 3)), ArgumentError, "stride",
              {"stride": (1, -1)}, F.conv2d),
    ErrorCase("conv2d-padding-negative", "conv2d", (z(1, 4, 5, 5), z(6, 4, 3, 3)), ArgumentError, "padding",
              {"padding": -1}, F.conv2d),
    ErrorCase("conv2d-dilation-0", "conv2d", (z(1, 4, 5, 5), z(6, 4, 3, 3)), ArgumentError, "dilation",
              {"dilation": 0}, F.conv2d),
    ErrorCase("conv2d-groups-0", "conv2d", (z(1, 4, 5, 5), z(6, 4, 3, 3)), ArgumentError, "groups", {"groups": 0},
              F.conv2d),
    ErrorCase("conv2d-no-out-channels", "conv2d", (z(1, 4, 5, 5), z(0, 4, 3, 3)), ShapeError, "weight", {}, F.conv2d),
    ErrorCase("conv2d-zero-kernel", "conv2d", (z(1, 4, 5, 5), z(6, 4, 0, 3)), ShapeError, "weight", {}, F.conv2d),
    ErrorCase("conv2d-no-in-channels", "conv2d", (z(1, 0, 5, 5), z(6, 0, 3, 3)), ShapeError, "weight"),
    ErrorCase("conv2d-groups-out", "conv2d", (z(1, 4, 5, 5), z(5, 2, 3, 3)), ShapeError, "weight", {"groups": 2},
              F.conv2d),
    ErrorCase("conv2d-channels", "conv2d", (z(1, 4, 5, 5), z(6, 3, 3, 3)), ShapeError, "x", {}, F.conv2d),
    ErrorCase("conv2d-groups-in", "conv2d", (z(1, 3, 5, 5), z(6, 1, 3, 3)), ShapeError, "x", {"groups": 2},
              F.conv2d),
    ErrorCase("conv2d-bias-shape", "conv2d", (z(1, 4, 5, 5), z(6, 4, 3, 3), z(5)), ShapeError, "bias", {}, F.conv2d),
    ErrorCase("conv2d-bias-2d", "conv2d", (z(1, 4, 5, 5), z(6, 4, 3, 3), z(6, 1)), ShapeError, "bias", {}, F.conv2d),
    ErrorCase("conv2d-kernel-too-big", "conv2d", (z(1, 4, 2, 2), z(6, 4, 3, 3)), ShapeError, "x", {}, F.conv2d),
    ErrorCase("conv2d-dilated-too-big", "conv2d", (z(1, 4, 4, 4), z(6, 4, 3, 3)), ShapeError, "x", {"dilation": 2},
              F.conv2d),
    ErrorCase("conv2d-empty-spatial", "conv2d", (z(1, 4, 0, 5), z(6, 4, 1, 1)), ShapeError, "x", {}, F.conv2d),
    ErrorCase("conv2d-stride-3-values", "conv2d", (z(1, 4, 5, 5), z(6, 4, 3, 3)), ArgumentError, "stride",
              {"stride": (1, 2, 3)}, F.conv2d),
    ErrorCase(f"{S}-dropout", S, (q4, k4, v4), ArgumentError, "dropout_p", {"dropout_p": 0.1}),
    ErrorCase(f"{S}-causal-and-mask", S, (q4, k4, v4, z(4, 5)), ArgumentError, "attn_mask", {"is_causal": True},
              sdpa),
    ErrorCase(f"{S}-query-1d", S, (z(8), z(8), z(6)), ShapeError, "query", {}, sdpa),
    ErrorCase(f"{S}-key-1d", S, (z(4, 8), z(8), z(5, 6)), ShapeError, "key", {}, sdpa),
    ErrorCase(f"{S}-value-1d", S, (z(4, 8), z(5, 8), z(6)), ShapeError, "value", {}, sdpa),
    ErrorCase(f"{S}-gqa-2d", S, (z(4, 8), z(5, 8), z(5, 6)), ShapeError, "query", {"enable_gqa": True}, sdpa),
    ErrorCase(f"{S}-int", S, (z(2, 4, 8, dtype=i64), z(2, 5, 8, dtype=i64), z(2, 5, 6, dtype=i64)), DTypeError,
              "query", {}, sdpa),
    ErrorCase(f"{S}-key-dtype", S, (q4, z(2, 3, 5, 8, dtype=f64), v4), DTypeError, "key", {}, sdpa),
    ErrorCase(f"{S}-value-dtype", S, (q4, k4, z(2, 3, 5, 6, dtype=f64)), DTypeError, "value", {}, sdpa),
    ErrorCase(f"{S}-embedding", S, (q4, z(2, 3, 5, 7), v4), ShapeError, "key", {}, sdpa),
    ErrorCase(f"{S}-length", S, (q4, k4, z(2, 3, 4, 6)), ShapeError, "value", {}, sdpa),
    ErrorCase(f"{S}-key-batch", S, (q4, z(5, 3, 5, 8), z(5, 3, 5, 6)), ShapeError, "key", {}, sdpa),
    ErrorCase(f"{S}-value-batch", S, (q4, k4, z(2, 2, 5, 6)), ShapeError, "value", {}, sdpa),
    ErrorCase(f"{S}-heads-without-gqa", S, (z(2, 6, 4, 8), k4, v4), ShapeError, "key", {}, sdpa),
    ErrorCase(f"{S}-gqa-key-heads", S, (z(2, 6, 4, 8), z(2, 4, 5, 8), z(2, 3, 5, 6)), ShapeError, "key",
              {"enable_gqa": True}, sdpa),
    ErrorCase(f"{S}-gqa-value-heads", S, (z(2, 6, 4, 8), k4, z(2, 4, 5, 6)), ShapeError, "value",
              {"enable_gqa": True}, sdpa),
    ErrorCase(f"{S}-mask-int", S, (q4, k4, v4, z(4, 5, dtype=i64)), DTypeError, "attn_mask", {}, sdpa),
    ErrorCase(f"{S}-mask-float64", S, (q4, k4, v4, z(4, 5, dtype=f64)), DTypeError, "attn_mask", {}, sdpa),
    ErrorCase(f"{S}-mask-1d", S, (q4, k4, v4, z(5)), ShapeError, "attn_mask", {}, sdpa),
    ErrorCase(f"{S}-mask-0d", S, (q4, k4, v4, z(dtype="bool")), ShapeError, "attn_mask", {}, sdpa),
    ErrorCase(f"{S}-mask-shape", S, (q4, k4, v4, z(4, 4)), ShapeError, "attn_mask", {}, sdpa),
    ErrorCase(f"{S}-mask-grows", S, (q4, k4, v4, z(7, 2, 3, 4, 5)), ShapeError, "attn_mask", {}, sdpa),
]  # fmt: skip


@pytest.mark.parametrize("case", ERRORS, ids=lambda case: case.id)
def test_errors(case):
    check_error_case(case)


def test_dropout_error_says_inference_only():
    with pytest.raises(ArgumentError, match="opcore is inference-only"):
        call(S, q4, k4, v4, None, 0.5)
