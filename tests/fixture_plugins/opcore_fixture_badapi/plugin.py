"""opcore test fixture: built for a future plugin API."""

from __future__ import annotations

import numpy

import opcore
from opcore import BackendSpec, DeviceType


@opcore.hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(
        name="fixture_badapi", version="0.1", priority=10, device_types=(DeviceType.CPU,), api_version=999
    )


@opcore.hookimpl
def opcore_register_kernels(registrar) -> None:
    registrar.add_kernel("relu", lambda x: numpy.maximum(x, 0), dtypes=["float32"])
