"""Kit entries for embedding, conv1d, conv2d and scaled_dot_product_attention."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy

from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.testing.builders import SampleSet, ValueRange, shape_id, tensor_of, z
from opcore.testing.records import ErrorInput, OpEntry, Sample, errors_by_op
from opcore.testing.tolerances import REDUCED_PRECISION_CHAINS

__all__ = ["CONV1D_CASES", "CONV_CASES", "ENTRIES"]

FLOATS = ("float32", "float16", "float64", "bfloat16")
SDPA = "scaled_dot_product_attention"


def embedding_samples() -> Iterable[Sample]:
    s = SampleSet("embedding")
    for index_dtype in ("int64", "int32"):
        for shape in ((), (5,), (2, 3), (0,), (2, 0)):
            s.add(f"{index_dtype}-{shape_id(shape)}", s.tensor(shape, index_dtype, low=0, high=6), s.tensor((7, 4)))
    for dtype in ("float32", "float16", "float64", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"):
        s.add(f"weight-{dtype}", s.tensor((3, 2), "int64", low=0, high=4), s.tensor((5, 3), dtype))
    for padding_idx in (0, -1, 2):
        s.add(f"padding-idx-{padding_idx}", s.tensor((4,), "int64", low=0, high=4), s.tensor((5, 3)), padding_idx)
    for layout in ("transposed", "strided"):
        indices = s.tensor((3, 4), "int64", low=0, high=5, layout=layout)
        s.add(layout, indices, s.tensor((6, 5), layout=layout))
    s.add("empty-weight-rows", tensor_of(numpy.zeros(0, "int64")), s.tensor((0, 4)))
    return s


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


def conv2d_samples() -> Iterable[Sample]:
    """Attributes (stride, padding, dilation, groups), 3-D input, empty batch, dtypes, layouts."""
    s = SampleSet("conv2d")
    for i, (x_shape, w_shape, stride, padding, dilation, groups) in enumerate(CONV_CASES):
        bias = s.tensor((w_shape[0],)) if i % 2 == 0 else None
        name = f"x{shape_id(x_shape)}-w{shape_id(w_shape)}-s{stride}-p{padding}-d{dilation}-g{groups}"
        s.add(name.replace(" ", ""), s.tensor(x_shape), s.tensor(w_shape), bias, stride, padding, dilation, groups)
    for dtype in ("float32", "float16", "float64", "bfloat16", "int64", "int32", "int16", "int8", "uint8"):
        options: ValueRange = {"low": 0, "high": 2} if dtype in ("int8", "uint8") else {}
        x, w = s.tensor((2, 4, 6, 6), dtype, **options), s.tensor((4, 2, 3, 3), dtype, **options)
        s.add(dtype, x, w, s.tensor((4,), dtype, **options), 1, 1, 1, 2)
    for layout in ("transposed", "strided"):
        s.add(layout, s.tensor((2, 3, 6, 7), layout=layout), s.tensor((4, 3, 3, 2), layout=layout), None, 1, 1)
    s.add("keywords", s.tensor((1, 2, 6, 6)), s.tensor((4, 1, 3, 3)), stride=2, padding=1, dilation=1, groups=2)
    s.add("large", s.tensor((1, 2, 5, 5), low=-1e3, high=1e3), s.tensor((3, 2, 3, 3), low=-1e3, high=1e3))
    # padding strings: "same" pads an even kernel's odd extra on the right and bottom, as torch
    for i, (x_shape, w_shape, padding, dilation, groups) in enumerate(_CONV2D_STRING_CASES):
        bias = s.tensor((w_shape[0],)) if i % 2 == 0 else None
        name = f"{padding}-x{shape_id(x_shape)}-w{shape_id(w_shape)}-d{dilation}-g{groups}".replace(" ", "")
        s.add(name, s.tensor(x_shape), s.tensor(w_shape), bias, 1, padding, dilation, groups)
    s.add("same-int32", s.tensor((1, 2, 5, 5), "int32"), s.tensor((2, 2, 2, 2), "int32"), None, 1, "same")
    s.add("same-keyword", s.tensor((1, 2, 6, 5)), s.tensor((3, 2, 4, 3)), padding="same", dilation=(1, 2))
    return s


_CONV2D_STRING_CASES = [
    # x shape, weight shape, padding, dilation, groups
    ((2, 4, 9, 8), (6, 4, 3, 3), "same", 1, 1),
    ((2, 4, 9, 8), (6, 2, 2, 4), "same", 1, 2),
    ((1, 4, 7, 9), (4, 4, 2, 3), "same", (2, 1), 1),
    ((1, 4, 7, 9), (4, 4, 4, 2), "same", 3, 1),
    ((4, 6, 5), (4, 4, 2, 2), "same", 1, 1),
    ((0, 4, 5, 5), (6, 4, 3, 2), "same", 1, 1),
    ((2, 4, 9, 8), (6, 4, 3, 2), "valid", 1, 1),
    ((4, 6, 5), (6, 2, 3, 3), "valid", 2, 2),
]

CONV1D_CASES = [
    # x shape, weight shape, stride, padding, dilation, groups
    ((2, 4, 9), (6, 4, 3), 1, 0, 1, 1),
    ((2, 4, 9), (6, 2, 2), 2, 1, 1, 2),
    ((1, 4, 10), (8, 1, 3), 1, 2, 2, 4),
    ((1, 3, 3), (2, 3, 5), 1, 1, 1, 1),
    ((1, 2, 11), (4, 2, 3), 3, 0, 3, 1),
    ((0, 4, 5), (6, 4, 3), 1, 0, 1, 1),
    ((4, 7), (6, 4, 3), 1, 1, 1, 1),
    ((4, 7), (6, 2, 3), 2, 0, 1, 2),
    ((2, 4, 9), (6, 4, 3), 1, "same", 1, 1),
    ((2, 4, 9), (6, 2, 4), 1, "same", 1, 2),
    ((1, 4, 10), (4, 4, 2), 1, "same", 3, 1),
    ((4, 7), (6, 4, 2), 1, "same", 2, 1),
    ((0, 4, 5), (6, 4, 2), 1, "same", 1, 1),
    ((2, 4, 9), (6, 4, 3), 1, "valid", 2, 1),
    ((4, 7), (6, 2, 3), 1, "valid", 1, 2),
]


def conv1d_samples() -> Iterable[Sample]:
    """Attributes (stride, padding sizes and strings, dilation, groups), 2-D input, empty batch,
    dtypes, layouts."""
    s = SampleSet("conv1d")
    for i, (x_shape, w_shape, stride, padding, dilation, groups) in enumerate(CONV1D_CASES):
        bias = s.tensor((w_shape[0],)) if i % 2 == 0 else None
        name = f"x{shape_id(x_shape)}-w{shape_id(w_shape)}-s{stride}-p{padding}-d{dilation}-g{groups}"
        s.add(name, s.tensor(x_shape), s.tensor(w_shape), bias, stride, padding, dilation, groups)
    for dtype in ("float32", "float16", "float64", "bfloat16", "int64", "int32", "int16", "int8", "uint8"):
        options: ValueRange = {"low": 0, "high": 2} if dtype in ("int8", "uint8") else {}
        x, w = s.tensor((2, 4, 7), dtype, **options), s.tensor((4, 2, 3), dtype, **options)
        s.add(dtype, x, w, s.tensor((4,), dtype, **options), 1, 1, 1, 2)
        if dtype in ("float32", "int32"):
            s.add(f"{dtype}-same-dilated", x, w, None, 1, "same", 2, 2)
    for layout in ("transposed", "strided"):
        s.add(layout, s.tensor((2, 3, 7), layout=layout), s.tensor((4, 3, 2), layout=layout), None, 1, 1)
        s.add(f"{layout}-same", s.tensor((2, 3, 7), layout=layout), s.tensor((4, 3, 2), layout=layout), None, 1,
              "same")  # fmt: skip
    s.add("keywords", s.tensor((1, 2, 8)), s.tensor((4, 1, 3)), stride=2, padding=1, dilation=1, groups=2)
    s.add("large", s.tensor((1, 2, 9), low=-1e3, high=1e3), s.tensor((3, 2, 3), low=-1e3, high=1e3))
    return s


_SDPA_SHAPES = [
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
_GQA_SHAPES = [
    ((2, 6, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)),
    ((2, 6, 4, 8), (2, 3, 5, 8), (2, 2, 5, 6)),
    ((1, 6, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)),
    ((6, 4, 8), (3, 5, 8), (3, 5, 6)),
    ((2, 4, 4, 8), (2, 4, 5, 8), (2, 4, 5, 6)),
]


def sdpa_samples() -> Iterable[Sample]:
    """Shapes and broadcast batches, dtypes, causal flag, bool and additive masks, scale, GQA."""
    s = SampleSet(SDPA)
    for q_shape, k_shape, v_shape in _SDPA_SHAPES:
        name = f"q{shape_id(q_shape)}-k{shape_id(k_shape)}-v{shape_id(v_shape)}"
        s.add(name, s.tensor(q_shape), s.tensor(k_shape), s.tensor(v_shape))
    for dtype in FLOATS:
        for causal in (False, True):
            q, k, v = s.tensor((2, 2, 5, 8), dtype), s.tensor((2, 2, 7, 8), dtype), s.tensor((2, 2, 7, 4), dtype)
            s.add(f"{dtype}" + ("-causal" if causal else ""), q, k, v, is_causal=causal)
    for length, source in [(4, 4), (3, 6), (6, 3), (1, 5)]:
        q, k, v = s.tensor((2, length, 8)), s.tensor((2, source, 8)), s.tensor((2, source, 3))
        s.add(f"causal-{length}x{source}", q, k, v, None, 0.0, True)
    for mask_dtype in ("bool", "float32"):
        for mask_shape in [(4, 5), (2, 1, 4, 5), (1, 5), (4, 1), (3, 4, 5), (2, 3, 4, 5)]:
            mask = s.tensor(mask_shape, mask_dtype)
            if mask_dtype == "bool":  # keep one key per row: fully masked rows have their own sample
                values = mask.values()
                values[..., 0] = True
                mask = tensor_of(values, "bool")
            q, k, v = s.tensor((2, 3, 4, 8)), s.tensor((2, 3, 5, 8)), s.tensor((2, 3, 5, 6))
            s.add(f"mask-{mask_dtype}-{shape_id(mask_shape)}", q, k, v, attn_mask=mask)
    for dtype in ("float16", "float64", "bfloat16"):
        q, k, v = s.tensor((2, 4, 8), dtype), s.tensor((2, 5, 8), dtype), s.tensor((2, 5, 6), dtype)
        s.add(f"additive-mask-{dtype}", q, k, v, s.tensor((4, 5), dtype))
    keep = numpy.ones((3, 5), bool)
    keep[1] = False
    for mask_dtype, mask_values in (("bool", keep), ("float32", numpy.where(keep, 0.0, -math.inf))):
        q, k, v = s.tensor((1, 2, 3, 4)), s.tensor((1, 2, 5, 4)), s.tensor((1, 2, 5, 2))
        mask = tensor_of(mask_values, mask_dtype)
        s.add(f"fully-masked-row-{mask_dtype}", q, k, v, attn_mask=mask, note="zeros")
    # decoders' head sizes (kernels block the head dim by 64 and more) under a bool mask with padded
    # keys and a fully masked row
    for head in (64, 128, 256):
        keep = numpy.ones((12, 20), bool)
        keep[:, 15:] = False
        keep[3] = False
        q, k, v = s.tensor((1, 2, 12, head)), s.tensor((1, 2, 20, head)), s.tensor((1, 2, 20, head))
        s.add(f"head-{head}-masked-rows", q, k, v, attn_mask=tensor_of(keep, "bool"), note="zeros")
    for scale in (0.0, -1.0, 0.3):
        s.add(f"scale-{scale}", s.tensor((2, 3, 4, 8)), s.tensor((2, 3, 5, 8)), s.tensor((2, 3, 5, 6)), scale=scale)
    for i, (q_shape, k_shape, v_shape) in enumerate(_GQA_SHAPES):
        for causal in (False, True):
            name = f"gqa-{i}" + ("-causal" if causal else "")
            s.add(name, s.tensor(q_shape), s.tensor(k_shape), s.tensor(v_shape), is_causal=causal, enable_gqa=True)
    # GQA with masks: a backend that groups the query heads per key/value head must group the mask's
    # rows with them (per head, per query position, broadcast batches) or pass a row mask as it is
    q_shapes = {"": (2, 6, 4, 8), "-qbatch1": (1, 6, 4, 8), "-decode": (2, 6, 1, 8)}
    named = set()
    for mask_dtype in ("bool", "float32"):
        for mask_shape in [(4, 5), (2, 1, 4, 5), (2, 6, 4, 5), (6, 1, 5), (2, 1, 1, 5), (1, 5)]:
            for q_name, q_shape in q_shapes.items():
                shape = (*mask_shape[:-2], q_shape[-2] if mask_shape[-2] != 1 else 1, mask_shape[-1])
                name = f"gqa-mask-{mask_dtype}-{shape_id(shape)}{q_name}"
                if name in named:  # a decode query makes some shapes the same
                    continue
                named.add(name)
                mask = s.tensor(shape, mask_dtype)
                if mask_dtype == "bool":
                    values = mask.values()
                    values[..., 0] = True
                    mask = tensor_of(values, "bool")
                q, k, v = s.tensor(q_shape), s.tensor((2, 3, 5, 8)), s.tensor((2, 3, 5, 6))
                s.add(name, q, k, v, attn_mask=mask, enable_gqa=True)
    rows = numpy.ones((2, 6, 4, 5), bool)
    rows[1, 4, 2] = False  # one fully masked row, in one head of one batch
    q, k, v = s.tensor((2, 6, 4, 8)), s.tensor((2, 3, 5, 8)), s.tensor((2, 3, 5, 6))
    s.add("gqa-fully-masked-row", q, k, v, attn_mask=tensor_of(rows, "bool"), enable_gqa=True, note="zeros")
    for layout in ("transposed", "strided"):
        q, k, v = (s.tensor(shape, layout=layout) for shape in ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)))
        s.add(layout, q, k, v, s.tensor((4, 5), layout=layout))
    s.add("large-scores", s.tensor((1, 3, 8), low=-100, high=100), s.tensor((1, 4, 8), low=-100, high=100),
          s.tensor((1, 4, 2)), note="needs the max subtracted first")  # fmt: skip
    return s


def _error_inputs() -> dict[str, list[ErrorInput]]:
    f64, i64 = "float64", "int64"
    idx = z(2, dtype=i64)
    q4, k4, v4 = z(2, 3, 4, 8), z(2, 3, 5, 8), z(2, 3, 5, 6)
    x, w = z(1, 4, 5, 5), z(6, 4, 3, 3)
    same = r"the dtype of 'x' \(float32\)"
    same_q = r"the dtype of 'query' \(float32\)"
    positive = "expected positive values"
    mask_shape = "broadcasts to the attention weights"
    return {
        "embedding": [
            ErrorInput("float-indices", (z(2), z(3, 4)), DTypeError, "input", "found float32"),
            ErrorInput("int16-indices", (z(2, dtype="int16"), z(3, 4)), DTypeError, "input", "found int16"),
            ErrorInput("weight-1d", (idx, z(3)), ShapeError, "weight", "a 2-D weight"),
            ErrorInput("weight-3d", (idx, z(3, 4, 5)), ShapeError, "weight", "a 2-D weight"),
            ErrorInput("padding-idx", (idx, z(3, 4), 3), ArgumentError, "padding_idx", r"in \[-3, 2\]"),
            ErrorInput("padding-idx-neg", (idx, z(3, 4), -4), ArgumentError, "padding_idx", r"in \[-3, 2\]"),
            ErrorInput("index-high", (tensor_of([0, 3]), z(3, 4)), ArgumentError, "input", "out of range",
                       raised_by="kernel"),
            ErrorInput("index-negative", (tensor_of([[-1]], "int32"), z(3, 4)), ArgumentError, "input",
                       "out of range", raised_by="kernel"),
        ],
        "conv2d": [
            ErrorInput("x-2d", (z(5, 5), w), ShapeError, "x", r"a 3-D \(C, H, W\) or 4-D"),
            ErrorInput("x-5d", (z(1, 1, 4, 5, 5), w), ShapeError, "x", r"a 3-D \(C, H, W\) or 4-D"),
            ErrorInput("weight-3d", (x, z(6, 4, 3)), ShapeError, "weight", "a 4-D weight"),
            ErrorInput("bool", (z(1, 4, 5, 5, dtype="bool"), z(6, 4, 3, 3, dtype="bool")), DTypeError, "x",
                       "found bool"),
            ErrorInput("weight-dtype", (x, z(6, 4, 3, 3, dtype=f64)), DTypeError, "weight", same),
            ErrorInput("bias-dtype", (x, w, z(6, dtype=f64)), DTypeError, "bias", same),
            ErrorInput("stride-0", (x, w), ArgumentError, "stride", positive, {"stride": 0}),
            ErrorInput("stride-negative", (x, w), ArgumentError, "stride", positive, {"stride": (1, -1)}),
            ErrorInput("padding-negative", (x, w), ArgumentError, "padding", "non-negative values", {"padding": -1}),
            ErrorInput("dilation-0", (x, w), ArgumentError, "dilation", positive, {"dilation": 0}),
            ErrorInput("groups-0", (x, w), ArgumentError, "groups", "a positive int", {"groups": 0}),
            ErrorInput("no-out-channels", (x, z(0, 4, 3, 3)), ShapeError, "weight", "no zero size"),
            ErrorInput("zero-kernel", (x, z(6, 4, 0, 3)), ShapeError, "weight", "no zero size"),
            ErrorInput("no-in-channels", (z(1, 0, 5, 5), z(6, 0, 3, 3)), ShapeError, "weight", "no zero size",
                       torch_rejects=False),
            ErrorInput("groups-out", (x, z(5, 2, 3, 3)), ShapeError, "weight", "divisible by groups = 2",
                       {"groups": 2}),
            ErrorInput("channels", (x, z(6, 3, 3, 3)), ShapeError, "x", "3 channels"),
            ErrorInput("groups-in", (z(1, 3, 5, 5), z(6, 1, 3, 3)), ShapeError, "x", r"2 channels \(weight",
                       {"groups": 2}),
            ErrorInput("bias-shape", (x, w, z(5)), ShapeError, "bias", r"shape \(6,\)"),
            ErrorInput("bias-2d", (x, w, z(6, 1)), ShapeError, "bias", r"shape \(6,\)"),
            ErrorInput("kernel-too-big", (z(1, 4, 2, 2), w), ShapeError, "x", "at least as large as the dilated"),
            ErrorInput("dilated-too-big", (z(1, 4, 4, 4), w), ShapeError, "x", r"dilated kernel \(5, 5\)",
                       {"dilation": 2}),
            ErrorInput("empty-spatial", (z(1, 4, 0, 5), z(6, 4, 1, 1)), ShapeError, "x", "at least as large"),
            ErrorInput("stride-3-values", (x, w), ArgumentError, "stride", "2 values", {"stride": (1, 2, 3)}),
            ErrorInput("same-strided", (x, w), ArgumentError, "padding", "stride > 1",
                       {"padding": "same", "stride": 2}),
            ErrorInput("padding-string", (x, w), ArgumentError, "padding", "'same', 'valid'", {"padding": "full"}),
            ErrorInput("padding-float", (x, w), ArgumentError, "padding", "int\\[2\\] or str", {"padding": 1.5}),
            ErrorInput("same-kernel-too-big", (z(1, 4, 0, 5), z(6, 4, 1, 1)), ShapeError, "x", "at least as large",
                       {"padding": "same"}),
        ],
        "conv1d": [
            ErrorInput("x-1d", (z(5), z(6, 4, 3)), ShapeError, "x", r"a 2-D \(C, L\) or 3-D"),
            ErrorInput("x-4d", (z(1, 1, 4, 5), z(6, 4, 3)), ShapeError, "x", r"a 2-D \(C, L\) or 3-D"),
            ErrorInput("weight-4d", (z(1, 4, 5), w), ShapeError, "weight", "a 3-D weight"),
            ErrorInput("bool", (z(1, 4, 5, dtype="bool"), z(6, 4, 3, dtype="bool")), DTypeError, "x", "found bool"),
            ErrorInput("weight-dtype", (z(1, 4, 5), z(6, 4, 3, dtype=f64)), DTypeError, "weight", same),
            ErrorInput("stride-0", (z(1, 4, 5), z(6, 4, 3)), ArgumentError, "stride", positive, {"stride": 0}),
            ErrorInput("padding-negative", (z(1, 4, 5), z(6, 4, 3)), ArgumentError, "padding", "non-negative values",
                       {"padding": -1}),
            ErrorInput("same-strided", (z(1, 4, 5), z(6, 4, 3)), ArgumentError, "padding", "stride > 1",
                       {"padding": "same", "stride": 2}),
            ErrorInput("padding-string", (z(1, 4, 5), z(6, 4, 3)), ArgumentError, "padding", "'same', 'valid'",
                       {"padding": "causal"}),
            ErrorInput("padding-2-values", (z(1, 4, 5), z(6, 4, 3)), ArgumentError, "padding", "int\\[1\\] or str",
                       {"padding": (1, 1)}),
            ErrorInput("dilation-0", (z(1, 4, 5), z(6, 4, 3)), ArgumentError, "dilation", positive, {"dilation": 0}),
            ErrorInput("groups-0", (z(1, 4, 5), z(6, 4, 3)), ArgumentError, "groups", "a positive int", {"groups": 0}),
            ErrorInput("zero-kernel", (z(1, 4, 5), z(6, 4, 0)), ShapeError, "weight", "no zero size"),
            ErrorInput("groups-out", (z(1, 4, 5), z(5, 2, 3)), ShapeError, "weight", "divisible by groups = 2",
                       {"groups": 2}),
            ErrorInput("channels", (z(1, 4, 5), z(6, 3, 3)), ShapeError, "x", "3 channels"),
            ErrorInput("bias-shape", (z(1, 4, 5), z(6, 4, 3), z(5)), ShapeError, "bias", r"shape \(6,\)"),
            ErrorInput("kernel-too-big", (z(1, 4, 2), z(6, 4, 3)), ShapeError, "x", "at least as large as the dilated"),
            ErrorInput("dilated-too-big", (z(1, 4, 4), z(6, 4, 3)), ShapeError, "x", r"dilated kernel \(5,\)",
                       {"dilation": 2}),
        ],
        SDPA: [
            ErrorInput("dropout", (q4, k4, v4), ArgumentError, "dropout_p", "inference-only", {"dropout_p": 0.1},
                       torch_rejects=False),
            ErrorInput("causal-and-mask", (q4, k4, v4, z(4, 5)), ArgumentError, "attn_mask", "None when is_causal",
                       {"is_causal": True}),
            ErrorInput("query-1d", (z(8), z(8), z(6)), ShapeError, "query", "at least 2 dimensions"),
            ErrorInput("key-1d", (z(4, 8), z(8), z(5, 6)), ShapeError, "key", "at least 2 dimensions"),
            ErrorInput("value-1d", (z(4, 8), z(5, 8), z(6)), ShapeError, "value", "at least 2 dimensions"),
            ErrorInput("gqa-2d", (z(4, 8), z(5, 8), z(5, 6)), ShapeError, "query", "with enable_gqa=True",
                       {"enable_gqa": True}),
            ErrorInput("int", (z(2, 4, 8, dtype=i64), z(2, 5, 8, dtype=i64), z(2, 5, 6, dtype=i64)), DTypeError,
                       "query", "found int64"),
            ErrorInput("key-dtype", (q4, z(2, 3, 5, 8, dtype=f64), v4), DTypeError, "key", same_q),
            ErrorInput("value-dtype", (q4, k4, z(2, 3, 5, 6, dtype=f64)), DTypeError, "value", same_q),
            ErrorInput("embedding", (q4, z(2, 3, 5, 7), v4), ShapeError, "key", r"embedding size of 'query' \(8\)"),
            ErrorInput("length", (q4, k4, z(2, 3, 4, 6)), ShapeError, "value", r"sequence length of 'key' \(5\)"),
            ErrorInput("key-batch", (q4, z(5, 3, 5, 8), z(5, 3, 5, 6)), ShapeError, "key", "broadcast together"),
            ErrorInput("value-batch", (q4, k4, z(2, 2, 5, 6)), ShapeError, "value", "broadcast together"),
            ErrorInput("heads-without-gqa", (z(2, 6, 4, 8), k4, v4), ShapeError, "key", "broadcast together"),
            ErrorInput("gqa-key-heads", (z(2, 6, 4, 8), z(2, 4, 5, 8), z(2, 3, 5, 6)), ShapeError, "key",
                       "divides the 6 heads", {"enable_gqa": True}),
            ErrorInput("gqa-value-heads", (z(2, 6, 4, 8), k4, z(2, 4, 5, 6)), ShapeError, "value",
                       "divides the 6 heads", {"enable_gqa": True}),
            ErrorInput("mask-int", (q4, k4, v4, z(4, 5, dtype=i64)), DTypeError, "attn_mask", "found int64"),
            ErrorInput("mask-float64", (q4, k4, v4, z(4, 5, dtype=f64)), DTypeError, "attn_mask", "found float64"),
            ErrorInput("mask-1d", (q4, k4, v4, z(5)), ShapeError, "attn_mask", "at least 2 dimensions"),
            ErrorInput("mask-0d", (q4, k4, v4, z(dtype="bool")), ShapeError, "attn_mask", "at least 2 dimensions"),
            ErrorInput("mask-shape", (q4, k4, v4, z(4, 4)), ShapeError, "attn_mask", mask_shape),
            ErrorInput("mask-grows", (q4, k4, v4, z(7, 2, 3, 4, 5)), ShapeError, "attn_mask", mask_shape),
        ],
    }  # fmt: skip


error_inputs = errors_by_op(_error_inputs)


_SAMPLES = {"embedding": embedding_samples, "conv1d": conv1d_samples, "conv2d": conv2d_samples, SDPA: sdpa_samples}
_TOLERANCES = {
    "embedding": {},
    "conv1d": REDUCED_PRECISION_CHAINS,
    "conv2d": REDUCED_PRECISION_CHAINS,
    SDPA: REDUCED_PRECISION_CHAINS,
}


def _entry(op: str) -> OpEntry:
    return OpEntry(op, _SAMPLES[op], lambda: error_inputs(op), _TOLERANCES[op])


ENTRIES: tuple[OpEntry, ...] = tuple(_entry(op) for op in _SAMPLES)
