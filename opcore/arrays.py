"""Moving arrays between the caller's kind and a kernel's kind, without copies where memory allows.

numpy <-> torch (CPU) share memory: ``torch.from_numpy`` and ``Tensor.numpy()``. Two
exceptions copy: bfloat16 (numpy has no bfloat16, so it travels as float32) and a
read-only numpy array (torch tensors are always writable). The torch half lives in
``opcore.arrays_torch`` and is imported only when torch is part of the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opcore.types import ArrayKind, DType

__all__ = ["converter", "result_converter"]

Convert = Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


def converter(target: ArrayKind) -> Convert:
    """A function bringing any tensor (numpy or torch) into ``target``'s kind."""
    from opcore import arrays_torch as torch_arrays

    return torch_arrays.to_torch if target is ArrayKind.TORCH else torch_arrays.to_numpy


def result_converter(source: ArrayKind, target: ArrayKind, dtypes: tuple[DType, ...]) -> Convert:
    """A function bringing a kernel's result (one array or a tuple) back to the caller's kind,
    cast to the contract's output dtypes when the trip lost them (bfloat16 through numpy).
    """
    if source is target:
        return _same
    from opcore import arrays_torch as torch_arrays

    return torch_arrays.result_to(target, dtypes)
