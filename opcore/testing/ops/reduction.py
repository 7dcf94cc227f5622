"""Kit entries for the reductions: sum, mean, amax, amin (every dim-list variant over the same
shape families), argmax and cumsum."""

from __future__ import annotations

import math
from collections.abc import Iterable

from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.opset import BUILTIN_DTYPES
from opcore.testing.builders import SampleSet, shape_id, tensor_of, z
from opcore.testing.records import ErrorInput, OpEntry, Sample, errors_by_op
from opcore.types import DType

__all__ = ["ENTRIES"]

REDUCTIONS = ("sum", "mean", "amax", "amin")
LAYOUTS = ("transposed", "strided", "expanded")
_SPECIAL = [-math.inf, -1.0, -0.0, 0.0, 1.0, math.inf, math.nan, 2.0]
# (shape, dim) families; None and () both mean every dim
_DIMS: list[tuple[tuple[int, ...], tuple[int, ...] | None]] = [
    ((3, 4), None), ((3, 4), ()), ((3, 4), (0,)), ((3, 4), (-1,)), ((2, 3, 4), (0, 2)), ((2, 3, 4), (-1, 0, 1)),
    ((2, 3, 4), (1,)), ((7,), (0,)), ((), None), ((), (0,)), ((), (-1,)), ((5, 1), (1,)),
]  # fmt: skip
_EMPTY: list[tuple[tuple[int, ...], tuple[int, ...] | None]] = [((0, 3), (1,)), ((2, 0, 3), (0, 2))]


def _dtypes(op: str) -> list[str]:
    return [d.value for d in DType if d in BUILTIN_DTYPES[op]]


def _dim_id(dim: tuple[int, ...] | None) -> str:
    return "all" if dim is None else "_".join(map(str, dim)) or "empty-list"


def reduction_samples(op: str) -> Iterable[Sample]:
    """Each dim-list family with keepdim False and True, every dtype, layouts, special values."""
    s = SampleSet(op)
    floating = op == "mean"
    empty = _EMPTY + ([((0, 3), (0,)), ((0, 3), None)] if op in ("sum", "mean") else [])
    for keepdim in (False, True):
        tag = "-keepdim" if keepdim else ""
        for shape, dim in _DIMS + empty:
            s.add(f"{shape_id(shape)}-{_dim_id(dim)}{tag}", s.tensor(shape), dim, keepdim)
        for dtype in _dtypes(op):
            low, high = (-9, 9) if not floating else (-3, 3)
            s.add(f"{dtype}{tag}", s.tensor((3, 4), dtype, low=low, high=high), (1,), keepdim)
        for layout in LAYOUTS:
            s.add(f"{layout}{tag}", s.tensor((4, 5), layout=layout), (0,), keepdim)
    for dtype in ("float32", "float64", "float16"):
        s.add(f"{dtype}-special", tensor_of([_SPECIAL, _SPECIAL[::-1]], dtype), (1,), False)
    s.add("large-float32", s.tensor((3, 4), low=-1e30, high=1e30), None, False)
    s.add("float16-large", s.tensor((4, 8), "float16", low=-1e3, high=1e3), (1,), False)
    if op == "sum":
        s.add("uint8-widens", tensor_of([200, 200, 255], "uint8"), None, False)
        s.add("int64-wraps", tensor_of([2**62, 2**62, 2**62], "int64"), (0,), False)
        s.add("bool-counts", s.tensor((5, 6), "bool"), (1,), False)
    if op in ("amax", "amin"):
        s.add("int64-extremes", tensor_of([[-(2**63), 2**63 - 1, 0]], "int64"), (1,), False)
        s.add("signed-zeros", tensor_of([[0.0, -0.0], [-0.0, 0.0]], "float32"), (1,), False)
    return s


def argmax_samples() -> Iterable[Sample]:
    """Every dim (None: flattened) with keepdim, ties (the first wins), NaN (the first NaN wins)."""
    s = SampleSet("argmax")
    for keepdim in (False, True):
        tag = "-keepdim" if keepdim else ""
        for shape, dim in [((3, 4), None), ((3, 4), 0), ((3, 4), -1), ((2, 3, 4), 1), ((7,), 0), ((), None),
                           ((), 0), ((0, 3), 1), ((5, 1), 1)]:  # fmt: skip
            s.add(f"{shape_id(shape)}-{dim}{tag}", s.tensor(shape), dim, keepdim)
        for dtype in _dtypes("argmax"):
            s.add(f"{dtype}{tag}", s.tensor((3, 4), dtype, low=-9, high=9), 1, keepdim)
        for layout in LAYOUTS:
            s.add(f"{layout}{tag}", s.tensor((4, 5), layout=layout), 0, keepdim)
    s.add("int32-ties", tensor_of([[1, 3, 3, 0], [2, 2, 2, 2]], "int32"), 1)
    s.add("float32-ties-flat", tensor_of([[1.0, 5.0], [5.0, 2.0]], "float32"), None)
    s.add("float32-nan", tensor_of([[1.0, math.nan, 5.0, math.nan], [math.inf, 2.0, math.inf, 0.0]], "float32"), 1)
    s.add("float32-special", tensor_of([_SPECIAL], "float32"), -1)
    return s


def cumsum_samples() -> Iterable[Sample]:
    """Every dim, every dtype (integers and bools to int64), a dtype asked for, 0-D and empty x."""
    s = SampleSet("cumsum")
    for shape, dim in [((3, 4), 0), ((3, 4), 1), ((3, 4), -1), ((2, 3, 4), 1), ((7,), 0), ((), 0), ((), -1),
                       ((0, 3), 0), ((2, 0), 1)]:  # fmt: skip
        s.add(f"{shape_id(shape)}-{dim}", s.tensor(shape), dim)
    for dtype in _dtypes("cumsum"):
        s.add(dtype, s.tensor((3, 4), dtype, low=-9, high=9), 1)
    for source, target in [("int32", "float32"), ("float32", "float64"), ("float32", "int32"), ("bool", "int32"),
                           ("int64", "float16"), ("float64", "float16"), ("uint8", "int64")]:  # fmt: skip
        s.add(f"{source}-dtype-{target}", s.tensor((3, 4), source, low=-9, high=9), 1, dtype=target)
    for layout in LAYOUTS:
        s.add(layout, s.tensor((4, 5), layout=layout), 0)
    s.add("float32-special", tensor_of([_SPECIAL], "float32"), 1)
    s.add("uint8-widens", tensor_of([200, 200, 255], "uint8"), 0)
    s.add("int8-dtype-wraps", tensor_of([100, 100, 100], "int8"), 0, dtype="int8")
    return s


def _error_inputs() -> dict[str, list[ErrorInput]]:
    i32, b = "int32", "bool"
    common = [
        ErrorInput("dim-range", (z(2, 3), (2,), False), ShapeError, "dim", r"a dim in the range \[-2, 1\]"),
        ErrorInput("dim-twice", (z(2, 3), (1, -1), False), ArgumentError, "dim", "each dim at most once"),
    ]
    empty = [ErrorInput("empty-dim", (z(0, 3), (0,), False), ShapeError, "x", "a non-empty dim 0")]
    return {
        "sum": common,
        "mean": [*common, ErrorInput("int", (z(2, 3, dtype=i32), None, False), DTypeError, "x", "found int32")],
        "amax": [*common, *empty, ErrorInput("empty-all", (z(2, 0), None, False), ShapeError, "x", "non-empty dim 1")],
        "amin": [*common, *empty],
        "argmax": [
            ErrorInput("bool", (z(2, 3, dtype=b), 1, False), DTypeError, "x", "found bool"),
            ErrorInput("dim-range", (z(2, 3), -3, False), ShapeError, "dim", r"a dim in the range \[-2, 1\]"),
            ErrorInput("empty-dim", (z(0, 3), 0, False), ShapeError, "x", "a non-empty dim 0"),
            ErrorInput("empty-flat", (z(2, 0), None, False), ShapeError, "x", "a non-empty dim 1"),
        ],
        "cumsum": [
            ErrorInput("dim-range", (z(2, 3), 2), ShapeError, "dim", r"a dim in the range \[-2, 1\]"),
            ErrorInput("dtype", (z(2, 3), 0), ArgumentError, "dtype", "one of ", {"dtype": "float8"},
                       torch_rejects=False),
        ],
    }  # fmt: skip


error_inputs = errors_by_op(_error_inputs)


def _entry(op: str) -> OpEntry:
    samples = {"argmax": argmax_samples, "cumsum": cumsum_samples}.get(op) or (lambda: reduction_samples(op))
    return OpEntry(op, samples, lambda: error_inputs(op))


ENTRIES: tuple[OpEntry, ...] = tuple(_entry(op) for op in (*REDUCTIONS, "argmax", "cumsum"))
