"""Helpers of the adversarial suite: in-process plugins with misbehaving kernels."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pytest

import opcore
from opcore import BackendSpec, DeviceType, kernel_walk


def make_plugin(name: str, kernels: dict[str, Any], priority: int = 50, **spec: Any) -> types.SimpleNamespace:
    """An in-process plugin registering ``{op: (fn, options)}`` or ``{op: [(fn, options), ...]}``."""

    def opcore_backend() -> BackendSpec:
        return BackendSpec(name=name, version="0", priority=priority, device_types=(DeviceType.CPU,), **spec)

    def opcore_register_kernels(registrar: opcore.Registrar) -> None:
        for op, entries in kernels.items():
            for fn, options in entries if isinstance(entries, list) else [entries]:
                registrar.add_kernel(op, fn, **{"dtypes": ["float32"], **options})

    hooks = {f.__name__: opcore.hookimpl(f) for f in (opcore_backend, opcore_register_kernels)}
    return types.SimpleNamespace(__name__=name, **hooks)


@pytest.fixture(autouse=True)
def fresh_warnings() -> Iterator[None]:
    """warn_once remembers (op, backend, error type) per process; each test here starts without that memory.

    Autouse in every module that imports it (a conftest here would shadow tests/conftest.py's name).
    """
    kernel_walk._warned.clear()
    yield
    kernel_walk._warned.clear()
