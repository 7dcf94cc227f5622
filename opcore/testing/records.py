"""The records of the conformance kit: tensor inputs, samples, error inputs, tolerances, op entries.

A sample holds its tensors as ``TensorInput`` (numpy data plus a dtype and a memory layout),
made into numpy arrays or torch tensors, on the backend's device, only when it runs, so the
same sample serves every backend and nothing here imports torch.

>>> x = TensorInput.of(numpy.arange(6.0).reshape(2, 3), "float32", layout="transposed")
>>> x.shape, x.to_numpy().flags.c_contiguous
((2, 3), False)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy

from opcore.errors import OpcoreError
from opcore.types import DType

__all__ = [
    "LAYOUTS",
    "ErrorInput",
    "OpEntry",
    "Sample",
    "TensorInput",
    "Tolerance",
    "errors_by_op",
    "round_to_bfloat16",
]

# contiguous; transposed: the last two dims swapped in memory; strided: every other element of
# the last dim; expanded: dim 0 broadcast from the first row (stride 0, read-only in numpy), so an
# expanded input holds its first row's values in every row
LAYOUTS = ("contiguous", "transposed", "strided", "expanded")


def round_to_bfloat16(values: numpy.ndarray) -> numpy.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), still as float32, so that the
    numpy and torch forms of a bfloat16 input hold the same numbers.
    """
    bits = numpy.array(values, dtype=numpy.float32, order="C").view(numpy.uint32)
    finite = numpy.isfinite(bits.view(numpy.float32))
    rounded = (bits + numpy.uint32(0x7FFF) + ((bits >> 16) & numpy.uint32(1))) & numpy.uint32(0xFFFF0000)
    kept = numpy.where(finite, rounded, bits & numpy.uint32(0xFFFF0000) | (bits & numpy.uint32(0x00400000)))
    # numpy 1.x promotes 0-d operands by value (uint32 + uint32 scalar can come back int64): back to
    # 32 bits before reading them as float32
    return kept.astype(numpy.uint32, copy=False).view(numpy.float32)


@dataclass(frozen=True, slots=True, eq=False)
class TensorInput:
    """One tensor argument of a sample: data, dtype and memory layout.

    ``storage`` is the contiguous data the layout's view is taken from, in a numpy dtype that holds
    the values exactly (float32 for bfloat16); ``shape`` is the shape the op sees.
    """

    storage: numpy.ndarray
    dtype: DType
    layout: str = "contiguous"
    shape: tuple[int, ...] = ()

    @classmethod
    def of(cls, values: Any, dtype: DType | str | None = None, *, layout: str = "contiguous") -> TensorInput:
        """The input with these values (of the shape the op sees) in ``dtype`` and ``layout``."""
        array = numpy.asarray(values)
        wanted = DType.parse(dtype) if dtype is not None else DType.from_numpy(array.dtype)
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")
        holder = numpy.float32 if wanted is DType.BFLOAT16 else wanted.to_numpy()
        with numpy.errstate(all="ignore"):
            data = array.astype(holder)
        if wanted is DType.BFLOAT16:
            data = round_to_bfloat16(data)
        shape = tuple(array.shape)
        if layout == "transposed" and data.ndim >= 2:
            storage = numpy.array(numpy.swapaxes(data, -1, -2), order="C")
        elif layout == "strided" and data.ndim >= 1:
            storage = numpy.zeros((*shape[:-1], 2 * shape[-1]), holder)
            storage[..., ::2] = data
            storage[..., 1::2] = _FILLER.get(wanted.value, numpy.nan)  # never read by a correct kernel
        elif layout == "expanded" and data.ndim >= 1:
            storage = numpy.array(data[:1], order="C")  # the view repeats row 0
        else:  # contiguous, or a layout the rank does not allow (a 1-D "transposed" input is contiguous)
            storage, layout = numpy.array(data, order="C"), "contiguous"  # (ascontiguousarray makes 0-D 1-D)
        return cls(storage, wanted, layout, shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def values(self) -> numpy.ndarray:
        """The values the op sees, contiguous, in the storage dtype (float32 for bfloat16)."""
        return numpy.array(_view_numpy(self.storage, self.layout, self.shape), order="C")

    def to_numpy(self) -> numpy.ndarray:
        """A fresh numpy array in this layout (bfloat16 has no numpy form: use to_torch)."""
        return _view_numpy(self.storage.astype(self.dtype.to_numpy(), copy=True), self.layout, self.shape)

    def to_torch(self, device: str = "cpu") -> Any:
        """A fresh torch tensor in this layout on ``device`` (imports torch)."""
        import torch

        base = torch.from_numpy(self.storage.copy()).to(device=device, dtype=self.dtype.to_torch())
        if self.layout == "transposed" and base.ndim >= 2:
            return base.transpose(-1, -2)
        if self.layout == "strided" and base.ndim >= 1:
            return base[..., ::2]
        if self.layout == "expanded" and base.ndim >= 1:
            return base.expand(self.shape)
        return base

    def describe(self) -> str:
        where = "" if self.layout == "contiguous" else f" {self.layout}"
        return f"{self.dtype.value}[{', '.join(map(str, self.shape))}]{where}"


# what the skipped elements of a "strided" input hold: NaN for floats, the largest value for integers
_FILLER = {"bool": True, "uint8": 255, "int8": 127, "int16": 32767, "int32": 2**31 - 1, "int64": 2**63 - 1}


def _view_numpy(storage: numpy.ndarray, layout: str, shape: tuple[int, ...]) -> numpy.ndarray:
    if layout == "transposed" and storage.ndim >= 2:
        return numpy.swapaxes(storage, -1, -2)
    if layout == "strided" and storage.ndim >= 1:
        return storage[..., ::2]
    if layout == "expanded" and storage.ndim >= 1:
        return numpy.broadcast_to(storage, shape)
    return storage


@dataclass(frozen=True, slots=True)
class Tolerance:
    """Allowed difference from the reference: ``|actual - expected| <= atol + rtol * |expected|``.

    (0, 0): exact, as for integer and bool results.
    """

    rtol: float
    atol: float

    @property
    def exact(self) -> bool:
        return self.rtol == 0.0 and self.atol == 0.0


@dataclass(frozen=True, slots=True, eq=False)
class Sample:
    """One valid call: positional ``args`` and keyword ``kwargs`` as the user writes them, with
    TensorInput for tensors (a list of them for ``Tensor[]``) and plain values for the rest.

    tolerance None: the entry's tolerance for the result dtype.
    """

    id: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    tolerance: Tolerance | None = None
    # Why the sample is there, shown when it fails ("broadcast", "large magnitudes", ...).
    note: str = ""

    def tensors(self) -> list[TensorInput]:
        """Every TensorInput of the sample, in argument order."""
        return [t for value in (*self.args, *self.kwargs.values()) for t in _tensor_inputs(value)]

    def describe(self) -> str:
        parts = [_describe(value) for value in self.args]
        parts += [f"{name}={_describe(value)}" for name, value in self.kwargs.items()]
        return ", ".join(parts)


@dataclass(frozen=True, slots=True, eq=False)
class ErrorInput:
    """One bad call and the error every backend must raise for it.

    ``match`` is a regular expression searched for in the message; the message must also start
    with ``op(): `` and, when ``arg`` is not None, name ``argument 'arg'``.
    raised_by "meta": the contract's meta function raises it, before any kernel, so every backend
    raises exactly the same error; "kernel": it depends on the data (an index out of range, an
    integer division by zero), so each backend's kernel must raise that type itself.
    torch_rejects: torch's own function rejects the same input (opcore's op tests check it).
    """

    id: str
    args: tuple[Any, ...]
    error: type[OpcoreError]
    arg: str | None
    match: str = ""
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    raised_by: str = "meta"
    torch_rejects: bool = True

    def describe(self) -> str:
        return Sample(self.id, self.args, self.kwargs).describe()


SampleGenerator = Callable[[], Iterable[Sample]]
ErrorGenerator = Callable[[], Iterable[ErrorInput]]


@dataclass(frozen=True, slots=True)
class OpEntry:
    """What the kit knows about one op.

    samples and errors: functions returning the op's samples and error inputs (called once, when
    the kit first needs them). tolerances: per result dtype, over DEFAULT_TOLERANCES.
    reference: the backend every result is compared with, or a function taking the sample's
    arguments (numpy, or torch for bfloat16) and returning the expected result.
    """

    op: str
    samples: SampleGenerator
    errors: ErrorGenerator = tuple
    tolerances: Mapping[DType, Tolerance] = field(default_factory=dict)
    reference: str | Callable[..., Any] = "reference"
    # Where the entry comes from: "opcore" for the built-ins, else the distribution or module.
    source: str = "opcore"


def errors_by_op(build: Callable[[], dict[str, list[ErrorInput]]]) -> Callable[[str], list[ErrorInput]]:
    """A family's ``error_inputs(op)``: its table of error inputs per op, built on first use (building
    it makes arrays, which importing the kit should not).

    >>> error_inputs = errors_by_op(lambda: {"relu": []})
    >>> error_inputs("relu"), error_inputs("gelu")
    ([], [])
    """
    table: dict[str, list[ErrorInput]] = {}

    def error_inputs(op: str) -> list[ErrorInput]:
        if not table:
            table.update(build())
        return table.get(op, [])

    return error_inputs


def _tensor_inputs(value: Any) -> list[TensorInput]:
    if isinstance(value, TensorInput):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, TensorInput)]
    return []


def _describe(value: Any) -> str:
    if isinstance(value, TensorInput):
        return value.describe()
    if isinstance(value, list) and any(isinstance(v, TensorInput) for v in value):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    return repr(value)
