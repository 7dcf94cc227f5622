"""Kit entries for the shape ops: transpose, permute, reshape, cat and the view ops unsqueeze, squeeze,
flatten, expand, slice, select (exact results for every dtype)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy

from opcore.errors import ArgumentError, ShapeError
from opcore.meta import FLOATING
from opcore.testing.builders import SampleSet, shape_id, tensor_of, z
from opcore.testing.records import ErrorInput, OpEntry, Sample, errors_by_op
from opcore.testing.tolerances import EXACT

__all__ = ["ENTRIES"]

DTYPES = ("float32", "float16", "float64", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")
LAYOUTS = ("transposed", "strided", "expanded")


def transpose_samples() -> Iterable[Sample]:
    s = SampleSet("transpose")
    cases = [((), 0, -1), ((), 0, 0), ((5,), 0, -1), ((2, 3), 0, 1), ((2, 3), -1, -2), ((2, 3), 1, 1),
             ((2, 3, 4), 0, 2), ((2, 0, 4), 1, 2)]  # fmt: skip
    for shape, dim0, dim1 in cases:
        s.add(f"{shape_id(shape)}-{dim0}-{dim1}", s.tensor(shape), dim0, dim1)
    for dtype in DTYPES:
        s.add(dtype, s.tensor((2, 3, 4), dtype), 0, 2)
    for layout in LAYOUTS:
        s.add(layout, s.tensor((2, 3, 4), layout=layout), -1, 0)
    return s


def permute_samples() -> Iterable[Sample]:
    s = SampleSet("permute")
    cases = [((), ()), ((5,), (0,)), ((5,), (-1,)), ((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (-1, 0, 1)),
             ((2, 3, 4), (0, 1, 2)), ((2, 0, 4), (1, 2, 0))]  # fmt: skip
    for shape, dims in cases:
        s.add(f"{shape_id(shape)}-{'_'.join(map(str, dims)) or 'none'}", s.tensor(shape), dims)
    for dtype in DTYPES:
        s.add(dtype, s.tensor((2, 3, 4), dtype), (1, 2, 0))
    for layout in LAYOUTS:
        s.add(layout, s.tensor((2, 3, 4), layout=layout), (2, 0, 1))
    return s


def reshape_samples() -> Iterable[Sample]:
    s = SampleSet("reshape")
    cases = [((2, 3), (-1,)), ((2, 3), (3, 2)), ((2, 3), (1, 6, 1)), ((2, 3), (6, -1)), ((0, 3), (-1, 3)),
             ((0, 3), (3, 0, 5)), ((), (1,)), ((), (-1,)), ((1, 1), ()), ((2, 3, 4), (4, -1, 2)),
             ((6,), (2, 3))]  # fmt: skip
    for shape, new in cases:
        s.add(f"{shape_id(shape)}-to-{'_'.join(map(str, new)) or 'scalar'}", s.tensor(shape), new)
    for dtype in DTYPES:
        s.add(dtype, s.tensor((2, 3, 4), dtype), (4, -1))
    for layout in LAYOUTS:
        s.add(layout, s.tensor((2, 3, 4), layout=layout), (-1,), note="a copy: the strides do not allow a view")
    return s


def cat_samples() -> Iterable[Sample]:
    """Shapes, dims, 1-D empty tensors (skipped, as torch does), promotion, layouts, every dtype."""
    s = SampleSet("cat")
    cases: list[tuple[list[tuple[int, ...]], int]]  # (shapes, dim)
    cases = [([(2, 3), (1, 3)], 0), ([(2, 3), (2, 4)], 1), ([(2, 3), (2, 4), (2, 1)], -1), ([(2,), (3,)], 0),
             ([(2, 3)], 1), ([(2, 0), (2, 0)], 0), ([(2, 0), (2, 3)], 1), ([(1, 2, 3), (1, 2, 3)], -2),
             ([(2, 3), (0,)], 0), ([(0,), (2, 3)], 1), ([(0,), (2, 3), (0,), (1, 3)], 0),
             ([(0,), (0,)], 0)]  # fmt: skip
    for shapes, dim in cases:
        s.add(f"{'-'.join(shape_id(shape) for shape in shapes)}-dim{dim}", [s.tensor(shape) for shape in shapes], dim)
    for dtype in DTYPES:
        s.add(dtype, [s.tensor((2, 3, 4), dtype), s.tensor((2, 1, 4), dtype)], 1)
    promotions = [("float32", "int64"), ("float16", "bfloat16"), ("int8", "bool"), ("uint8", "int8"),
                  ("int64", "float16"), ("int32", "float64", "float16"), ("float64", "float32")]  # fmt: skip
    for dtypes in promotions:
        s.add(f"promote-{'-'.join(dtypes)}", [s.tensor((2, 3), dtype) for dtype in dtypes], 0)
    s.add("skip-empty-promotes", [s.tensor((0,), "float64"), s.tensor((2, 3))], 0, note="the empty one still promotes")
    parts = [s.tensor((3, 4), layout="transposed"), s.tensor((3, 4), layout="strided"), s.tensor((3, 4))]
    s.add("non-contiguous-dim0", parts, 0)
    s.add("non-contiguous-dim1", parts, 1)
    s.add("expanded", [s.tensor((3, 4), layout="expanded"), s.tensor((1, 4))], 0)
    return s


def _every_dtype_and_layout(s: SampleSet, *args: object) -> None:
    """The same attributes over every dtype, large magnitudes and every non-contiguous layout of a
    (2, 3, 4) tensor."""
    s.add("large", s.tensor((2, 3, 4), low=-1e4, high=1e4), *args)
    for dtype in DTYPES:
        s.add(dtype, s.tensor((2, 3, 4), dtype), *args)
    for layout in LAYOUTS:
        s.add(layout, s.tensor((2, 3, 4), layout=layout), *args)


def clone_samples() -> Iterable[Sample]:
    s = SampleSet("clone")
    for shape in [(), (5,), (2, 3), (2, 0), (2, 3, 4)]:
        s.add(shape_id(shape), s.tensor(shape))
    s.add("nan-inf", tensor_of(numpy.array([numpy.nan, numpy.inf, -numpy.inf, -0.0]), "float32"))
    _every_dtype_and_layout(s)
    return s


def unsqueeze_samples() -> Iterable[Sample]:
    s = SampleSet("unsqueeze")
    cases = [((), 0), ((), -1), ((5,), 0), ((5,), 1), ((5,), -1), ((5,), -2), ((2, 3), 1), ((2, 0), 2),
             ((2, 3, 4), -4)]  # fmt: skip
    for shape, dim in cases:
        s.add(f"{shape_id(shape)}-{dim}", s.tensor(shape), dim)
    _every_dtype_and_layout(s, 1)
    return s


def squeeze_samples() -> Iterable[Sample]:
    s = SampleSet("squeeze")
    cases = [((), None), ((), (0,)), ((), (-1,)), ((1,), None), ((1, 3, 1), None), ((1, 3, 1), (0,)),
             ((1, 3, 1), (1,)), ((1, 3, 1), (-1, 0)), ((1, 3, 1), ()), ((1, 0, 1), None), ((1, 0, 1), (1, 2)),
             ((2, 3), None)]  # fmt: skip
    for shape, dim in cases:
        name = "all" if dim is None else "_".join(map(str, dim)) or "none"
        s.add(f"{shape_id(shape)}-{name}", s.tensor(shape), dim)
    s.add("keyword-dim", s.tensor((1, 3, 1)), dim=(2,))
    s.add("default", s.tensor((1, 3, 1)))
    for dtype in DTYPES:
        s.add(dtype, s.tensor((2, 1, 4), dtype), (1,))
    s.add("large", s.tensor((2, 1, 4), low=-1e4, high=1e4), (1,))
    for layout in LAYOUTS:
        s.add(layout, s.tensor((3, 1, 4), layout=layout), None)
    return s


def flatten_samples() -> Iterable[Sample]:
    s = SampleSet("flatten")
    cases = [((), 0, -1), ((), 0, 0), ((5,), 0, -1), ((2, 3, 4), 0, -1), ((2, 3, 4), 1, 2), ((2, 3, 4), 0, 1),
             ((2, 3, 4), -2, -1), ((2, 3, 4), 1, 1), ((2, 0, 4), 1, 2), ((2, 3, 4, 5), 1, 2)]  # fmt: skip
    for shape, start, end in cases:
        s.add(f"{shape_id(shape)}-{start}-{end}", s.tensor(shape), start, end)
    s.add("default", s.tensor((2, 3, 4)))
    s.add("keyword-start", s.tensor((2, 3, 4)), start_dim=1)
    _every_dtype_and_layout(s, 1, -1)
    return s


def expand_samples() -> Iterable[Sample]:
    s = SampleSet("expand")
    cases = [((), ()), ((), (3,)), ((), (2, 3)), ((1,), (4,)), ((1,), (-1,)), ((3, 1), (3, 4)), ((3, 1), (-1, 4)),
             ((3, 1), (2, 3, 4)), ((3, 1), (2, -1, -1)), ((1, 4), (0, 4)), ((2, 0), (3, 2, 0)),
             ((2, 3), (2, 3))]  # fmt: skip
    for shape, size in cases:
        s.add(f"{shape_id(shape)}-to-{'_'.join(map(str, size)) or 'scalar'}", s.tensor(shape), size)
    for dtype in DTYPES:
        s.add(dtype, s.tensor((2, 1, 4), dtype), (3, 2, 5, 4))
    s.add("large", s.tensor((2, 1, 4), low=-1e4, high=1e4), (3, 2, 5, 4))
    for layout in LAYOUTS:
        s.add(layout, s.tensor((2, 3, 4), layout=layout), (2, -1, 3, 4))
    return s


def slice_samples() -> Iterable[Sample]:
    """Bounds as torch clamps them: None ends, negatives, out of range, empty results, steps."""
    s = SampleSet("slice")
    cases = [((6,), 0, None, None, 1), ((6,), 0, 1, 4, 1), ((6,), 0, -4, -1, 1), ((6,), 0, 1, None, 2),
             ((6,), 0, None, 100, 3), ((6,), 0, -100, 2, 1), ((6,), 0, 4, 2, 1), ((6,), 0, 7, 9, 1),
             ((6,), -1, 0, 6, 4), ((2, 5, 3), 1, 1, -1, 1), ((2, 5, 3), -1, 1, None, 1), ((2, 5, 3), 0, 1, 2, 1),
             ((2, 0, 3), 1, 0, 1, 1), ((0,), 0, 0, 1, 1), ((2, 5, 3), 1, None, None, 2)]  # fmt: skip
    for shape, dim, start, end, step in cases:
        s.add(f"{shape_id(shape)}-{dim}-{start}-{end}-{step}", s.tensor(shape), dim, start, end, step)
    s.add("default", s.tensor((4, 3)))
    s.add("keyword-end", s.tensor((4, 3)), 1, end=2)
    _every_dtype_and_layout(s, 1, 1, 3, 1)
    return s


def select_samples() -> Iterable[Sample]:
    s = SampleSet("select")
    cases = [((5,), 0, 2), ((5,), 0, -1), ((5,), -1, -5), ((2, 3), 0, 1), ((2, 3), 1, -1), ((2, 3, 4), 2, 3),
             ((2, 0, 4), 0, 1), ((2, 0, 4), 2, 0)]  # fmt: skip
    for shape, dim, index in cases:
        s.add(f"{shape_id(shape)}-{dim}-{index}", s.tensor(shape), dim, index)
    _every_dtype_and_layout(s, 1, -2)
    return s


def _error_inputs() -> dict[str, list[ErrorInput]]:
    dim = "a dim in the range"
    return {
        "transpose": [
            ErrorInput("dim0", (z(2, 3), 2, 0), ShapeError, "dim0", dim),
            ErrorInput("dim1", (z(2, 3), 0, -3), ShapeError, "dim1", dim),
            ErrorInput("0d", (z(), 0, 1), ShapeError, "dim1", r"\[-1, 0\] for a 0-D tensor"),
        ],
        "permute": [
            ErrorInput("count", (z(2, 3), (0,)), ShapeError, "dims", "2 dims, one per dimension"),
            ErrorInput("0d", (z(), (0,)), ShapeError, "dims", "0 dims"),
            ErrorInput("repeated", (z(2, 3), (0, 0)), ArgumentError, "dims", "each dim exactly once"),
            ErrorInput("repeated-negative", (z(2, 3), (1, -1)), ArgumentError, "dims", "each dim exactly once"),
            ErrorInput("range", (z(2, 3), (0, 2)), ShapeError, "dims[1]", dim),
        ],
        "reshape": [
            ErrorInput("two-unknown", (z(2, 3), (-1, -1)), ArgumentError, "shape", "at most one -1"),
            ErrorInput("negative", (z(2, 3), (-2, 3)), ArgumentError, "shape[0]", "a size >= 0"),
            ErrorInput("size", (z(2, 3), (4, 2)), ShapeError, "shape", r"a shape of 6 elements, found \[4, 2\]"),
            ErrorInput("size-unknown", (z(2, 3), (4, -1)), ShapeError, "shape", "whose product divides 6"),
            ErrorInput("ambiguous", (z(0, 3), (0, -1)), ShapeError, "shape", "no -1 beside a zero size"),
            ErrorInput("0d", (z(), (2,)), ShapeError, "shape", "a shape of 1 elements"),
        ],
        "cat": [
            ErrorInput("empty-list", ([],), ArgumentError, "tensors", "a non-empty list"),
            ErrorInput("0d", ([z(), z()],), ShapeError, "tensors[0]", "a 0-D tensor cannot be concatenated"),
            ErrorInput("0d-later", ([z(3), z()],), ShapeError, "tensors[1]", "a 0-D tensor cannot be concatenated"),
            ErrorInput("rank", ([z(2, 3), z(3)],), ShapeError, "tensors[1]", r"a 2-D tensor like tensors\[0\]"),
            ErrorInput("size", ([z(2, 3), z(2, 4)],), ShapeError, "tensors[1]", "size 3 at dim 1"),
            ErrorInput("size-after-skip", ([z(0), z(2, 3), z(1, 4)],), ShapeError, "tensors[2]",
                       r"like tensors\[1\]"),
            ErrorInput("empty-2d-is-not-skipped", ([z(0, 3), z(2, 4)],), ShapeError, "tensors[1]", "size 3 at dim 1"),
            ErrorInput("dim", ([z(2, 3), z(2, 3)], 2), ShapeError, "dim", dim),
            ErrorInput("dim-after-skip", ([z(0), z(2, 3)], 2), ShapeError, "dim", dim),
        ],
        "unsqueeze": [
            ErrorInput("dim", (z(2, 3), 3), ShapeError, "dim", r"\[-3, 2\]"),
            ErrorInput("dim-negative", (z(2, 3), -4), ShapeError, "dim", r"\[-3, 2\]"),
        ],
        "squeeze": [
            ErrorInput("dim", (z(2, 3), (2,)), ShapeError, "dim[0]", dim),
            ErrorInput("dim-later", (z(2, 3), (0, -3)), ShapeError, "dim[1]", dim),
            ErrorInput("repeated", (z(1, 3), (0, -2)), ArgumentError, "dim", "each dim at most once"),
        ],
        "flatten": [
            ErrorInput("start", (z(2, 3), 2, -1), ShapeError, "start_dim", dim),
            ErrorInput("end", (z(2, 3), 0, 2), ShapeError, "end_dim", dim),
            ErrorInput("order", (z(2, 3, 4), 2, 1), ArgumentError, "end_dim", "at or after start_dim"),
        ],
        "expand": [
            ErrorInput("rank", (z(2, 3), (3,)), ShapeError, "size", "at least 2 sizes"),
            ErrorInput("size", (z(2, 3), (4, 3)), ShapeError, "size", "size 2 or -1 at dim 0"),
            ErrorInput("new-unknown", (z(2, 3), (-1, 2, 3)), ArgumentError, "size[0]", "-1 keeps an existing size"),
            ErrorInput("negative", (z(1, 3), (-2, 3)), ArgumentError, "size[0]", "a size >= 0"),
        ],
        "slice": [
            ErrorInput("0d", (z(), 0, 0, 1, 1), ShapeError, "x", "slice cannot cut a 0-D tensor"),
            ErrorInput("dim", (z(2, 3), 2, 0, 1, 1), ShapeError, "dim", dim),
            ErrorInput("step-zero", (z(2, 3), 0, 0, 1, 0), ArgumentError, "step", "a step >= 1"),
            ErrorInput("step-negative", (z(2, 3), 0, 0, 1, -1), ArgumentError, "step", "a step >= 1"),
        ],
        "select": [
            ErrorInput("0d", (z(), 0, 0), ShapeError, "x", "select cannot index a 0-D tensor"),
            ErrorInput("dim", (z(2, 3), -3, 0), ShapeError, "dim", dim),
            ErrorInput("index", (z(2, 3), 1, 3), ShapeError, "index", r"\[-3, 2\] for dim 1 of size 3"),
            ErrorInput("index-negative", (z(2, 3), 0, -3), ShapeError, "index", r"\[-2, 1\]"),
            ErrorInput("empty", (z(2, 0), 1, 0), ShapeError, "index", r"\[0, -1\]"),
        ],
    }  # fmt: skip


error_inputs = errors_by_op(_error_inputs)


_SAMPLES = {
    "transpose": transpose_samples,
    "permute": permute_samples,
    "reshape": reshape_samples,
    "cat": cat_samples,
    "clone": clone_samples,
    "unsqueeze": unsqueeze_samples,
    "squeeze": squeeze_samples,
    "flatten": flatten_samples,
    "expand": expand_samples,
    "slice": slice_samples,
    "select": select_samples,
}
# they move data (cat's promotion rounds to nearest, as every library does): results are exact
_EXACT = {dtype: EXACT for dtype in FLOATING}


def _entry(op: str) -> OpEntry:
    return OpEntry(op, _SAMPLES[op], lambda: error_inputs(op), _EXACT)


ENTRIES: tuple[OpEntry, ...] = tuple(_entry(op) for op in _SAMPLES)
