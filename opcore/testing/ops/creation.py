"""Kit entries for zeros_like, ones_like, full_like (every dtype of x and of the result, shapes,
layouts, fill values of each kind) and zeros, ones, full, arange (sizes, dtypes, torch's dtype
inference, arange's lengths and signs); exact results. The kit sets a tensor-less op's ``device``
to the device of the backend's kernel."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy

from opcore.errors import ArgumentError, DeviceError, DTypeError, ShapeError
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
    s.add("float32-to-numpy-int16", s.tensor((2, 3)), *fill, dtype=numpy.int16)
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
    other_device = ErrorInput("device", (z(2), *((1,) if op == "full_like" else ())), DeviceError, "device",
                              "None or x's device", {"device": "cuda:0"}, torch_rejects=False)  # fmt: skip
    if op != "full_like":
        return [bad_dtype, other_device]
    return [
        bad_dtype,
        other_device,
        ErrorInput("int8-overflow", (z(2), 300), ArgumentError, "fill_value", "converts to int8 without overflow",
                   {"dtype": "int8"}),
        ErrorInput("int-inf", (z(2, dtype="int32"), math.inf), ArgumentError, "fill_value",
                   "converts to int32 without overflow"),
    ]  # fmt: skip


def _entry(op: str) -> OpEntry:
    return OpEntry(op, lambda: like_samples(op), lambda: _errors(op))


SIZES = ((), (0,), (7,), (2, 0, 3), (3, 4), (1, 2, 3, 4))


def sized_samples(op: str) -> Iterable[Sample]:
    """zeros, ones, full: every dtype (bfloat16 too: it comes back as a torch tensor), sizes,
    an int size, full's fill values and its dtype inference."""
    s = SampleSet(op)
    fill = (7,) if op == "full" else ()
    for size in SIZES:
        s.add(f"size-{shape_id(size)}", size, *fill)
    s.add("int-size", 5, *fill)
    s.add("list-size", [2, 3], *fill)
    for dtype in DTYPES:
        s.add(dtype, (2, 3), *fill, dtype=dtype)
    # a dtype as numpy writes it, and a DType (torch.float64 in the OpInfo test): the contract binds each to its name
    s.add("numpy-dtype", (2, 3), *fill, dtype=numpy.dtype("int32"))
    s.add("numpy-type", (2, 3), *fill, dtype=numpy.float64)
    s.add("opcore-dtype", (2, 3), *fill, dtype=DType.INT8)
    if op == "full":
        for value in (True, -3, 2.5, math.inf, math.nan, 2**62):  # inferred: bool, int64, float32
            s.add(f"inferred-{value!r}", (2, 3), value)
        for dtype, value in [("int32", 2.7), ("int32", -2.7), ("uint8", -1), ("bool", 0.5), ("float16", 65504.0),
                             ("float64", 1e300), ("float32", True), ("int64", -(2**63))]:  # fmt: skip
            s.add(f"{dtype}-fill-{value!r}", (2, 3), value, dtype=dtype)
    return s


def arange_samples() -> Iterable[Sample]:
    """arange(end), arange(start, end, step): int and float bounds, negative steps, lengths that
    round up, empty ranges, every numeric dtype."""
    s = SampleSet("arange")
    s.add("end-int", 5)
    s.add("end-zero", 0)
    s.add("end-float", 4.5)
    s.add("start-end", -3, 4)
    s.add("start-end-step", 1, 10, 3)
    s.add("negative-step", 5, -4, -2)
    s.add("float-step", 0, 1, 0.1)
    s.add("float-negative-step", 1.5, -1.0, -0.25)
    s.add("float-bounds-round-up", 0.5, 3.7)
    s.add("empty-equal-bounds", 3, 3)
    s.add("empty-equal-bounds-negative-step", 3, 3, -1)
    s.add("large-int64", 2**40, 2**40 + 5)
    s.add("keyword-end", 2, end=6)
    for dtype in DTYPES:
        if dtype != "bool":
            s.add(dtype, 0, 6, dtype=dtype)
    # integer dtypes count from int(start) by int(step); only int64 takes its length from int bounds
    s.add("int32-float-bounds", 0.5, 4.6, 2, dtype="int32")
    s.add("int64-float-bounds", 0.5, 4.6, 2, dtype="int64")
    s.add("int8-wraps", 100, 200, 50, dtype="int8")
    s.add("float64-fine-step", 0, 1, 1e-3, dtype="float64")
    s.add("int64-negative", -10, -20, -3, dtype="int64")
    return s


def _sized_errors(op: str) -> list[ErrorInput]:
    fill = (1,) if op == "full" else ()
    cases = [
        ErrorInput("negative-size", ((2, -1), *fill), ShapeError, "size", "non-negative sizes"),
        ErrorInput("float-size", ((2.0, 3), *fill), ArgumentError, "size[0]", "an int"),
        ErrorInput("dtype", ((2,), *fill), ArgumentError, "dtype", "one of ", {"dtype": "float8"}, torch_rejects=False),
        ErrorInput("device", ((2,), *fill), ArgumentError, "device", "'cpu', 'cuda'", {"device": "tpu"}),
    ]
    if op == "full":
        cases += [
            ErrorInput("int8-overflow", ((2,), 300), ArgumentError, "fill_value", "converts to int8 without overflow",
                       {"dtype": "int8"}),
            ErrorInput("int-inf", ((2,), math.inf), ArgumentError, "fill_value", "converts to int64 without overflow",
                       {"dtype": "int64"}),
            ErrorInput("fill-not-a-number", ((2,), "1"), ArgumentError, "fill_value", "a number"),
        ]  # fmt: skip
    return cases


def _arange_errors() -> list[ErrorInput]:
    return [
        ErrorInput("zero-step", (0, 5, 0), ArgumentError, "step", "non-zero"),
        ErrorInput("zero-step-float", (0.0, 5.0, 0.0), ArgumentError, "step", "non-zero"),
        ErrorInput("inconsistent-sign", (5, 0, 1), ArgumentError, "step", "sign agrees"),
        ErrorInput("inconsistent-sign-negative", (0, 5, -1), ArgumentError, "step", "sign agrees"),
        ErrorInput("infinite-end", (0, math.inf), ArgumentError, "end", "finite bounds"),
        ErrorInput("nan-start", (math.nan, 5), ArgumentError, "start", "finite bounds"),
        ErrorInput("bool-dtype", (5,), DTypeError, "dtype", "numeric dtype", {"dtype": "bool"}),
        ErrorInput("int64-step-truncates-to-zero", (0, 5, 0.5), ArgumentError, "step", "non-zero",
                   {"dtype": "int64"}),
        # torch's CPU kernel returns zeros here (its meta kernel raises): the contract refuses it
        ErrorInput("int16-step-truncates-to-zero", (0, 5, 0.5), ArgumentError, "step", "non-zero",
                   {"dtype": "int16"}, torch_rejects=False),
        ErrorInput("string-end", (0, "5"), ArgumentError, "end", "a number"),
        # torch checks the sign in double before an integer dtype's int(): int(0.1) - 0 is 0, refused
        ErrorInput("sign-before-int-conversion", (0, 0.1, -1), ArgumentError, "step", "sign agrees",
                   {"dtype": "int64"}),
        # torch counts integer aranges in int64, float16/bfloat16 ones in float32: the bounds must convert
        ErrorInput("step-beyond-int64", (0, 1, 1e300), ArgumentError, "step", "converts to int64",
                   {"dtype": "int32"}),
        ErrorInput("end-beyond-int64", (0, 1e19), ArgumentError, "end", "converts to int64", {"dtype": "int64"}),
        ErrorInput("step-beyond-float32", (0, 1, 1e300), ArgumentError, "step", "converts to float32",
                   {"dtype": "float16"}),
    ]  # fmt: skip


def _sized_entry(op: str) -> OpEntry:
    return OpEntry(op, lambda: sized_samples(op), lambda: _sized_errors(op))


ENTRIES: tuple[OpEntry, ...] = (
    *(_entry(op) for op in ("zeros_like", "ones_like", "full_like")),
    *(_sized_entry(op) for op in ("zeros", "ones", "full")),
    OpEntry("arange", arange_samples, _arange_errors),
)
