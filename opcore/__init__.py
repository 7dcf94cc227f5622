"""opcore: operator contracts, plugin backends, ranked fallback dispatch.

>>> import numpy, opcore
>>> x, w = numpy.ones((2, 8), "float32"), numpy.ones((4, 8), "float32")
>>> opcore.run("linear", x, w).shape
(2, 4)
"""

from opcore import runtime as runtime  # the process-wide state, for tools (the doctor, tests)
from opcore._version import __version__
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
    NoKernelError,
    OpcoreError,
    PluginError,
    ShapeError,
    UnknownOpError,
    Unsupported,
)
from opcore.explain import Explanation
from opcore.kernels import Kernel
from opcore.registry import Registrar
from opcore.reports import PluginReport, PluginStatus
from opcore.resolved import ResolvedOp, resolve
from opcore.types import ArrayKind, Device, DeviceType, DType, Layout, TensorMeta

__all__ = [
    "API_VERSION",
    "DEFAULT_PRIORITIES",
    "ArgumentError",
    "ArrayKind",
    "BackendSpec",
    "DType",
    "DTypeError",
    "Device",
    "DeviceError",
    "DeviceType",
    "Explanation",
    "FallbackWarning",
    "Kernel",
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
    "TensorMeta",
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
    "unregister_plugin",
]


def __getattr__(name: str) -> object:
    # pluggy (with importlib.metadata) costs ~15 ms to import: plugins pay it, `import opcore` does not
    if name == "hookimpl":
        from opcore.hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'opcore' has no attribute {name!r}")
