"""Kit entries for zeros_like, ones_like, full_like: every dtype of x and of the result, shapes,
layouts, fill values of each kind (exact results)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from opcore.errors import ArgumentError
from opcore.testing.builders import SampleSet, shape_id, z
from opcore.testing.records import ErrorInput, OpEntry, Sample
from opcore.types import DType

__all__ = ["ENTRIES"]

# numpy inputs cannot come back as bfloat16 (numpy has none): a bfloat16 result only from a bfloat16 x
DTYPES = [d.value for d in DType]


def like_samples(op: str) -> Iterable[Sample]:
    s = SampleSet(op)
    fill = (7,) if op == "full_like" else ()
    for dtype in DTYPES:
        s.add(dtype, s.tensor((3, 4), dtype), *fill)
        if dtype != "bfloat16":
            s.add(f"float32-to-{dtype}", s.tensor((2, 3)), *fill, dtype=dtype)
    s.add("bfloat16-to-float32", s.tensor((2, 3), "bfloat16"), *fill, dtype="float32")
    for shape in ((), (0,), (2, 0, 3), (7,), (1, 2, 3, 4)):
        s.add(f"shape-{shape_id(shape)}", s.tensor(shape), *fill)
    for layout in ("transposed", "strided", "expanded"):
        s.add(layout, s.tensor((3, 4), layout=layout), *fill)
    s.add("large-float32", s.tensor((3, 4), low=-1e30, high=1e30), *fill)
    if op == "full_like":
        for dtype, value in [("int32", 2.7), ("int32", -2.7), ("uint8", -1), ("bool", 0.5), ("bool", 0),
                             ("float16", 65504.0), ("float32", -math.inf), ("float32", math.nan), ("int64", 2**62),
                             ("float64", 1e300), ("float32", True)]:  # fmt: skip
            s.add(f"{dtype}-fill-{value!r}", s.tensor((2, 3)), value, dtype=dtype)
    return s


def _errors(op: str) -> list[ErrorInput]:
    bad_dtype = ErrorInput("dtype", (z(2), *((1,) if op == "full_like" else ())), ArgumentError, "dtype", "one of ",
                           {"dtype": "float8"}, torch_rejects=False)  # fmt: skip
    if op != "full_like":
        return [bad_dtype]
    return [
        bad_dtype,
        ErrorInput("int8-overflow", (z(2), 300), ArgumentError, "fill_value", "converts to int8 without overflow",
                   {"dtype": "int8"}),
        ErrorInput("int-inf", (z(2, dtype="int32"), math.inf), ArgumentError, "fill_value",
                   "converts to int32 without overflow"),
    ]  # fmt: skip


def _entry(op: str) -> OpEntry:
    return OpEntry(op, lambda: like_samples(op), lambda: _errors(op))


ENTRIES: tuple[OpEntry, ...] = tuple(_entry(op) for op in ("zeros_like", "ones_like", "full_like"))
