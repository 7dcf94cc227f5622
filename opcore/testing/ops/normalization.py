"""Kit entries for softmax, log_softmax, layer_norm and rms_norm."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy

from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.testing.builders import SampleSet, shape_id, tensor_of, z
from opcore.testing.records import ErrorInput, OpEntry, Sample, errors_by_op
from opcore.testing.tolerances import REDUCED_PRECISION_CHAINS

__all__ = ["ENTRIES"]

FLOATS = ("float32", "float16", "float64", "bfloat16")
_SOFTMAX_DIMS = [
    ((), 0), ((), -1), ((0,), 0), ((5,), 0), ((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), -1), ((2, 3, 4), -3),
    ((2, 0, 3), 1), ((2, 0, 3), 2), ((1, 1), 1),
]  # fmt: skip
_SPECIAL_ROWS = [
    [1000.0, 0.0, -1000.0, 5.0],
    [-math.inf, 0.0, 1.0, -math.inf],
    [-math.inf, -math.inf, -math.inf, -math.inf],
    [1.0, math.nan, 2.0, 3.0],
    [30.0, 30.0, 30.0, 30.0],
]


def softmax_samples(op: str) -> Iterable[Sample]:
    """Scalars, empty dims, every dim, every dtype and layout, large and special values."""
    s = SampleSet(op)
    for shape, dim in _SOFTMAX_DIMS:
        s.add(f"{shape_id(shape)}-dim{dim}", s.tensor(shape), dim)
    for dtype in FLOATS:
        for layout in ("contiguous", "transposed", "strided"):
            s.add(f"{dtype}-{layout}-last", s.tensor((3, 7), dtype, layout=layout, low=-10, high=10), -1)
            s.add(f"{dtype}-{layout}-first", s.tensor((3, 7), dtype, layout=layout), 0)
    s.add("large", s.tensor((3, 7), low=-1000, high=1000), -1, note="needs the max subtracted first")
    s.add("small", s.tensor((3, 7), low=-1e-4, high=1e-4), -1)
    for dtype in ("float32", "float64", "float16"):
        s.add(f"{dtype}-special", tensor_of(_SPECIAL_ROWS, dtype), -1)
    # torch's dtype=: x cast first (numpy's dtype objects and names alike; torch.float32 in the OpInfo test)
    s.add("float16-dtype-float32", s.tensor((3, 7), "float16"), -1, dtype="float32")
    s.add("float32-dtype-numpy-float64", s.tensor((3, 7)), 0, dtype=numpy.float64)
    s.add("float64-dtype-float32", s.tensor((3, 7), "float64"), -1, dtype=numpy.dtype("float32"))
    return s


_NORM_SHAPES = [((2, 3, 8), (8,)), ((2, 3, 8), (3, 8)), ((8,), (8,)), ((0, 8), (8,)), ((2, 0), (0,)), ((4, 1), (1,))]


def layer_norm_samples() -> Iterable[Sample]:
    s = SampleSet("layer_norm")
    for shape, normalized in _NORM_SHAPES:
        for parameters in ("none", "weight", "both"):
            weight = s.tensor(normalized) if parameters != "none" else None
            bias = s.tensor(normalized) if parameters == "both" else None
            s.add(
                f"{shape_id(shape)}-over-{shape_id(normalized)}-{parameters}", s.tensor(shape), normalized, weight, bias
            )
    for dtype in FLOATS:
        for layout in ("contiguous", "transposed", "strided"):
            x = s.tensor((3, 4, 6), dtype, layout=layout, low=-5, high=7)
            weight, bias = (
                s.tensor((6,), dtype),
                s.tensor((6,), dtype, layout="strided" if layout != "contiguous" else layout),
            )
            s.add(f"{dtype}-{layout}", x, (6,), weight, bias)
        s.add(f"{dtype}-eps", s.tensor((3, 6), dtype), (6,), s.tensor((6,), dtype), s.tensor((6,), dtype), 0.5)
    for dtype in ("float16", "bfloat16"):
        s.add(f"{dtype}-float32-parameters", s.tensor((3, 6), dtype), (6,), s.tensor((6,)), s.tensor((6,)))
        s.add(f"{dtype}-float32-bias", s.tensor((3, 6), dtype), (6,), None, s.tensor((6,)))
    s.add("constant-rows", tensor_of([[3.0] * 5] * 2, "float32"), (5,), note="zero variance")
    s.add("normalized-shape-int", s.tensor((2, 6)), 6)
    s.add("large", s.tensor((3, 6), low=-1e4, high=1e4), (6,))
    s.add("small", s.tensor((3, 6), low=-1e-2, high=1e-2), (6,), tolerance=None)
    return s


def rms_norm_samples() -> Iterable[Sample]:
    s = SampleSet("rms_norm")
    for shape, normalized in _NORM_SHAPES:
        s.add(f"{shape_id(shape)}-over-{shape_id(normalized)}", s.tensor(shape), normalized)
        s.add(
            f"{shape_id(shape)}-over-{shape_id(normalized)}-weight", s.tensor(shape), normalized, s.tensor(normalized)
        )
    for dtype in FLOATS:
        for layout in ("contiguous", "transposed", "strided"):
            s.add(f"{dtype}-{layout}", s.tensor((3, 4, 6), dtype, layout=layout), (6,), s.tensor((6,), dtype))
        for eps in (1e-6, 0.5):
            s.add(f"{dtype}-eps-{eps}", s.tensor((3, 6), dtype), (6,), s.tensor((6,), dtype), eps)
        # values so small that the default eps dominates: float16 computes in float32, so uses its eps
        s.add(f"{dtype}-default-eps-tiny", tensor_of([[1e-3] * 4] * 2, dtype), (4,))
        s.add(f"{dtype}-zeros", tensor_of([[0.0] * 4] * 2, dtype), (4,))
    s.add("normalized-shape-int", s.tensor((2, 6)), 6)
    s.add("large", s.tensor((3, 6), low=-1e4, high=1e4), (6,))
    s.add("weight-float64", s.tensor((3, 6)), (6,), s.tensor((6,), "float64"), note="a weight of another float dtype")
    return s


def batch_norm_samples() -> Iterable[Sample]:
    """(N, C), (N, C, L), (N, C, H, W), (N, C, D, H, W); empty batch and channels; with and without
    weight and bias; every dtype (float32 statistics of a float16/bfloat16 x too); layouts."""
    s = SampleSet("batch_norm")

    def stats(channels: int, dtype: str = "float32", layout: str = "contiguous") -> tuple[object, object]:
        return s.tensor((channels,), dtype, layout=layout), s.tensor((channels,), dtype, low=0.1, high=3.0)

    for shape in ((4, 3), (2, 3, 5), (2, 3, 4, 5), (1, 2, 2, 3, 4), (0, 3, 4), (2, 0, 4), (1, 1)):
        channels = shape[1]
        for parameters in ("none", "weight", "both"):
            weight = s.tensor((channels,)) if parameters != "none" else None
            bias = s.tensor((channels,)) if parameters == "both" else None
            s.add(f"{shape_id(shape)}-{parameters}", s.tensor(shape), *stats(channels), weight, bias)
    for dtype in FLOATS:
        s.add(dtype, s.tensor((2, 3, 4, 4), dtype), *stats(3, dtype), s.tensor((3,), dtype), s.tensor((3,), dtype))
    for dtype in ("float16", "bfloat16"):
        s.add(f"{dtype}-float32-statistics", s.tensor((2, 3, 4), dtype), *stats(3), s.tensor((3,)), s.tensor((3,)))
    for layout in ("transposed", "strided"):
        s.add(layout, s.tensor((2, 3, 4, 5), layout=layout), *stats(3), s.tensor((3,)), s.tensor((3,)))
    s.add("eps", s.tensor((2, 3, 4)), *stats(3), None, None, False, 0.1, 0.5)
    s.add("keywords", s.tensor((2, 3, 4)), *stats(3), bias=s.tensor((3,)), momentum=0.3, eps=1e-3)
    s.add("large", s.tensor((2, 3, 4), low=-1e4, high=1e4), *stats(3))
    s.add("zero-variance", s.tensor((2, 3, 4)), s.tensor((3,)), tensor_of([0.0, 1.0, 0.0], "float32"),
          note="1 / sqrt(eps)")  # fmt: skip
    return s


def group_norm_samples() -> Iterable[Sample]:
    """(N, C), (N, C, L), (N, C, H, W); one group, some, one per channel; empty dims; dtypes; layouts."""
    s = SampleSet("group_norm")
    for shape, groups in (((2, 6), 3), ((2, 6, 5), 1), ((2, 6, 5), 2), ((2, 6, 5), 6), ((2, 4, 3, 3), 2),
                          ((0, 4, 3), 2), ((2, 4, 0), 2), ((1, 1, 4), 1)):  # fmt: skip
        for parameters in ("none", "weight", "both"):
            weight = s.tensor((shape[1],)) if parameters != "none" else None
            bias = s.tensor((shape[1],)) if parameters == "both" else None
            s.add(f"{shape_id(shape)}-g{groups}-{parameters}", s.tensor(shape), groups, weight, bias)
    for dtype in FLOATS:
        s.add(dtype, s.tensor((2, 4, 5), dtype), 2, s.tensor((4,), dtype), s.tensor((4,), dtype))
    for dtype in ("float16", "bfloat16"):
        s.add(f"{dtype}-float32-parameters", s.tensor((2, 4, 5), dtype), 2, s.tensor((4,)), s.tensor((4,)))
    for layout in ("transposed", "strided"):
        s.add(layout, s.tensor((2, 4, 6), layout=layout), 2, s.tensor((4,)), s.tensor((4,)))
    s.add("eps", s.tensor((2, 4, 3)), 2, None, None, 0.5)
    s.add("keywords", s.tensor((2, 4, 3)), num_groups=4, bias=s.tensor((4,)), eps=1e-3)
    s.add("large", s.tensor((2, 4, 3), low=-1e4, high=1e4), 2)
    s.add("constant-groups", tensor_of([[[3.0] * 4] * 2], "float32"), 1, note="zero variance")
    return s


def _error_inputs() -> dict[str, list[ErrorInput]]:
    i32, i64, b = "int32", "int64", "bool"
    dim = r"a dim in the range"
    trailing = "the trailing sizes of 'x'"
    return {
        "softmax": [
            ErrorInput("int", (z(2, dtype=i64), 0), DTypeError, "x", "found int64"),
            ErrorInput("bool", (z(2, dtype=b), 0), DTypeError, "x", "found bool"),
            ErrorInput("dim", (z(2, 3), 2), ShapeError, "dim", rf"{dim} \[-2, 1\]"),
            ErrorInput("dim-negative", (z(2, 3), -3), ShapeError, "dim", rf"{dim} \[-2, 1\]"),
            ErrorInput("0d-dim", (z(), 1), ShapeError, "dim", rf"{dim} \[-1, 0\] for a 0-D tensor"),
            ErrorInput("dtype-int", (z(2, 3), 0), DTypeError, "dtype", "a floating dtype", {"dtype": i64}),
            ErrorInput("int-with-dtype", (z(2, dtype=i64), 0), DTypeError, "x", "found int64", {"dtype": "float32"}),
        ],
        "log_softmax": [
            ErrorInput("int", (z(2, dtype=i32), 0), DTypeError, "x", "found int32"),
            ErrorInput("dim", (z(2, 3), -4), ShapeError, "dim", dim),
        ],
        "layer_norm": [
            ErrorInput("int", (z(2, 3, dtype=i64), (3,)), DTypeError, "x", "found int64"),
            ErrorInput("empty", (z(2, 3), ()), ArgumentError, "normalized_shape", "at least one size"),
            ErrorInput("mismatch", (z(2, 3), (4,)), ShapeError, "normalized_shape", trailing),
            ErrorInput("too-long", (z(3), (2, 3)), ShapeError, "normalized_shape", trailing),
            ErrorInput("negative", (z(2, 3), (-3,)), ShapeError, "normalized_shape", trailing),
            ErrorInput("weight", (z(2, 3), (3,), z(4)), ShapeError, "weight", r"normalized_shape = \(3,\)"),
            ErrorInput("weight-2d", (z(2, 3), (3,), z(1, 3)), ShapeError, "weight", r"normalized_shape = \(3,\)"),
            ErrorInput("bias", (z(2, 3), (3,), None, z(2)), ShapeError, "bias", r"normalized_shape = \(3,\)"),
            ErrorInput("weight-dtype", (z(2, 3), (3,), z(3, dtype="float64")), DTypeError, "weight",
                       r"the dtype of 'x' \(float32\)"),
            ErrorInput("bias-dtype", (z(2, 3), (3,), None, z(3, dtype="float16")), DTypeError, "bias",
                       r"the dtype of 'x' \(float32\)"),
            ErrorInput("mixed-parameters", (z(2, 3, dtype="float16"), (3,), z(3), z(3, dtype="float16")), DTypeError,
                       "bias", r"the same as 'weight' \(float32\)"),
        ],
        "rms_norm": [
            ErrorInput("int", (z(2, 3, dtype=i64), (3,)), DTypeError, "x", "found int64"),
            ErrorInput("empty", (z(2, 3), ()), ArgumentError, "normalized_shape", "at least one size"),
            ErrorInput("mismatch", (z(2, 3), (2,)), ShapeError, "normalized_shape", trailing),
            ErrorInput("weight", (z(2, 3), (3,), z(4)), ShapeError, "weight", r"normalized_shape = \(3,\)"),
            ErrorInput("weight-int", (z(2, 3), (3,), z(3, dtype=i32)), DTypeError, "weight", "found int32",
                       torch_rejects=False),
        ],
        "group_norm": [
            ErrorInput("int", (z(2, 4, dtype=i64), 2), DTypeError, "x", "found int64"),
            ErrorInput("1d", (z(4), 2), ShapeError, "x", "at least 2 dimensions"),
            ErrorInput("groups", (z(2, 4, 3), 3), ShapeError, "num_groups", "a divisor of the 4 channels"),
            ErrorInput("groups-0", (z(2, 4, 3), 0), ArgumentError, "num_groups", "a positive number"),
            ErrorInput("weight", (z(2, 4, 3), 2, z(3)), ShapeError, "weight", r"shape \(4,\)"),
            ErrorInput("bias", (z(2, 4, 3), 2, None, z(4, 1)), ShapeError, "bias", r"shape \(4,\)"),
            ErrorInput("weight-dtype", (z(2, 4, 3), 2, z(4, dtype="float64")), DTypeError, "weight",
                       r"the dtype of 'x' \(float32\)"),
            ErrorInput("mixed", (z(2, 4, 3, dtype="float16"), 2, z(4), z(4, dtype="float16")), DTypeError, "bias",
                       r"the same as 'weight' \(float32\)"),
        ],
        "batch_norm": [
            ErrorInput("training", (z(2, 3), z(3), z(3)), ArgumentError, "training", "inference-only",
                       {"training": True}, torch_rejects=False),
            ErrorInput("int", (z(2, 3, dtype=i64), z(3, dtype=i64), z(3, dtype=i64)), DTypeError, "x", "found int64"),
            ErrorInput("1d", (z(3), z(3), z(3)), ShapeError, "x", "at least 2 dimensions"),
            ErrorInput("0d", (z(), z(1), z(1)), ShapeError, "x", "at least 2 dimensions"),
            ErrorInput("mean-shape", (z(2, 3, 4), z(4), z(3)), ShapeError, "running_mean", r"shape \(3,\)"),
            ErrorInput("var-shape", (z(2, 3, 4), z(3), z(3, 1)), ShapeError, "running_var", r"shape \(3,\)"),
            ErrorInput("weight-shape", (z(2, 3, 4), z(3), z(3), z(4)), ShapeError, "weight", r"shape \(3,\)"),
            ErrorInput("bias-shape", (z(2, 3, 4), z(3), z(3), None, z(2)), ShapeError, "bias", r"shape \(3,\)"),
            ErrorInput("stats-float64", (z(2, 3), z(3, dtype="float64"), z(3, dtype="float64")), DTypeError,
                       "running_mean", r"the dtype of 'x' \(float32\)"),
            ErrorInput("mixed", (z(2, 3, dtype="float16"), z(3), z(3), z(3, dtype="float16")), DTypeError,
                       "weight", r"the same as 'running_mean' \(float32\)"),
            ErrorInput("x-float64", (z(2, 3, dtype="float64"), z(3), z(3)), DTypeError, "running_mean",
                       r"the dtype of 'x' \(float64\)"),
        ],
    }  # fmt: skip


error_inputs = errors_by_op(_error_inputs)


_SAMPLES = {
    "softmax": lambda: softmax_samples("softmax"),
    "log_softmax": lambda: softmax_samples("log_softmax"),
    "layer_norm": layer_norm_samples,
    "rms_norm": rms_norm_samples,
    "batch_norm": batch_norm_samples,
    "group_norm": group_norm_samples,
}


def _entry(op: str) -> OpEntry:
    return OpEntry(op, _SAMPLES[op], lambda: error_inputs(op), REDUCED_PRECISION_CHAINS)


ENTRIES: tuple[OpEntry, ...] = tuple(_entry(op) for op in _SAMPLES)
