"""The reference backend's hooks: one numpy kernel for every built-in op, for every dtype its
contract accepts.

>>> opcore_backend().priority
0
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import opcore
from opcore.backend import BackendSpec
from opcore.hookspecs import hookimpl
from opcore.opset import BUILTIN_DTYPES
from opcore.reference import elementwise, linear, nn, normalization, shape
from opcore.types import DeviceType

if TYPE_CHECKING:
    from opcore.registry import Registrar

__all__ = ["KERNELS", "opcore_backend", "opcore_register_kernels"]

KERNELS: Mapping[str, Callable[..., Any]] = {
    "add": elementwise.add,
    "sub": elementwise.sub,
    "mul": elementwise.mul,
    "div": elementwise.div,
    "relu": elementwise.relu,
    "gelu": elementwise.gelu,
    "silu": elementwise.silu,
    "sigmoid": elementwise.sigmoid,
    "tanh": elementwise.tanh,
    "exp": elementwise.exp,
    "linear": linear.linear,
    "matmul": linear.matmul,
    "bmm": linear.bmm,
    "linear_relu": linear.linear_relu,
    "linear_silu": linear.linear_silu,
    "linear_gelu": linear.linear_gelu,
    "gated_mlp": linear.gated_mlp,
    "softmax": normalization.softmax,
    "log_softmax": normalization.log_softmax,
    "layer_norm": normalization.layer_norm,
    "rms_norm": normalization.rms_norm,
    "embedding": nn.embedding,
    "conv2d": nn.conv2d,
    "scaled_dot_product_attention": nn.scaled_dot_product_attention,
    "transpose": shape.transpose,
    "permute": shape.permute,
    "reshape": shape.reshape,
    "cat": shape.cat,
}


@hookimpl
def opcore_backend() -> BackendSpec:
    """The reference backend: always available, lowest priority, CPU only."""
    return BackendSpec(
        name="reference",
        version=opcore.__version__,
        priority=0,
        device_types=(DeviceType.CPU,),
        description="numpy, float64 inside",
    )


@hookimpl
def opcore_register_kernels(registrar: Registrar) -> None:
    """One kernel per built-in op; bfloat16 inputs reach them as float32 (see _common)."""
    for op, kernel in KERNELS.items():
        registrar.add_kernel(op, kernel, dtypes=BUILTIN_DTYPES[op], array_kind="numpy")
