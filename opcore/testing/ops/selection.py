"""Kit entries for where, masked_fill and clamp (exact results: values are picked, not computed)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.testing.builders import SampleSet, shape_id, tensor_of, z
from opcore.testing.records import ErrorInput, OpEntry, Sample, errors_by_op
from opcore.types import DType

__all__ = ["ENTRIES"]

DTYPES = [d.value for d in DType]
LAYOUTS = ("transposed", "strided", "expanded")
_SPECIAL = [-math.inf, -1.0, -0.0, 0.0, 1.0, math.inf, math.nan, 2.5]
_BROADCAST = [((2, 3), (3,), (2, 1)), ((4, 1, 3), (2, 1), ()), ((), (), ()), ((5,), (), (5,)), ((2, 0, 3), (3,), (1,))]


def where_samples() -> Iterable[Sample]:
    """Tensor and number operands, broadcasting of all three, promotion, every dtype."""
    s = SampleSet("where")
    for dtype in DTYPES:
        s.add(dtype, s.tensor((3, 4), "bool"), s.tensor((3, 4), dtype), s.tensor((3, 4), dtype))
    for c_shape, x_shape, y_shape in _BROADCAST:
        s.add(f"shape-{shape_id(c_shape)}-{shape_id(x_shape)}-{shape_id(y_shape)}",
              s.tensor(c_shape, "bool"), s.tensor(x_shape), s.tensor(y_shape))  # fmt: skip
    for x_dtype, y_dtype in [("int32", "float16"), ("uint8", "int8"), ("bool", "int64"), ("float32", "float64"),
                             ("int64", "float32")]:  # fmt: skip
        s.add(f"promote-{x_dtype}-{y_dtype}", s.tensor((2, 3), "bool"), s.tensor((2, 3), x_dtype),
              s.tensor((3,), y_dtype))  # fmt: skip
    s.add("promote-0d", s.tensor((2, 3), "bool"), s.tensor((2, 3), "int32"), s.tensor((), "float64"))
    for x, other in [(2.5, "float32"), (-1, "uint8"), (3, "int32"), (True, "bool"), (0.0, "float16"),
                     (-math.inf, "float32")]:  # fmt: skip
        s.add(f"scalar-{x!r}-{other}", s.tensor((2, 3), "bool"), x, s.tensor((2, 3), other))
        s.add(f"{other}-scalar-{x!r}", s.tensor((2, 3), "bool"), s.tensor((2, 3), other), x)
    s.add("two-ints", s.tensor((2, 3), "bool"), 1, 0)
    s.add(
        "large-float32",
        s.tensor((3, 4), "bool"),
        s.tensor((3, 4), low=-1e30, high=1e30),
        s.tensor((4,), low=-1e4, high=1e4),
    )
    s.add("int-float", s.tensor((2, 3), "bool"), 1, 0.5)
    for layout in LAYOUTS:
        s.add(layout, s.tensor((3, 4), "bool", layout=layout), s.tensor((3, 4), layout=layout), s.tensor((3, 4)))
    s.add(
        "float32-special", s.tensor((8,), "bool"), tensor_of(_SPECIAL, "float32"), tensor_of(_SPECIAL[::-1], "float32")
    )
    return s


def masked_fill_samples() -> Iterable[Sample]:
    """Number and 0-D tensor values of each kind into every dtype, mask broadcasting (growing x too)."""
    s = SampleSet("masked_fill")
    for dtype in DTYPES:
        value: bool | int | float = True if dtype == "bool" else 7
        s.add(dtype, s.tensor((3, 4), dtype), s.tensor((3, 4), "bool"), value)
        s.add(f"{dtype}-0d-value", s.tensor((3, 4), dtype), s.tensor((4,), "bool"), tensor_of(1, "float32"))
    for x_shape, m_shape in [((2, 3), (3,)), ((3,), (2, 1)), ((), ()), ((), (4,)), ((2, 0, 3), (1,)), ((5,), ())]:
        s.add(f"shape-{shape_id(x_shape)}-{shape_id(m_shape)}", s.tensor(x_shape), s.tensor(m_shape, "bool"), -1.5)
    values: list[tuple[str, bool | int | float]] = [
        ("int32", 2.5), ("int32", -7.9), ("uint8", -1), ("uint8", 255), ("int8", -128), ("float16", 65504.0),
        ("float32", -math.inf), ("float32", math.nan), ("bool", 0.5), ("bool", 0), ("float64", 1e300),
        ("bfloat16", 3.0),
    ]  # fmt: skip
    for dtype, value in values:
        s.add(f"{dtype}-value-{value!r}", s.tensor((2, 3), dtype), s.tensor((2, 3), "bool"), value)
    s.add("int64-0d-float-value", s.tensor((2, 3), "int64"), s.tensor((2, 3), "bool"), tensor_of(2.5, "float64"))
    s.add("float32-0d-int-value", s.tensor((2, 3)), s.tensor((2, 3), "bool"), tensor_of(-3, "int64"))
    for layout in LAYOUTS:
        s.add(layout, s.tensor((3, 4), layout=layout), s.tensor((3, 4), "bool", layout=layout), 0.0)
    s.add("attention-mask", s.tensor((2, 4, 4)), s.tensor((4, 4), "bool"), -math.inf)
    s.add("large-float32", s.tensor((3, 4), low=-1e30, high=1e30), s.tensor((3, 4), "bool"), 1e30)
    return s


def clamp_samples() -> Iterable[Sample]:
    """min only, max only, both (as numbers and as tensors, min > max too), promotion, NaN, every dtype."""
    s = SampleSet("clamp")
    for dtype in DTYPES:
        if dtype != "bool":
            s.add(dtype, s.tensor((3, 4), dtype, low=-9, high=9), 0, 5)
    # (min, max) variants, positional (None: not given); each also as tensors of those shapes
    variants: list[tuple[str, int | float | None, int | float | None]] = [
        ("min", -0.5, None), ("max", None, 0.5), ("both", -1.0, 1.0), ("min-above-max", 1.0, -1.0),
        ("int-bounds", -1, 2),
    ]  # fmt: skip
    for name, low, high in variants:
        for shape in ((3, 4), (), (0, 2)):
            s.add(f"{name}-{shape_id(shape)}", s.tensor(shape), low, high)
        bounds = [None if bound is None else s.tensor((3,), low=-1, high=1) for bound in (low, high)]
        s.add(f"{name}-tensors", s.tensor((2, 3)), *bounds)
    s.add("tensor-min-only", s.tensor((2, 3)), s.tensor((2, 1)))
    s.add("tensor-max-only", s.tensor((2, 3)), None, s.tensor((3,)))
    s.add("tensor-grows-x", s.tensor((3,)), s.tensor((2, 3)), s.tensor((2, 1)))
    s.add("int32-float-min", s.tensor((2, 3), "int32", low=-5, high=5), 0.5)
    s.add("bool-int-min", s.tensor((2, 3), "bool"), 0, 1)
    s.add("float16-float32-tensor", s.tensor((2, 3), "float16"), s.tensor((3,), "float32"), None)
    s.add("uint8-int-bounds", s.tensor((2, 3), "uint8", low=0, high=255), 10, 200)
    s.add("float32-special", tensor_of(_SPECIAL, "float32"), -1.0, 1.0)
    s.add("float32-nan-bound", s.tensor((2, 3)), math.nan, None)
    s.add("large-float32", s.tensor((3, 4), low=-1e30, high=1e30), -1e20, 1e25)
    s.add("float32-nan-tensor-bound", s.tensor((3,)), tensor_of([math.nan, 0.0, 1.0], "float32"),
          tensor_of([1.0, math.nan, 2.0], "float32"))  # fmt: skip
    for layout in LAYOUTS:
        s.add(layout, s.tensor((3, 4), layout=layout), -1.0, 1.0)
    return s


def _error_inputs() -> dict[str, list[ErrorInput]]:
    b, i32, u8, f16 = "bool", "int32", "uint8", "float16"
    return {
        "where": [
            ErrorInput("int-condition", (z(2, dtype=i32), z(2), z(2)), DTypeError, "condition", "a bool tensor"),
            ErrorInput("broadcast", (z(2, 3, dtype=b), z(2), z(3)), ShapeError, "other", "shapes that broadcast"),
            ErrorInput("huge-int", (z(2, dtype=b), 2**70, z(2)), ArgumentError, "x", "int64 range"),
            ErrorInput("float32-overflow", (z(2, dtype=b), z(2), 1e300), ArgumentError, "other",
                       "converts to float32 without overflow"),
            ErrorInput("int16-overflow", (z(2, dtype=b), z(2, dtype="int16"), 2**20), ArgumentError, "other",
                       "converts to int16 without overflow"),
        ],
        "masked_fill": [
            ErrorInput("uint8-mask", (z(2), z(2, dtype=u8), 0.0), DTypeError, "mask", "a bool tensor"),
            ErrorInput("1d-value", (z(2), z(2, dtype=b), z(1)), ShapeError, "value", "a number or a 0-D tensor"),
            ErrorInput("broadcast", (z(2, 3), z(2, dtype=b), 0.0), ShapeError, "mask", "shapes that broadcast"),
            ErrorInput("uint8-overflow", (z(2, dtype=u8), z(2, dtype=b), 300), ArgumentError, "value",
                       "converts to uint8 without overflow"),
            ErrorInput("int-inf", (z(2, dtype=i32), z(2, dtype=b), math.inf), ArgumentError, "value",
                       "converts to int32 without overflow"),
            ErrorInput("float16-overflow", (z(2, dtype=f16), z(2, dtype=b), 1e6), ArgumentError, "value",
                       "converts to float16 without overflow"),
        ],
        "clamp": [
            ErrorInput("no-bounds", (z(2),), ArgumentError, "min", "at least one of 'min' and 'max'"),
            ErrorInput("mixed", (z(2), z(2), 1.0), ArgumentError, "max", "like 'min'"),
            ErrorInput("bool", (z(2, dtype=b), True, None), DTypeError, "x", "not bool"),
            ErrorInput("broadcast", (z(2, 3), z(2), None), ShapeError, "min", "shapes that broadcast"),
            ErrorInput("float16-overflow", (z(2, dtype=f16), None, 1e10), ArgumentError, "max",
                       "converts to float16 without overflow"),
            ErrorInput("uint8-overflow", (z(2, dtype=u8), 300, None), ArgumentError, "min",
                       "converts to uint8 without overflow"),
        ],
    }  # fmt: skip


error_inputs = errors_by_op(_error_inputs)


ENTRIES: tuple[OpEntry, ...] = (
    OpEntry("where", where_samples, lambda: error_inputs("where")),
    OpEntry("masked_fill", masked_fill_samples, lambda: error_inputs("masked_fill")),
    OpEntry("clamp", clamp_samples, lambda: error_inputs("clamp")),
)
