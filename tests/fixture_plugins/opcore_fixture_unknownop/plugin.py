"""opcore test fixture: registers a kernel for an unknown op (and a valid one, which must not land)."""

from __future__ import annotations

import numpy

import opcore
from opcore import BackendSpec, DeviceType


@opcore.hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(name="fixture_unknownop", version="0.1", priority=10, device_types=(DeviceType.CPU,))


@opcore.hookimpl
def opcore_register_kernels(registrar) -> None:
    registrar.add_kernel("relu", lambda x: numpy.maximum(x, 0), dtypes=["float64"])
    registrar.add_kernel("rleu", lambda x: x, dtypes=["float32"])
