"""Kit entries for max_pool2d, avg_pool2d and adaptive_avg_pool2d: every attribute variant over the
same shape families, dtypes, layouts, 3-D input, empty batch."""

from __future__ import annotations

import math
from collections.abc import Iterable

from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.meta import FLOATING
from opcore.testing.builders import SampleSet, shape_id, tensor_of, z
from opcore.testing.records import ErrorInput, OpEntry, Sample, errors_by_op
from opcore.testing.tolerances import EXACT, REDUCED_PRECISION_CHAINS

__all__ = ["ENTRIES", "POOL_CASES"]

FLOATS = ("float32", "float16", "float64", "bfloat16")
INTEGERS = ("int64", "int32", "int16", "int8", "uint8")
LAYOUTS = ("transposed", "strided")
SHAPES = ((2, 3, 7, 7), (1, 2, 8, 6), (3, 6, 5), (0, 2, 6, 6))

POOL_CASES = [
    # kernel_size, stride, padding, ceil_mode
    (2, None, 0, False),
    (3, 2, 1, False),
    (3, 2, 1, True),
    (2, 2, 0, True),
    ((3, 2), (2, 1), (1, 0), False),
    ((2, 3), (1, 2), (0, 1), True),
    (3, 1, 0, False),
    (1, 2, 0, True),
]


def _case_id(shape: tuple[int, ...], kernel: object, stride: object, padding: object, ceil: bool) -> str:
    text = f"{shape_id(shape)}-k{kernel}-s{stride}-p{padding}" + ("-ceil" if ceil else "")
    return text.replace(" ", "")


def max_pool2d_samples() -> Iterable[Sample]:
    s = SampleSet("max_pool2d")
    for shape in SHAPES:
        for kernel, stride, padding, ceil in POOL_CASES:
            s.add(_case_id(shape, kernel, stride, padding, ceil), s.tensor(shape), kernel, stride, padding, 1, ceil)
    for dilation, ceil in ((2, False), (2, True), ((1, 2), False), ((2, 1), True)):
        for shape in SHAPES[:3]:
            name = f"{shape_id(shape)}-dilation{dilation}" + ("-ceil" if ceil else "")
            s.add(name.replace(" ", ""), s.tensor(shape), 3, 2, 1, dilation, ceil)
    for dtype in FLOATS + INTEGERS:
        s.add(dtype, s.tensor((2, 3, 6, 6), dtype, low=-50, high=50), 3, 2, 1)
    for layout in LAYOUTS:
        s.add(layout, s.tensor((2, 3, 6, 7), layout=layout), 2)
    s.add("keywords", s.tensor((1, 2, 6, 6)), kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True)
    s.add("nan", tensor_of([[[[1.0, math.nan], [3.0, 2.0]]]], "float32"), 2, note="NaN wins, as torch")
    s.add("inf", tensor_of([[[[-math.inf, -math.inf], [-math.inf, -math.inf]]]], "float32"), 2, None, 0)
    s.add("large", s.tensor((1, 2, 5, 5), low=-1e4, high=1e4), 2, 1)
    # torch's forms: one-element lists for the sizes, return_indices=True (where each max was, h * W + w)
    s.add("one-element-lists", s.tensor((1, 2, 7, 7)), [3], [2], [1])
    s.add("return-indices", s.tensor((2, 3, 7, 6)), 3, 2, 1, return_indices=True)
    s.add("return-indices-dilated-ceil", s.tensor((3, 7, 7)), (2, 3), (1, 2), 1, 2, True, True)
    s.add("return-indices-nan", tensor_of([[[[1.0, math.nan], [3.0, math.nan]]]], "float32"), 2, return_indices=True)
    s.add("return-indices-int32", s.tensor((1, 2, 6, 6), "int32", low=-3, high=3), 3, 2, 1, return_indices=True,
          note="ties: the first in the window, as torch")  # fmt: skip
    return s


def avg_pool2d_samples() -> Iterable[Sample]:
    s = SampleSet("avg_pool2d")
    for shape in SHAPES:
        for kernel, stride, padding, ceil in POOL_CASES:
            for include in (True, False):
                name = _case_id(shape, kernel, stride, padding, ceil) + ("" if include else "-exclude-pad")
                s.add(name, s.tensor(shape), kernel, stride, padding, ceil, include)
    for divisor in (1, 3, -2):
        for kernel, stride, padding, ceil in POOL_CASES[1:4]:
            name = _case_id((2, 3, 7, 7), kernel, stride, padding, ceil) + f"-divisor{divisor}"
            s.add(name, s.tensor((2, 3, 7, 7)), kernel, stride, padding, ceil, True, divisor)
    for dtype in (*FLOATS, "int64"):
        for include in (True, False):
            s.add(f"{dtype}" + ("" if include else "-exclude-pad"), s.tensor((2, 3, 6, 6), dtype, low=-50, high=50),
                  3, 2, 1, True, include)  # fmt: skip
    for layout in LAYOUTS:
        s.add(layout, s.tensor((2, 3, 6, 7), layout=layout), 2)
    s.add("keywords", s.tensor((1, 2, 6, 6)), kernel_size=3, stride=2, padding=1, ceil_mode=True,
          count_include_pad=False, divisor_override=None)  # fmt: skip
    s.add("large", s.tensor((1, 2, 5, 5), low=-1e4, high=1e4), 2, 1)
    s.add("one-element-padding", s.tensor((1, 2, 6, 6)), [3], [2], [1])
    return s


def adaptive_avg_pool2d_samples() -> Iterable[Sample]:
    s = SampleSet("adaptive_avg_pool2d")
    outputs = ((1, 1), (2, 2), (3, 3), (3, 2), (7, 7), (4, 5), (1, 3), (0, 2), 2)
    for shape in (*SHAPES, (2, 0, 5, 5)):
        for size in outputs:
            s.add(f"{shape_id(shape)}-to-{size}".replace(" ", ""), s.tensor(shape), size)
    for dtype in FLOATS:
        s.add(dtype, s.tensor((2, 3, 6, 5), dtype), (4, 3))
    for layout in LAYOUTS:
        s.add(layout, s.tensor((2, 3, 6, 7), layout=layout), (2, 3))
    s.add("large", s.tensor((1, 2, 5, 5), low=-1e4, high=1e4), (2, 2))
    # None: that input size (torch's output_size=(None, 3))
    s.add("none-height", s.tensor((2, 3, 6, 5)), (None, 3))
    s.add("none-both", s.tensor((3, 6, 5)), [None, None])
    return s


def _error_inputs() -> dict[str, list[ErrorInput]]:
    x = z(1, 2, 6, 6)
    rank = r"a 3-D \(C, H, W\) or 4-D"
    positive = "expected positive values"
    shared = [
        ErrorInput("x-2d", (z(6, 6), 2), ShapeError, "x", rank),
        ErrorInput("x-5d", (z(1, 1, 2, 6, 6), 2), ShapeError, "x", rank),
        ErrorInput("empty-channels", (z(1, 0, 6, 6), 2), ShapeError, "x", "non-zero sizes"),
        ErrorInput("empty-height", (z(1, 2, 0, 6), 2), ShapeError, "x", "non-zero sizes"),
        ErrorInput("empty-3d", (z(0, 6, 6), 2), ShapeError, "x", "non-zero sizes"),
        ErrorInput("kernel-0", (x, 0), ArgumentError, "kernel_size", positive),
        ErrorInput("kernel-3-values", (x, (2, 2, 2)), ArgumentError, "kernel_size", "2 values"),
        ErrorInput("stride-0", (x, 2), ArgumentError, "stride", positive, {"stride": 0}),
        ErrorInput("padding-negative", (x, 3), ArgumentError, "padding", "non-negative", {"padding": -1}),
        ErrorInput("padding-over-half", (x, 3), ArgumentError, "padding", "at most half", {"padding": 2}),
        ErrorInput("too-small", (z(1, 2, 2, 2), 3), ShapeError, "x", "at least one"),
    ]
    return {
        "max_pool2d": [
            *shared,
            ErrorInput("bool", (z(1, 2, 4, 4, dtype="bool"), 2), DTypeError, "x", "found bool"),
            ErrorInput("dilation-0", (x, 2), ArgumentError, "dilation", positive, {"dilation": 0}),
            ErrorInput("dilated-too-small", (z(1, 2, 4, 4), 3), ShapeError, "x", "at least one", {"dilation": 2}),
        ],
        "avg_pool2d": [
            *shared,
            ErrorInput("int32", (z(1, 2, 4, 4, dtype="int32"), 2), DTypeError, "x", "found int32"),
            ErrorInput("divisor-0", (x, 2), ArgumentError, "divisor_override", "non-zero", {"divisor_override": 0}),
        ],
        "adaptive_avg_pool2d": [
            ErrorInput("x-2d", (z(6, 6), 2), ShapeError, "x", rank),
            ErrorInput("empty-width", (z(1, 2, 6, 0), 2), ShapeError, "x", "non-zero H and W"),
            ErrorInput("int", (z(1, 2, 4, 4, dtype="int64"), 2), DTypeError, "x", "found int64"),
            ErrorInput("negative", (x, (2, -1)), ArgumentError, "output_size", "non-negative"),
            ErrorInput("three-values", (x, (2, 2, 2)), ArgumentError, "output_size", "2 values"),
        ],
    }  # fmt: skip


error_inputs = errors_by_op(_error_inputs)


_SAMPLES = {
    "max_pool2d": max_pool2d_samples,
    "avg_pool2d": avg_pool2d_samples,
    "adaptive_avg_pool2d": adaptive_avg_pool2d_samples,
}
# max_pool2d picks a value: exact; the averages sum in the input's dtype in torch's reduced-precision kernels
_TOLERANCES = {
    "max_pool2d": {dtype: EXACT for dtype in FLOATING},
    "avg_pool2d": REDUCED_PRECISION_CHAINS,
    "adaptive_avg_pool2d": REDUCED_PRECISION_CHAINS,
}


def _entry(op: str) -> OpEntry:
    return OpEntry(op, _SAMPLES[op], lambda: error_inputs(op), _TOLERANCES[op])


ENTRIES: tuple[OpEntry, ...] = tuple(_entry(op) for op in _SAMPLES)
