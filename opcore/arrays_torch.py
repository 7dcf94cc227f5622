"""numpy <-> torch conversions for the dispatcher (zero-copy on CPU where possible), and the moves
to and from a device for numpy inputs pinned to a device backend (``backend="cuda"``): the torch
half of ``opcore.arrays``, imported only when torch is part of the call. ``opcore.torchkit.arrays``
re-exports it for backends (it is part of torchkit's surface); it lives here, beside the dispatcher
that uses it, so that the dispatcher imports nothing of the kits above it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy
import torch

from opcore.errors import DeviceError, Unsupported
from opcore.types import ArrayKind, DType

__all__ = ["result_to", "to_device", "to_host", "to_numpy", "to_torch"]

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


# what torch raises when a device cannot be reached: AssertionError "Torch not compiled with CUDA
# enabled"; RuntimeError "Found no NVIDIA driver", "The NVIDIA driver on your system is too old", an
# unknown device type. Running out of memory is not among them: it stays the caller's error.
_OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def to_device(device: str) -> Callable[[Any], Any]:
    """A function moving a numpy array to ``device`` as a torch tensor (other values pass through).

    A device torch cannot reach raises Unsupported with torch's reason, so a pinned call reports
    it (NoKernelError) instead of leaking a traceback.

    >>> to_device("meta")(numpy.ones(2)).device
    device(type='meta')
    """

    def move(value: Any) -> Any:
        tensor = to_torch(value)
        if not isinstance(tensor, torch.Tensor):
            return tensor
        try:
            return tensor.to(device)
        except (RuntimeError, AssertionError) as error:
            if isinstance(error, _OUT_OF_MEMORY):
                raise
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise Unsupported(f"cannot move the inputs to {device}: {reason}") from None

    return move


def to_host(result: Any) -> Any:
    """A kernel's result (a tensor or a tuple of them) on any device, as host numpy arrays.

    >>> to_host((torch.ones(2), 3))
    (array([1., 1.], dtype=float32), 3)
    """
    if isinstance(result, tuple):
        return tuple(to_host(r) for r in result)
    if isinstance(result, torch.Tensor):
        return to_numpy(result.detach().cpu())
    return result
