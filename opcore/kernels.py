"""Kernel records: one implementation of one op on one backend.

>>> kernel = Kernel(op="relu", fn=lambda x: x.clip(min=0), dtypes=frozenset({DType.FLOAT32}))
>>> kernel.device_type, kernel.array_kind
(<DeviceType.CPU: 'cpu'>, <ArrayKind.NUMPY: 'numpy'>)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from opcore.types import ArrayKind, DeviceType, DType

__all__ = ["Checker", "Kernel", "Prepare", "as_dtypes"]

# Called with the bound arguments: a TensorMeta for each tensor, plain values for the rest.
# Returns True to accept, or a string saying why it declines. Its answer is cached per call
# signature (shapes, dtypes, devices, attribute values), so it must not look at data.
Checker = Callable[..., "bool | str"]

# Called once by opcore.resolve with the bound arguments (tensors already in the kernel's
# array kind; the non-constant ones are the examples) and the names of the constant ones.
# Returns a function taking the non-constant tensor arguments, in schema order, that
# computes the op with the constants baked in (packed weights, initializers, ...).
Prepare = Callable[[tuple[Any, ...], frozenset[str]], Callable[..., Any]]


@dataclass(frozen=True, slots=True)
class Kernel:
    """One implementation. ``fn`` takes the bound arguments in schema order, tensors in
    ``array_kind``, and returns the result in that kind (a tuple for several outputs).
    """

    op: str
    fn: Callable[..., Any]
    dtypes: frozenset[DType]
    device_type: DeviceType = DeviceType.CPU
    array_kind: ArrayKind = ArrayKind.NUMPY
    # Added to the backend's priority; higher runs first.
    priority: int = 0
    # None: always accepts the inputs its dtypes and device type admit.
    checker: Checker | None = None
    # None: resolve() binds constants as they are and calls fn.
    prepare: Prepare | None = None
    # Short name shown by explain when one backend has several kernels for an op ("onednn").
    label: str = ""
    # Filled in at registration: the backend's name, and module:qualname of fn.
    backend: str = ""
    source: str = field(default="", compare=False)

    @property
    def title(self) -> str:
        return f"{self.backend}/{self.label}" if self.label else self.backend


def as_dtypes(values: Iterable[DType | str] | DType | str) -> frozenset[DType]:
    """A frozenset of DType from names or DTypes.

    >>> sorted(as_dtypes(["float32", "bf16"]))
    [<DType.BFLOAT16: 'bfloat16'>, <DType.FLOAT32: 'float32'>]
    """
    if isinstance(values, (str, DType)):
        values = (values,)
    return frozenset(DType.parse(v) for v in values)
