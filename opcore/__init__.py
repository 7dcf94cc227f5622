"""opcore: operator contracts, plugin backends, ranked fallback dispatch.

>>> import numpy, opcore
>>> x, w = numpy.ones((2, 8), "float32"), numpy.ones((4, 8), "float32")
>>> opcore.run("linear", x, w).shape
(2, 4)

The names below load on first use (PEP 562), so ``import opcore`` costs about a millisecond
and imports no backend, no pluggy and no torch; the first call loads what it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from opcore._version import __version__

# public name -> the module defining it
_EXPORTS = {
    "API_VERSION": "opcore.backend",
    "DEFAULT_PRIORITIES": "opcore.backend",
    "BackendSpec": "opcore.backend",
    "ArgumentError": "opcore.errors",
    "DTypeError": "opcore.errors",
    "DeviceError": "opcore.errors",
    "FallbackWarning": "opcore.errors",
    "KernelResultError": "opcore.errors",
    "NoKernelError": "opcore.errors",
    "OpcoreError": "opcore.errors",
    "PluginError": "opcore.errors",
    "ShapeError": "opcore.errors",
    "UnknownOpError": "opcore.errors",
    "Unsupported": "opcore.errors",
    "ArrayKind": "opcore.types",
    "DType": "opcore.types",
    "Device": "opcore.types",
    "DeviceType": "opcore.types",
    "Layout": "opcore.types",
    "TensorMeta": "opcore.types",
    "OpContract": "opcore.contracts",
    "define_op": "opcore.contracts",
    "Kernel": "opcore.kernel_records",
    "Registrar": "opcore.registry",
    "PluginReport": "opcore.reports",
    "PluginStatus": "opcore.reports",
    "Explanation": "opcore.explanation",
    "ResolvedOp": "opcore.resolved",
    "resolve": "opcore.resolved",
    "run": "opcore.dispatch",
    "hookimpl": "opcore.hookspecs",
    "backends": "opcore.api",
    "configure": "opcore.api",
    "explain": "opcore.api",
    "infer_meta": "opcore.api",
    "ops": "opcore.api",
    "prefer": "opcore.api",
    "register_plugin": "opcore.api",
    "reload_plugins": "opcore.api",
    "strict": "opcore.api",
    "unregister_plugin": "opcore.api",
    "tune": "opcore.tuning.measure",
    "TuneResult": "opcore.tuning.measure",
    "StaleTuningWarning": "opcore.errors",
}

__all__ = [
    "API_VERSION",
    "ArgumentError",
    "ArrayKind",
    "BackendSpec",
    "DEFAULT_PRIORITIES",
    "DType",
    "DTypeError",
    "Device",
    "DeviceError",
    "DeviceType",
    "Explanation",
    "FallbackWarning",
    "Kernel",
    "KernelResultError",
    "Layout",
    "NoKernelError",
    "OpContract",
    "OpcoreError",
    "PluginError",
    "PluginReport",
    "PluginStatus",
    "Registrar",
    "ResolvedOp",
    "ShapeError",
    "StaleTuningWarning",
    "TensorMeta",
    "TuneResult",
    "UnknownOpError",
    "Unsupported",
    "__version__",
    "backends",
    "configure",
    "define_op",
    "explain",
    "hookimpl",
    "infer_meta",
    "ops",
    "prefer",
    "register_plugin",
    "reload_plugins",
    "resolve",
    "run",
    "strict",
    "tune",
    "unregister_plugin",
]


def __getattr__(name: str) -> Any:
    if name == "runtime":  # the process-wide state, for tools (the doctor, tests)
        return importlib.import_module("opcore.runtime")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'opcore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what static analysis sees
    from opcore import runtime as runtime
    from opcore.api import (
        backends,
        configure,
        explain,
        infer_meta,
        ops,
        prefer,
        register_plugin,
        reload_plugins,
        strict,
        unregister_plugin,
    )
    from opcore.backend import API_VERSION, DEFAULT_PRIORITIES, BackendSpec
    from opcore.contracts import OpContract, define_op
    from opcore.dispatch import run
    from opcore.errors import (
        ArgumentError,
        DeviceError,
        DTypeError,
        FallbackWarning,
        KernelResultError,
        NoKernelError,
        OpcoreError,
        PluginError,
        ShapeError,
        StaleTuningWarning,
        UnknownOpError,
        Unsupported,
    )
    from opcore.explanation import Explanation
    from opcore.hookspecs import hookimpl
    from opcore.kernel_records import Kernel
    from opcore.registry import Registrar
    from opcore.reports import PluginReport, PluginStatus
    from opcore.resolved import ResolvedOp, resolve
    from opcore.tuning.measure import TuneResult, tune
    from opcore.types import ArrayKind, Device, DeviceType, DType, Layout, TensorMeta
