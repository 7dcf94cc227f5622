"""Kit entries for linear_wq and embedding_wq: int8 per channel and grouped, int4 grouped, symmetric
and asymmetric, every float dtype, with special values (all-zero groups, the extreme codes, scales
of 0) and the contract's errors.

The tolerance is wider than a plain linear's: ONNX Runtime's MatMulNBits at its default
accuracy_level 4 rounds x to 8 bits per block (|x| <= 1 here, K <= 128: errors up to ~0.1).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy

from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.quantize import pack_int4, quantize_weight
from opcore.testing.builders import SampleSet, shape_id, tensor_of, z
from opcore.testing.records import ErrorInput, OpEntry, Sample, Tolerance, errors_by_op
from opcore.types import DType

__all__ = ["ENTRIES"]

FLOATS = ("float32", "float16", "float64", "bfloat16")
# bits, group_size, symmetric, (N, K)
FORMATS = (
    (8, -1, True, (16, 64)),
    (8, -1, False, (16, 64)),
    (8, 32, False, (8, 64)),
    (4, 32, True, (16, 64)),
    (4, 64, False, (16, 128)),
    (4, 128, True, (32, 128)),
    (4, 32, False, (5, 96)),
)
TOLERANCES = {
    DType.FLOAT32: Tolerance(1e-2, 0.15),
    DType.FLOAT16: Tolerance(1e-2, 0.15),
    DType.BFLOAT16: Tolerance(5e-2, 0.3),
}


def _weights(
    s: SampleSet, shape: tuple[int, int], bits: int, group: int, symmetric: bool, scale_dtype: str = "float32"
) -> tuple[object, ...]:
    weight = s.rng.uniform(-1, 1, size=shape)
    qw = quantize_weight(weight.astype(numpy.float32), bits=bits, group_size=group, symmetric=symmetric)
    zero = None if qw.zero is None else tensor_of(qw.zero, "uint8")
    return tensor_of(qw.qweight, "uint8"), tensor_of(qw.scale, scale_dtype), zero


def linear_wq_samples() -> Iterable[Sample]:
    s = SampleSet("linear_wq")
    for bits, group, symmetric, (n, k) in FORMATS:
        name = f"int{bits}-g{group}-{'sym' if symmetric else 'asym'}-{n}x{k}"
        q, scale, zero = _weights(s, (n, k), bits, group, symmetric)
        s.add(name, s.tensor((3, k), low=-1, high=1), q, scale, zero, s.tensor((n,)), bits=bits, group_size=group)
    for dtype in FLOATS:
        q, scale, zero = _weights(s, (16, 64), 8, -1, True)
        x, b = s.tensor((2, 3, 64), dtype, low=-1, high=1), s.tensor((16,), dtype)
        s.add(f"{dtype}-int8", x, q, scale, zero, b, bits=8, group_size=-1)
        q4, scale4, zero4 = _weights(s, (16, 64), 4, 32, False)
        s.add(f"{dtype}-int4-no-bias", x, q4, scale4, zero4, None, bits=4, group_size=32)
    q, scale, zero = _weights(s, (16, 64), 8, -1, False)
    for layout in ("transposed", "strided"):
        s.add(f"x-{layout}", s.tensor((4, 64), low=-1, high=1, layout=layout), q, scale, zero, None,
              bits=8, group_size=-1)  # fmt: skip
    # large x: ONNX Runtime's rounding of x to 8 bits grows with it (|x| / 254 a term)
    s.add("x-large", s.tensor((2, 64), low=-300, high=300), q, scale, zero, None, bits=8, group_size=-1,
          tolerance=Tolerance(1e-2, 40.0))  # fmt: skip
    s.add("x-1d", s.tensor((64,), low=-1, high=1), q, scale, zero, None, bits=8, group_size=-1)
    s.add("x-empty-batch", s.tensor((0, 64)), q, scale, zero, s.tensor((16,)), bits=8, group_size=-1)
    # special values: a weight whose groups are all zero (scale 0), the extreme codes, explicit scales of 0
    zeros = numpy.zeros((16, 64), numpy.float32)
    zeros[:8] = s.rng.uniform(-1, 1, size=(8, 64))
    for symmetric in (True, False):
        qw = quantize_weight(zeros, bits=4, group_size=32, symmetric=symmetric)
        s.add(f"all-zero-groups-{'sym' if symmetric else 'asym'}", s.tensor((2, 64), low=-1, high=1),
              tensor_of(qw.qweight, "uint8"), tensor_of(qw.scale, "float32"),
              None if qw.zero is None else tensor_of(qw.zero, "uint8"), None, bits=4, group_size=32)  # fmt: skip
    x = s.tensor((2, 64), low=-1, high=1)
    scales = tensor_of(numpy.full((16, 2), 0.01), "float32")
    for bits, top in ((8, 255), (4, 15)):
        codes = numpy.zeros((16, 64), numpy.uint8)
        codes[:, 0::2], codes[:, 1::2] = top, 0
        packed = codes if bits == 8 else pack_int4(codes)
        zero_low = tensor_of(numpy.zeros((16, 2)), "uint8")
        zero_high = tensor_of(numpy.full((16, 2), top), "uint8")
        for label, zero_point in (("zero-at-0", zero_low), ("zero-at-max", zero_high), ("symmetric", None)):
            s.add(f"int{bits}-extreme-codes-{label}", x, tensor_of(packed, "uint8"), scales, zero_point, None,
                  bits=bits, group_size=32)  # fmt: skip
    scale_zero = numpy.full((16, 2), 0.02)
    scale_zero[::3] = 0.0
    q, _, zero = _weights(s, (16, 64), 8, 32, False)
    s.add("scales-of-0", x, q, tensor_of(scale_zero, "float32"), zero, s.tensor((16,)), bits=8, group_size=32)
    return s


def embedding_wq_samples() -> Iterable[Sample]:
    s = SampleSet("embedding_wq")
    for bits, group, symmetric, (n, k) in FORMATS:
        name = f"int{bits}-g{group}-{'sym' if symmetric else 'asym'}-{n}x{k}"
        q, scale, zero = _weights(s, (n, k), bits, group, symmetric)
        s.add(name, s.tensor((2, 3), "int64", low=0, high=n - 1), q, scale, zero, bits=bits, group_size=group)
    q, scale, zero = _weights(s, (16, 64), 8, -1, False)
    for index_dtype in ("int64", "int32"):
        for shape in ((), (5,), (2, 3), (0,), (2, 0)):
            indices = s.tensor(shape, index_dtype, low=0, high=15)
            s.add(f"{index_dtype}-{shape_id(shape)}", indices, q, scale, zero, bits=8, group_size=-1)
    for dtype in FLOATS:
        q4, scale4, zero4 = _weights(s, (16, 64), 4, 32, True, dtype)
        s.add(f"scale-{dtype}", s.tensor((4,), "int64", low=0, high=15), q4, scale4, zero4,
              bits=4, group_size=32)  # fmt: skip
    for layout in ("transposed", "strided"):
        s.add(f"indices-{layout}", s.tensor((3, 4), "int64", low=0, high=15, layout=layout), q, scale, zero,
              bits=8, group_size=-1)  # fmt: skip
    s.add("every-row-repeated", tensor_of(numpy.repeat(numpy.arange(16), 2)), q, scale, zero, bits=8, group_size=-1)
    # the extreme codes against zero points at both ends and the middle; scales of 0
    scales = tensor_of(numpy.full((16, 2), 0.01), "float32")
    for bits, top in ((8, 255), (4, 15)):
        codes = numpy.zeros((16, 64), numpy.uint8)
        codes[:, 0::2], codes[:, 1::2] = top, 0
        packed = tensor_of(codes if bits == 8 else pack_int4(codes), "uint8")
        for label, zero_point in (("zero-at-0", 0), ("zero-at-max", top), ("symmetric", None)):
            zeros = None if zero_point is None else tensor_of(numpy.full((16, 2), zero_point), "uint8")
            s.add(f"int{bits}-extreme-codes-{label}", s.tensor((6,), "int64", low=0, high=15), packed, scales, zeros,
                  bits=bits, group_size=32)  # fmt: skip
    scale_zero = numpy.full((16, 2), 0.02)
    scale_zero[::3] = 0.0
    q, _, zero = _weights(s, (16, 64), 8, 32, False)
    s.add("scales-of-0", tensor_of(numpy.arange(16)), q, tensor_of(scale_zero, "float32"), zero, bits=8,
          group_size=32)  # fmt: skip
    # large scales: rows up to ~6e4 (float16's range ends at 65504)
    s.add("scales-large", tensor_of(numpy.arange(16)), q, tensor_of(numpy.full((16, 2), 400.0), "float32"), zero,
          bits=8, group_size=32)  # fmt: skip
    return s


def _error_inputs() -> dict[str, list[ErrorInput]]:
    u8 = "uint8"
    x, q8, s1 = z(2, 64), z(16, 64, dtype=u8), z(16, 1)
    q4, s2 = z(16, 32, dtype=u8), z(16, 2)
    idx = tensor_of([0, 3])
    return {
        "linear_wq": [
            ErrorInput("bits-3", (x, q8, s1), ArgumentError, "bits", "4 or 8", {"bits": 3}, torch_rejects=False),
            ErrorInput("group-not-dividing-k", (x, q4, z(16, 2)), ShapeError, "group_size",
                       "a group size that divides in_features = 64", {"bits": 4, "group_size": 48},
                       torch_rejects=False),
            ErrorInput("group-0", (x, q4, s2), ArgumentError, "group_size", "-1 .per output channel.",
                       {"bits": 4, "group_size": 0}, torch_rejects=False),
            ErrorInput("scale-shape", (x, q4, z(16, 4)), ShapeError, "scale", r"shape \(16, 2\)",
                       {"bits": 4, "group_size": 32}, torch_rejects=False),
            ErrorInput("scale-1d", (x, q8, z(16)), ShapeError, "scale", "a 2-D tensor", torch_rejects=False),
            ErrorInput("scale-int", (x, q8, z(16, 1, dtype="int32")), DTypeError, "scale", "a floating dtype",
                       torch_rejects=False),
            ErrorInput("qweight-int8", (x, z(16, 64, dtype="int8"), s1), DTypeError, "qweight", "uint8",
                       torch_rejects=False),
            ErrorInput("qweight-width", (x, q8, s1), ShapeError, "qweight", r"shape \(16, 32\)", {"bits": 4},
                       torch_rejects=False),
            ErrorInput("zero-shape", (x, q8, s1, z(16, 2, dtype=u8)), ShapeError, "zero", r"shape \(16, 1\)",
                       torch_rejects=False),
            ErrorInput("zero-float", (x, q8, s1, z(16, 1)), DTypeError, "zero", "uint8", torch_rejects=False),
            ErrorInput("b-dtype", (x, q8, s1, None, z(16, dtype="float64")), DTypeError, "b", "the dtype of 'x'",
                       torch_rejects=False),
            ErrorInput("b-shape", (x, q8, s1, None, z(8)), ShapeError, "b", r"shape \(16,\)", torch_rejects=False),
            ErrorInput("x-int", (z(2, 64, dtype="int32"), q8, s1), DTypeError, "x", "found int32",
                       torch_rejects=False),
            ErrorInput("odd-k-int4", (z(2, 63), z(16, 31, dtype=u8), z(16, 1)), ShapeError, "x",
                       "an even in_features", {"bits": 4}, torch_rejects=False),
        ],
        "embedding_wq": [
            ErrorInput("float-indices", (z(2), q8, s1), DTypeError, "input", "found float32", torch_rejects=False),
            ErrorInput("bits-3", (idx, q8, s1), ArgumentError, "bits", "4 or 8", {"bits": 3}, torch_rejects=False),
            ErrorInput("group-not-dividing", (idx, q4, z(16, 2)), ShapeError, "group_size",
                       "divides embedding_dim = 64", {"bits": 4, "group_size": 24}, torch_rejects=False),
            ErrorInput("qweight-1d", (idx, z(16, dtype=u8), s1), ShapeError, "qweight", "a 2-D uint8",
                       torch_rejects=False),
            ErrorInput("qweight-float", (idx, z(16, 64), s1), DTypeError, "qweight", "uint8", torch_rejects=False),
            ErrorInput("scale-shape", (idx, q4, z(16, 4)), ShapeError, "scale", r"shape \(16, 2\)",
                       {"bits": 4, "group_size": 32}, torch_rejects=False),
            ErrorInput("scale-int", (idx, q8, z(16, 1, dtype="int32")), DTypeError, "scale", "a floating dtype",
                       torch_rejects=False),
            ErrorInput("zero-float", (idx, q8, s1, z(16, 1)), DTypeError, "zero", "uint8", torch_rejects=False),
            ErrorInput("index-high", (tensor_of([0, 16]), q8, s1), ArgumentError, "input", "out of range",
                       raised_by="kernel", torch_rejects=False),
            ErrorInput("index-negative", (tensor_of([[-1]], "int32"), q8, s1), ArgumentError, "input",
                       "out of range", raised_by="kernel", torch_rejects=False),
        ],
    }  # fmt: skip


error_inputs = errors_by_op(_error_inputs)

ENTRIES: tuple[OpEntry, ...] = (
    OpEntry("linear_wq", linear_wq_samples, lambda: error_inputs("linear_wq"), TOLERANCES),
    # the rows are dequantized exactly as the reference does (in float32 or float64, then the scale's dtype)
    OpEntry("embedding_wq", embedding_wq_samples, lambda: error_inputs("embedding_wq")),
)
