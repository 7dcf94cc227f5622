"""opcore test fixture: a working plugin for the name fixture_twin, which opcore-fixture-zz-duplicate
claims as well; neither may serve it silently."""

from __future__ import annotations

import numpy

import opcore
from opcore import BackendSpec, DeviceType


@opcore.hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(name="fixture_twin", version="1.1", priority=60, device_types=(DeviceType.CPU,))


@opcore.hookimpl
def opcore_register_kernels(registrar) -> None:
    registrar.add_kernel("relu", lambda x: numpy.maximum(x, 0), dtypes=["float32"])
