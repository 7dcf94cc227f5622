"""Kit entries for the matrix products and the fused linear ops."""

from __future__ import annotations

from collections.abc import Iterable

import numpy

from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.testing.builders import SampleSet, ValueRange, shape_id, tensor_of, z
from opcore.testing.records import ErrorInput, OpEntry, Sample, TensorInput, errors_by_op
from opcore.testing.tolerances import REDUCED_PRECISION_CHAINS

__all__ = ["ENTRIES", "LINEAR_SHAPES", "int_range"]

FLOATS = ("float32", "float16", "float64", "bfloat16")
INTS = ("int64", "int32", "int16", "int8", "uint8")


def int_range(dtype: str) -> ValueRange:
    """Small integers, so that integer products stay exact (torch wraps as the reference does)."""
    if dtype in INTS:
        return {"low": 0, "high": 3} if dtype == "uint8" else {"low": -3, "high": 3}
    return {}


LINEAR_SHAPES = [
    ((2, 3), (4, 3), (4,)),
    ((2, 3), (4, 3), None),
    ((3,), (4, 3), (4,)),
    ((3,), (3,), None),
    ((3,), (3,), ()),
    ((2, 3), (3,), None),
    ((5, 2, 3), (4, 3), (4,)),
    ((2, 5, 2, 3), (4, 3), (5, 2, 4)),
    ((0, 3), (4, 3), (4,)),
    ((2, 0), (4, 0), (4,)),
    ((2, 3), (0, 3), (0,)),
    ((2, 3), (4, 3), ()),
    ((2, 3), (4, 3), (1,)),
    ((2, 3), (4, 3), (2, 4)),
    ((2, 3), (4, 3), (2, 1)),
]


def linear_samples() -> Iterable[Sample]:
    s = SampleSet("linear")
    for x_shape, w_shape, b_shape in LINEAR_SHAPES:
        bias = None if b_shape is None else s.tensor(b_shape)
        name = f"x{shape_id(x_shape)}-w{shape_id(w_shape)}-b{'none' if b_shape is None else shape_id(b_shape)}"
        s.add(name, s.tensor(x_shape), s.tensor(w_shape), bias)
    for dtype in FLOATS + INTS:
        options = int_range(dtype)
        x, w, b = s.tensor((3, 2, 8), dtype, **options), s.tensor((5, 8), dtype, **options), s.tensor((5,), dtype)
        s.add(dtype, x, w, b)
        s.add(f"{dtype}-no-bias", x, w)
    for layout in ("transposed", "strided"):
        s.add(layout, s.tensor((4, 6), layout=layout), s.tensor((5, 6), layout=layout), s.tensor((5,), layout=layout))
        s.add(f"int64-{layout}", s.tensor((4, 6), "int64", layout=layout), s.tensor((5, 6), "int64", layout=layout))
    s.add("w-1d-bias-0d", s.tensor((2, 3), "float64"), s.tensor((3,), "float64"), s.tensor((), "float64"),
          note="torch's F.linear refuses this bias; opcore broadcasts it")  # fmt: skip
    s.add("large", s.tensor((4, 16), low=-1e3, high=1e3), s.tensor((6, 16), low=-1e3, high=1e3), s.tensor((6,)))
    s.add("small", s.tensor((4, 16), low=-1e-3, high=1e-3), s.tensor((6, 16), low=-1e-3, high=1e-3))
    s.add("int8-wraps", tensor_of(numpy.full((1, 4), 100), "int8"), tensor_of(numpy.full((1, 4), 100), "int8"))
    s.add("int32-wraps", tensor_of(numpy.full((1, 3), 2**31 - 1), "int32"), tensor_of(numpy.ones((2, 3)), "int32"))
    return s


_MATMUL_SHAPES = [
    ((3,), (3,)),
    ((2, 3), (3,)),
    ((3,), (3, 4)),
    ((4, 3), (3, 6)),
    ((2, 4, 3), (3,)),
    ((3,), (2, 3, 4)),
    ((2, 1, 4, 3), (5, 3, 6)),
    ((7, 4, 3), (3, 2)),
    ((0, 3), (3, 2)),
    ((2, 0), (0, 3)),
    ((0,), (0,)),
    ((2, 0, 4, 3), (1, 3, 2)),
]


def matmul_samples() -> Iterable[Sample]:
    s = SampleSet("matmul")
    for x_shape, y_shape in _MATMUL_SHAPES:
        s.add(f"{shape_id(x_shape)}-{shape_id(y_shape)}", s.tensor(x_shape), s.tensor(y_shape))
    for dtype in FLOATS + INTS:
        s.add(dtype, s.tensor((2, 3, 5), dtype, **int_range(dtype)), s.tensor((5, 4), dtype, **int_range(dtype)))
    for layout in ("transposed", "strided"):
        s.add(layout, s.tensor((2, 3, 5), layout=layout), s.tensor((5, 4), layout=layout))
    s.add("large", s.tensor((3, 8), low=-1e3, high=1e3), s.tensor((8, 2), low=-1e3, high=1e3))
    return s


def bmm_samples() -> Iterable[Sample]:
    s = SampleSet("bmm")
    for x_shape, y_shape in [
        ((2, 3, 4), (2, 4, 5)),
        ((0, 3, 4), (0, 4, 5)),
        ((2, 0, 4), (2, 4, 1)),
        ((1, 1, 1), (1, 1, 1)),
    ]:
        s.add(f"{shape_id(x_shape)}-{shape_id(y_shape)}", s.tensor(x_shape), s.tensor(y_shape))
    for dtype in FLOATS + INTS:
        s.add(dtype, s.tensor((2, 3, 5), dtype, **int_range(dtype)), s.tensor((2, 5, 4), dtype, **int_range(dtype)))
    for layout in ("transposed", "strided"):
        s.add(layout, s.tensor((2, 3, 5), layout=layout), s.tensor((2, 5, 4), layout=layout))
    s.add("large", s.tensor((2, 3, 8), low=-1e3, high=1e3), s.tensor((2, 8, 2), low=-1e3, high=1e3))
    return s


def _groups(s: SampleSet, rows: int, groups: int, dtype: str = "int64", *, layout: str = "contiguous") -> TensorInput:
    return s.tensor((rows,), dtype, low=0, high=groups - 1, layout=layout)


def gather_mm_samples() -> Iterable[Sample]:
    """Rows spread over groups (some empty), all rows in one group, one row, no rows, int32 indices,
    every numeric dtype, transposed and strided operands (transformers' experts pass w transposed)."""
    s = SampleSet("gather_mm")
    # a kernel may take few rows (a decode step's) one by one and many grouped: both sizes here
    for rows, k, groups, n in [(6, 4, 3, 5), (9, 3, 8, 2), (1, 4, 3, 5), (0, 4, 3, 5), (5, 0, 2, 3), (4, 3, 2, 0),
                               (40, 6, 8, 3), (33, 4, 40, 2), (40, 8, 8, 4)]:  # fmt: skip
        s.add(f"{rows}x{k}-{groups}x{n}", s.tensor((rows, k)), s.tensor((groups, k, n)), _groups(s, rows, groups))
    s.add("one-group", s.tensor((5, 4)), s.tensor((3, 4, 2)), tensor_of([2, 2, 2, 2, 2], "int64"))
    s.add("one-group-many-rows", s.tensor((24, 4)), s.tensor((3, 4, 2)), tensor_of([1] * 24, "int64"))
    s.add("descending", s.tensor((4, 3)), s.tensor((4, 3, 2)), tensor_of([3, 2, 1, 0], "int64"))
    s.add("index-int32", s.tensor((6, 4)), s.tensor((3, 4, 5)), _groups(s, 6, 3, "int32"))
    for dtype in FLOATS + INTS:
        s.add(dtype, s.tensor((6, 5), dtype, **int_range(dtype)), s.tensor((3, 5, 4), dtype, **int_range(dtype)),
              _groups(s, 6, 3))  # fmt: skip
    for layout in ("transposed", "strided"):
        s.add(layout, s.tensor((6, 5), layout=layout), s.tensor((3, 5, 4), layout=layout),
              _groups(s, 6, 3, layout=layout))  # fmt: skip
    s.add("large", s.tensor((5, 8), low=-1e3, high=1e3), s.tensor((2, 8, 3), low=-1e3, high=1e3), _groups(s, 5, 2))
    return s


_ADDMM_SHAPES = [
    ((3, 5), (3, 4), (4, 5)),
    ((5,), (3, 4), (4, 5)),
    ((1, 5), (3, 4), (4, 5)),
    ((3, 1), (3, 4), (4, 5)),
    ((), (3, 4), (4, 5)),
    ((0, 5), (0, 4), (4, 5)),
    ((3, 0), (3, 4), (4, 0)),
    ((3, 5), (3, 0), (0, 5)),
    ((1, 1), (1, 1), (1, 1)),
]


def addmm_samples() -> Iterable[Sample]:
    """Broadcast x, empty n/m/k, every numeric dtype, beta/alpha (beta=0 drops x's NaN), GPT-2's Conv1D."""
    s = SampleSet("addmm")
    for x_shape, a_shape, b_shape in _ADDMM_SHAPES:
        name = f"x{shape_id(x_shape)}-{shape_id(a_shape)}-{shape_id(b_shape)}"
        s.add(name, s.tensor(x_shape), s.tensor(a_shape), s.tensor(b_shape))
    for dtype in FLOATS + INTS:
        options = int_range(dtype)
        x, a = s.tensor((4,), dtype, **options), s.tensor((3, 6), dtype, **options)
        b = s.tensor((6, 4), dtype, **options)
        s.add(dtype, x, a, b)
        factors = {"beta": 2, "alpha": 3} if dtype in INTS else {"beta": 0.5, "alpha": -1.5}
        s.add(f"{dtype}-beta-alpha", x, a, b, **factors)
    s.add("beta-0-nan", tensor_of(numpy.full((2, 3), numpy.nan), "float32"), s.tensor((2, 4)), s.tensor((4, 3)),
          beta=0)  # fmt: skip
    s.add("alpha-0", s.tensor((2, 3)), s.tensor((2, 4)), s.tensor((4, 3)), alpha=0)
    s.add("int-beta-alpha-float32", s.tensor((2, 3)), s.tensor((2, 4)), s.tensor((4, 3)), beta=2, alpha=-1)
    for layout in ("transposed", "strided"):
        s.add(layout, s.tensor((6,), layout=layout), s.tensor((4, 5), layout=layout), s.tensor((5, 6), layout=layout))
    s.add("conv1d-gpt2", s.tensor((12,)), s.tensor((7, 8)), s.tensor((8, 12)))
    s.add("large", s.tensor((3,), low=-1e3, high=1e3), s.tensor((2, 8), low=-1e3, high=1e3), s.tensor((8, 3)))
    return s


def fused_samples(op: str) -> Iterable[Sample]:
    """Every dtype, 1-D and batched inputs, empty batches, with and without bias; gelu's approximate."""
    s = SampleSet(op)
    dtypes = FLOATS + (INTS if op == "linear_relu" else ())
    for dtype in dtypes:
        options = int_range(dtype)
        cases = [((4, 8), True), ((8,), False)] + ([((2, 3, 8), True), ((0, 8), True)] if dtype == "float32" else [])
        for x_shape, with_bias in cases:
            bias = s.tensor((6,), dtype, **options) if with_bias else None
            name = f"{dtype}-{shape_id(x_shape)}" + ("" if with_bias else "-no-bias")
            s.add(name, s.tensor(x_shape, dtype, **options), s.tensor((6, 8), dtype, **options), bias)
    s.add("w-transposed", s.tensor((4, 8)), s.tensor((6, 8), layout="transposed"), s.tensor((6,)))
    s.add("x-strided", s.tensor((4, 8), layout="strided"), s.tensor((6, 8)), None)
    s.add("large", s.tensor((4, 8), low=-300, high=300), s.tensor((6, 8), low=-300, high=300), s.tensor((6,)))
    s.add("small", s.tensor((4, 8), low=-1e-3, high=1e-3), s.tensor((6, 8)), s.tensor((6,), low=-1e-3, high=1e-3))
    if op == "linear_gelu":
        for dtype in ("float32", "float16"):
            x, w, b = s.tensor((4, 8), dtype), s.tensor((6, 8), dtype, layout="transposed"), s.tensor((6,), dtype)
            s.add(f"{dtype}-tanh", x, w, b, approximate="tanh")
        s.add("float32-none", s.tensor((4, 8)), s.tensor((6, 8)), s.tensor((6,)), approximate="none")
    return s


def gated_mlp_samples() -> Iterable[Sample]:
    s = SampleSet("gated_mlp")

    def weights(dtype: str, layout: str = "contiguous") -> tuple[object, ...]:
        return (
            s.tensor((16, 8), dtype, low=-1, high=1, layout=layout),
            s.tensor((16, 8), dtype, low=-1, high=1),
            s.tensor((5, 16), dtype, layout=layout),
        )

    for dtype in FLOATS:
        for x_shape in [(3, 8), (8,)] + ([(2, 3, 8), (0, 8)] if dtype == "float32" else []):
            s.add(f"{dtype}-{shape_id(x_shape)}", s.tensor(x_shape, dtype), *weights(dtype))
    s.add("transposed-weights", s.tensor((3, 8)), *weights("float32", "transposed"))
    s.add("x-strided", s.tensor((3, 8), layout="strided"), *weights("float32"))
    s.add("large-x", s.tensor((3, 8), low=-300, high=300), *weights("float32"))
    return s


def _error_inputs() -> dict[str, list[ErrorInput]]:
    i32, i64, f64, b = "int32", "int64", "float64", "bool"
    same = r"the dtype of 'x' \(float32\)"
    bias = "a bias that broadcasts to the output shape"
    return {
        "linear": [
            ErrorInput("x-0d", (z(), z(4, 3)), ShapeError, "x", "at least 1 dimension"),
            ErrorInput("w-0d", (z(2, 3), z()), ShapeError, "w", "found a 0-D tensor"),
            ErrorInput("w-3d", (z(2, 3), z(1, 4, 3)), ShapeError, "w", "found a 3-D tensor"),
            ErrorInput("bool", (z(2, 3, dtype=b), z(2, 3, dtype=b)), DTypeError, "x", "found bool"),
            ErrorInput("w-dtype", (z(2, 3), z(4, 3, dtype=f64)), DTypeError, "w", same),
            ErrorInput("b-dtype", (z(2, 3), z(4, 3), z(4, dtype=f64)), DTypeError, "b", same),
            ErrorInput("in-features", (z(2, 3), z(4, 5)), ShapeError, "w", "in_features = 3"),
            ErrorInput("1d-in-features", (z(3), z(4)), ShapeError, "w", "in_features = 3"),
            ErrorInput("b-shape", (z(2, 3), z(4, 3), z(3)), ShapeError, "b", bias),
            ErrorInput("b-grows", (z(2, 3), z(4, 3), z(5, 2, 4)), ShapeError, "b", bias, torch_rejects=False),
        ],
        "addmm": [
            ErrorInput("mat1-1d", (z(3), z(4), z(4, 3)), ShapeError, "mat1", r"a 2-D matrix \(n, k\)"),
            ErrorInput("mat2-3d", (z(3), z(2, 4), z(1, 4, 3)), ShapeError, "mat2", r"a 2-D matrix \(k, m\)"),
            ErrorInput("bool", (z(2, 3, dtype=b), z(2, 4, dtype=b), z(4, 3, dtype=b)), DTypeError, "x", "found bool"),
            ErrorInput("mat2-dtype", (z(2, 3), z(2, 4), z(4, 3, dtype=f64)), DTypeError, "mat2", same),
            ErrorInput("inner", (z(2, 3), z(2, 4), z(3, 3)), ShapeError, "mat2", "k = 4 rows"),
            ErrorInput("x-shape", (z(4), z(2, 4), z(4, 3)), ShapeError, "x", "broadcasts to the product's shape"),
            ErrorInput("x-grows", (z(5, 2, 3), z(2, 4), z(4, 3)), ShapeError, "x", "broadcasts to the product's shape"),
            ErrorInput("float-beta-int", (z(2, 3, dtype=i32), z(2, 4, dtype=i32), z(4, 3, dtype=i32)), ArgumentError,
                       "beta", "an int for integral inputs", {"beta": 0.5}),
            ErrorInput("float-alpha-int", (z(2, 3, dtype=i32), z(2, 4, dtype=i32), z(4, 3, dtype=i32)), ArgumentError,
                       "alpha", "an int for integral inputs", {"alpha": 0.5}),
        ],
        "linear_relu": [
            ErrorInput("bool", (z(2, 3, dtype=b), z(2, 3, dtype=b)), DTypeError, "x", "found bool"),
            ErrorInput("in-features", (z(2, 3), z(4, 5)), ShapeError, "w", "in_features = 3"),
        ],
        "linear_silu": [
            ErrorInput("int", (z(2, 3, dtype=i32), z(4, 3, dtype=i32)), DTypeError, "x", "found int32",
                       torch_rejects=False),
            ErrorInput("b-shape", (z(2, 3), z(4, 3), z(2)), ShapeError, "b", bias, torch_rejects=False),
        ],
        "linear_gelu": [
            ErrorInput("int", (z(2, 3, dtype=i32), z(4, 3, dtype=i32)), DTypeError, "x", "found int32",
                       torch_rejects=False),
            ErrorInput("approximate", (z(2, 3), z(4, 3)), ArgumentError, "approximate", "one of 'none', 'tanh'",
                       {"approximate": "x"}, torch_rejects=False),
        ],
        "matmul": [
            ErrorInput("x-0d", (z(), z(3)), ShapeError, "x", "at least 1 dimension"),
            ErrorInput("y-0d", (z(3), z()), ShapeError, "y", "at least 1 dimension"),
            ErrorInput("bool", (z(2, 3, dtype=b), z(3, 2, dtype=b)), DTypeError, "x", "found bool"),
            ErrorInput("dtype", (z(2, 3), z(3, 2, dtype=f64)), DTypeError, "y", same),
            ErrorInput("inner", (z(2, 3), z(4, 2)), ShapeError, "y", "size at dim -2 = 3"),
            ErrorInput("inner-1d", (z(2, 3), z(4)), ShapeError, "y", "its size = 3"),
            ErrorInput("batch", (z(2, 4, 3), z(5, 3, 6)), ShapeError, "y", "shapes that broadcast together"),
        ],
        "bmm": [
            ErrorInput("x-2d", (z(4, 3), z(1, 3, 6)), ShapeError, "x", r"a 3-D tensor \(batch, n, k\)"),
            ErrorInput("y-4d", (z(1, 4, 3), z(1, 1, 3, 6)), ShapeError, "y", r"a 3-D tensor \(batch, k, m\)"),
            ErrorInput("bool", (z(1, 2, 3, dtype=b), z(1, 3, 2, dtype=b)), DTypeError, "x", "found bool"),
            ErrorInput("dtype", (z(1, 4, 3), z(1, 3, 6, dtype=f64)), DTypeError, "y", same),
            ErrorInput("batch", (z(2, 4, 3), z(1, 3, 6)), ShapeError, "y", r"\(batch, k\) = \(2, 3\)"),
            ErrorInput("inner", (z(1, 4, 3), z(1, 2, 6)), ShapeError, "y", r"\(batch, k\) = \(1, 3\)"),
        ],
        "gather_mm": [
            ErrorInput("x-1d", (z(4), z(2, 4, 3), z(1, dtype=i64)), ShapeError, "x", r"a 2-D tensor \(rows, k\)",
                       torch_rejects=False),
            ErrorInput("w-2d", (z(2, 4), z(4, 3), z(2, dtype=i64)), ShapeError, "w", r"a 3-D tensor \(groups, k, n\)"),
            ErrorInput("index-2d", (z(2, 4), z(2, 4, 3), z(2, 1, dtype=i64)), ShapeError, "index", "a 1-D tensor",
                       torch_rejects=False),
            ErrorInput("bool", (z(2, 3, dtype=b), z(2, 3, 2, dtype=b), z(2, dtype=i64)), DTypeError, "x",
                       "found bool"),
            ErrorInput("dtype", (z(2, 3), z(2, 3, 2, dtype=f64), z(2, dtype=i64)), DTypeError, "w", same),
            ErrorInput("index-float", (z(2, 3), z(2, 3, 2), z(2)), DTypeError, "index", "found float32"),
            ErrorInput("inner", (z(2, 3), z(2, 4, 2), z(2, dtype=i64)), ShapeError, "w", r"k = 3"),
            ErrorInput("rows", (z(2, 3), z(2, 3, 2), z(3, dtype=i64)), ShapeError, "index", r"shape \(2,\)",
                       torch_rejects=False),
            ErrorInput("no-groups", (z(2, 3), z(0, 3, 2), z(2, dtype=i64)), ShapeError, "w", "at least one group"),
            ErrorInput("index-range", (z(2, 3), z(2, 3, 2), tensor_of([0, 2], "int64")), ArgumentError, "index",
                       "out of range", raised_by="kernel"),
            ErrorInput("index-negative", (z(2, 3), z(2, 3, 2), tensor_of([-1, 0], "int64")), ArgumentError, "index",
                       "out of range", raised_by="kernel", torch_rejects=False),
        ],
        "gated_mlp": [
            ErrorInput("x-0d", (z(), z(4, 3), z(4, 3), z(3, 4)), ShapeError, "x", r"1 dimension \(\.\.\., hidden"),
            ErrorInput("w_gate-1d", (z(3), z(3), z(4, 3), z(3, 4)), ShapeError, "w_gate", "a 2-D weight",
                       torch_rejects=False),
            ErrorInput("w_down-3d", (z(3), z(4, 3), z(4, 3), z(1, 3, 4)), ShapeError, "w_down", "a 2-D weight",
                       torch_rejects=False),
            ErrorInput("int", (z(3, dtype=i32), z(4, 3, dtype=i32), z(4, 3, dtype=i32), z(3, 4, dtype=i32)),
                       DTypeError, "x", "found int32"),
            ErrorInput("dtype", (z(3), z(4, 3), z(4, 3), z(3, 4, dtype=f64)), DTypeError, "w_down", same),
            ErrorInput("hidden", (z(5), z(4, 3), z(4, 3), z(3, 4)), ShapeError, "w_gate", r"shape \(intermediate, 5\)"),
            ErrorInput("w_up", (z(3), z(4, 3), z(5, 3), z(3, 4)), ShapeError, "w_up", "the shape of 'w_gate'"),
            ErrorInput("w_down", (z(3), z(4, 3), z(4, 3), z(3, 5)), ShapeError, "w_down", r"shape \(out_features, 4\)"),
        ],
    }  # fmt: skip


error_inputs = errors_by_op(_error_inputs)


_SAMPLES = {
    "linear": linear_samples,
    "matmul": matmul_samples,
    "bmm": bmm_samples,
    "gather_mm": gather_mm_samples,
    "addmm": addmm_samples,
    "linear_relu": lambda: fused_samples("linear_relu"),
    "linear_silu": lambda: fused_samples("linear_silu"),
    "linear_gelu": lambda: fused_samples("linear_gelu"),
    "gated_mlp": gated_mlp_samples,
}
_CHAINED = {"linear_relu", "linear_silu", "linear_gelu", "gated_mlp"}


def _entry(op: str) -> OpEntry:
    tolerances = REDUCED_PRECISION_CHAINS if op in _CHAINED else {}
    return OpEntry(op, _SAMPLES[op], lambda: error_inputs(op), tolerances)


ENTRIES: tuple[OpEntry, ...] = tuple(_entry(op) for op in _SAMPLES)
