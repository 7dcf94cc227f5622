"""The ``cpu`` backend's hooks (entry point ``cpu = "opcore_cpu.plugin"`` in ``opcore.backends``).

Loading this module imports no torch: every kernel is named as ``"module:qualname"`` and imported
when it first runs; the checkers live in the torch-free ``opcore_cpu.choice``.

Three layers of kernels, highest priority first:

- ``cpu/onednn`` (+10): oneDNN linear and fused linear + activation, gated_mlp and conv2d + activation, with
  ``prepare`` packing constant weights; their checkers send small problems to the next layer.
- ``cpu/aten``: the shared device-generic torch kernels (``opcore.torchkit.torch_kernels``), every op.
  ``linear_wq`` among them: torch's int8/int4 weight-only kernels, packed once by ``prepare``
  (opcore.torchkit.quantized), large float32 weights declined as Costly (opcore_cpu.choice).
- ``aten.*`` ops: the shared ATen fallback (``opcore.torchkit.aten``), any ``torch.ops.aten`` op.

>>> opcore_backend().priority
300
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opcore.extend import DEFAULT_PRIORITIES, ArrayKind, BackendSpec, DeviceType, hookimpl
from opcore_cpu import __version__, choice, system
from opcore_cpu.contracts import CONTRACTS
from opcore_cpu.dtypes import CPU_DIFFERENCES, ONEDNN_DTYPES

if TYPE_CHECKING:
    from opcore.extend import Checker, Registrar

__all__ = [
    "ONEDNN_LABEL",
    "ONEDNN_PRIORITY",
    "opcore_backend",
    "opcore_register_contracts",
    "opcore_register_kernels",
]

ONEDNN_LABEL = "onednn"
ONEDNN_PRIORITY = 10  # above this backend's plain ATen kernels

# op -> (kernel, prepare, checker) of the oneDNN fused kernels
_ONEDNN: dict[str, tuple[str, str, Checker]] = {
    "linear": ("opcore_cpu.onednn:linear", "opcore_cpu.onednn:prepare_linear", choice.linear_checker),
    "linear_relu": ("opcore_cpu.onednn:linear_relu", "opcore_cpu.onednn:prepare_linear_relu", choice.linear_checker),
    "linear_silu": ("opcore_cpu.onednn:linear_silu", "opcore_cpu.onednn:prepare_linear_silu", choice.linear_checker),
    "linear_gelu": ("opcore_cpu.onednn:linear_gelu", "opcore_cpu.onednn:prepare_linear_gelu", choice.linear_checker),
    "gated_mlp": ("opcore_cpu.onednn:gated_mlp", "opcore_cpu.onednn:prepare_gated_mlp", choice.gated_mlp_checker),
    "conv2d_relu": ("opcore_cpu.conv:conv2d_relu", "opcore_cpu.conv:prepare_conv2d_relu", choice.conv_checker),
    "conv2d_silu": ("opcore_cpu.conv:conv2d_silu", "opcore_cpu.conv:prepare_conv2d_silu", choice.conv_checker),
}


@hookimpl
def opcore_backend() -> BackendSpec:
    """PyTorch on CPU: cheap to announce (no torch import until a kernel runs)."""
    return BackendSpec(
        name="cpu",
        version=__version__,
        priority=DEFAULT_PRIORITIES["cpu"],
        device_types=(DeviceType.CPU,),
        is_available=system.is_available,
        describe=system.describe,
        description="PyTorch CPU: ATen kernels, oneDNN fused linear/conv with packed weights, the ATen fallback",
        install_hint="pip install 'opcore[cpu]'",
    )


@hookimpl
def opcore_register_contracts(registrar: Registrar) -> None:
    """conv2d_relu and conv2d_silu, unless the core (or another plugin) already defines them."""
    known = registrar.contracts
    for contract in CONTRACTS:
        if contract.name not in known:
            registrar.add_contract(contract)


@hookimpl
def opcore_register_kernels(registrar: Registrar) -> None:
    """The shared torch kernels, the oneDNN fused kernels on top, and the ATen fallback."""
    from opcore.extend import register_aten_fallback, register_torch_kernels

    known = registrar.contracts
    register_torch_kernels(registrar, DeviceType.CPU, CPU_DIFFERENCES, checkers={"linear_wq": choice.linear_wq_checker})
    for op, (kernel, prepare, checker) in _ONEDNN.items():
        if op not in known:
            continue
        registrar.add_kernel(
            op,
            kernel,
            dtypes=ONEDNN_DTYPES,
            array_kind=ArrayKind.TORCH,
            priority=ONEDNN_PRIORITY,
            checker=checker,
            prepare=prepare,
            label=ONEDNN_LABEL,
        )
    register_aten_fallback(registrar, DeviceType.CPU)
