"""opcore test fixture: the entry point says fixture_misnamed, the backend says something else."""

from __future__ import annotations

import opcore
from opcore import BackendSpec, DeviceType


@opcore.hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(name="something_else", version="0.1", priority=10, device_types=(DeviceType.CPU,))
