"""The OpenVINO backend's hooks: one kernel per built-in op, each a one-op model built with
``openvino.opset13`` and run through a cached compiled model.

Loading this module does not import openvino: kernels are named as "module:qualname" and
imported when one first runs; ``is_available`` reads package metadata.

>>> opcore_backend().name, opcore_backend().priority
('openvino', 200)
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
from opcore_openvino import __version__
from opcore_openvino.checks import checker_for

if TYPE_CHECKING:
    from opcore.registry import Registrar

__all__ = ["KERNELS", "MIN_OPENVINO", "opcore_backend", "opcore_register_kernels"]

MIN_OPENVINO = (2024, 0)
_PACKAGE = "opcore_openvino.kernels"

# op -> module of its kernel (the kernel object has the op's name); ops with prepare=True bake
# their constant tensors in as Constants when resolved with constants.
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
    """True when openvino (>= 2024.0) is installed; never imports it."""
    if importlib.util.find_spec("openvino") is None:
        return "openvino is not installed (pip install 'opcore[openvino]')"
    try:
        version = importlib.metadata.version("openvino")
    except importlib.metadata.PackageNotFoundError:
        return "openvino has no distribution metadata (a broken install?)"
    if _version_tuple(version) < MIN_OPENVINO:
        return f"openvino {version} is older than 2024.0 (pip install -U openvino)"
    return True


def describe() -> Mapping[str, str]:
    """Versions, devices, the precision hint and the compiled-model cache, for ``opcore doctor``."""
    from opcore_openvino.doctor import describe as collect

    return collect()


@hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(
        name="openvino",
        version=__version__,
        priority=200,
        device_types=(DeviceType.CPU,),
        is_available=is_available,
        describe=describe,
        description="OpenVINO (CPU plugin): models built with openvino.opset13, cached compiled models",
        install_hint="pip install 'opcore[openvino]'",
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
