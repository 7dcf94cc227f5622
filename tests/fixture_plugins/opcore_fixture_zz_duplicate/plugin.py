"""opcore test fixture: a second distribution announcing the name fixture_good."""

from __future__ import annotations

import opcore
from opcore import BackendSpec, DeviceType


@opcore.hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(name="fixture_good", version="0.9", priority=10, device_types=(DeviceType.CPU,))
