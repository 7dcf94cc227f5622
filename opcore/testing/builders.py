"""Helpers for writing entries: deterministic random tensors, sample lists with unique ids.

>>> samples = SampleSet("relu")
>>> samples.add("float32-2d", samples.tensor((2, 3)))
>>> [s.id for s in samples]
['float32-2d']
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any, TypedDict

import numpy

from opcore.testing.records import Sample, TensorInput, Tolerance
from opcore.types import DType

__all__ = ["SampleSet", "ValueRange", "shape_id", "tensor_of", "z"]


def shape_id(shape: tuple[int, ...]) -> str:
    """A shape as a test id: ``2x3``, ``7``, ``scalar`` for ()."""
    return "x".join(map(str, shape)) if shape else "scalar"


def z(*shape: int, dtype: str = "float32") -> TensorInput:
    """Zeros of a shape and dtype: the data of most error inputs does not matter."""
    return TensorInput.of(numpy.zeros(shape), dtype)


def tensor_of(values: Any, dtype: str | None = None, *, layout: str = "contiguous") -> TensorInput:
    """A TensorInput holding exactly these values (special values, data-dependent errors)."""
    return TensorInput.of(numpy.asarray(values), dtype, layout=layout)


class ValueRange(TypedDict, total=False):
    """``SampleSet.tensor``'s value bounds, passed as ``**options``: ``{"low": 0, "high": 3}``."""

    low: float
    high: float


class SampleSet:
    """The samples of one op, with a random generator seeded by the op's name, so that each op's
    data is the same whatever other ops are generated or in which order.
    """

    def __init__(self, op: str) -> None:
        self.op = op
        self.rng = numpy.random.default_rng(zlib.crc32(op.encode()))
        self._samples: dict[str, Sample] = {}

    def tensor(
        self,
        shape: tuple[int, ...],
        dtype: str = "float32",
        *,
        layout: str = "contiguous",
        low: float = -3.0,
        high: float = 3.0,
    ) -> TensorInput:
        """Uniform values in [low, high] (integers: within the dtype's range; bool: a coin flip)."""
        kind = DType.parse(dtype)
        if kind is DType.BOOL:
            values: numpy.ndarray = self.rng.random(shape) < 0.5
        elif kind.is_integer:
            info = numpy.iinfo(kind.value)
            low_int, high_int = max(int(low), int(info.min)), min(int(high), int(info.max))
            if low_int > high_int:  # e.g. [-3, -1] for uint8: keep the width, shift it into range
                low_int, high_int = 0, high_int - low_int
            values = self.rng.integers(low_int, high_int, size=shape, endpoint=True)
        else:
            values = self.rng.uniform(low, high, size=shape)
        return TensorInput.of(values, kind, layout=layout)

    def nonzero(self, shape: tuple[int, ...], dtype: str = "float32", *, layout: str = "contiguous") -> TensorInput:
        """Values in [1, 4] with random signs (unsigned and bool: positive): safe divisors."""
        kind = DType.parse(dtype)
        values = self.rng.integers(1, 4, size=shape, endpoint=True).astype(numpy.float64)
        if kind is not DType.BOOL and kind is not DType.UINT8:
            values *= numpy.where(self.rng.random(shape) < 0.5, -1.0, 1.0)
        if kind.is_floating:
            values += self.rng.uniform(0.0, 0.5, size=shape) * numpy.sign(values)
        return TensorInput.of(values, kind, layout=layout)

    def add(
        self, sample_id: str, *args: Any, tolerance: Tolerance | None = None, note: str = "", **kwargs: Any
    ) -> None:
        """Add a sample; ids are unique within the op."""
        if sample_id in self._samples:
            raise ValueError(f"{self.op}: two samples are named {sample_id!r}")
        self._samples[sample_id] = Sample(sample_id, args, kwargs, tolerance, note)

    def __iter__(self) -> Iterator[Sample]:
        return iter(self._samples.values())

    def __len__(self) -> int:
        return len(self._samples)
