"""Kit entries for the elementwise ops: add, sub, mul, div, minimum, relu, gelu, silu, sigmoid, tanh, exp,
the unary math ops neg, abs, sqrt, rsqrt, erf, cos, sin, log, ceil, sign, the comparisons eq, ne, lt, le,
gt, ge, logical_and, logical_or, logical_not, pow, cast, softplus, hardswish and hardsigmoid."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TypedDict

from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.opset import BUILTIN_DTYPES
from opcore.testing.builders import SampleSet, shape_id, tensor_of, z
from opcore.testing.records import ErrorInput, OpEntry, Sample, errors_by_op
from opcore.types import DType

__all__ = ["ENTRIES"]

BINARY = ("add", "sub", "mul", "div", "minimum", "eq", "ne", "lt", "le", "gt", "ge")
TENSORS_ONLY = ("minimum",)  # binary ops whose other is a tensor, never a Python number (as in torch)
LOGICAL = ("logical_and", "logical_or")
UNARY = (
    "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "neg", "abs", "sqrt", "rsqrt", "erf", "cos", "sin", "logical_not",
    "softplus", "hardswish", "hardsigmoid", "log", "ceil", "sign",
)  # fmt: skip

_BROADCAST = [((2, 3), (3,)), ((4, 1, 3), (2, 1)), ((), ()), ((5,), ()), ((), (2, 2)), ((2, 0, 3), (3,)), ((0,), (1,))]
_PROMOTIONS = [
    ("int32", "float16"),
    ("uint8", "int8"),
    ("bool", "int16"),
    ("float32", "float64"),
    ("bfloat16", "float16"),
    ("int64", "float32"),
]
_ZERO_DIM = [("float16", "float64"), ("int32", "float64"), ("bfloat16", "int64"), ("int32", "bool"), ("uint8", "int64")]
_SCALARS = [("float32", 2.5), ("float32", -3), ("float16", 2), ("int32", 2.5), ("int32", -3), ("uint8", 2)]
_BOOL_SCALARS = [("bool", True), ("bool", 2), ("int64", True)]  # sub refuses bool operands
_SPECIAL = [-math.inf, -1000.0, -30.0, -1.0, -0.0, 0.0, 1e-8, 1.0, 30.0, 1000.0, math.inf, math.nan]


class _Attributes(TypedDict, total=False):
    """The attribute variants unary samples are repeated over (typed: they go in as ``**attrs``)."""

    approximate: str
    beta: float
    threshold: float


def _dtypes(op: str) -> list[str]:
    return [d.value for d in DType if d in BUILTIN_DTYPES[op]]


def binary_samples(op: str) -> Iterable[Sample]:
    """Every dtype, broadcasting, scalars, non-contiguous inputs, promotion, magnitudes, attributes."""
    s = SampleSet(op)
    no_bool = op == "sub"

    def other(shape: tuple[int, ...], dtype: str = "float32", layout: str = "contiguous") -> object:
        return s.nonzero(shape, dtype, layout=layout) if op == "div" else s.tensor(shape, dtype, layout=layout)

    for dtype in _dtypes(op):
        s.add(dtype, s.tensor((3, 4), dtype, low=-9, high=9), other((3, 4), dtype))
    for x_shape, y_shape in _BROADCAST:
        s.add(f"shape-{shape_id(x_shape)}-{shape_id(y_shape)}", s.tensor(x_shape), other(y_shape))
    s.add("1d", s.tensor((7,)), other((7,)))
    for layout in ("transposed", "strided", "expanded"):
        s.add(layout, s.tensor((3, 4), layout=layout), other((3, 4), layout=layout))
    s.add("int64-transposed-float64-row", s.tensor((3, 4), "int64", layout="transposed"), other((4,), "float64"))
    for dtype, scalar in _SCALARS + ([] if no_bool else _BOOL_SCALARS):
        if op not in TENSORS_ONLY:
            s.add(f"{dtype}-scalar-{scalar!r}", s.tensor((2, 3), dtype), scalar)
    for x_dtype, y_dtype in _PROMOTIONS:
        if no_bool and "bool" in (x_dtype, y_dtype):
            continue
        s.add(f"promote-{x_dtype}-{y_dtype}", s.tensor((4, 2, 3), x_dtype), other((2, 3), y_dtype))
    for x_dtype, y_dtype in _ZERO_DIM:
        if no_bool and "bool" in (x_dtype, y_dtype):
            continue
        s.add(f"promote-{x_dtype}-0d-{y_dtype}", s.tensor((3,), x_dtype), other((), y_dtype))
    s.add("large-float32", s.tensor((3, 4), low=-1e30, high=1e30), other((3, 4)), note="overflow to inf")
    s.add("small-float32", s.tensor((3, 4), low=-1e-30, high=1e-30), other((3, 4)))
    s.add("large-float16", s.tensor((3, 4), "float16", low=-6e4, high=6e4), other((3, 4), "float16"))
    s.add("float32-special", tensor_of(_SPECIAL[:6] * 2, "float32"), tensor_of(_SPECIAL[::-1], "float32"))
    if op in ("add", "sub"):
        _alpha_samples(s, op)
    if op == "div":
        _rounding_samples(s)
    if op in ("eq", "ne", "lt", "le", "gt", "ge"):
        _tie_samples(s)
    if op == "minimum":
        _minimum_samples(s)
    if op in ("add", "mul"):
        s.add("uint8-wraps", tensor_of([250, 3], "uint8"), 300 if op == "add" else -1)
        s.add("int32-wraps", tensor_of([2**31 - 1, 5], "int32"), 2)
        s.add("int64-exact", tensor_of([2**62 + 1, -(2**62) - 3], "int64"), tensor_of([3, 1], "int64"))
    return s


def _tie_samples(s: SampleSet) -> None:
    """Equal values, NaN, signed zeros, and operands that are equal only once rounded to the promoted dtype."""
    s.add(
        "float32-ties",
        tensor_of([1.0, 2.0, math.nan, -0.0, math.inf, -math.inf], "float32"),
        tensor_of([1.0, 3.0, math.nan, 0.0, math.inf, 1.0], "float32"),
    )
    s.add("int32-ties", s.tensor((4, 5), "int32", low=-2, high=2), s.tensor((5,), "int32", low=-2, high=2))
    s.add("bool-ties", s.tensor((3, 4), "bool"), s.tensor((3, 4), "bool"))
    s.add("int64-vs-float32-rounding", tensor_of([2**24 + 1, 3], "int64"), tensor_of([2**24, 3.0], "float32"))
    s.add("float32-scalar-tie", tensor_of([0.1, 0.2, 0.3], "float32"), 0.1)
    s.add("int32-int-scalar-tie", tensor_of([[1, 2], [3, 2]], "int32"), 2)


def _minimum_samples(s: SampleSet) -> None:
    """NaN on either side (NaN wins, as torch), ties, infinities, exact int64 and unsigned values, bools."""
    s.add(
        "float32-nan-either-side",
        tensor_of([math.nan, 1.0, math.nan, -math.inf, 2.0, 0.0], "float32"),
        tensor_of([1.0, math.nan, math.nan, 5.0, math.inf, 0.0], "float32"),
    )
    s.add(
        "float16-nan", tensor_of([math.nan, -1.0, 65504.0], "float16"), tensor_of([0.0, math.nan, -65504.0], "float16")
    )
    s.add("int64-exact", tensor_of([2**62 + 1, -(2**62) - 3, 7], "int64"), tensor_of([2**62, -(2**62) - 2, 7], "int64"))
    s.add("uint8-extremes", tensor_of([0, 255, 128], "uint8"), tensor_of([255, 254, 0], "uint8"))
    s.add("uint8-int8", tensor_of([200, 0, 5], "uint8"), tensor_of([-1, 3, 5], "int8"))
    s.add("bool-and", tensor_of([True, True, False, False], "bool"), tensor_of([True, False, True, False], "bool"))
    s.add("int64-vs-float32-rounding", tensor_of([2**24 + 1, 3], "int64"), tensor_of([2**24, 3.5], "float32"))


def logical_samples(op: str) -> Iterable[Sample]:
    """Every dtype (nonzero is true, NaN included), broadcasting, mixed dtypes, non-contiguous inputs."""
    s = SampleSet(op)
    for dtype in _dtypes(op):
        s.add(dtype, s.tensor((3, 4), dtype, low=-1, high=1), s.tensor((3, 4), dtype, low=-1, high=1))
    for x_shape, y_shape in _BROADCAST:
        s.add(f"shape-{shape_id(x_shape)}-{shape_id(y_shape)}", s.tensor(x_shape, "bool"), s.tensor(y_shape, "bool"))
    for x_dtype, y_dtype in _PROMOTIONS:
        s.add(f"mixed-{x_dtype}-{y_dtype}", s.tensor((4, 2, 3), x_dtype, low=-1, high=1), s.tensor((2, 3), y_dtype))
    for layout in ("transposed", "strided", "expanded"):
        s.add(layout, s.tensor((3, 4), "bool", layout=layout), s.tensor((3, 4), layout=layout))
    s.add("float32-special", tensor_of(_SPECIAL, "float32"), tensor_of(_SPECIAL[::-1], "float32"))
    return s


def _alpha_samples(s: SampleSet, op: str) -> None:
    for dtype, alpha in [("float32", 2), ("float32", -0.5), ("float16", 3.0), ("int64", 3), ("uint8", -1)]:
        s.add(f"{dtype}-alpha-{alpha!r}", s.tensor((2, 3), dtype, high=9), s.tensor((2, 3), dtype, high=9), alpha=alpha)
    if op == "add":
        for alpha in (True, False, 0, 2):
            s.add(f"bool-alpha-{alpha!r}", s.tensor((8,), "bool"), s.tensor((8,), "bool"), alpha=alpha)


def _rounding_samples(s: SampleSet) -> None:
    for mode in ("trunc", "floor"):
        for dtype in ("float32", "float64", "float16", "int64", "int32", "int8", "uint8"):
            x = s.tensor((3, 4), dtype, low=-20, high=20)
            s.add(f"{dtype}-{mode}", x, s.nonzero((4,), dtype), rounding_mode=mode)
        s.add(f"float32-{mode}-scalar", s.tensor((3, 4), low=-20, high=20), -2.5, rounding_mode=mode)
        s.add(f"int64-{mode}-scalar", s.tensor((3, 4), "int64", low=-20, high=20), 3, rounding_mode=mode)
        s.add(
            f"bfloat16-{mode}",  # whole numbers over powers of two: no rounding of the quotient to argue over
            tensor_of([[-7.0, 7.0, 5.0, -3.0]], "bfloat16"),
            tensor_of([1.0, -2.0, 4.0, -0.5], "bfloat16"),
            rounding_mode=mode,
        )
        s.add(
            f"float32-{mode}-special",
            tensor_of([-7.0, 7.0, 0.0, math.inf, math.nan], "float32"),
            tensor_of([2.0, -2.0, 0.0, 1.0, 1.0], "float32"),
            rounding_mode=mode,
        )
        s.add(f"bool-int-{mode}", tensor_of([True, False], "bool"), tensor_of([3, 1], "int64"), rounding_mode=mode)
    s.add("int-true-division-by-zero", tensor_of([1, 0, -1], "int64"), 0, note="inf and nan, as torch")
    s.add("float32-by-zero", tensor_of([-7.0, 7.0, 0.0, math.inf, math.nan], "float32"), 0.0)


def unary_samples(op: str) -> Iterable[Sample]:
    """Every dtype, scalars, empty and 1-D inputs, non-contiguous inputs, magnitudes, special values;
    for an op with attribute variants (gelu's approximate), every variant over the same families.
    """
    s = SampleSet(op)
    variants: list[_Attributes] = [{}]
    if op == "gelu":
        variants.append({"approximate": "tanh"})
    if op == "softplus":
        variants += [{"beta": 2.0, "threshold": 5.0}, {"beta": -0.5, "threshold": 1.0}]
    for attrs in variants:
        tag = "".join(f"-{value}" for value in attrs.values())
        for dtype in _dtypes(op):
            s.add(f"{dtype}{tag}", s.tensor((3, 4), dtype, low=-5, high=5 if dtype != "uint8" else 9), **attrs)
        for shape in ((), (0,), (7,), (2, 3, 4), (3, 0, 2)):
            s.add(f"shape-{shape_id(shape)}{tag}", s.tensor(shape), **attrs)
        for dtype in ("float16", "float64", "bfloat16"):
            s.add(f"{dtype}-scalar{tag}", s.tensor((), dtype), **attrs)
        for layout in ("transposed", "strided", "expanded"):
            s.add(f"{layout}{tag}", s.tensor((4, 5), layout=layout), **attrs)
        s.add(f"large-float32{tag}", s.tensor((3, 4), low=-1e4, high=1e4), **attrs)
        s.add(f"small-float32{tag}", s.tensor((3, 4), low=-1e-4, high=1e-4), **attrs)
        s.add(f"large-float64{tag}", s.tensor((3, 4), "float64", low=-800, high=800), **attrs)
        # gelu of +-inf: torch's vectorized float32 kernel gives nan where the exact answer is inf
        special = [v for v in _SPECIAL if not (op == "gelu" and math.isinf(v))]
        for dtype in ("float32", "float64", "float16"):
            s.add(f"{dtype}-special{tag}", tensor_of(special, dtype), **attrs)
    if op == "gelu":
        s.add("float32-none", s.tensor((5, 6), low=-6, high=6), approximate="none")
    if op == "logical_not":
        for dtype in ("int32", "uint8", "bool"):
            s.add(f"{dtype}-zeros", tensor_of([0, 1, 0, 1], dtype))
    if op in ("neg", "abs"):
        # exact in the input dtype: the most negative integer wraps to itself, uint8 wraps modulo 256
        for dtype, values in (("int8", [-128, -1, 0, 127]), ("int32", [-(2**31), 5, -7]), ("uint8", [0, 1, 255])):
            s.add(f"{dtype}-extremes", tensor_of(values, dtype))
        s.add("int64-extremes", tensor_of([-(2**63), 2**62 + 1, -3], "int64"))
    if op in ("sqrt", "rsqrt"):
        s.add("float32-positive", s.tensor((4, 5), low=1e-3, high=1e3))
        s.add("int32-squares", tensor_of([0, 1, 4, 9, 1 << 20], "int32"))
    if op in ("cos", "sin"):
        s.add("float32-periods", s.tensor((4, 5), low=-20, high=20))
    if op == "log":
        s.add("float32-positive", s.tensor((4, 5), low=1e-3, high=1e3))
        s.add("int32-powers", tensor_of([0, 1, 2, 8, 1 << 20, -1], "int32"), note="log(0) is -inf, log(-1) NaN")
    if op in ("ceil", "sign"):
        # integers are their own ceiling, exact to the extremes; sign of each extreme
        for dtype, values in (("int8", [-128, -1, 0, 127]), ("uint8", [0, 1, 255]), ("int32", [-(2**31), 5, -7])):
            s.add(f"{dtype}-extremes", tensor_of(values, dtype))
        s.add("int64-extremes", tensor_of([-(2**63), 2**62 + 1, -3, 0], "int64"))
        s.add("float32-near-integers", tensor_of([-2.5, -1.0, -0.5, -1e-7, 1e-7, 0.5, 1.0, 2.5, 1e20], "float32"))
    if op in ("softplus", "hardswish", "hardsigmoid"):
        # around the kinks: softplus's threshold (20 / beta), hardswish's and hardsigmoid's -3 and 3
        s.add("float32-kinks", tensor_of([-3.5, -3.0, -2.9, 2.9, 3.0, 3.5, 19.9, 20.0, 20.1, 25.0], "float32"))
    return s


def pow_samples() -> Iterable[Sample]:
    """Tensor and number exponents, every dtype, promotion, broadcasting, negative bases, integer
    wrapping, and the integer rule for negative tensor exponents (0, but +-1 for bases +-1)."""
    s = SampleSet("pow")
    for dtype in _dtypes("pow"):
        if dtype != "bool":
            s.add(dtype, s.tensor((3, 4), dtype, low=0, high=4), s.tensor((3, 4), dtype, low=0, high=3))
    for exponent in (2, 3, 0, 0.5, -1.0, 2.5, -2, True):
        for dtype in ("float32", "float16", "float64", "bfloat16"):
            s.add(f"{dtype}-scalar-{exponent!r}", s.tensor((2, 3), dtype, low=0.1, high=3), exponent)
    for dtype, exponent in (("int32", 3), ("uint8", 2), ("int64", 0), ("bool", 2), ("int32", 0.5), ("int8", True)):
        s.add(f"{dtype}-scalar-{exponent!r}", s.tensor((2, 3), dtype, low=0, high=5), exponent)
    for x_shape, y_shape in _BROADCAST:
        s.add(f"shape-{shape_id(x_shape)}-{shape_id(y_shape)}", s.tensor(x_shape, low=0.1), s.tensor(y_shape))
    for x_dtype, y_dtype in (("int32", "float16"), ("uint8", "int8"), ("int64", "float32"), ("float32", "float64")):
        s.add(
            f"promote-{x_dtype}-{y_dtype}",
            s.tensor((4, 3), x_dtype, low=0, high=3),
            s.tensor((3,), y_dtype, low=0, high=2),
        )
    for layout in ("transposed", "strided", "expanded"):
        s.add(layout, s.tensor((3, 4), low=0.1, layout=layout), s.tensor((3, 4), layout=layout))
    s.add(
        "negative-base",
        tensor_of([-2.0, -1.5, -0.5, 0.0, -0.0], "float32"),
        tensor_of([2.0, 0.5, 3.0, -1.0, -1.0], "float32"),
    )
    s.add("float32-special", tensor_of(_SPECIAL, "float32"), tensor_of(_SPECIAL[::-1], "float32"))
    s.add("large-float32", s.tensor((3, 4), low=0.1, high=1e4), s.tensor((3, 4), low=-8, high=8))
    s.add("int32-wraps", tensor_of([7, -7, 1 << 20], "int32"), 5)
    s.add(
        "int64-negative-exponent", tensor_of([1, -1, -1, 2, 0, -3], "int64"), tensor_of([-3, -3, -2, -1, 2, 3], "int64")
    )
    return s


def cast_samples() -> Iterable[Sample]:
    """Every dtype to every dtype (floats to integers with values in range: out-of-range and NaN
    conversions are undefined in C and differ between libraries), special values to floats and bool."""
    s = SampleSet("cast")
    dtypes = [d.value for d in DType]
    for source in dtypes:
        low, high = (0, 100) if source != "bool" else (0, 1)
        x = s.tensor((3, 4), source, low=low, high=high)
        for target in dtypes:
            # numpy inputs cannot come back as bfloat16 (numpy has none): only a bfloat16 x, which
            # the kit passes as a torch tensor, is cast to bfloat16
            if target != "bfloat16" or source == "bfloat16":
                s.add(f"{source}-to-{target}", x, target)
    for shape in ((), (0,), (2, 0, 3), (7,)):
        s.add(f"shape-{shape_id(shape)}", s.tensor(shape), "float16")
    for layout in ("transposed", "strided", "expanded"):
        s.add(layout, s.tensor((3, 4), layout=layout), "int32")
    s.add("float32-truncates", tensor_of([-2.7, -0.5, 0.5, 2.7, 99.9], "float32"), "int32")
    s.add("float32-negatives-int8", tensor_of([-128.0, -127.9, 127.5, -3.5], "float32"), "int8")
    s.add("float32-to-bool-special", tensor_of(_SPECIAL, "float32"), "bool")
    for target in ("float16", "float64"):
        s.add(f"float32-special-to-{target}", tensor_of(_SPECIAL, "float32"), target)
    s.add("bfloat16-special-to-float32", tensor_of(_SPECIAL, "bfloat16"), "float32")
    s.add("float64-overflow-float16", tensor_of([7e4, -1e6, 65504.0, 1e-8], "float64"), "float16")
    s.add("int64-to-int8-wraps", tensor_of([300, -129, 2**40 + 5], "int64"), "int8")
    s.add("int32-to-uint8-wraps", tensor_of([-1, 256, 1000], "int32"), "uint8")
    s.add("int64-large-to-float32", tensor_of([2**24 + 1, 2**40 + 3, -(2**53) - 1], "int64"), "float32")
    return s


def _error_inputs() -> dict[str, list[ErrorInput]]:
    i8, i32, i64, u8, f16, b = "int8", "int32", "int64", "uint8", "float16", "bool"
    fit = r"a value that fits in"
    return {
        "add": [
            ErrorInput("broadcast", (z(2, 3), z(4)), ShapeError, "other", "shapes that broadcast together"),
            ErrorInput("huge-int", (z(2), 2**70), ArgumentError, "other", "an int within the int64 range"),
            ErrorInput("bool-alpha-float", (z(2), z(2)), ArgumentError, "alpha", "a bool alpha is only for bool",
                       {"alpha": True}),
            ErrorInput("float-alpha-int", (z(2, dtype=i32), z(2, dtype=i32)), ArgumentError, "alpha",
                       r"an int for integral inputs \(the result is int32\)", {"alpha": 2.5}),
            ErrorInput("float-alpha-bool", (z(2, dtype=b), z(2, dtype=b)), ArgumentError, "alpha",
                       r"an int for integral inputs \(the result is bool\)", {"alpha": 0.5}),
            ErrorInput("alpha-overflow-uint8", (z(2, dtype=u8), z(2, dtype=u8)), ArgumentError, "alpha",
                       f"{fit} uint8", {"alpha": 256}),
            ErrorInput("alpha-overflow-float16", (z(2, dtype=f16), z(2, dtype=f16)), ArgumentError, "alpha",
                       f"{fit} float16", {"alpha": 1e6}),
            ErrorInput("alpha-huge-int", (z(2), z(2)), ArgumentError, "alpha", "int64 range", {"alpha": 2**70}),
        ],
        "sub": [
            ErrorInput("broadcast", (z(2, 3), z(2)), ShapeError, "other", "shapes that broadcast together"),
            ErrorInput("two-bools", (z(2, dtype=b), z(2, dtype=b)), DTypeError, "other", "subtracting two bool"),
            ErrorInput("bool-scalar", (z(2, dtype=b), True), DTypeError, "other", "subtracting two bool"),
            ErrorInput("bool-x", (z(2, dtype=b), z(2, dtype=i32)), DTypeError, "x", "subtraction with a bool"),
            ErrorInput("bool-other", (z(2, dtype=i64), True), DTypeError, "other", "subtraction with a bool"),
            ErrorInput("alpha-negated-overflow", (z(2, dtype=i8), z(2, dtype=i8)), ArgumentError, "alpha",
                       "-alpha to fit in int8", {"alpha": -128}),
            ErrorInput("float-alpha-int", (z(2, dtype=i64), 1), ArgumentError, "alpha", "an int for integral inputs",
                       {"alpha": 1.0}),
        ],
        "mul": [
            ErrorInput("broadcast", (z(3, 1, 2), z(4, 3)), ShapeError, "other", "shapes that broadcast together"),
            ErrorInput("huge-int", (z(2, dtype=i32), -(2**64)), ArgumentError, "other", "int64 range"),
        ],
        "div": [
            ErrorInput("broadcast", (z(2, 3), z(2)), ShapeError, "other", "shapes that broadcast together"),
            ErrorInput("rounding-mode", (z(2), 2.0), ArgumentError, "rounding_mode", "one of None, 'trunc', 'floor'",
                       {"rounding_mode": "round"}),
            ErrorInput("bool-rounding", (z(2, dtype=b), z(2, dtype=b)), DTypeError, "x", "whose result is not bool",
                       {"rounding_mode": "trunc"}),
            ErrorInput("int-by-zero", (tensor_of([4, 5], i64), tensor_of([2, 0], i64)), ArgumentError, "other",
                       "no zero divisor", {"rounding_mode": "floor"}, raised_by="kernel"),
            ErrorInput("int-by-zero-scalar", (tensor_of([4, 5], i8), 0), ArgumentError, "other", "no zero divisor",
                       {"rounding_mode": "trunc"}, raised_by="kernel"),
        ],
        "relu": [ErrorInput("bool", (z(2, dtype=b),), DTypeError, "x", "found bool")],
        "gelu": [
            ErrorInput("int", (z(2, dtype=i64),), DTypeError, "x", "found int64"),
            ErrorInput("bool", (z(2, dtype=b),), DTypeError, "x", "found bool"),
            ErrorInput("approximate", (z(2),), ArgumentError, "approximate", "one of 'none', 'tanh'",
                       {"approximate": "erf"}),
        ],
        "silu": [ErrorInput("int", (z(2, dtype=i32),), DTypeError, "x", "found int32")],
        "softplus": [ErrorInput("int", (z(2, dtype=i64),), DTypeError, "x", "found int64")],
        "hardswish": [ErrorInput("int", (z(2, dtype=i32),), DTypeError, "x", "found int32"),
                      ErrorInput("bool", (z(2, dtype=b),), DTypeError, "x", "found bool")],
        "hardsigmoid": [ErrorInput("int", (z(2, dtype=i64),), DTypeError, "x", "found int64"),
                        ErrorInput("bool", (z(2, dtype=b),), DTypeError, "x", "found bool")],
        "pow": [
            ErrorInput("broadcast", (z(2, 3), z(2)), ShapeError, "exponent", "shapes that broadcast together"),
            ErrorInput("bool-bool", (z(2, dtype=b), True), DTypeError, "exponent", "not bool"),
            ErrorInput("bool-tensors", (z(2, dtype=b), z(2, dtype=b)), DTypeError, "exponent", "not bool"),
            ErrorInput("int-negative", (z(2, dtype=i32), -1), ArgumentError, "exponent", "an exponent >= 0"),
            ErrorInput("huge-int", (z(2), 2**70), ArgumentError, "exponent", "int64 range"),
        ],
        "cast": [ErrorInput("dtype", (z(2), "float8"), ArgumentError, "dtype", "one of ", torch_rejects=False)],
        "neg": [ErrorInput("bool", (z(2, dtype=b),), DTypeError, "x", "found bool")],
        "ceil": [ErrorInput("bool", (z(2, dtype=b),), DTypeError, "x", "found bool")],
        "minimum": [
            ErrorInput("broadcast", (z(2, 3), z(2)), ShapeError, "other", "shapes that broadcast together"),
            ErrorInput("number", (z(2), 2.0), ArgumentError, "other", "(?i)a tensor"),
        ],
        "abs": [ErrorInput("bool", (z(2, dtype=b),), DTypeError, "x", "found bool")],
        **{
            op: [
                ErrorInput("broadcast", (z(2, 3), z(2)), ShapeError, "other", "shapes that broadcast together"),
                ErrorInput("huge-int", (z(2, dtype=i32), 2**64), ArgumentError, "other", "int64 range"),
            ]
            for op in ("eq", "ne", "lt", "le", "gt", "ge")
        },
        **{
            op: [ErrorInput("broadcast", (z(3, 2), z(3)), ShapeError, "other", "shapes that broadcast together")]
            for op in LOGICAL
        },
    }  # fmt: skip


error_inputs = errors_by_op(_error_inputs)


def _entry(op: str) -> OpEntry:
    samples = binary_samples if op in BINARY else logical_samples if op in LOGICAL else unary_samples
    return OpEntry(op, lambda: samples(op), lambda: error_inputs(op))


ENTRIES: tuple[OpEntry, ...] = (
    *(_entry(op) for op in BINARY + LOGICAL + UNARY),
    OpEntry("pow", pow_samples, lambda: error_inputs("pow")),
    OpEntry("cast", cast_samples, lambda: error_inputs("cast")),
)
