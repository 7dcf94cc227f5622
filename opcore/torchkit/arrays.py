"""numpy <-> torch conversions and device moves (imports torch): ``opcore.arrays_torch``, which the
dispatcher uses, re-exported as part of torchkit's surface."""

from __future__ import annotations

from opcore.arrays_torch import result_to, to_device, to_host, to_numpy, to_torch

__all__ = ["result_to", "to_device", "to_host", "to_numpy", "to_torch"]
