"""opcore test fixture: loads, but its device is absent."""

from __future__ import annotations

import opcore
from opcore import BackendSpec, DeviceType


@opcore.hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(
        name="fixture_unavailable",
        version="2.0",
        priority=500,
        device_types=(DeviceType.CPU,),
        is_available=lambda: "no widget attached (looked in /dev/widget*)",
    )


@opcore.hookimpl
def opcore_register_kernels(registrar) -> None:
    raise AssertionError("an unavailable backend is never asked for kernels")
