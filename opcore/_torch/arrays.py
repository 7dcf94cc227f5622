"""numpy <-> torch conversions for the dispatcher (zero-copy on CPU where possible)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy
import torch

from opcore.errors import DeviceError
from opcore.types import ArrayKind, DType

_TO_TORCH_DTYPE = {d: d.to_torch() for d in DType}


def to_torch(value: Any) -> Any:
    if isinstance(value, (numpy.ndarray, numpy.generic)):
        value = numpy.asarray(value)
        # torch warns on read-only memory and refuses negative strides (x[::-1]): copy those
        if not value.flags.writeable or any(stride < 0 for stride in value.strides):
            value = value.copy()
        return torch.from_numpy(value)
    return value


def to_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise DeviceError(
                arg="tensor",
                expected="a CPU tensor for a numpy kernel",
                found=f"a tensor on {value.device}",
                fix="move it with tensor.cpu(), or install a backend for that device",
            )
        value = value.detach()
        if value.dtype is torch.bfloat16:
            value = value.float()
        return value.resolve_conj().resolve_neg().numpy()
    return value


def result_to(target: ArrayKind, dtypes: tuple[DType, ...]) -> Callable[[Any], Any]:
    wanted = tuple(_TO_TORCH_DTYPE[d] for d in dtypes)
    if target is ArrayKind.NUMPY:

        def torch_to_numpy(result: Any) -> Any:
            if isinstance(result, tuple):
                return tuple(to_numpy(r) for r in result)
            return to_numpy(result)

        return torch_to_numpy

    def numpy_to_torch(result: Any) -> Any:
        if isinstance(result, tuple):
            return tuple(_back(r, d) for r, d in zip(result, wanted))
        return _back(result, wanted[0])

    return numpy_to_torch


def _back(result: Any, dtype: Any) -> Any:
    tensor = to_torch(numpy.asarray(result))
    return tensor if tensor.dtype is dtype else tensor.to(dtype)
