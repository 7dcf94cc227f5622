"""The ONNX Runtime backend's hooks: one kernel per built-in op, each a one-op ONNX model run
through a cached InferenceSession.

Loading this module imports neither onnxruntime nor onnx: kernels are named as
"module:qualname" and imported when one first runs; ``is_available`` reads package metadata.

>>> opcore_backend().name, opcore_backend().priority
('onnxruntime', 100)
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opcore.backend import BackendSpec
from opcore.hookspecs import hookimpl
from opcore.opset import BUILTIN_DTYPES
from opcore.types import DeviceType
from opcore_onnxruntime import __version__
from opcore_onnxruntime.checks import checker_for

if TYPE_CHECKING:
    from opcore.registry import Registrar

__all__ = ["KERNELS", "MIN_ONNXRUNTIME", "opcore_backend", "opcore_register_kernels"]

MIN_ONNXRUNTIME = (1, 17)
_PACKAGE = "opcore_onnxruntime.kernels"

# op -> module of its kernel (the kernel object has the op's name); ops with prepare=True bake
# their constant tensors in as initializers when resolved with constants.
KERNELS: Mapping[str, tuple[str, bool]] = {
    "add": ("elementwise", True),
    "sub": ("elementwise", True),
    "mul": ("elementwise", True),
    "div": ("elementwise", True),
    "relu": ("elementwise", False),
    "gelu": ("elementwise", False),
    "silu": ("elementwise", False),
    "sigmoid": ("elementwise", False),
    "tanh": ("elementwise", False),
    "exp": ("elementwise", False),
    "linear": ("linear", True),
    "matmul": ("linear", True),
    "bmm": ("linear", True),
    "linear_relu": ("linear", True),
    "linear_silu": ("linear", True),
    "linear_gelu": ("linear", True),
    "gated_mlp": ("linear", True),
    "softmax": ("normalization", False),
    "log_softmax": ("normalization", False),
    "layer_norm": ("normalization", True),
    "rms_norm": ("normalization", True),
    "embedding": ("nn", True),
    "conv2d": ("nn", True),
    "scaled_dot_product_attention": ("nn", True),
    "transpose": ("shape", False),
    "permute": ("shape", False),
    "reshape": ("shape", False),
    "cat": ("shape", False),
}


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def is_available() -> bool | str:
    """True when onnxruntime (>= 1.17) and onnx are installed; never imports them."""
    for module in ("onnxruntime", "onnx"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'opcore[onnxruntime]')"
    try:
        version = importlib.metadata.version("onnxruntime")
    except importlib.metadata.PackageNotFoundError:
        return "onnxruntime has no distribution metadata (a broken install?)"
    if _version_tuple(version) < MIN_ONNXRUNTIME:
        return f"onnxruntime {version} is older than 1.17 (pip install -U onnxruntime)"
    return True


def describe() -> Mapping[str, str]:
    """Versions, providers, plugin-EP devices and the session cache, for ``opcore doctor``."""
    from opcore_onnxruntime.doctor import describe as collect

    return collect()


@hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(
        name="onnxruntime",
        version=__version__,
        priority=100,
        device_types=(DeviceType.CPU,),
        is_available=is_available,
        describe=describe,
        description="ONNX Runtime (CPUExecutionProvider): one-op ONNX models, cached sessions",
        install_hint="pip install 'opcore[onnxruntime]'",
    )


@hookimpl
def opcore_register_kernels(registrar: Registrar) -> None:
    """One numpy kernel per op for every dtype its contract accepts; the checker declines the rest."""
    for op, (module, prepares) in KERNELS.items():
        target = f"{_PACKAGE}.{module}:{op}"
        registrar.add_kernel(
            op,
            target,
            dtypes=BUILTIN_DTYPES[op],
            array_kind="numpy",
            checker=checker_for(op),
            prepare=f"{target}.prepare" if prepares else None,
        )
