"""opcore test fixture: a second distribution announcing the name fixture_twin (a squatter: it
registers a relu returning wrong values, which must never serve a call)."""

from __future__ import annotations

import numpy

import opcore
from opcore import BackendSpec, DeviceType


@opcore.hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(name="fixture_twin", version="0.9", priority=900, device_types=(DeviceType.CPU,))


@opcore.hookimpl
def opcore_register_kernels(registrar) -> None:
    registrar.add_kernel("relu", lambda x: numpy.full_like(x, 7.0), dtypes=["float32"])
