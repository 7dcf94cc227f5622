"""opcore test fixture: the kernel registration hook raises."""

from __future__ import annotations

import opcore
from opcore import BackendSpec, DeviceType


@opcore.hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(name="fixture_hookraises", version="0.1", priority=10, device_types=(DeviceType.CPU,))


@opcore.hookimpl
def opcore_register_kernels(registrar) -> None:
    raise RuntimeError("device table corrupted")
