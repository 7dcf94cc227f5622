"""Dtypes, devices, layouts and tensor metadata, with numpy and torch conversions.

Nothing here imports torch: conversions to torch objects import it inside the
function that needs it, and conversions from torch objects work on names.

>>> TensorMeta.of(numpy.zeros((2, 3), dtype="float32")).describe()
'float32[2, 3] on cpu'
"""

from __future__ import annotations

import math
import sys
from enum import Enum
from typing import Any

import numpy

from opcore.errors import ArgumentError
from opcore.fast_records import record

__all__ = [
    "ArrayKind",
    "CPU",
    "DType",
    "Device",
    "DeviceType",
    "Layout",
    "TensorMeta",
    "array_kind_of",
    "contiguous_strides",
    "is_numpy_bfloat16",
    "is_tensor",
]


class DType(str, Enum):
    """Element types, named as in PyTorch and numpy."""

    BOOL = "bool"
    UINT8 = "uint8"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"

    def __str__(self) -> str:
        return self.value

    @property
    def is_floating(self) -> bool:
        return self in _FLOATING

    @property
    def is_integer(self) -> bool:
        """Integral, bool excluded."""
        return self in _INTEGER

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @classmethod
    def parse(cls, value: Any) -> DType:
        """A DType from a DType, a name ("bf16" and "fp32" too), a numpy dtype or a torch dtype.

        >>> DType.parse("bf16"), DType.parse(numpy.float32)
        (<DType.BFLOAT16: 'bfloat16'>, <DType.FLOAT32: 'float32'>)
        """
        if isinstance(value, DType):
            return value
        if isinstance(value, str):
            found = _ALIASES.get(value.lower().removeprefix("torch."))
            if found is not None:
                return found
            raise ArgumentError(
                arg="dtype",
                expected="one of " + ", ".join(d.value for d in DType),
                found=repr(value),
            )
        if type(value).__module__ == "torch":  # torch.dtype: map by name, never import torch
            return cls.parse(str(value))
        try:
            return cls.from_numpy(numpy.dtype(value))
        except TypeError as error:
            raise ArgumentError(
                arg="dtype", expected="a DType, a dtype name, a numpy or a torch dtype", found=repr(value)
            ) from error

    @classmethod
    def from_numpy(cls, dtype: numpy.dtype) -> DType:
        found = _FROM_NUMPY.get(dtype)
        if found is None and is_numpy_bfloat16(dtype):
            return DType.BFLOAT16
        if found is None:
            raise ArgumentError(
                arg="dtype",
                expected="a numpy dtype opcore supports (" + ", ".join(d.value for d in _NUMPY_TYPES) + ")",
                found=str(dtype),
            )
        return found

    @classmethod
    def from_torch(cls, dtype: Any) -> DType:
        found = _FROM_TORCH_NAME.get(str(dtype))
        if found is None:
            raise ArgumentError(
                arg="dtype",
                expected="a torch dtype opcore supports (" + ", ".join(d.value for d in DType) + ")",
                found=str(dtype),
            )
        return found

    def to_numpy(self) -> numpy.dtype:
        """The numpy dtype. numpy itself has no bfloat16: ``ml_dtypes.bfloat16`` stands for it where
        ml_dtypes is installed (what graph runtimes take bfloat16 arrays as), else ArgumentError."""
        if self is DType.BFLOAT16:
            return _numpy_bfloat16()
        return numpy.dtype(self.value)

    def to_torch(self) -> Any:
        import torch

        return getattr(torch, self.value)


_FLOATING = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64})
_INTEGER = frozenset({DType.UINT8, DType.INT8, DType.INT16, DType.INT32, DType.INT64})
_ITEMSIZE = {
    DType.BOOL: 1, DType.UINT8: 1, DType.INT8: 1, DType.INT16: 2, DType.INT32: 4, DType.INT64: 8,
    DType.FLOAT16: 2, DType.BFLOAT16: 2, DType.FLOAT32: 4, DType.FLOAT64: 8,
}  # fmt: skip
_NUMPY_TYPES = tuple(d for d in DType if d is not DType.BFLOAT16)
_FROM_NUMPY = {numpy.dtype(d.value): d for d in _NUMPY_TYPES}
_FROM_TORCH_NAME = {f"torch.{d.value}": d for d in DType}
_ALIASES = {d.value: d for d in DType} | {
    "bf16": DType.BFLOAT16, "fp16": DType.FLOAT16, "half": DType.FLOAT16, "fp32": DType.FLOAT32,
    "float": DType.FLOAT32, "fp64": DType.FLOAT64, "double": DType.FLOAT64, "long": DType.INT64,
    "int": DType.INT32,
}  # fmt: skip


def is_numpy_bfloat16(dtype: numpy.dtype) -> bool:
    """Whether ``dtype`` is ml_dtypes' bfloat16 (numpy kind "V": no numpy kind test finds it as a
    float), told without importing ml_dtypes."""
    return dtype.kind == "V" and dtype.name == "bfloat16"


def _numpy_bfloat16() -> numpy.dtype:
    """``ml_dtypes.bfloat16`` as a numpy dtype (ml_dtypes: JAX's and ONNX's numpy bfloat16)."""
    try:
        import ml_dtypes
    except ImportError as error:
        raise ArgumentError(
            arg="dtype",
            expected="a dtype numpy can hold",
            found="bfloat16 (numpy has none; ml_dtypes, which adds it, is not installed)",
            fix="pip install ml_dtypes, or use torch tensors for bfloat16",
        ) from error
    return numpy.dtype(ml_dtypes.bfloat16)


class DeviceType(str, Enum):
    """Kinds of device a kernel can run on."""

    CPU = "cpu"
    CUDA = "cuda"
    XPU = "xpu"
    NPU = "npu"
    META = "meta"

    def __str__(self) -> str:
        return self.value


@record
class Device:
    """A device type and an index (index None: the current or only device of that type).

    >>> Device.parse("cuda:1")
    Device(type=<DeviceType.CUDA: 'cuda'>, index=1)
    """

    type: DeviceType
    index: int | None = None

    def __str__(self) -> str:
        return self.type.value if self.index is None else f"{self.type.value}:{self.index}"

    @classmethod
    def parse(cls, value: Any) -> Device:
        if isinstance(value, Device):
            return value
        if isinstance(value, DeviceType):
            return cls(value)
        text = str(value)
        kind, _, index = text.partition(":")
        try:
            return cls(DeviceType(kind), int(index) if index else None)
        except ValueError as error:
            raise ArgumentError(
                arg="device",
                expected="'cpu', 'cuda', 'cuda:N' or another DeviceType name",
                found=repr(text),
            ) from error


CPU = Device(DeviceType.CPU)


class Layout(str, Enum):
    """Memory layouts. Kernels see strided tensors unless a prepare step packed them."""

    STRIDED = "strided"
    SPARSE_COO = "sparse_coo"
    SPARSE_CSR = "sparse_csr"
    MKLDNN = "mkldnn"

    def __str__(self) -> str:
        return self.value


class ArrayKind(str, Enum):
    """The array type a kernel consumes, and the one the caller gets back."""

    NUMPY = "numpy"
    TORCH = "torch"

    def __str__(self) -> str:
        return self.value


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides, in elements, for a shape.

    >>> contiguous_strides((2, 3, 4))
    (12, 4, 1)
    """
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


@record
class TensorMeta:
    """Everything about a tensor except its data.

    strides None: contiguous row-major (what meta functions return). bounds: an inclusive
    ``(lo, hi)`` that every value of an integer tensor is proven to lie in (a graph plan's value-range
    analysis, ``opcore.graph.ranges``, sets it on a node's inputs for the checkers); None: unknown,
    as for every single call.
    """

    shape: tuple[int, ...]
    dtype: DType
    device: Device = CPU
    layout: Layout = Layout.STRIDED
    strides: tuple[int, ...] | None = None
    bounds: tuple[int, int] | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def is_contiguous(self) -> bool:
        # an empty tensor is contiguous whatever its strides (numpy gives empty arrays zero strides), as in torch
        return self.strides is None or self.numel == 0 or self.strides == contiguous_strides(self.shape)

    def describe(self) -> str:
        """Short text for messages: ``float32[2, 3] on cpu``."""
        return f"{self.dtype.value}[{', '.join(map(str, self.shape))}] on {self.device}"

    def replace(self, **changes: Any) -> TensorMeta:
        fields: dict[str, Any] = {
            "shape": self.shape,
            "dtype": self.dtype,
            "device": self.device,
            "layout": self.layout,
        }
        fields.update(changes)
        return TensorMeta(**fields)

    @classmethod
    def of(cls, array: Any) -> TensorMeta:
        """The metadata of a numpy array or a torch tensor."""
        if isinstance(array, numpy.ndarray):
            if type(array) is not numpy.ndarray:
                raise _subclass_error(array)
            itemsize = array.itemsize
            return cls(
                tuple(array.shape),
                _numpy_dtype(array.dtype),
                CPU,
                Layout.STRIDED,
                tuple(s // itemsize for s in array.strides),
            )
        if is_torch_tensor(array):
            device = array.device
            layout = _TORCH_LAYOUTS.get(str(array.layout), Layout.STRIDED)
            return cls(
                tuple(array.shape),
                DType.from_torch(array.dtype),
                Device(DeviceType(device.type), device.index),
                layout,
                tuple(array.stride()) if layout is Layout.STRIDED else None,
            )
        raise ArgumentError(expected="a numpy.ndarray or a torch.Tensor", found=type(array).__name__, arg="array")


def _subclass_error(array: numpy.ndarray) -> ArgumentError:
    """numpy subclasses change what the kernels compute (np.matrix: * is a matrix product) or carry
    what they would ignore (a masked array's mask): refused, with the conversion that keeps meaning.
    """
    kind = type(array)
    name = f"{kind.__module__}.{kind.__name__}"
    if isinstance(array, numpy.ma.MaskedArray):
        fix = "pass x.filled(value) to choose what masked elements become, or x.data to ignore the mask"
    elif isinstance(array, numpy.matrix):
        fix = "pass numpy.asarray(x) (opcore's ops are elementwise where numpy's are; matmul is an op)"
    else:
        fix = "pass numpy.asarray(x), a plain ndarray view of the same memory"
    return ArgumentError(arg="array", expected="a plain numpy.ndarray or a torch.Tensor", found=f"a {name}", fix=fix)


def _numpy_dtype(dtype: numpy.dtype) -> DType:
    found = _FROM_NUMPY.get(dtype)
    if found is not None:
        return found
    if not dtype.isnative and dtype.newbyteorder("=") in _FROM_NUMPY:
        raise ArgumentError(
            arg="array",
            expected="native byte order",
            found=f"{dtype.str} ({dtype.newbyteorder('=').name}, byte-swapped)",
            fix="pass x.astype(x.dtype.newbyteorder('=')) (one copy)",
        )
    if is_numpy_bfloat16(dtype):
        # ml_dtypes' bfloat16 stands for bfloat16 between a graph plan and its runtimes only: numpy
        # kernels compute in numpy's own dtypes, and a bfloat16 tensor travels to them as float32
        raise ArgumentError(
            arg="array",
            expected="a numpy dtype opcore's numpy kernels compute in, or a torch tensor for bfloat16",
            found="a numpy bfloat16 array (ml_dtypes)",
            fix="pass torch.from_numpy(x.view(numpy.int16)).view(torch.bfloat16), or x.astype(numpy.float32)",
        )
    return DType.from_numpy(dtype)


_TORCH_LAYOUTS = {
    "torch.strided": Layout.STRIDED,
    "torch.sparse_coo": Layout.SPARSE_COO,
    "torch.sparse_csr": Layout.SPARSE_CSR,
    "torch._mkldnn": Layout.MKLDNN,
}


def is_torch_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")  # a torch tensor cannot exist unless torch was imported
    return torch is not None and isinstance(value, torch.Tensor)


def array_kind_of(value: Any) -> ArrayKind | None:
    """NUMPY, TORCH, or None for anything that is not a tensor.

    >>> array_kind_of(numpy.zeros(2)), array_kind_of(2.0)
    (<ArrayKind.NUMPY: 'numpy'>, None)
    """
    if isinstance(value, numpy.ndarray):
        return ArrayKind.NUMPY
    if is_torch_tensor(value):
        return ArrayKind.TORCH
    return None


def is_tensor(value: Any) -> bool:
    """True for numpy arrays and torch tensors (numpy scalars are not tensors)."""
    return isinstance(value, numpy.ndarray) or is_torch_tensor(value)
