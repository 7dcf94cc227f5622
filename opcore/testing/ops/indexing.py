"""Kit entries for the indexing ops: gather, index, split, split_with_sizes, chunk, pad (exact
results for every dtype)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy

from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.meta import FLOATING
from opcore.testing.builders import SampleSet, shape_id, tensor_of, z
from opcore.testing.records import ErrorInput, OpEntry, Sample, errors_by_op
from opcore.testing.tolerances import EXACT

__all__ = ["ENTRIES"]

DTYPES = ("float32", "float16", "float64", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")
LAYOUTS = ("transposed", "strided", "expanded")


def _indices(
    s: SampleSet, shape: tuple[int, ...], size: int, *, dtype: str = "int64", negative: bool = False
) -> object:
    low = -size if negative else 0
    return tensor_of(s.rng.integers(low, max(size, 1), size=shape) if size else numpy.zeros(shape), dtype)


def gather_samples() -> Iterable[Sample]:
    s = SampleSet("gather")
    # a 0-D x or index: torch takes it as 1-D (the last four)
    cases = [((5,), 0, (3,)), ((5,), 0, (7,)), ((3, 4), 0, (2, 4)), ((3, 4), 1, (3, 6)), ((3, 4), -1, (2, 2)),
             ((2, 3, 4), 1, (2, 5, 4)), ((2, 3, 4), 2, (1, 2, 3)), ((3, 4), 0, (0, 4)), ((), 0, ()),
             ((5,), 0, ()), ((5,), -1, ()), ((), 0, (3,)), ((), -1, (1,))]  # fmt: skip
    for shape, dim, index_shape in cases:
        size = shape[dim] if shape else 1
        s.add(f"{shape_id(shape)}-{dim}-{shape_id(index_shape)}", s.tensor(shape), dim,
              _indices(s, index_shape, size))  # fmt: skip
    for dtype in DTYPES:
        s.add(dtype, s.tensor((3, 4), dtype), 1, _indices(s, (3, 5), 4))
    for layout in LAYOUTS:
        s.add(layout, s.tensor((3, 4), layout=layout), 0, _indices(s, (2, 4), 3))
    s.add("large", s.tensor((3, 4), low=-1e4, high=1e4), 1, _indices(s, (3, 5), 4))
    s.add("index-transposed", s.tensor((3, 4)), 1, tensor_of(s.rng.integers(0, 4, size=(3, 5)), "int64",
                                                              layout="transposed"))  # fmt: skip
    s.add("index-int32", s.tensor((3, 4)), 1, tensor_of(s.rng.integers(0, 4, size=(3, 5)), "int32"))
    return s


def index_samples() -> Iterable[Sample]:
    """Index tensors at some dims, None elsewhere, broadcasting, negatives, adjacency rules."""
    s = SampleSet("index")
    x = (4, 5, 6)
    cases: dict[str, list[tuple[int, ...] | None]] = {
        "first": [(3,)],
        "first-2d": [(2, 3)],
        "two-broadcast": [(2, 1), (3,)],
        "middle": [None, (3,)],
        "last": [None, None, (2, 2)],
        "adjacent-pair": [None, (2,), (2,)],
        "separated": [(3,), None, (3,)],
        "separated-broadcast": [(2, 1), None, (1, 3)],
        "scalar-index": [()],
        "empty-index": [(0,)],
    }
    for name, shapes in cases.items():
        indices = [None if shape is None else _indices(s, shape, x[i], negative=True) for i, shape in enumerate(shapes)]
        s.add(name, s.tensor(x), indices)
    s.add("int32-index", s.tensor(x), [None, _indices(s, (3,), 5, dtype="int32")])
    s.add("1d", s.tensor((5,)), [_indices(s, (4,), 5)])
    s.add("large", s.tensor((5,), low=-1e4, high=1e4), [_indices(s, (4,), 5)])
    s.add("empty-x", s.tensor((0, 3)), [None, _indices(s, (2,), 3)])
    for dtype in DTYPES:
        s.add(dtype, s.tensor((3, 4), dtype), [_indices(s, (2,), 3), None])
    for layout in LAYOUTS:
        s.add(layout, s.tensor((3, 4), layout=layout), [None, _indices(s, (5,), 4)])
    return s


def split_samples() -> Iterable[Sample]:
    s = SampleSet("split")
    cases = [((5, 2), 2, 0), ((6, 2), 3, 0), ((6, 2), 6, 0), ((6, 2), 10, 0), ((2, 7), 3, 1), ((2, 7), 1, -1),
             ((0, 3), 2, 0), ((0, 3), 0, 0), ((2, 0), 1, 0)]  # fmt: skip
    for shape, size, dim in cases:
        s.add(f"{shape_id(shape)}-{size}-{dim}", s.tensor(shape), size, dim)
    s.add("default-dim", s.tensor((5, 2)), 2)
    s.add("large", s.tensor((5,), low=-1e4, high=1e4), 2)
    for dtype in DTYPES:
        s.add(dtype, s.tensor((2, 5, 3), dtype), 2, 1)
    for layout in LAYOUTS:
        s.add(layout, s.tensor((2, 5, 3), layout=layout), 2, 1)
    # torch.split(x, [sizes], dim): a list of sizes
    s.add("sizes-list", s.tensor((5, 2)), [2, 3])
    s.add("sizes-tuple-dim1", s.tensor((2, 7)), (1, 0, 6), 1)
    return s


def split_with_sizes_samples() -> Iterable[Sample]:
    s = SampleSet("split_with_sizes")
    cases = [((5, 2), (2, 3), 0), ((5, 2), (5,), 0), ((5, 2), (0, 5, 0), 0), ((2, 7), (1, 2, 4), 1),
             ((2, 7), (3, 4), -1), ((0, 3), (0,), 0), ((0, 3), (0, 0), 0)]  # fmt: skip
    for shape, sizes, dim in cases:
        s.add(f"{shape_id(shape)}-{'_'.join(map(str, sizes))}-{dim}", s.tensor(shape), sizes, dim)
    s.add("large", s.tensor((5,), low=-1e4, high=1e4), (1, 4))
    for dtype in DTYPES:
        s.add(dtype, s.tensor((2, 5, 3), dtype), (1, 4), 1)
    for layout in LAYOUTS:
        s.add(layout, s.tensor((2, 5, 3), layout=layout), (3, 2), 1)
    return s


def chunk_samples() -> Iterable[Sample]:
    s = SampleSet("chunk")
    cases = [((5, 2), 2, 0), ((6, 2), 3, 0), ((6, 2), 4, 0), ((5, 2), 5, 0), ((5, 2), 9, 0), ((2, 7), 3, 1),
             ((2, 7), 1, -1), ((0, 3), 3, 0), ((2, 0), 2, 1)]  # fmt: skip
    for shape, chunks, dim in cases:
        s.add(f"{shape_id(shape)}-{chunks}-{dim}", s.tensor(shape), chunks, dim)
    s.add("default-dim", s.tensor((5, 2)), 2)
    s.add("large", s.tensor((5,), low=-1e4, high=1e4), 3)
    for dtype in DTYPES:
        s.add(dtype, s.tensor((2, 5, 3), dtype), 2, 1)
    for layout in LAYOUTS:
        s.add(layout, s.tensor((2, 5, 3), layout=layout), 2, 1)
    return s


def pad_samples() -> Iterable[Sample]:
    """Pads of the last dims (last first), zero, negative (cutting), values of each kind."""
    s = SampleSet("pad")
    cases = [((), ()), ((3,), (1, 2)), ((3,), (0, 0)), ((3,), ()), ((2, 3), (1, 1)), ((2, 3), (1, 0, 0, 2)),
             ((2, 3, 4), (1, 1, 2, 2, 0, 1)), ((2, 3), (-1, 2)), ((2, 3), (-1, -2)), ((2, 3), (2, -1, -1, 1)),
             ((0, 3), (1, 1, 1, 1)), ((2, 3), (-3, 0)), ((1, 2, 3, 4), (1, 1, 1, 1))]  # fmt: skip
    for shape, pads in cases:
        s.add(f"{shape_id(shape)}-{'_'.join(map(str, pads)) or 'none'}", s.tensor(shape), pads)
    s.add("value-float", s.tensor((2, 3)), (1, 1), "constant", 2.5)
    s.add("large", s.tensor((3,), low=-1e4, high=1e4), (2, -1))
    s.add("large-value", s.tensor((2, 3), low=-1e4, high=1e4), (1, 1), "constant", -1e4)
    s.add("value-int", s.tensor((2, 3)), (1, 1), "constant", -4)
    s.add("value-none", s.tensor((2, 3)), (1, 1), "constant", None)
    s.add("keyword-value", s.tensor((2, 3)), (0, 1, 1, 0), value=1.0)
    for dtype in DTYPES:
        s.add(dtype, s.tensor((2, 3, 4), dtype), (1, 2, 1, 0), "constant", True if dtype == "bool" else 1)
    for layout in LAYOUTS:
        s.add(layout, s.tensor((2, 3, 4), layout=layout), (1, 1, -1, 1), "constant", 0.5)
    # torch's other modes (torch.nn.functional.pad(x, pad, mode=...)): 1-3 padded dims after (N,) C
    for mode in ("reflect", "replicate", "circular"):
        for shape, pads in (((1, 2, 5), (2, 1)), ((2, 5), (-1, 3)), ((1, 2, 4, 5), (1, 2, 3, 0)),
                            ((2, 3, 4, 5, 3), (1, 1, 2, 2, 0, 1)), ((2, 4, 5), (2, -1))):  # fmt: skip
            s.add(f"{mode}-{shape_id(shape)}-{'_'.join(map(str, pads))}", s.tensor(shape), pads, mode)
        s.add(f"{mode}-int32", s.tensor((1, 2, 5), "int32"), (1, 2), mode=mode)
    return s


def _error_inputs() -> dict[str, list[ErrorInput]]:
    dim = "a dim in the range"
    i64 = z(2, 2, dtype="int64")
    return {
        "gather": [
            ErrorInput("dim", (z(2, 3), 2, i64), ShapeError, "dim", dim),
            ErrorInput("index-dtype", (z(2, 3), 0, z(2, 2, dtype="int16")), DTypeError, "index", "int64"),
            ErrorInput("index-rank", (z(2, 3), 0, z(2, dtype="int64")), ShapeError, "index", "a 2-D index"),
            ErrorInput("index-size", (z(2, 3), 0, z(2, 4, dtype="int64")), ShapeError, "index", "size <= 3 at dim 1"),
            ErrorInput("index-range", (z(2, 3), 0, tensor_of([[0, 2]], "int64")), ArgumentError, "index",
                       "out of range", raised_by="kernel"),
            ErrorInput("index-negative", (z(2, 3), 1, tensor_of([[-1]], "int64")), ArgumentError, "index",
                       "out of range", raised_by="kernel"),
        ],
        "index": [
            ErrorInput("too-many", (z(2, 3), [i64, i64, i64]), ShapeError, "indices", "at most 2 indices"),
            ErrorInput("none-only", (z(2, 3), [None]), ArgumentError, "indices", "at least one index tensor"),
            ErrorInput("mask", (z(2, 3), [z(2, dtype="bool")]), DTypeError, "indices[0]", "depends on the data"),
            ErrorInput("float", (z(2, 3), [None, z(2)]), DTypeError, "indices[1]", "int32 or int64"),
            ErrorInput("broadcast", (z(2, 3), [z(2, dtype="int64"), z(3, dtype="int64")]), ShapeError, "indices[1]",
                       "broadcast together"),
            ErrorInput("range", (z(2, 3), [None, tensor_of([0, 3], "int64")]), ArgumentError, "indices[1]",
                       "out of range", raised_by="kernel"),
            ErrorInput("range-negative", (z(2, 3), [tensor_of([-3], "int64")]), ArgumentError, "indices[0]",
                       "out of range", raised_by="kernel"),
        ],
        "split": [
            ErrorInput("0d", (z(), 1), ShapeError, "x", "cannot be split"),
            ErrorInput("dim", (z(2, 3), 1, 2), ShapeError, "dim", dim),
            ErrorInput("zero", (z(2, 3), 0), ArgumentError, "split_size", "a size >= 1"),
            ErrorInput("negative", (z(2, 3), -1), ArgumentError, "split_size", "a size >= 1"),
        ],
        "split_with_sizes": [
            ErrorInput("0d", (z(), (1,)), ShapeError, "x", "cannot be split"),
            ErrorInput("sum", (z(5, 3), (2, 2)), ShapeError, "split_sizes", "adding up to 5"),
            ErrorInput("negative", (z(5, 3), (6, -1)), ArgumentError, "split_sizes[1]", "a size >= 0"),
            ErrorInput("dim", (z(5, 3), (5,), -3), ShapeError, "dim", dim),
        ],
        "chunk": [
            ErrorInput("0d", (z(), 1), ShapeError, "x", "cannot be split"),
            ErrorInput("zero", (z(2, 3), 0), ArgumentError, "chunks", "chunks >= 1"),
            ErrorInput("dim", (z(2, 3), 1, 2), ShapeError, "dim", dim),
        ],
        "pad": [
            ErrorInput("odd", (z(2, 3), (1,)), ArgumentError, "pad", "an even number of pads"),
            ErrorInput("too-many", (z(3), (1, 1, 1, 1)), ShapeError, "pad", "at most 2 pads"),
            ErrorInput("mode", (z(2, 3), (1, 1), "wrap"), ArgumentError, "mode", "'constant', 'reflect'"),
            ErrorInput("reflect-value", (z(1, 2, 3), (1, 1), "reflect", 1.0), ArgumentError, "value", "no fill value"),
            ErrorInput("reflect-too-far", (z(1, 2, 3), (3, 0), "reflect"), ArgumentError, "pad", "below the size"),
            ErrorInput("circular-twice", (z(1, 2, 3), (4, 0), "circular"), ArgumentError, "pad", "more than once"),
            ErrorInput("mode-rank", (z(1, 2, 3, 4), (1, 1), "replicate"), ShapeError, "pad", "2 pads for a 2-D or"),
            ErrorInput("negative-size", (z(2, 3), (-2, -2)), ShapeError, "pad", "a size >= 0"),
            # torch cuts before it pads: pads that cancel still may not cut more than the dim
            ErrorInput("cancelling-pads", (z(2, 3), (2**62, -(2**62))), ShapeError, "pad", "cutting at most"),
        ],
    }  # fmt: skip


error_inputs = errors_by_op(_error_inputs)


_SAMPLES = {
    "gather": gather_samples,
    "index": index_samples,
    "split": split_samples,
    "split_with_sizes": split_with_sizes_samples,
    "chunk": chunk_samples,
    "pad": pad_samples,
}
# they move data (pad's value is cast to x's dtype as torch does): results are exact
_EXACT = {dtype: EXACT for dtype in FLOATING}


def _entry(op: str) -> OpEntry:
    return OpEntry(op, _SAMPLES[op], lambda: error_inputs(op), _EXACT)


ENTRIES: tuple[OpEntry, ...] = tuple(_entry(op) for op in _SAMPLES)
